package local

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/internal/egress"
	"github.com/runbox/runbox/internal/jail"
	"github.com/runbox/runbox/internal/procbox"
)

// ProviderName is the name the CLI and Sandbox.Provider use for this provider.
const ProviderName = "local"

// WorkspacePath is where the workspace appears in a sandbox; it is every
// exec's default working directory.
const WorkspacePath = jail.WorkspacePath

// Network modes a spec may ask for.
const (
	NetworkHost = "host" // the host's network (the default)
	NetworkNone = "none" // a network namespace of its own with only loopback
	// NetworkPrivate is NetworkNone plus runboxd's egress proxy on that
	// loopback, carried to a host-side process that allows what
	// SandboxSpec.Egress allows (internal/egress).
	NetworkPrivate = "private"
)

// ErrNoNamespaces means the kernel (or a policy) refuses to make the
// namespaces a local sandbox needs. It wraps runbox.ErrProviderUnavailable.
var ErrNoNamespaces = fmt.Errorf("%w: cannot create Linux namespaces", runbox.ErrProviderUnavailable)

// ErrSharedWorkdir is runbox.ErrUnsafeWorkdir: Create refused a workdir
// that is not the caller's alone (another owner; sticky like /tmp,
// world-writable, group-writable but by the owner's user private group,
// or writable by others through a POSIX ACL): their unix sockets and
// files would be in the sandbox. Errors wrapping it wrap
// runbox.ErrInvalidSpec as well.
var ErrSharedWorkdir = procbox.ErrSharedWorkdir

// Provider creates local sandboxes. The zero value is ready to use.
type Provider struct {
	// Home is the runbox home directory holding sandbox records and state;
	// "" means $RUNBOX_HOME, else ~/.runbox. Unix socket paths are limited
	// to 107 bytes, so keep it short.
	Home string
	// Runboxd is the path of a static runboxd binary; "" means
	// $RUNBOX_RUNBOXD, else a runboxd beside the running executable, else
	// runboxd in PATH.
	Runboxd string
	// UIDBase is the host uid and gid that a sandbox's root is, as root
	// (MappedIDs ids from there); 0 means $RUNBOX_LOCAL_UID_BASE, else
	// DefaultUIDBase. Rootless, a sandbox's root is the caller.
	UIDBase uint32
}

var _ runbox.Provider = (*Provider)(nil)

var kind = procbox.Kind{
	Name:  ProviderName,
	Check: checkSpec,
	// runboxd is PID 1: when it dies, the kernel kills the rest.
	EndsWithDaemon: true,
	Cleanup:        cleanup,
	Describe:       describe,
	// A workspace other users write into holds their sockets.
	PrivateWorkdir: true,
}

func (p *Provider) store() *procbox.Store {
	k := kind
	k.Launch = p.launch
	return &procbox.Store{Kind: k, Home: p.Home, Runboxd: p.Runboxd}
}

// Name returns "local".
func (p *Provider) Name() string { return ProviderName }

// RunsInHostDirectory reports that a local sandbox's workdir is a
// directory of this machine, mounted at /workspace (runbox serve makes a
// fresh one when a create names none).
func (p *Provider) RunsInHostDirectory() bool { return true }

// Create builds a sandbox and returns once its runboxd answers. The
// workspace is spec.Workdir (an existing directory, its path free of
// symbolic links), else the caller's working
// directory; spec.Rootfs replaces the host's root; Memory, Pids and CPUs
// are cgroup limits; Disk bounds the sandbox's writable layer (as root);
// Network is "host" (default), "none" or "private" (with spec.Egress). Image is
// refused: use Rootfs, or the docker provider.
//
// With spec.FromSnapshot, the snapshot's layer is stacked under the
// sandbox's own upper layer, and without a Workdir the sandbox gets a copy
// of the snapshot's workspace (see Snapshot).
func (p *Provider) Create(ctx context.Context, spec runbox.SandboxSpec) (runbox.Sandbox, error) {
	if spec.FromSnapshot != "" && spec.Workdir == "" {
		ws, err := p.snapshotWorkdir(spec.FromSnapshot)
		if err != nil {
			return runbox.Sandbox{}, &runbox.Error{Op: "create", Sandbox: spec.Name, Err: err}
		}
		spec.Workdir = ws
	}
	return p.store().Create(ctx, spec)
}

