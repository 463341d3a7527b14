package docker

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	moby "github.com/moby/moby/client"

	"github.com/runbox/runbox"
	rbclient "github.com/runbox/runbox/client"
	"github.com/runbox/runbox/internal/sandboxkey"
)

var (
	_ runbox.Pauser      = (*Provider)(nil)
	_ runbox.Snapshotter = (*Provider)(nil)
)

// SnapshotRepo is the repository of the images snapshots are committed to:
// snapshot NAME is the image SnapshotRepo/NAME.
const SnapshotRepo = "runbox-snapshot"

// Labels of a snapshot's image.
const (
	LabelSnapshotOf      = "runbox.snapshot.of"      // the sandbox it was taken of
	LabelSnapshotCreated = "runbox.snapshot.created" // when, RFC 3339
)

// pausedFile, in a socket-stream sandbox's state directory, says the
// container is paused: its runboxd is frozen with it, and a connection
// to its socket would be accepted by the kernel and never answered, so the
// dialer refuses at once with runbox.ErrSandboxPaused instead. When Pause
// froze the container's cgroup itself (freezer_linux.go), the file names
// that cgroup ("v1 DIR" or "v2 DIR"), and it is the only record of the
// pause: the engine still says running.
const pausedFile = "paused"

// Pause freezes the sandbox: its runboxd first stops its execs' clocks and
// freezes the commands (so no deadline counts the pause), then the whole
// container (runboxd included) is frozen: on a local Docker engine, with a
// socket stream, by writing the container's cgroup freezer directly (the
// engine's pause costs tens of milliseconds of containerd and runc for the
// same write); otherwise (Podman, a remote engine, the exec stream, a
// cgroup this process cannot write) by the engine's pause. While paused,
// Get and List say so (Detail "paused") and a new connection is refused
// with runbox.ErrSandboxPaused, never left hanging. Pausing a paused
// sandbox does nothing.
func (p *Provider) Pause(ctx context.Context, sb runbox.Sandbox) error {
	fail := func(err error) error { return &runbox.Error{Op: "pause", Sandbox: sb.ID, Err: err} }
	dir := sb.Detail["dir"]
	pl, err := lockFile(ctx, p.lockDir(sb), pauseLockFile, true)
	if err != nil {
		return fail(err)
	}
	defer pl.unlock()
	// A freezer found before (freezerFile) spares the engine's inspect.
	if f, ok := p.knownFreezer(dir, sb.Detail["container"]); ok {
		if err := p.pauseDirect(ctx, sb, f); err != nil {
			return fail(err)
		}
		return nil
	}
	st, err := p.pausedState(ctx, sb)
	if err != nil {
		return fail(err)
	}
	if st.paused {
		return nil
	}
	if dir != "" {
		if f, ok := p.directFreezer(ctx, st); ok {
			// Recorded for the next Pause; a failure only costs it the inspect.
			_ = os.WriteFile(filepath.Join(dir, freezerFile), []byte(f.marker()), 0o600)
			if err := p.pauseDirect(ctx, sb, f); err != nil {
				return fail(err)
			}
			return nil
		}
	}
	cl := p.daemon(sb)
	if err := cl.Pause(ctx); err != nil {
		return fail(err)
	}
	if dir != "" {
		if err := os.WriteFile(filepath.Join(dir, pausedFile), nil, 0o600); err != nil {
			_ = cl.Resume(ctx)
			return fail(err)
		}
	}
	if _, err := st.cli.ContainerPause(ctx, st.id, moby.ContainerPauseOptions{}); err != nil {
		p.clearPaused(sb)
		_ = cl.Resume(ctx)
		return fail(fmt.Errorf("pause container %.12s: %w", st.id, engineError(st.cli, err)))
	}
	return nil
}

