package docker

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/mount"
	moby "github.com/moby/moby/client"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/internal/daemonauth"
	"github.com/runbox/runbox/internal/egress"
	"github.com/runbox/runbox/internal/homes"
	"github.com/runbox/runbox/internal/owndir"
	"github.com/runbox/runbox/internal/procbox"
	"github.com/runbox/runbox/internal/runboxdbin"
	"github.com/runbox/runbox/internal/sandboxkey"
	"github.com/runbox/runbox/provider/host"
)

// Create makes a container from spec.Image (pulling it when the engine does
// not have it), gives it runboxd (a read-only bind mount on a local engine,
// a copy for a remote one), starts it, and returns once runboxd
// answers. On failure nothing is left behind.
func (p *Provider) Create(ctx context.Context, spec runbox.SandboxSpec) (runbox.Sandbox, error) {
	fail := func(id string, err error) (runbox.Sandbox, error) {
		if id == "" {
			id = spec.Name
		}
		return runbox.Sandbox{}, &runbox.Error{Op: "create", Sandbox: id, Err: err}
	}
	if spec.FromSnapshot != "" {
		cli, err := p.engine()
		if err != nil {
			return fail("", err)
		}
		if spec.Image, err = p.snapshotImage(ctx, cli, spec); err != nil {
			return fail("", err)
		}
	}
	if err := checkSpec(spec); err != nil {
		return fail("", err)
	}
	c := &creation{spec: spec}
	if err := p.prepareCreation(ctx, c); err != nil {
		return fail("", err)
	}
	if err := c.makeLabels(); err != nil {
		return fail(c.id, err)
	}
	if err := p.makeStateDir(c); err != nil {
		return fail(c.id, err)
	}
	if err := c.prepareEgress(); err != nil {
		return fail(c.id, err)
	}
	c.addMounts()
	view, err := viewFor(ctx, c.cli, c.eng, spec.Image)
	if err != nil {
		c.removeStateDir()
		return fail(c.id, err)
	}
	cfg, hc := c.containerConfig(view)
	ctrID, err := c.createContainer(ctx, cfg, hc)
	if err != nil {
		c.removeStateDir()
		return fail(c.id, err)
	}
	sb, err := p.startContainer(ctx, c, ctrID)
	if err != nil {
		c.removeContainer(ctx, ctrID)
		return fail(c.id, err)
	}
	return sb, nil
}

// creation is what the steps of Create share: the spec, what was found
// out about the engine and runboxd, and what was made for the sandbox so
// far (its id, labels, state directory and mounts).
type creation struct {
	spec       runbox.SandboxSpec
	binPath    string // runboxd on this machine
	workdir    string // the workspace, absolute; "" for none
	maskedHome string // the runbox home's path in the container, when the workspace holds it
	cli        *moby.Client
	eng        EngineInfo
	// bindRunboxd says runboxd is bind-mounted (runboxdSrc, the home's
	// copy) rather than copied in (bin).
	bindRunboxd bool
	bin         []byte
	runboxdSrc  string

	id      string
	name    string // the container's name
	network string // the sandbox's network mode, never ""
	private bool   // network == NetworkPrivate
	secret  []byte
	labels  map[string]string
	// stateDir is the sandbox's directory in the home, holding the run
	// directory with runboxd's socket, when the stream is the socket ("" when
	// it is docker exec).
	stateDir string
	socket   string
	mounts   []mount.Mount
	tmpfs    map[string]string
}

// prepareCreation finds out what a container for c.spec needs before
// anything is made: runboxd's binary, the workspace (checked), an engine
// that can hold the limits and has the image, how runboxd gets into the
// container, and the sandbox's id.
func (p *Provider) prepareCreation(ctx context.Context, c *creation) error {
	var err error
	if c.binPath, err = runboxdbin.Locate(p.Runboxd); err != nil {
		return err
	}
	if c.workdir, c.maskedHome, err = p.checkWorkdir(c.spec.Workdir); err != nil {
		return err
	}
	if c.cli, err = p.engine(); err != nil {
		return err
	}
	if c.eng, err = p.engineInfo(ctx, c.cli); err != nil {
		return err
	}
	if err := c.eng.checkLimits(c.spec.Memory, c.spec.Pids, c.spec.CPUs); err != nil {
		return err
	}
	if err := ensureImage(ctx, c.cli, c.spec.Image); err != nil {
		return err
	}
	// A local engine gets runboxd bind-mounted read-only (the home's copy),
	// so it is never in the container's writable layer: a snapshot commits
	// only the sandbox's own changes. A remote engine (or a forced exec
	// stream, which stands in for one in tests) gets it copied in.
	c.bindRunboxd = isLocal(c.cli) && !p.execForced()
	if c.bindRunboxd {
		c.runboxdSrc, err = p.runboxdCopy(c.binPath)
	} else {
		c.bin, err = readRunboxd(c.binPath)
	}
	if err != nil {
		return err
	}
	c.id, err = newID()
	return err
}

