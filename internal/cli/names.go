package cli

import (
	"context"
	"net"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/internal/procbox"
	"github.com/runbox/runbox/internal/sandboxkey"
	"github.com/runbox/runbox/internal/sandboxnames"
)

// The name index (package sandboxnames) under the runbox home: up and run
// claim a --name in it before they create, and record the sandbox once
// made; rm takes the entry away; a lookup by name reads it first and asks
// only the provider it names. Through a server (RUNBOX_HOST) the server
// keeps the names, and the index is not used.

// names returns this home's name index.
func (a *app) names() sandboxnames.Index { return sandboxnames.At(a.env.Home) }

// claimName reserves name in the index for a create of this process: of
// concurrent creates of one name, one gets it and the others fail with
// procbox.ErrNameInUse. An entry whose sandbox is gone is taken over.
// The returned release gives the claim up (after a failed create).
func (a *app) claimName(ctx context.Context, name string) (release func(), err error) {
	if name == "" || !sandboxkey.ValidName(name) {
		return func() {}, nil // the provider refuses a bad name in its own words
	}
	return a.names().Claim(name, procbox.ErrNameInUse, func(e sandboxnames.Entry) (bool, error) {
		_, _, ok := a.fromIndexEntry(ctx, name, e)
		return ok, nil
	})
}

// recordName records that sb has its name, after a create.
func (a *app) recordName(p runbox.Provider, sb runbox.Sandbox) {
	if sb.Name != "" {
		_ = a.names().Set(sb.Name, sandboxnames.Entry{Provider: p.Name(), ID: sb.ID})
	}
}

// forgetName takes a removed sandbox's name out of the index.
func (a *app) forgetName(sb runbox.Sandbox) {
	if srv, _ := a.remoteServer(); srv != nil {
		return // a server's sandbox: the server keeps its names
	}
	if sb.Name != "" {
		_ = a.names().Remove(sb.Name, sb.ID)
	}
}

// findByIndex looks key up as a name in the index, and asks only the
// provider the entry names for that sandbox, which must still have that
// name: ok is false when the index has no such entry or it is stale (the
// caller then asks every provider).
func (a *app) findByIndex(ctx context.Context, key string) (runbox.Provider, runbox.Sandbox, net.Conn, bool) {
	if sandboxkey.ValidID(key) {
		return nil, runbox.Sandbox{}, nil, false // an id ranks before a name
	}
	e, err := a.names().Lookup(key)
	if err != nil || e.Pending() {
		return nil, runbox.Sandbox{}, nil, false
	}
	p, sb, ok := a.fromIndexEntry(ctx, key, e)
	return p, sb, nil, ok
}

// fromIndexEntry asks the provider the entry e of name names for its
// sandbox, and reports whether it exists with that name.
func (a *app) fromIndexEntry(ctx context.Context, name string, e sandboxnames.Entry) (runbox.Provider, runbox.Sandbox, bool) {
	if !sandboxkey.ValidID(e.ID) {
		return nil, runbox.Sandbox{}, false
	}
	p, err := a.localProvider(e.Provider)
	if err != nil {
		return nil, runbox.Sandbox{}, false
	}
	sb, err := p.Get(ctx, e.ID)
	if err != nil || sb.ID != e.ID || sb.Name != name {
		return nil, runbox.Sandbox{}, false
	}
	return p, sb, true
}

// repairName writes the index entry of a sandbox a full lookup found by
// its name.
func (a *app) repairName(p runbox.Provider, sb runbox.Sandbox, key string) {
	if sb.Name == key && sandboxkey.ValidName(key) {
		_ = a.names().Repair(key, sandboxnames.Entry{Provider: p.Name(), ID: sb.ID})
	}
}