// Two flock(2) files in a sandbox's state directory order a user's pause
// and resume against snapshots, across every process that drives the
// sandbox (CLIs, serve). The kernel drops a lock with its holder's last
// descriptor, so a process that dies holding one never blocks the others.
const (
	// pauseLockFile is held exclusively by Pause and Resume for their
	// whole change, and by Snapshot while it decides how to hold the
	// sandbox and while it lets go: so a snapshot never holds or releases
	// against a runboxd being frozen or thawed meanwhile.
	pauseLockFile = "pause.lock"
	// holdLockFile is held shared by each snapshot of a sandbox whose
	// container was frozen already (its user paused it: its runboxd
	// cannot take a hold) until its commit ends, and exclusively by
	// Resume before it thaws: a resume waits for those commits.
	holdLockFile = "hold.lock"
)

// lockDir is where sb's pause and hold locks are: its state directory,
// or for a sandbox without one (the exec stream) the directory its state
// directory would have in this provider's home, made for them (Remove
// removes it). Processes on other machines driving the same remote
// engine do not share it. Empty (no lock) when there is no home.
func (p *Provider) lockDir(sb runbox.Sandbox) string {
	if d := sb.Detail["dir"]; d != "" {
		return d
	}
	home, err := p.home()
	if err != nil {
		return ""
	}
	d := filepath.Join(home, "docker", sb.ID)
	if err := os.MkdirAll(d, 0o700); err != nil {
		return ""
	}
	return d
}

// freezerFile, in a socket-stream sandbox's state directory, records the
// container's cgroup freezer once Pause has found it (as pausedFile does
// while frozen), so later pauses need no inspect from the engine. The
// cgroup is named by the container's id and goes when the container stops.
const freezerFile = "freezer"

// knownFreezer is the freezer freezerFile in dir records for container id,
// when it is there and writable.
func (p *Provider) knownFreezer(dir, id string) (cgroupFreezer, bool) {
	if dir == "" || p.execForced() {
		return cgroupFreezer{}, false
	}
	b, err := os.ReadFile(filepath.Join(dir, freezerFile))
	if err != nil {
		return cgroupFreezer{}, false
	}
	f, ok := parseFreezerMarker(string(b), id)
	return f, ok && f.writable()
}

// pauseDirect pauses sb by its cgroup's freezer f: runboxd stops its
// clocks and freezes its commands, the marker is written (so no dial
// reaches the frozen runboxd), then the cgroup is frozen. A cgroup found
// frozen already (paused before, by Pause or the engine) is left as it is.
func (p *Provider) pauseDirect(ctx context.Context, sb runbox.Sandbox, f cgroupFreezer) error {
	if frozen, err := f.frozen(); err != nil || frozen {
		return err
	}
	cl := p.daemon(sb)
	if err := cl.Pause(ctx); err != nil {
		return err
	}
	err := os.WriteFile(filepath.Join(sb.Detail["dir"], pausedFile), []byte(f.marker()), 0o600)
	if err == nil {
		if err = f.freeze(ctx); err != nil {
			p.clearPaused(sb)
		}
	}
	if err != nil {
		_ = cl.Resume(context.WithoutCancel(ctx))
		return err
	}
	return nil
}

// directFreezer is the container's cgroup freezer when Pause may write it
// itself: a local Docker engine (Podman keeps its own record of a pause,
// and a rootless one's cgroups are its user's), and a cgroup found and
// writable.
func (p *Provider) directFreezer(ctx context.Context, st pauseState) (cgroupFreezer, bool) {
	if p.execForced() || !isLocal(st.cli) {
		return cgroupFreezer{}, false
	}
	if eng, err := p.engineInfo(ctx, st.cli); err != nil || eng.Kind != kindDocker {
		return cgroupFreezer{}, false
	}
	f, err := findFreezer(st.pid, st.id)
	if err != nil || !f.writable() {
		return cgroupFreezer{}, false
	}
	return f, true
}