// checkWorkdir returns the absolute path of the workspace dir ("" for
// none), once it is the caller's alone and apart from the runbox home, and
// the home's path in the container when the workspace holds it ("" when
// it does not).
func (p *Provider) checkWorkdir(dir string) (workdir, maskedHome string, err error) {
	if dir == "" {
		return "", "", nil
	}
	if workdir, err = filepath.Abs(dir); err != nil {
		return "", "", fmt.Errorf("workdir: %w", err)
	}
	// The container's root has the workspace as a bind: it must be
	// the caller's alone (internal/owndir), or another user's or a
	// daemon's socket there (dockerd's own, -H unix:///tmp/d.sock)
	// is the container's. The engine binds the path itself, so a
	// swap after this check is not caught here.
	wd, err := owndir.Open(workdir)
	if err != nil {
		return "", "", err
	}
	err = owndir.Check(wd, workdir)
	wd.Close()
	if err != nil {
		return "", "", err
	}
	home, err := p.home()
	if err != nil {
		return "", "", err
	}
	if procbox.Within(home, workdir) {
		return "", "", fmt.Errorf("workdir %s is inside the runbox home %s, which holds every sandbox's records, sockets and secrets: a sandbox must not see it; pick another directory, or move the home with RUNBOX_HOME: %w",
			workdir, home, runbox.ErrInvalidSpec)
	}
	if err := homes.Check(workdir, home); err != nil {
		return "", "", err
	}
	if procbox.Within(workdir, home) {
		rel, _ := filepath.Rel(workdir, home)
		maskedHome = path.Join(ctrWorkspace, filepath.ToSlash(rel))
	}
	return workdir, maskedHome, nil
}

// makeLabels sets the sandbox's network mode, makes its secret, and
// builds the container's labels: its record, read back by Get and List.
func (c *creation) makeLabels() error {
	spec := c.spec
	c.network = spec.Network
	if c.network == "" {
		c.network = defaultNetwork
	}
	c.private = c.network == NetworkPrivate
	created := time.Now().UTC()
	specJSON, err := json.Marshal(specLabel{
		Name: spec.Name, Image: spec.Image, Workdir: c.workdir, Memory: spec.Memory, Pids: spec.Pids,
		CPUs: spec.CPUs, Network: c.network, DaemonArgs: spec.DaemonArgs,
	})
	if err != nil {
		return fmt.Errorf("spec label: %w", err)
	}
	c.labels = map[string]string{
		LabelSandbox: c.id,
		LabelName:    spec.Name,
		LabelSpec:    string(specJSON),
		LabelCreated: created.Format(time.RFC3339Nano),
		LabelStream:  streamExec,
		LabelEngine:  c.eng.String(),
	}
	if c.secret, err = daemonauth.NewSecret(); err != nil {
		return err
	}
	c.labels[LabelSecret] = hex.EncodeToString(c.secret)
	return nil
}

