package docker

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/pkg/stdcopy"
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
	binPath, err := runboxdbin.Locate(p.Runboxd)
	if err != nil {
		return fail("", err)
	}
	workdir := ""
	if spec.Workdir != "" {
		if workdir, err = filepath.Abs(spec.Workdir); err != nil {
			return fail("", fmt.Errorf("workdir: %w", err))
		}
		// The container's root has the workspace as a bind: it must be
		// the caller's alone (internal/owndir), or another user's or a
		// daemon's socket there (dockerd's own, -H unix:///tmp/d.sock)
		// is the container's. The engine binds the path itself, so a
		// swap after this check is not caught here.
		wd, err := owndir.Open(workdir)
		if err != nil {
			return fail("", err)
		}
		err = owndir.Check(wd, workdir)
		wd.Close()
		if err != nil {
			return fail("", err)
		}
	}
	var maskedHome string // the runbox home's path in the container, when the workspace holds it
	if workdir != "" {
		home, err := p.home()
		if err != nil {
			return fail("", err)
		}
		if procbox.Within(home, workdir) {
			return fail("", fmt.Errorf("workdir %s is inside the runbox home %s, which holds every sandbox's records, sockets and secrets: a sandbox must not see it; pick another directory, or move the home with RUNBOX_HOME: %w",
				workdir, home, runbox.ErrInvalidSpec))
		}
		if err := homes.Check(workdir, home); err != nil {
			return fail("", err)
		}
		if procbox.Within(workdir, home) {
			rel, _ := filepath.Rel(workdir, home)
			maskedHome = path.Join(ctrWorkspace, filepath.ToSlash(rel))
		}
	}
	cli, err := p.engine()
	if err != nil {
		return fail("", err)
	}
	eng, err := p.engineInfo(ctx, cli)
	if err != nil {
		return fail("", err)
	}
	if err := eng.checkLimits(spec.Memory, spec.Pids, spec.CPUs); err != nil {
		return fail("", err)
	}
	if err := ensureImage(ctx, cli, spec.Image); err != nil {
		return fail("", err)
	}
	// A local engine gets runboxd bind-mounted read-only (the home's copy),
	// so it is never in the container's writable layer: a snapshot commits
	// only the sandbox's own changes. A remote engine (or a forced exec
	// stream, which stands in for one in tests) gets it copied in.
	bindRunboxd := isLocal(cli) && !p.execForced()
	var bin []byte        // runboxd, to copy in
	var runboxdSrc string // the home's copy, to bind-mount
	if bindRunboxd {
		runboxdSrc, err = p.runboxdCopy(binPath)
	} else {
		bin, err = readRunboxd(binPath)
	}
	if err != nil {
		return fail("", err)
	}
	id, err := newID()
	if err != nil {
		return fail("", err)
	}

	network := spec.Network
	if network == "" {
		network = defaultNetwork
	}
	private := network == NetworkPrivate
	created := time.Now().UTC()
	specJSON, err := json.Marshal(specLabel{
		Name: spec.Name, Image: spec.Image, Workdir: workdir, Memory: spec.Memory, Pids: spec.Pids,
		CPUs: spec.CPUs, Network: network, DaemonArgs: spec.DaemonArgs,
	})
	if err != nil {
		return fail(id, fmt.Errorf("spec label: %w", err))
	}
	labels := map[string]string{
		LabelSandbox: id,
		LabelName:    spec.Name,
		LabelSpec:    string(specJSON),
		LabelCreated: created.Format(time.RFC3339Nano),
		LabelStream:  streamExec,
		LabelEngine:  eng.String(),
	}
	secret, err := daemonauth.NewSecret()
	if err != nil {
		return fail(id, err)
	}
	labels[LabelSecret] = hex.EncodeToString(secret)

	var mounts []mount.Mount
	stateDir, socket := "", ""
	sockOK, why := eng.socketStream(os.Geteuid())
	if !sockOK {
		labels[LabelStreamWhy] = why
	}
	if !p.execForced() && isLocal(cli) && sockOK {
		home, err := p.home()
		if err != nil {
			return fail(id, err)
		}
		stateDir = filepath.Join(home, "docker", id)
		runDir := filepath.Join(stateDir, "run")
		socket = filepath.Join(runDir, "runboxd.sock")
		if len(socket) > maxSocketPath {
			return fail(id, fmt.Errorf("socket path %s would be %d bytes, more than the %d a unix socket allows: use a shorter RUNBOX_HOME (now %s), or %s=exec",
				socket, len(socket), maxSocketPath, home, StreamEnv))
		}
		if err := os.MkdirAll(stateDir, 0o700); err != nil {
			return fail(id, fmt.Errorf("state dir: %w", err))
		}
		// The run directory is writable by any uid, so runboxd can make its
		// socket whatever user the image runs as; its parent (0700) keeps
		// other host users out.
		if err := os.Mkdir(runDir, 0o700); err != nil {
			os.RemoveAll(stateDir)
			return fail(id, fmt.Errorf("state dir: %w", err))
		}
		if err := os.Chmod(runDir, 0o1777); err != nil {
			os.RemoveAll(stateDir)
			return fail(id, fmt.Errorf("state dir: %w", err))
		}
		mounts = append(mounts, mount.Mount{Type: mount.TypeBind, Source: runDir, Target: ctrRunDir})
		labels[LabelStream] = streamSocket
		labels[LabelSocket] = socket
	}
	if private {
		// The host side dials the sandbox's socket on this machine.
		if stateDir == "" {
			return fail(id, fmt.Errorf("network private needs the sandbox's socket on this machine (a local engine that can bind-mount it, %s not exec): %w", StreamEnv, errors.ErrUnsupported))
		}
		if err := writeEgressState(stateDir, secret, spec.Egress); err != nil {
			os.RemoveAll(stateDir)
			return fail(id, err)
		}
	}
	if bindRunboxd {
		mounts = append(mounts, mount.Mount{Type: mount.TypeBind, Source: runboxdSrc, Target: ctrRunboxd, ReadOnly: true})
	}
	if workdir != "" {
		mounts = append(mounts, mount.Mount{Type: mount.TypeBind, Source: workdir, Target: ctrWorkspace})
	}
	tmpfs := map[string]string{}
	if eng.Kind == kindPodman && eng.Rootless && eng.Cgroup == "1" {
		// Rootless Podman on cgroup v1 gives a container no cgroup of its
		// own and shows it the host's hierarchy (other sandboxes' cgroups
		// by name); there is nothing of the sandbox's there to keep.
		tmpfs["/sys/fs/cgroup"] = "ro,size=4k,mode=755,notmpcopyup"
	}
	switch {
	case maskedHome != "" && eng.Kind == kindPodman:
		// Podman copies what a tmpfs covers into it (tmpcopyup) unless
		// told not to: the home's records and secrets would be in the
		// sandbox's view.
		tmpfs[maskedHome] = "ro,size=4k,mode=755,notmpcopyup"
	case maskedHome != "":
		// An empty read-only tmpfs over the home inside the workspace (the
		// engine mounts it after the workspace: it sorts mounts by depth).
		mounts = append(mounts, mount.Mount{Type: mount.TypeTmpfs, Target: maskedHome, ReadOnly: true,
			TmpfsOptions: &mount.TmpfsOptions{SizeBytes: 4096, Mode: 0o755}})
	}

	entrypoint := []string{ctrRunboxd, "serve", "--socket", ctrSocket, "--auth-sha256", daemonauth.Sum(secret)}
	if spec.Pids > 0 {
		entrypoint = append(entrypoint, "--threads", strconv.Itoa(runboxdbin.SharedLimitThreads))
	}
	if stateDir != "" {
		// The socket is on the host, made by the container's user (root,
		// usually): open to every user, with the state directory (0700,
		// the creating user's) keeping out all but that user.
		entrypoint = append(entrypoint, "--socket-mode", "0666")
	}
	noInit, stopGrace := false, stopGraceSeconds
	view, err := viewFor(ctx, cli, eng, spec.Image)
	if err != nil {
		if stateDir != "" {
			os.RemoveAll(stateDir)
		}
		return fail(id, err)
	}
	entrypoint = append(entrypoint, view.args...)
	var env []string
	if private {
		entrypoint = append(entrypoint, "--egress")
		env = egress.Env // runboxd's environment is its commands'
	}
	labels[LabelView] = view.label
	hc := &container.HostConfig{
		// CAP_SYS_ADMIN for runboxd to build its commands' view, which
		// they never hold (see viewFor).
		CapAdd:      view.capAdd,
		SecurityOpt: view.securityOpt,
		NetworkMode: container.NetworkMode(engineNetwork(network)),
		// runboxd must be PID 1 itself: it is the sandbox's reaper, and its
		// exit must end the container.
		Init:   &noInit,
		Mounts: mounts,
		Tmpfs:  tmpfs,
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
		Labels:     labels,
		// runboxd as PID 1 stops every exec with the stop protocol on
		// SIGRTMIN+3 (not SIGTERM, which its commands could send it with
		// `kill 1`), whatever STOPSIGNAL the image asks for.
		StopSignal:  "SIGRTMIN+3",
		StopTimeout: &stopGrace,
	}
	if workdir != "" {
		cfg.WorkingDir = ctrWorkspace
	}

	name := "runbox-" + id
	if spec.Name != "" {
		name = "runbox-" + spec.Name
	}
	cr, err := cli.ContainerCreate(ctx, moby.ContainerCreateOptions{Name: name, Config: cfg, HostConfig: hc})
	if err != nil {
		if stateDir != "" {
			os.RemoveAll(stateDir)
		}
		// Docker says 409 Conflict; Podman 500 "... is already in use".
		if (cerrdefs.IsConflict(err) || strings.Contains(err.Error(), "is already in use")) && spec.Name != "" {
			return fail(id, fmt.Errorf("container %s exists: %w: %w", name, host.ErrNameInUse, err))
		}
		if spec.Disk > 0 {
			// The engine says why only in words (a 500 from Docker).
			return fail(id, fmt.Errorf("%w: disk: the engine refused a container with a writable layer of bounded size (Docker's overlay2 takes one only on XFS mounted with pquota): create it without --disk: %w: %w",
				ErrLimitUnsupported, errors.ErrUnsupported, err))
		}
		return fail(id, fmt.Errorf("create container from %s: %w", spec.Image, err))
	}
	cleanup := func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), exitTimeout)
		defer cancel()
		cli.ContainerRemove(ctx, cr.ID, moby.ContainerRemoveOptions{Force: true, RemoveVolumes: true})
		if stateDir != "" {
			os.RemoveAll(stateDir)
		}
	}

	// The run directory comes from the archive unless a bind mount covers
	// it, and runboxd unless it is bind-mounted.
	if !bindRunboxd || stateDir == "" {
		archive, err := runboxdTar(bin)
		if err != nil {
			cleanup()
			return fail(id, err)
		}
		if _, err := cli.CopyToContainer(ctx, cr.ID, moby.CopyToContainerOptions{DestinationPath: "/", Content: archive}); err != nil {
			cleanup()
			return fail(id, fmt.Errorf("copy runboxd into container %.12s: %w", cr.ID, err))
		}
	}
	if _, err := cli.ContainerStart(ctx, cr.ID, moby.ContainerStartOptions{}); err != nil {
		cleanup()
		return fail(id, fmt.Errorf("start container %.12s: %w", cr.ID, err))
	}
	c := ctr{ID: cr.ID, Name: name, Image: spec.Image, State: container.StateRunning, Labels: labels}
	if err := p.waitReady(ctx, cli, c); err != nil {
		cleanup()
		return fail(id, err)
	}
	if stateDir != "" {
		if err := c.save(stateDir); err != nil {
			cleanup()
			return fail(id, err)
		}
	}
	if private {
		ir, err := cli.ContainerInspect(ctx, cr.ID, moby.ContainerInspectOptions{})
		if err != nil || ir.Container.State == nil || ir.Container.State.Pid <= 0 {
			cleanup()
			return fail(id, fmt.Errorf("network private: the container's runboxd pid: %v", err))
		}
		if _, err := startEgressHost(binPath, stateDir, socket, ir.Container.State.Pid); err != nil {
			cleanup()
			return fail(id, err)
		}
	}
	return p.toSandbox(c, true), nil
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