// Get finds a sandbox by exact id, exact name, or unique id prefix, and
// probes whether its runboxd answers.
func (p *Provider) Get(ctx context.Context, idOrName string) (runbox.Sandbox, error) {
	return p.store().Get(ctx, idOrName)
}

// List returns every local sandbox under the home, oldest first, each
// marked Alive when its runboxd accepts a connection with the sandbox's secret within a second.
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

// Remove stops every exec with the stop protocol, ends runboxd (and with it
// every process and mount of the sandbox), and deletes its cgroups and
// state. A sandbox whose runboxd died (killed, host rebooted) is removed
// without force: nothing of it can have outlived its PID 1.
func (p *Provider) Remove(ctx context.Context, sb runbox.Sandbox, force bool) error {
	return p.store().Remove(ctx, sb, force)
}

// checkSpec refuses what a local sandbox cannot do.
func checkSpec(spec runbox.SandboxSpec) error {
	if spec.Image != "" {
		return fmt.Errorf("the local provider has no images: give a root filesystem directory (--rootfs), or use --provider docker: %w", errors.ErrUnsupported)
	}
	switch spec.Network {
	case "", NetworkHost, NetworkNone, NetworkPrivate:
	default:
		return fmt.Errorf("network %q: the local provider has host, none and private: %w", spec.Network, errors.ErrUnsupported)
	}
	if !spec.Egress.Empty() && spec.Network != NetworkPrivate {
		return fmt.Errorf("an egress allowlist (--allow, --allow-cidr, --deny, --resolve) needs --network private, not %q: %w", spec.Network, runbox.ErrInvalidSpec)
	}
	if err := egress.Policy(spec.Egress).Check(); err != nil {
		return fmt.Errorf("%w: %w", runbox.ErrInvalidSpec, err)
	}
	if (spec.Memory < 0 && spec.Memory != Unlimited) || (spec.Pids < 0 && spec.Pids != Unlimited) || (spec.CPUs < 0 && spec.CPUs != Unlimited) || (spec.Disk < 0 && spec.Disk != Unlimited) {
		return fmt.Errorf("negative resource limit (local.Unlimited, -1, asks for none): %w", runbox.ErrInvalidSpec)
	}
	if spec.Rootfs != "" {
		fi, err := os.Stat(spec.Rootfs)
		if err != nil {
			return fmt.Errorf("rootfs: %w", err)
		}
		if !fi.IsDir() {
			return fmt.Errorf("rootfs %s is not a directory", spec.Rootfs)
		}
	}
	return nil
}

// Directories under a sandbox's state directory.
const (
	upperDir  = "upper"  // the overlay's upper layer: what the sandbox changed
	workDir   = "work"   // the overlay's work directory
	mergedDir = "rootfs" // where the sandbox's root is put together
)

// upperPath is the overlay's upper layer (what the sandbox changed) of the
// sandbox whose state directory is sbDir. Snapshots read it through here.
func upperPath(sbDir string) string { return filepath.Join(sbDir, layersDir, upperDir) }

// hostname is the sandbox's hostname: its name, else "runbox-" and its id.
func hostname(rec *procbox.Record) string {
	if rec.Name != "" {
		return rec.Name
	}
	return "runbox-" + rec.ID
}