// makeStateDir makes the sandbox's state directory and the run directory
// bind-mounted into the container for runboxd's socket, when the engine is
// local and can give the host a socket made in the container (the socket
// stream); else the stream stays docker exec, and the label says why.
func (p *Provider) makeStateDir(c *creation) error {
	sockOK, why := c.eng.socketStream(os.Geteuid())
	if !sockOK {
		c.labels[LabelStreamWhy] = why
	}
	if p.execForced() || !isLocal(c.cli) || !sockOK {
		return nil
	}
	home, err := p.home()
	if err != nil {
		return err
	}
	stateDir := filepath.Join(home, "docker", c.id)
	runDir := filepath.Join(stateDir, "run")
	socket := filepath.Join(runDir, "runboxd.sock")
	if len(socket) > maxSocketPath {
		return fmt.Errorf("socket path %s would be %d bytes, more than the %d a unix socket allows: use a shorter RUNBOX_HOME (now %s), or %s=exec",
			socket, len(socket), maxSocketPath, home, StreamEnv)
	}
	if err := os.MkdirAll(stateDir, 0o700); err != nil {
		return fmt.Errorf("state dir: %w", err)
	}
	// The run directory is writable by any uid, so runboxd can make its
	// socket whatever user the image runs as; its parent (0700) keeps
	// other host users out.
	if err := os.Mkdir(runDir, 0o700); err != nil {
		os.RemoveAll(stateDir)
		return fmt.Errorf("state dir: %w", err)
	}
	if err := os.Chmod(runDir, 0o1777); err != nil {
		os.RemoveAll(stateDir)
		return fmt.Errorf("state dir: %w", err)
	}
	c.stateDir, c.socket = stateDir, socket
	c.mounts = append(c.mounts, mount.Mount{Type: mount.TypeBind, Source: runDir, Target: ctrRunDir})
	c.labels[LabelStream] = streamSocket
	c.labels[LabelSocket] = socket
	return nil
}

// prepareEgress writes a private sandbox's egress state (its policy) in
// its state directory, which the host side reads; a private sandbox needs
// one, as the host side dials the sandbox's socket on this machine.
func (c *creation) prepareEgress() error {
	if !c.private {
		return nil
	}
	if c.stateDir == "" {
		return fmt.Errorf("network private needs the sandbox's socket on this machine (a local engine that can bind-mount it, %s not exec): %w", StreamEnv, errors.ErrUnsupported)
	}
	if err := writeEgressState(c.stateDir, c.secret, c.spec.Egress); err != nil {
		os.RemoveAll(c.stateDir)
		return err
	}
	return nil
}

// addMounts adds runboxd's bind mount, the workspace's, and what masks the
// runbox home in the workspace and, on rootless Podman with cgroup v1, the
// host's cgroup hierarchy.
func (c *creation) addMounts() {
	if c.bindRunboxd {
		c.mounts = append(c.mounts, mount.Mount{Type: mount.TypeBind, Source: c.runboxdSrc, Target: ctrRunboxd, ReadOnly: true})
	}
	if c.workdir != "" {
		c.mounts = append(c.mounts, mount.Mount{Type: mount.TypeBind, Source: c.workdir, Target: ctrWorkspace})
	}
	c.tmpfs = map[string]string{}
	eng := c.eng
	if eng.Kind == kindPodman && eng.Rootless && eng.Cgroup == "1" {
		// Rootless Podman on cgroup v1 gives a container no cgroup of its
		// own and shows it the host's hierarchy (other sandboxes' cgroups
		// by name); there is nothing of the sandbox's there to keep.
		c.tmpfs["/sys/fs/cgroup"] = "ro,size=4k,mode=755,notmpcopyup"
	}
	switch {
	case c.maskedHome != "" && eng.Kind == kindPodman:
		// Podman copies what a tmpfs covers into it (tmpcopyup) unless
		// told not to: the home's records and secrets would be in the
		// sandbox's view.
		c.tmpfs[c.maskedHome] = "ro,size=4k,mode=755,notmpcopyup"
	case c.maskedHome != "":
		// An empty read-only tmpfs over the home inside the workspace (the
		// engine mounts it after the workspace: it sorts mounts by depth).
		c.mounts = append(c.mounts, mount.Mount{Type: mount.TypeTmpfs, Target: c.maskedHome, ReadOnly: true,
			TmpfsOptions: &mount.TmpfsOptions{SizeBytes: 4096, Mode: 0o755}})
	}
}

