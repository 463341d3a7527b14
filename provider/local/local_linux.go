package local

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/internal/jail"
	"github.com/runbox/runbox/internal/procbox"
	"github.com/runbox/runbox/internal/runboxdbin"
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
)

// ErrNoNamespaces means the kernel (or a policy) refuses to make the
// namespaces a local sandbox needs. It wraps runbox.ErrProviderUnavailable.
var ErrNoNamespaces = fmt.Errorf("%w: cannot create Linux namespaces", runbox.ErrProviderUnavailable)

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
}

var _ runbox.Provider = (*Provider)(nil)

var kind = procbox.Kind{
	Name:          ProviderName,
	Check:         checkSpec,
	CreateWorkdir: true,
	// runboxd is PID 1: when it dies, the kernel kills the rest.
	EndsWithDaemon: true,
	Launch:         launch,
	Cleanup:        cleanup,
	Describe:       describe,
}

func (p *Provider) store() *procbox.Store {
	return &procbox.Store{Kind: kind, Home: p.Home, Runboxd: p.Runboxd}
}

// Name returns "local".
func (p *Provider) Name() string { return ProviderName }

// Create builds a sandbox and returns once its runboxd answers. The
// workspace is spec.Workdir (created if absent), else the caller's working
// directory; spec.Rootfs replaces the host's root; Memory, Pids and CPUs
// are cgroup limits; Network is "host" (default) or "none". Image is
// refused: use Rootfs, or the docker provider.
func (p *Provider) Create(ctx context.Context, spec runbox.SandboxSpec) (runbox.Sandbox, error) {
	return p.store().Create(ctx, spec)
}

// Get finds a sandbox by exact id, exact name, or unique id prefix, and
// probes whether its runboxd answers.
func (p *Provider) Get(ctx context.Context, idOrName string) (runbox.Sandbox, error) {
	return p.store().Get(ctx, idOrName)
}

// List returns every local sandbox under the home, oldest first, each
// marked Alive when its runboxd answers Info within a second.
func (p *Provider) List(ctx context.Context) ([]runbox.Sandbox, error) {
	return p.store().List(ctx)
}

