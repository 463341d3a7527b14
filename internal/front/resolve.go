package front

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/internal/dockerrecord"
	"github.com/runbox/runbox/internal/homes"
	"github.com/runbox/runbox/internal/processrecord"
	"github.com/runbox/runbox/internal/sandboxkey"
	"github.com/runbox/runbox/internal/sandboxnames"
)

// reach is a sandbox the front reaches itself: its id, a connection to
// its runboxd already authenticated, and how to dial another.
type reach struct {
	id   string
	conn net.Conn
	dial runbox.Dialer
	// dialBound bounds one dial after the first.
	dialBound time.Duration
	// gone, when set, says from the sandbox's record why its runboxd is
	// gone (runbox.ErrSandboxLost), or nil: a broken stream then is not
	// retried.
	gone func() error
	// lost, when set, says in the provider's words why the sandbox is
	// lost after its runboxd stopped answering (cause).
	lost func(cause error) error
}

// lostError is the error for a sandbox lost after its runboxd stopped
// answering (cause), in the provider's words when it has some.
func (r reach) lostError(cause error) error {
	if r.lost != nil {
		return r.lost(cause)
	}
	if errors.Is(cause, runbox.ErrSandboxLost) {
		return cause
	}
	return fmt.Errorf("%w: %v", runbox.ErrSandboxLost, cause)
}

// resolve finds the sandbox key names, when the front can reach it
// itself: a host, local or docker sandbox with a socket on this machine,
// or an ssh or kubernetes sandbox through its persistent endpoint
// (reachRemote),
// named by its exact id or by a name the name index (package
// sandboxnames) gives, whose record still has that name, and whose
// runboxd accepts a connection with its secret, in a home only the user
// and root may change (homes.Trusted). Anything else (an id prefix, a
// name the index lacks or that now names nothing, another provider, a
// sandbox whose runboxd does not answer, a home others may change) is
// runbox-full's, whose full lookup reports it in its own words.
func resolve(key string) (reach, bool) {
	home, err := processrecord.Home()
	if err != nil {
		return reach{}, false
	}
	if home, err = filepath.Abs(home); err != nil {
		return reach{}, false
	}
	if homes.Trusted(home) != nil {
		return reach{}, false // runbox-full refuses the home, saying why
	}
	return resolveIn(home, key)
}

// resolveIn is resolve in the absolute home, whatever its modes: each
// read and dial below holds against what another user could plant in it
// on its own (records and secrets read as regular files only, the
// listener's uid checked), under the home's rule.
func resolveIn(home, key string) (reach, bool) {
	id, name, provider := key, "", ""
	if !sandboxkey.ValidID(key) {
		e, err := sandboxnames.At(home).Lookup(key)
		if err != nil || e.Pending() || !sandboxkey.ValidID(e.ID) {
			return reach{}, false
		}
		id, name, provider = e.ID, key, e.Provider
	}
	switch provider {
	case "", processrecord.HostProvider, processrecord.LocalProvider:
		if r, ok := reachProc(home, id, name); ok || provider != "" {
			return r, ok
		}
	}
	switch provider {
	case "", "docker":
		if r, ok := reachDocker(home, id, name); ok || provider != "" {
			return r, ok
		}
	}
	switch provider {
	case "", "ssh":
		if r, ok := reachRemote(home, "ssh", id, name); ok || provider != "" {
			return r, ok
		}
	}
	switch provider {
	case "", "kubernetes":
		return reachRemote(home, "kubernetes", id, name)
	}
	return reach{}, false
}

// reachProc reaches a host or local sandbox from its record.
func reachProc(home, id, name string) (reach, bool) {
	sbDir := filepath.Join(home, "sandboxes", id)
	rec, err := processrecord.Read(sbDir)
	if err != nil || rec.ID != id || rec.Name != name && name != "" ||
		rec.Provider != processrecord.HostProvider && rec.Provider != processrecord.LocalProvider {
		return reach{}, false
	}
	conn := processrecord.AliveConn(context.Background(), rec, sbDir)
	if conn == nil {
		return reach{}, false // runbox-full says the sandbox is lost
	}
	return reach{id: id, conn: conn, dial: processrecord.Dialer(rec.Socket, sbDir), dialBound: daemonProbeBound,
		gone: func() error { return procGone(rec, sbDir) },
		lost: func(error) error {
			if err := procGone(rec, sbDir); err != nil {
				return err
			}
			return fmt.Errorf("%w: runboxd (pid %d) runs but does not answer on %s (runbox inspect %s shows its record; %s removes it)",
				runbox.ErrSandboxLost, rec.Pid, rec.Socket, rec.ID, procRm(rec))
		}}, true
}

// procRm is the command that removes the host or local sandbox rec.
func procRm(rec processrecord.Record) string {
	if rec.Provider == processrecord.HostProvider {
		return "runbox rm -f " + rec.ID // commands it started may still run
	}
	return "runbox rm " + rec.ID
}

// procGone says why the host or local sandbox whose record rec was read
// from sbDir is lost when its runboxd no longer runs (or its record is
// gone), in runbox-full's words; else nil.
func procGone(rec processrecord.Record, sbDir string) error {
	now, err := processrecord.Read(sbDir)
	if err == nil && now.Pid == rec.Pid && processrecord.Alive(now) {
		return nil
	}
	return fmt.Errorf("%w: runboxd (pid %d) is not running (runbox inspect %s shows its record; %s removes it)",
		runbox.ErrSandboxLost, rec.Pid, rec.ID, procRm(rec))
}

// reachDocker reaches a docker sandbox through the socket its runboxd
// listens on in the sandbox's state directory (bind-mounted from the
// host), as the docker provider does for a sandbox this machine made,
// without asking the engine. A socket nothing accepts on (the container
// stopped, or is gone) is runbox-full's, which asks the engine why.
func reachDocker(home, id, name string) (reach, bool) {
	if os.Getenv(dockerrecord.StreamEnv) == "exec" {
		return reach{}, false
	}
	c, err := dockerrecord.Read(home, id)
	if err != nil || name != "" && c.Labels[dockerrecord.LabelName] != name {
		return reach{}, false
	}
	dial, ok := c.Dialer()
	if !ok {
		return reach{}, false
	}
	ctx, cancel := context.WithTimeout(context.Background(), processrecord.AliveTimeout)
	defer cancel()
	conn, err := dial(ctx)
	if err != nil {
		return reach{}, false
	}
	return reach{id: id, conn: conn, dial: dial, dialBound: daemonProbeBound}, true
}
