package docker

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/moby/moby/api/types/container"
	moby "github.com/moby/moby/client"

	"github.com/runbox/runbox"
	rbclient "github.com/runbox/runbox/client"
	"github.com/runbox/runbox/internal/sandboxkey"
)

// Get finds a sandbox by exact id, exact name, or unique id prefix, among
// the engine's containers labelled by runbox, and probes whether its
// runboxd answers. A sandbox this machine made, named exactly, whose
// runboxd answers on its socket, is found without asking the engine.
func (p *Provider) Get(ctx context.Context, idOrName string) (runbox.Sandbox, error) {
	fail := func(err error) (runbox.Sandbox, error) {
		return runbox.Sandbox{}, &runbox.Error{Op: "get", Sandbox: idOrName, Err: err}
	}
	if sb, ok := p.getHere(ctx, idOrName); ok {
		return sb, nil
	}
	cli, err := p.engine()
	if err != nil {
		return fail(err)
	}
	cs, err := containers(ctx, cli, "")
	if err != nil {
		return fail(err)
	}
	c, err := match(cs, idOrName)
	if err != nil {
		return fail(err)
	}
	return p.toSandbox(c, p.alive(ctx, c)), nil
}

// List returns every sandbox the engine has, oldest first, each marked Alive
// when its container runs and its runboxd answers Info.
func (p *Provider) List(ctx context.Context) ([]runbox.Sandbox, error) {
	cli, err := p.engine()
	if err != nil {
		return nil, &runbox.Error{Op: "list", Err: err}
	}
	cs, err := containers(ctx, cli, "")
	if err != nil {
		return nil, &runbox.Error{Op: "list", Err: err}
	}
	out := make([]runbox.Sandbox, len(cs))
	var wg sync.WaitGroup
	for i, c := range cs {
		wg.Go(func() { out[i] = p.toSandbox(c, p.alive(ctx, c)) })
	}
	wg.Wait()
	return out, nil
}

// getHere finds a sandbox this machine's engine runs, by exact id or exact
// name, from the records in the runbox home, and returns it if something
// listens on its socket: the socket is in the sandbox's own state
// directory, where only its runboxd listens, and nothing listens once the
// container has stopped. The engine is not asked, so a `runbox exec` costs a
// process start and the exec. Anything less (no record, a prefix, a socket
// nothing listens on) is left to the engine.
func (p *Provider) getHere(ctx context.Context, key string) (runbox.Sandbox, bool) {
	if p.execForced() {
		return runbox.Sandbox{}, false
	}
	home, err := p.home()
	if err != nil {
		return runbox.Sandbox{}, false
	}
	dirs, _ := os.ReadDir(filepath.Join(home, "docker"))
	for _, d := range dirs {
		b, err := os.ReadFile(filepath.Join(home, "docker", d.Name(), containerFile))
		if err != nil {
			continue
		}
		var c ctr
		if json.Unmarshal(b, &c) != nil || c.Labels[LabelSandbox] != d.Name() {
			continue
		}
		if key != c.Labels[LabelSandbox] && key != c.Labels[LabelName] {
			continue
		}
		if c.stateDir() == "" || !listening(ctx, c.Labels[LabelSocket]) {
			return runbox.Sandbox{}, false
		}
		c.State = container.StateRunning
		if pausedMarked(c.Labels[LabelSocket]) {
			c.State = container.StatePaused
		}
		return p.toSandbox(c, true), true
	}
	return runbox.Sandbox{}, false
}

// listening reports whether a unix socket accepts a connection.
func listening(ctx context.Context, socket string) bool {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", socket)
	if err != nil {
		return false
	}
	conn.Close()
	return true
}

// containers lists runbox's containers (all states), oldest first; with id
// set, only that sandbox's.
func containers(ctx context.Context, cli *moby.Client, id string) ([]ctr, error) {
	label := LabelSandbox
	if id != "" {
		label += "=" + id
	}
	res, err := cli.ContainerList(ctx, moby.ContainerListOptions{All: true, Filters: make(moby.Filters).Add("label", label)})
	if err != nil {
		return nil, fmt.Errorf("list containers: %w", engineError(cli, err))
	}
	out := make([]ctr, 0, len(res.Items))
	for _, s := range res.Items {
		c := fromSummary(s)
		if !sandboxkey.ValidID(c.Labels[LabelSandbox]) {
			continue
		}
		out = append(out, c)
	}
	slices.SortFunc(out, func(a, b ctr) int {
		if c := a.created().Compare(b.created()); c != 0 {
			return c
		}
		return strings.Compare(a.Labels[LabelSandbox], b.Labels[LabelSandbox])
	})
	return out, nil
}

// match picks the container named by key: an exact sandbox id, then an exact
// name, then a unique id prefix.
func match(cs []ctr, key string) (ctr, error) {
	return sandboxkey.Match(cs, key, func(c ctr) string { return c.Labels[LabelSandbox] }, func(c ctr) string { return c.Labels[LabelName] })
}

// alive reports whether c runs and its runboxd answers Info.
func (p *Provider) alive(ctx context.Context, c ctr) bool {
	if c.isPaused() {
		return true // frozen, runboxd with it: it answers once resumed
	}
	return c.State == container.StateRunning &&
		probe(ctx, p.dialerFor(c), c.Labels[LabelSandbox]) == nil
}

// probe asks runboxd for Info through dial, bounded by aliveTimeout.
func probe(ctx context.Context, dial runbox.Dialer, name string) error {
	ctx, cancel := context.WithTimeout(ctx, aliveTimeout)
	defer cancel()
	c := rbclient.New(dial, rbclient.WithSandboxName(name))
	defer c.Close()
	_, err := c.Info(ctx)
	return err
}