// containerConfig is the container's configuration: runboxd serve as its
// entrypoint and PID 1, with the commands' view, the limits, the mounts
// and the labels.
func (c *creation) containerConfig(view commandView) (*container.Config, *container.HostConfig) {
	spec := c.spec
	entrypoint := []string{ctrRunboxd, "serve", "--socket", ctrSocket, "--auth-sha256", daemonauth.Sum(c.secret)}
	if spec.Pids > 0 {
		entrypoint = append(entrypoint, "--threads", strconv.Itoa(runboxdbin.SharedLimitThreads))
	}
	if c.stateDir != "" {
		// The socket is on the host, made by the container's user (root,
		// usually): open to every user, with the state directory (0700,
		// the creating user's) keeping out all but that user.
		entrypoint = append(entrypoint, "--socket-mode", "0666")
	}
	noInit, stopGrace := false, stopGraceSeconds
	entrypoint = append(entrypoint, view.args...)
	var env []string
	if c.private {
		entrypoint = append(entrypoint, "--egress")
		env = egress.Env // runboxd's environment is its commands'
	}
	c.labels[LabelView] = view.label
	hc := &container.HostConfig{
		// CAP_SYS_ADMIN for runboxd to build its commands' view, which
		// they never hold (see viewFor).
		CapAdd:      view.capAdd,
		SecurityOpt: view.securityOpt,
		NetworkMode: container.NetworkMode(engineNetwork(c.network)),
		// runboxd must be PID 1 itself: it is the sandbox's reaper, and its
		// exit must end the container.
		Init:   &noInit,
		Mounts: c.mounts,
		Tmpfs:  c.tmpfs,
		Resources: container.Resources{
			Memory:   spec.Memory,
			NanoCPUs: int64(math.Round(spec.CPUs * 1e9)),
		},
	}
	if spec.Disk > 0 {
		// Only some storage drivers take a size (overlay2 on XFS with
		// pquota, btrfs, zfs); the others refuse the container.
		hc.StorageOpt = map[string]string{"size": strconv.FormatInt(spec.Disk, 10)}
	}
	if spec.Pids > 0 {
		// The container's limit counts runboxd's threads too: the commands
		// get their Pids beside the threads runboxd keeps, and a few more.
		pids := spec.Pids + runboxdbin.SharedLimitAllowance
		hc.Resources.PidsLimit = &pids
	}
	cfg := &container.Config{
		Image:      spec.Image,
		Entrypoint: append(entrypoint, spec.DaemonArgs...),
		Cmd:        []string{},
		Env:        env,
		Labels:     c.labels,
		// runboxd as PID 1 stops every exec with the stop protocol on
		// SIGRTMIN+3 (not SIGTERM, which its commands could send it with
		// `kill 1`), whatever STOPSIGNAL the image asks for.
		StopSignal:  "SIGRTMIN+3",
		StopTimeout: &stopGrace,
	}
	if c.workdir != "" {
		cfg.WorkingDir = ctrWorkspace
	}
	return cfg, hc
}

// createContainer creates the container, named after the sandbox, and
// returns its id; it tells a name in use and a refused disk bound apart.
func (c *creation) createContainer(ctx context.Context, cfg *container.Config, hc *container.HostConfig) (string, error) {
	c.name = "runbox-" + c.id
	if c.spec.Name != "" {
		c.name = "runbox-" + c.spec.Name
	}
	cr, err := c.cli.ContainerCreate(ctx, moby.ContainerCreateOptions{Name: c.name, Config: cfg, HostConfig: hc})
	if err == nil {
		return cr.ID, nil
	}
	// Docker says 409 Conflict; Podman 500 "... is already in use".
	if (cerrdefs.IsConflict(err) || strings.Contains(err.Error(), "is already in use")) && c.spec.Name != "" {
		return "", fmt.Errorf("container %s exists: %w: %w", c.name, host.ErrNameInUse, err)
	}
	if c.spec.Disk > 0 {
		// The engine says why only in words (a 500 from Docker).
		return "", fmt.Errorf("%w: disk: the engine refused a container with a writable layer of bounded size (Docker's overlay2 takes one only on XFS mounted with pquota): create it without --disk: %w: %w",
			ErrLimitUnsupported, errors.ErrUnsupported, err)
	}
	return "", fmt.Errorf("create container from %s: %w", c.spec.Image, err)
}