// Dialer returns a dialer for the sandbox's unix socket.
func (p *Provider) Dialer(sb runbox.Sandbox) runbox.Dialer { return p.store().Dialer(sb) }

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
	case "", NetworkHost, NetworkNone:
	default:
		return fmt.Errorf("network %q: the local provider has host and none: %w", spec.Network, errors.ErrUnsupported)
	}
	if spec.Memory < 0 || spec.Pids < 0 || spec.CPUs < 0 {
		return fmt.Errorf("negative resource limit: %w", runbox.ErrInvalidSpec)
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

// launch builds the sandbox's directories and cgroups and starts runboxd
// as PID 1 of new namespaces, in its cgroups from its first instruction.
func launch(ctx context.Context, l procbox.Launch) (*procbox.Detached, error) {
	rec, spec := l.Record, l.Spec
	bin, err := os.ReadFile(rec.Runboxd)
	if err != nil {
		return nil, fmt.Errorf("read runboxd: %w", err)
	}
	if spec.Rootfs != "" {
		// The binary runs in the host's root until it pivots, but a
		// dynamic one would then find its libraries gone for good.
		if err := runboxdbin.CheckStatic(bin, rec.Runboxd); err != nil {
			return nil, err
		}
	}
	rootless := os.Geteuid() != 0
	userns := rootless || spec.UserNS
	for _, d := range []string{upperDir, workDir, mergedDir} {
		if err := os.Mkdir(filepath.Join(l.Dir, d), 0o755); err != nil {
			return nil, fmt.Errorf("state dir: %w", err)
		}
	}
	cg, err := newCgroups(rec.ID, spec, rootless)
	if err != nil {
		return nil, err
	}
	if rec.Extra == nil {
		rec.Extra = map[string]string{}
	}
	cg.record(rec.Extra)
	lower := "/"
	if spec.Rootfs != "" {
		if lower, err = filepath.Abs(spec.Rootfs); err != nil {
			return nil, fmt.Errorf("rootfs: %w", err)
		}
		rec.Extra["rootfs"] = lower
	}
	network := spec.Network
	if network == "" {
		network = NetworkHost
	}
	rec.Extra["network"] = network
	if userns {
		rec.Extra["userns"] = "true"
	}
	cfg := jail.Config{
		Lower:       lower,
		Upper:       filepath.Join(l.Dir, upperDir),
		Work:        filepath.Join(l.Dir, workDir),
		Merged:      filepath.Join(l.Dir, mergedDir),
		Workspace:   rec.Workdir,
		Socket:      rec.Socket,
		Hostname:    hostname(rec),
		NetworkNone: network == NetworkNone,
		Mask:        []string{l.Home},
		Env:         jail.DefaultEnv,
		OOMControl:  cg.oomControl,
		ExecTasks:   cg.execTasks,
		Threads:     cg.keepThreads,
	}
	cfgJSON, err := json.Marshal(cfg)
	if err != nil {
		cg.remove()
		return nil, fmt.Errorf("jail config: %w", err)
	}

	syncR, syncW, err := os.Pipe()
	if err != nil {
		cg.remove()
		return nil, fmt.Errorf("sync pipe: %w", err)
	}
	defer syncR.Close()
	defer syncW.Close()
	args := append([]string{"jail"}, spec.DaemonArgs...)
	cmd := exec.Command(rec.Runboxd, args...)
	cmd.Dir = "/"
	cmd.Env = jail.DefaultEnv
	cmd.Stdout, cmd.Stderr = l.Log, l.Log
	cmd.ExtraFiles = []*os.File{syncR} // fd 3: the configuration
	attr := &syscall.SysProcAttr{
		Setsid: true,
		Cloneflags: syscall.CLONE_NEWNS | syscall.CLONE_NEWPID | syscall.CLONE_NEWUTS |
			syscall.CLONE_NEWIPC | syscall.CLONE_NEWCGROUP,
	}
	if network == NetworkNone {
		attr.Cloneflags |= syscall.CLONE_NEWNET
	}
	if userns {
		attr.Cloneflags |= syscall.CLONE_NEWUSER
		attr.UidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Geteuid(), Size: 1}}
		attr.GidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getegid(), Size: 1}}
		attr.GidMappingsEnableSetgroups = false
	}
	if cg.v2Dir != "" {
		dir, err := os.Open(cg.v2Dir)
		if err != nil {
			cg.remove()
			return nil, fmt.Errorf("cgroup %s: %w", cg.v2Dir, err)
		}
		defer dir.Close()
		attr.UseCgroupFD, attr.CgroupFD = true, int(dir.Fd())
	}
	cmd.SysProcAttr = attr
	proc, err := procbox.StartDetached(cmd)
	if err != nil {
		cg.remove()
		if errors.Is(err, syscall.EPERM) || errors.Is(err, syscall.EINVAL) || errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EUSERS) {
			return nil, fmt.Errorf("%w (%v): run as root, enable unprivileged user namespaces (sysctl kernel.unprivileged_userns_clone=1, user.max_user_namespaces), or use --provider host or --provider docker",
				ErrNoNamespaces, err)
		}
		return nil, err
	}
	if err := cg.place(proc.Pid); err != nil {
		proc.Kill()
		<-proc.Exited
		cg.remove()
		return nil, err
	}
	// The configuration, then EOF, is runboxd's go-ahead.
	_, err = syncW.Write(cfgJSON)
	if cerr := syncW.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		proc.Kill()
		<-proc.Exited
		cg.remove()
		return nil, fmt.Errorf("start runboxd: %w", err)
	}
	return proc, nil
}

// hostname is the sandbox's hostname: its name, else "runbox-" and its id.
func hostname(rec *procbox.Record) string {
	if rec.Name != "" {
		return rec.Name
	}
	return "runbox-" + rec.ID
}

// cleanup deletes the sandbox's cgroups once runboxd is gone (its mounts
// went with its mount namespace), and makes its state directory removable:
// an overlay in a user namespace leaves work directories with mode 0.
func cleanup(rec procbox.Record, sbDir string) error {
	err := removeCgroups(rec.Extra[extraCgroup2], rec.Extra[extraCgroup1])
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
	for _, k := range []string{"network", "rootfs", "userns", extraCgroup2, extraCgroup1} {
		if v := rec.Extra[k]; v != "" {
			detail[k] = v
		}
	}
	detail["workspace"] = jail.WorkspacePath
	detail["upper"] = filepath.Join(filepath.Dir(rec.Socket), upperDir) // the socket is in the state dir
}