// Resume thaws the container (its cgroup, or through the engine, as Pause
// froze it), then lets runboxd thaw the commands and restart their
// clocks (unless a snapshot holds them frozen: then they thaw when its
// commit ends). A snapshot that began while the container was frozen
// commits it frozen: Resume waits for that commit. Resuming a running
// sandbox does nothing.
func (p *Provider) Resume(ctx context.Context, sb runbox.Sandbox) error {
	fail := func(err error) error { return &runbox.Error{Op: "resume", Sandbox: sb.ID, Err: err} }
	pl, err := lockFile(ctx, p.lockDir(sb), pauseLockFile, true)
	if err != nil {
		return fail(err)
	}
	defer pl.unlock()
	// A snapshot that began while the container was frozen commits it as
	// it is: the thaw waits for its commit.
	hl, err := lockFile(ctx, p.lockDir(sb), holdLockFile, true)
	if err != nil {
		return fail(err)
	}
	defer hl.unlock()
	// Frozen by Pause itself: thawed without asking the engine. A cgroup
	// that is gone (the container stopped) is left to the engine's answer.
	if f, ok := frozenDirectly(sb.Detail["dir"], sb.Detail["container"]); ok && f.thaw() == nil {
		p.clearPaused(sb)
		cl := p.daemon(sb)
		if err := cl.Resume(ctx); err != nil {
			return fail(err)
		}
		return nil
	}
	st, err := p.pausedState(ctx, sb)
	if err != nil {
		return fail(err)
	}
	if st.engine {
		if _, err := st.cli.ContainerUnpause(ctx, st.id, moby.ContainerUnpauseOptions{}); err != nil {
			return fail(fmt.Errorf("unpause container %.12s: %w", st.id, engineError(st.cli, err)))
		}
	}
	if f, ok := frozenDirectly(sb.Detail["dir"], st.id); ok {
		if err := f.thaw(); err != nil {
			return fail(err)
		}
	}
	p.clearPaused(sb)
	cl := p.daemon(sb)
	if err := cl.Resume(ctx); err != nil {
		return fail(err)
	}
	return nil
}

// daemon returns a client of sb's runboxd, kept for the provider's life
// (until Remove or Close): a new connection for each Pause and Resume was
// about half of their time (serve, which holds one provider, pauses and
// resumes through it). Only Pause and Resume use it, each at a moment
// runboxd is not frozen.
func (p *Provider) daemon(sb runbox.Sandbox) *rbclient.Client {
	key := sb.ID + "/" + sb.Detail["container"]
	p.mu.Lock()
	defer p.mu.Unlock()
	if c, ok := p.daemons[key]; ok {
		return c
	}
	if p.daemons == nil {
		p.daemons = map[string]*rbclient.Client{}
	}
	c := rbclient.New(p.Dialer(sb), rbclient.WithSandboxName(sb.ID))
	p.daemons[key] = c
	return c
}

// forgetDaemon closes the clients daemon kept for sandbox id.
func (p *Provider) forgetDaemon(id string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for k, c := range p.daemons {
		if strings.HasPrefix(k, id+"/") {
			c.Close()
			delete(p.daemons, k)
		}
	}
}

func (p *Provider) clearPaused(sb runbox.Sandbox) {
	if dir := sb.Detail["dir"]; dir != "" {
		os.Remove(filepath.Join(dir, pausedFile))
	}
}

// pauseState is what the engine says of a sandbox's container, and
// whether it is paused (by the engine, or by its cgroup's freezer).
type pauseState struct {
	cli    *moby.Client
	id     string
	pid    int  // its PID 1 on the host
	engine bool // paused by the engine
	paused bool // paused at all
}

// pausedState asks the engine about sb's container, and its state
// directory whether Pause froze its cgroup.
func (p *Provider) pausedState(ctx context.Context, sb runbox.Sandbox) (pauseState, error) {
	cli, err := p.engine()
	if err != nil {
		return pauseState{}, err
	}
	id := sb.Detail["container"]
	if id == "" {
		return pauseState{}, fmt.Errorf("sandbox %s has no container: %w", sb.ID, runbox.ErrSandboxNotFound)
	}
	ir, err := cli.ContainerInspect(ctx, id, moby.ContainerInspectOptions{})
	if err != nil {
		return pauseState{}, fmt.Errorf("inspect container %.12s: %w", id, engineError(cli, err))
	}
	st := ir.Container.State
	if st == nil || (!st.Running && !st.Paused) {
		return pauseState{}, fmt.Errorf("%w: container %.12s is not running", runbox.ErrSandboxLost, id)
	}
	id = ir.Container.ID
	_, direct := frozenDirectly(sb.Detail["dir"], id)
	return pauseState{cli: cli, id: id, pid: st.Pid, engine: st.Paused, paused: st.Paused || direct}, nil
}