// cleanup unmounts the sandbox's disk and waits for its loop device to be
// free, deletes the sandbox's cgroups once runboxd is gone (its other
// mounts went with its mount namespace), and makes its state directory removable:
// an overlay in a user namespace leaves work directories with mode 0.
func cleanup(rec procbox.Record, sbDir string) error {
	err := errors.Join(releaseDisk(sbDir), removeCgroups(rec.Extra[extraCgroup2], rec.Extra[extraCgroup1], rec.Extra[extraFuseCgroup2]))
	// WalkDir visits a directory before it reads it, so opening it up on
	// that first visit is enough to walk (and then remove) what is inside.
	_ = filepath.WalkDir(sbDir, func(p string, d os.DirEntry, werr error) error {
		if werr == nil && d.IsDir() {
			if fi, err := d.Info(); err == nil && fi.Mode().Perm()&0o700 != 0o700 {
				_ = os.Chmod(p, fi.Mode().Perm()|0o700)
			}
		}
		return nil
	})
	return err
}

// describe adds the sandbox's isolation facts to its Detail.
func describe(rec procbox.Record, detail map[string]string) {
	for _, k := range []string{"snapshot", extraSnapshotLayers, "network", "egress_pid", "rootfs", "root", "fuse_server_pid", extraFuseMemory, extraFuseCgroup2, "userns", extraCgroup2, extraCgroup1, "memory", "pids", "cpus", "cpu_shares", "tmp_size", "disk"} {
		if v := rec.Extra[k]; v != "" {
			detail[k] = v
		}
	}
	detail["workspace"] = jail.WorkspacePath
	dir := filepath.Dir(rec.Socket) // the socket is in the state dir
	detail["upper"] = filepath.Join(dir, layersDir, upperDir)
	if onOwnDisk(dir) {
		detail["upper"] = filepath.Join(dir, diskImage) + ":/" + upperDir
	}
}

// ErrNotPrivate means an egress policy was asked of a sandbox that is not
// on the private network. It wraps runbox.ErrInvalidSpec.
var ErrNotPrivate = fmt.Errorf("%w: the sandbox is not on the private network (runbox up --network private)", runbox.ErrInvalidSpec)

// Egress returns the egress policy in force in sb, a private-network
// sandbox.
func (p *Provider) Egress(ctx context.Context, sb runbox.Sandbox) (runbox.EgressPolicy, error) {
	path, err := policyPath(sb)
	if err != nil {
		return runbox.EgressPolicy{}, err
	}
	pol, err := egress.ReadPolicy(path)
	return runbox.EgressPolicy(pol), err
}

// SetEgress replaces the egress policy of sb, a private-network sandbox;
// it applies to every connection opened from then on (the host side reads
// it for each one). Connections already carried are not cut.
func (p *Provider) SetEgress(ctx context.Context, sb runbox.Sandbox, pol runbox.EgressPolicy) error {
	path, err := policyPath(sb)
	if err != nil {
		return err
	}
	if err := egress.WritePolicy(path, egress.Policy(pol)); err != nil {
		return fmt.Errorf("%w: %w", runbox.ErrInvalidSpec, err)
	}
	return nil
}

// policyPath is where the host side of sb's egress reads its policy.
func policyPath(sb runbox.Sandbox) (string, error) {
	if sb.Detail["network"] != NetworkPrivate || sb.Detail["socket"] == "" {
		return "", ErrNotPrivate
	}
	return filepath.Join(filepath.Dir(sb.Detail["socket"]), egress.PolicyFile), nil
}

// TakeEgressRefusals returns the refusals the host side of sb's egress
// made since the last call and forgets them (egress.TakeRefusals), for
// runbox serve's audit log. A sandbox not on the private network has none.
func (p *Provider) TakeEgressRefusals(ctx context.Context, sb runbox.Sandbox) ([]egress.Refused, error) {
	path, err := policyPath(sb)
	if err != nil {
		return nil, nil
	}
	return egress.TakeRefusals(filepath.Join(filepath.Dir(path), egress.RefusalsFile))
}