// startContainer copies in what no bind mount brings, starts the
// container, waits for its runboxd to answer, saves its record in the
// state directory, and starts a private sandbox's egress host side. The
// caller removes the container if it fails.
func (p *Provider) startContainer(ctx context.Context, c *creation, ctrID string) (runbox.Sandbox, error) {
	cli := c.cli
	// The run directory comes from the archive unless a bind mount covers
	// it, and runboxd unless it is bind-mounted.
	if !c.bindRunboxd || c.stateDir == "" {
		archive, err := runboxdTar(c.bin)
		if err != nil {
			return runbox.Sandbox{}, err
		}
		if _, err := cli.CopyToContainer(ctx, ctrID, moby.CopyToContainerOptions{DestinationPath: "/", Content: archive}); err != nil {
			return runbox.Sandbox{}, fmt.Errorf("copy runboxd into container %.12s: %w", ctrID, err)
		}
	}
	if _, err := cli.ContainerStart(ctx, ctrID, moby.ContainerStartOptions{}); err != nil {
		return runbox.Sandbox{}, fmt.Errorf("start container %.12s: %w", ctrID, err)
	}
	ct := ctr{ID: ctrID, Name: c.name, Image: c.spec.Image, State: container.StateRunning, Labels: c.labels}
	if err := p.waitReady(ctx, cli, ct); err != nil {
		return runbox.Sandbox{}, err
	}
	if c.stateDir != "" {
		if err := ct.save(c.stateDir); err != nil {
			return runbox.Sandbox{}, err
		}
	}
	if c.private {
		ir, err := cli.ContainerInspect(ctx, ctrID, moby.ContainerInspectOptions{})
		if err != nil || ir.Container.State == nil || ir.Container.State.Pid <= 0 {
			return runbox.Sandbox{}, fmt.Errorf("network private: the container's runboxd pid: %v", err)
		}
		if _, err := startEgressHost(c.binPath, c.stateDir, c.socket, ir.Container.State.Pid); err != nil {
			return runbox.Sandbox{}, err
		}
	}
	return p.toSandbox(ct, true), nil
}

// removeStateDir removes the sandbox's state directory, if it has one.
func (c *creation) removeStateDir() {
	if c.stateDir != "" {
		os.RemoveAll(c.stateDir)
	}
}

// removeContainer removes a container that failed to start, and the
// sandbox's state directory, even when ctx is cancelled.
func (c *creation) removeContainer(ctx context.Context, ctrID string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), exitTimeout)
	defer cancel()
	c.cli.ContainerRemove(ctx, ctrID, moby.ContainerRemoveOptions{Force: true, RemoveVolumes: true})
	c.removeStateDir()
}

// engineNetwork is the engine's network for a sandbox's network mode:
// a private sandbox's container is on "none".
func engineNetwork(network string) string {
	if network == NetworkPrivate {
		return "none"
	}
	return network
}

// checkSpec refuses what a docker sandbox cannot be made from.
func checkSpec(spec runbox.SandboxSpec) error {
	if spec.Image == "" {
		return fmt.Errorf("%w: name one (e.g. --image debian:bookworm)", ErrImageRequired)
	}
	if spec.Name != "" && !sandboxkey.ValidName(spec.Name) {
		return fmt.Errorf("invalid name %q: use letters, digits, '_', '.', '-' (at most 63, not starting with a punctuation mark)", spec.Name)
	}
	if spec.Memory < 0 || spec.Pids < 0 || spec.CPUs < 0 || spec.Disk < 0 || math.IsNaN(spec.CPUs) || math.IsInf(spec.CPUs, 0) {
		return fmt.Errorf("negative or invalid resource limit (memory %d, pids %d, cpus %v, disk %d)", spec.Memory, spec.Pids, spec.CPUs, spec.Disk)
	}
	if !spec.Egress.Empty() && spec.Network != NetworkPrivate {
		// Silently reaching nothing, or everything, would both betray an
		// allowlist.
		return fmt.Errorf("an egress allowlist (--allow, --allow-cidr, --deny, --resolve) needs --network private, not %q: %w", spec.Network, runbox.ErrInvalidSpec)
	}
	if err := egress.Policy(spec.Egress).Check(); err != nil {
		return fmt.Errorf("%w: %w", runbox.ErrInvalidSpec, err)
	}
	return nil
}

// ensureImage makes sure the engine has image, pulling it when it does not.
func ensureImage(ctx context.Context, cli *moby.Client, image string) error {
	_, err := cli.ImageInspect(ctx, image)
	if err == nil {
		return nil
	}
	if !cerrdefs.IsNotFound(err) {
		return fmt.Errorf("inspect image %s: %w", image, engineError(cli, err))
	}
	resp, err := cli.ImagePull(ctx, image, moby.ImagePullOptions{})
	if err != nil {
		return fmt.Errorf("image %s is not on the engine and cannot be pulled: %w", image, err)
	}
	defer resp.Close()
	if err := resp.Wait(ctx); err != nil {
		return fmt.Errorf("image %s is not on the engine and cannot be pulled: %w", image, err)
	}
	return nil
}

// newID returns a fresh sandbox id.
var newID = sandboxkey.NewID