// frozenDirectly returns the freezer the state directory dir records Pause
// froze, if it does (for container id).
func frozenDirectly(dir, id string) (cgroupFreezer, bool) {
	if dir == "" {
		return cgroupFreezer{}, false
	}
	b, err := os.ReadFile(filepath.Join(dir, pausedFile))
	if err != nil {
		return cgroupFreezer{}, false
	}
	return parseFreezerMarker(string(b), id)
}

// pausedMarked reports whether the state directory of the sandbox whose
// socket is socket says it is paused.
func pausedMarked(socket string) bool {
	if socket == "" {
		return false
	}
	_, err := os.Lstat(filepath.Join(filepath.Dir(filepath.Dir(socket)), pausedFile))
	return err == nil
}

// errPaused is the dialer's refusal of a paused sandbox.
func errPaused(containerID string) error {
	return fmt.Errorf("%w: container %.12s is paused (runbox resume)", runbox.ErrSandboxPaused, containerID)
}

// Snapshot holds sb's commands frozen (client.Hold, through its runboxd),
// commits its container to the image SnapshotRepo/name (the engine's
// commit: its filesystem changes as a layer over its image), and releases
// the hold; a sandbox that was paused already is committed as it is and
// stays paused (a resume meanwhile waits for the commit). The hold is not
// the user's pause: a pause during the commit stands after it, a resume
// during it takes effect when it ends. A docker sandbox has no workspace,
// so opts change nothing.
func (p *Provider) Snapshot(ctx context.Context, sb runbox.Sandbox, name string, opts runbox.SnapshotOptions) (runbox.Snapshot, error) {
	fail := func(err error) (runbox.Snapshot, error) {
		return runbox.Snapshot{}, &runbox.Error{Op: "snapshot", Sandbox: sb.ID, Err: err}
	}
	if name == "" {
		name = "snap-" + strings.ReplaceAll(time.Now().UTC().Format("20060102-150405.000"), ".", "-")
	}
	if !sandboxkey.ValidName(name) || strings.ToLower(name) != name {
		return fail(fmt.Errorf("invalid snapshot name %q: docker wants lower-case letters, digits, '_', '.', '-': %w", name, runbox.ErrInvalidSpec))
	}
	cli, err := p.engine()
	if err != nil {
		return fail(err)
	}
	ref := SnapshotRepo + "/" + name
	if _, err := cli.ImageInspect(ctx, ref); err == nil {
		return fail(fmt.Errorf("snapshot %s exists: pick another name or remove it (runbox snapshot rm): %w", name, runbox.ErrInvalidSpec))
	}
	// The user's pause and resume wait while the snapshot decides how to
	// hold the sandbox, so it holds a runboxd that answers, or a frozen
	// container that stays so.
	dir, locks := sb.Detail["dir"], p.lockDir(sb)
	pl, err := lockFile(ctx, locks, pauseLockFile, true)
	if err != nil {
		return fail(err)
	}
	defer pl.unlock()
	ir, err := cli.ContainerInspect(ctx, sb.Detail["container"], moby.ContainerInspectOptions{})
	if err != nil {
		return fail(engineError(cli, err))
	}
	created := time.Now().UTC()
	// The image must not carry the sandbox's runbox labels (its id, name,
	// secret): a container made from it gets its own.
	changes := []string{fmt.Sprintf("LABEL %s=%q %s=%q", LabelSnapshotOf, sb.ID, LabelSnapshotCreated, created.Format(time.RFC3339Nano))}
	if ir.Container.Config != nil {
		for k := range ir.Container.Config.Labels {
			if strings.HasPrefix(k, "runbox.") && !strings.HasPrefix(k, "runbox.snapshot.") {
				changes = append(changes, fmt.Sprintf("LABEL %s=\"\"", k))
			}
		}
	}
	// A sandbox its user paused (by the engine, or its cgroup frozen by
	// Pause) is frozen, runboxd included: it is committed as it is, and
	// stays frozen until the commit ends (holdLockFile: Resume waits). A
	// running one is held by its runboxd (client.Hold: the commands
	// freeze, runboxd answers on): the user's pause and resume meanwhile
	// change only the user's pause (and the container's freezer), so
	// neither thaws the commit nor is undone by it, and a snapshotter that
	// dies releases the hold with its connection.
	frozen := false
	if st := ir.Container.State; st != nil {
		_, direct := frozenDirectly(dir, ir.Container.ID)
		frozen = st.Paused || direct
	}
	var hold *rbclient.Hold
	if frozen {
		hl, err := lockFile(ctx, locks, holdLockFile, false)
		if err != nil {
			return fail(err)
		}
		defer hl.unlock()
	} else {
		hold, err = p.daemon(sb).Hold(ctx, "snapshot "+name)
		legacy := errors.Is(err, runbox.ErrUnsupported)
		if err != nil && !legacy {
			return fail(fmt.Errorf("freeze it for the commit: %w", err))
		}
		if legacy {
			// A runboxd older than holds (a container made by an older
			// runbox): paused and resumed as the user does, as before.
			pl.unlock()
			return p.legacySnapshot(ctx, cli, sb, name, ref, changes)
		}
		defer hold.Release()
	}
	pl.unlock()
	if snapshotCommitting != nil {
		snapshotCommitting(name)
	}
	_, cerr := cli.ContainerCommit(ctx, sb.Detail["container"], moby.ContainerCommitOptions{
		Reference: ref, Changes: changes, NoPause: true,
		Comment: "runbox snapshot of sandbox " + sb.ID,
	})
	var herr error
	if hold != nil {
		herr = p.releaseHold(context.WithoutCancel(ctx), sb, hold)
	}
	if cerr != nil {
		return fail(fmt.Errorf("commit: %w", engineError(cli, cerr)))
	}
	if herr != nil {
		return fail(fmt.Errorf("the sandbox was not held frozen for the whole commit: %w", herr))
	}
	return p.snapshotInfo(ctx, cli, name)
}

