package host

import (
	"context"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/internal/procbox"
	"github.com/runbox/runbox/internal/runboxdbin"
)

// ProviderName is the name the CLI and Sandbox.Provider use for this provider.
const ProviderName = "host"

// Errors specific to the host provider. Compare with errors.Is.
var (
	// ErrNoRunboxd means the runboxd binary could not be found.
	ErrNoRunboxd = runboxdbin.ErrNotFound
	// ErrNameInUse means another sandbox already has the requested name.
	ErrNameInUse = procbox.ErrNameInUse
)

// Provider creates sandboxes that are detached runboxd processes on this
// host. The zero value is ready to use.
type Provider struct {
	// Home is the runbox home directory holding sandbox records; "" means
	// $RUNBOX_HOME, else ~/.runbox. Unix socket paths are limited to 107
	// bytes, so keep it short.
	Home string
	// Runboxd is the path of the runboxd binary; "" means $RUNBOX_RUNBOXD,
	// else a runboxd beside the running executable, else runboxd in PATH.
	Runboxd string
}

var _ runbox.Provider = (*Provider)(nil)

// DefaultHome returns $RUNBOX_HOME, or ~/.runbox when it is unset.
func DefaultHome() (string, error) { return procbox.DefaultHome() }

// kind is what makes a procbox sandbox a host sandbox: runboxd serve,
// started in the workdir, and no isolation to offer.
var kind = procbox.Kind{
	Name:   ProviderName,
	Check:  checkSpec,
	Launch: launch,
}

func (p *Provider) store() *procbox.Store {
	return &procbox.Store{Kind: kind, Home: p.Home, Runboxd: p.Runboxd}
}

// Name returns "host".
func (p *Provider) Name() string { return ProviderName }

// RunsInHostDirectory reports that a host sandbox's workdir is a directory
// of this machine (runbox serve makes a fresh one when a create names none).
func (p *Provider) RunsInHostDirectory() bool { return true }

// Create starts a new runboxd and returns once it answers. The sandbox's
// default working directory is spec.Workdir, else the caller's working
// directory. Image, resource limits and Network "none" are refused with
// errors.ErrUnsupported: a host sandbox cannot provide them.
func (p *Provider) Create(ctx context.Context, spec runbox.SandboxSpec) (runbox.Sandbox, error) {
	return p.store().Create(ctx, spec)
}

// Get finds a sandbox by exact id, exact name, or unique id prefix, and
// probes whether its runboxd answers.
func (p *Provider) Get(ctx context.Context, idOrName string) (runbox.Sandbox, error) {
	return p.store().Get(ctx, idOrName)
}

// List returns every host sandbox under the home, oldest first, each marked
// Alive when its runboxd accepts a connection with the sandbox's secret within a second.
func (p *Provider) List(ctx context.Context) ([]runbox.Sandbox, error) {
	return p.store().List(ctx)
}

// GetByID finds the sandbox whose id is exactly id from its record alone,
// probes its runboxd as Get does, and returns the probe's authenticated
// connection when it answers (nil otherwise), for the caller to use (as its
// client's first connection) and close.
func (p *Provider) GetByID(ctx context.Context, id string) (runbox.Sandbox, net.Conn, error) {
	return p.store().GetByID(ctx, id)
}

// Dialer returns a dialer for the sandbox's unix socket.
func (p *Provider) Dialer(sb runbox.Sandbox) runbox.Dialer { return p.store().Dialer(sb) }

// PassesFDs says connected sockets can travel to and from the sandbox's
// runboxd (internal/fdpass): its socket is a unix socket on this machine.
func (p *Provider) PassesFDs(runbox.Sandbox) bool { return true }

// Remove stops every exec with the stop protocol (the Shutdown RPC), waits
// for runboxd to exit, SIGKILLs it if it has not within a bound, and deletes
// the sandbox's directory. A sandbox whose runboxd is already gone is only
// removed with force, and the error without force wraps ErrSandboxLost.
// With force, the processes its execs left running (runboxd was killed, or
// crashed) are killed first: everything in runboxd's cgroup, and every
// process of this user carrying its RUNBOX_DAEMON marker.
func (p *Provider) Remove(ctx context.Context, sb runbox.Sandbox, force bool) error {
	return p.store().Remove(ctx, sb, force)
}

// checkSpec refuses what a host sandbox cannot do, instead of ignoring it.
func checkSpec(spec runbox.SandboxSpec) error {
	if spec.FromSnapshot != "" {
		return fmt.Errorf("from snapshot %s: provider %s cannot snapshot: %w", spec.FromSnapshot, ProviderName, runbox.ErrUnsupported)
	}
	var bad []string
	if spec.Image != "" {
		bad = append(bad, "an image")
	}
	if spec.Memory != 0 || spec.Pids != 0 || spec.CPUs != 0 || spec.Disk != 0 {
		bad = append(bad, "resource limits")
	}
	if spec.Network != "" && spec.Network != "host" {
		bad = append(bad, "network "+strconv.Quote(spec.Network))
	}
	if len(bad) > 0 {
		return fmt.Errorf("the host provider does not isolate, so it cannot provide %s: %w",
			strings.Join(bad, ", "), errors.ErrUnsupported)
	}
	return nil
}

// launch starts `runboxd serve` in a new session, in the workdir, with the
// hash of the sandbox's secret (never the secret: its argv is readable by
// any process on the host).
func launch(_ context.Context, l procbox.Launch) (*procbox.Detached, error) {
	rec := l.Record
	// Spill files go in the sandbox's own directory, on disk (the host's
	// /tmp may be a RAM tmpfs), and go with it.
	spill := filepath.Join(l.Dir, "spill")
	args := append([]string{"serve", "--socket", rec.Socket, "--dir", rec.Workdir, "--auth-sha256", l.AuthSHA256,
		"--spill-dir", spill, "--daemon-file", l.DaemonFile}, l.Spec.DaemonArgs...)
	return procbox.SpawnDetached(rec.Runboxd, args, rec.Workdir, l.Log)
}