// runboxdTar is the archive copied to / before start: /.runbox/runboxd
// (when bin is not nil: a local engine bind-mounts it instead) and the run
// directory (world-writable with the sticky bit, for images whose user is
// not root; on the socket stream a bind mount covers it).
func runboxdTar(bin []byte) (*bytes.Buffer, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	now := time.Now()
	hdrs := []*tar.Header{
		{Name: ".runbox/", Typeflag: tar.TypeDir, Mode: 0o755, ModTime: now},
		{Name: ".runbox/run/", Typeflag: tar.TypeDir, Mode: 0o1777, ModTime: now},
	}
	if bin != nil {
		hdrs = append(hdrs, &tar.Header{Name: ".runbox/runboxd", Typeflag: tar.TypeReg, Mode: 0o755, Size: int64(len(bin)), ModTime: now})
	}
	for _, h := range hdrs {
		if err := tw.WriteHeader(h); err != nil {
			return nil, fmt.Errorf("runboxd archive: %w", err)
		}
	}
	if _, err := tw.Write(bin); err != nil {
		return nil, fmt.Errorf("runboxd archive: %w", err)
	}
	if err := tw.Close(); err != nil {
		return nil, fmt.Errorf("runboxd archive: %w", err)
	}
	return &buf, nil
}

// waitReady polls until the container's runboxd answers Info, the container
// stops (the error then quotes its log), or startTimeout passes.
func (p *Provider) waitReady(ctx context.Context, cli *moby.Client, c ctr) error {
	ctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	dial := p.dialerFor(c)
	socket := c.Labels[LabelSocket]
	var last error
	for {
		// On the socket stream, dial first: it is cheap, and the client
		// would otherwise retry a socket that is not there yet.
		ready := true
		if socket != "" && !p.execForced() {
			if conn, err := net.Dial("unix", socket); err == nil {
				conn.Close()
			} else {
				ready, last = false, err
			}
		}
		if ready {
			if last = probe(ctx, dial, c.Labels[LabelSandbox]); last == nil {
				return nil
			}
		}
		ir, err := cli.ContainerInspect(ctx, c.ID, moby.ContainerInspectOptions{})
		if err == nil && ir.Container.State != nil && !ir.Container.State.Running {
			st := ir.Container.State
			return fmt.Errorf("container %.12s stopped (status %s, exit code %d%s) before runboxd answered%s",
				c.ID, st.Status, st.ExitCode, errSuffix(st.Error), logTail(cli, c.ID))
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("runboxd in container %.12s did not answer within %v (%v): %w%s",
				c.ID, startTimeout, last, ctx.Err(), logTail(cli, c.ID))
		case <-time.After(pollInterval):
		}
	}
}

func errSuffix(s string) string {
	if s == "" {
		return ""
	}
	return ", " + s
}

// logTail returns the last lines of the container's log (runboxd's stderr),
// formatted to follow an error message, or "".
func logTail(cli *moby.Client, id string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	rc, err := cli.ContainerLogs(ctx, id, moby.ContainerLogsOptions{ShowStdout: true, ShowStderr: true, Tail: logTailLines})
	if err != nil {
		return ""
	}
	defer rc.Close()
	var out bytes.Buffer
	stdcopy.StdCopy(&out, &out, rc)
	s := strings.TrimSpace(out.String())
	if s == "" {
		return ""
	}
	return "; container log: " + s
}