// legacySnapshot commits sb, whose runboxd has no holds, paused as its
// user pauses it and resumed after, as Snapshot did before holds (with
// their races: a user's resume during the commit thaws it).
func (p *Provider) legacySnapshot(ctx context.Context, cli *moby.Client, sb runbox.Sandbox, name, ref string, changes []string) (runbox.Snapshot, error) {
	fail := func(err error) (runbox.Snapshot, error) {
		return runbox.Snapshot{}, &runbox.Error{Op: "snapshot", Sandbox: sb.ID, Err: err}
	}
	if err := p.Pause(ctx, sb); err != nil {
		return fail(err)
	}
	_, cerr := cli.ContainerCommit(ctx, sb.Detail["container"], moby.ContainerCommitOptions{
		Reference: ref, Changes: changes, NoPause: true,
		Comment: "runbox snapshot of sandbox " + sb.ID,
	})
	rerr := p.Resume(context.WithoutCancel(ctx), sb)
	if cerr != nil {
		return fail(fmt.Errorf("commit: %w", engineError(cli, cerr)))
	}
	if rerr != nil {
		return fail(rerr)
	}
	return p.snapshotInfo(ctx, cli, name)
}

// snapshotCommitting, set by tests only, is called with the snapshot's
// name once the sandbox is held frozen for the commit and before the
// commit starts.
var snapshotCommitting func(name string)

// releaseHold ends a snapshot's hold on sb's runboxd, with the user's
// pause and resume waiting (pauseLockFile): when the user froze the
// container meanwhile its runboxd cannot answer, so the hold is dropped
// (runboxd lets go of it once thawed, when the user's pause keeps the
// commands frozen anyway); else it is released and answered once thawed.
// Either says whether the hold stood until then.
func (p *Provider) releaseHold(ctx context.Context, sb runbox.Sandbox, hold *rbclient.Hold) error {
	pl, err := lockFile(ctx, p.lockDir(sb), pauseLockFile, true)
	if err != nil {
		hold.Drop()
		return err
	}
	defer pl.unlock()
	st, err := p.pausedState(ctx, sb)
	if err != nil || st.paused {
		return hold.Drop()
	}
	return hold.Release()
}

// snapshotInfo describes the snapshot name from its image.
func (p *Provider) snapshotInfo(ctx context.Context, cli *moby.Client, name string) (runbox.Snapshot, error) {
	ref := SnapshotRepo + "/" + name
	img, err := cli.ImageInspect(ctx, ref)
	if err != nil {
		if cerrdefs.IsNotFound(err) {
			return runbox.Snapshot{}, fmt.Errorf("no snapshot %s (runbox snapshot ls): %w", name, runbox.ErrInvalidSpec)
		}
		return runbox.Snapshot{}, engineError(cli, err)
	}
	s := runbox.Snapshot{Name: name, Provider: ProviderName, Detail: map[string]string{"image": ref, "image_id": img.ID}}
	if img.Config != nil {
		s.Sandbox = img.Config.Labels[LabelSnapshotOf]
		s.Created, _ = time.Parse(time.RFC3339Nano, img.Config.Labels[LabelSnapshotCreated])
	}
	if img.Size > 0 {
		s.Bytes = img.Size
	}
	return s, nil
}

// Snapshots lists the engine's snapshot images, oldest first.
func (p *Provider) Snapshots(ctx context.Context) ([]runbox.Snapshot, error) {
	cli, err := p.engine()
	if err != nil {
		return nil, err
	}
	res, err := cli.ImageList(ctx, moby.ImageListOptions{Filters: make(moby.Filters).Add("label", LabelSnapshotOf)})
	if err != nil {
		return nil, engineError(cli, err)
	}
	var out []runbox.Snapshot
	for _, img := range res.Items {
		for _, tag := range img.RepoTags {
			name, ok := strings.CutPrefix(tag, SnapshotRepo+"/")
			if !ok {
				continue
			}
			name = strings.TrimSuffix(name, ":latest")
			if s, err := p.snapshotInfo(ctx, cli, name); err == nil {
				out = append(out, s)
			}
		}
	}
	slices.SortFunc(out, func(a, b runbox.Snapshot) int { return a.Created.Compare(b.Created) })
	return out, nil
}

// RemoveSnapshot removes the snapshot's image. The engine refuses while a
// container (a sandbox made from it) uses it.
func (p *Provider) RemoveSnapshot(ctx context.Context, name string) error {
	cli, err := p.engine()
	if err != nil {
		return err
	}
	if _, err := p.snapshotInfo(ctx, cli, name); err != nil {
		return err
	}
	if _, err := cli.ImageRemove(ctx, SnapshotRepo+"/"+name, moby.ImageRemoveOptions{}); err != nil {
		if cerrdefs.IsConflict(err) {
			return fmt.Errorf("snapshot %s: sandboxes made from it still use it (remove them first): %w", name, runbox.ErrInvalidSpec)
		}
		return engineError(cli, err)
	}
	return nil
}

// snapshotImage is the image a spec with FromSnapshot starts from, checked
// to exist (an image that is not there would be pulled).
func (p *Provider) snapshotImage(ctx context.Context, cli *moby.Client, spec runbox.SandboxSpec) (string, error) {
	if spec.Image != "" {
		return "", fmt.Errorf("--image and --from both name the root: give one: %w", runbox.ErrInvalidSpec)
	}
	if _, err := p.snapshotInfo(ctx, cli, spec.FromSnapshot); err != nil {
		return "", err
	}
	return SnapshotRepo + "/" + spec.FromSnapshot, nil
}

// isPaused reports whether c's container is paused: by the engine, or
// running as the engine sees it with its state directory saying paused
// (Pause froze its cgroup).
func (c ctr) isPaused() bool {
	return c.State == container.StatePaused ||
		(c.State == container.StateRunning && pausedMarked(c.Labels[LabelSocket]))
}
