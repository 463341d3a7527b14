package local

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/client"
	"github.com/runbox/runbox/internal/jail"
	"github.com/runbox/runbox/internal/sandboxkey"
)

var _ runbox.Snapshotter = (*Provider)(nil)

// A snapshot lives in RUNBOX_HOME/snapshots/NAME: its layer (a copy of the
// sandbox's upper layer: what the sandbox changed on top of the host's
// root), its workspace copy, and meta.json. Nothing writes it once made: a
// sandbox made from it gets the layer as hard links in its state directory
// (snapshotLayersDir, on the home's filesystem like the snapshot, whatever
// its disk bound), stacked read-only under its own upper layer, so the
// data is on disk once however many sandboxes stand on it, and removing
// the snapshot leaves them working.
const (
	snapshotsDir      = "snapshots"
	snapshotLayer     = "layer"
	snapshotWorkspace = "workspace"
	snapshotMeta      = "meta.json"
	// snapshotLayerDir is the snapshot's layer's name in a sandbox's
	// snapshot layers directory (see jail.ExecFuseServer's lowers).
	snapshotLayerDir = "snapshot"
	// snapshotLayersDir is the directory, in a sandbox's state directory,
	// holding the snapshot layers it stands on: outside its layers, which
	// may be on a disk of its own (a bound), so that they can be hard links
	// to the snapshot's files. Its FUSE server gets it read-only.
	snapshotLayersDir = "snapshot-layers"
	// extraSnapshotLayers is the record's count of the snapshot layers a
	// sandbox stands on (its Detail's "snapshot_layers").
	extraSnapshotLayers = "snapshot_layers"
	// workspacesSuffix names the directory beside the home where the
	// workspaces of sandboxes made from snapshots go: a workdir must not
	// lie in the home.
	workspacesSuffix = "-workspaces"
)

// snapshotCopying, set by tests only, is called with the snapshot's name
// once the sandbox is frozen for the copy and before the copy starts: the
// moment a user's pause or resume, another snapshot or the snapshotter's
// death are to land in.
var snapshotCopying func(name string)

func (p *Provider) snapshotsPath() (string, error) {
	home, err := p.store().HomeDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(home, snapshotsDir), nil
}

// snapshotPath is the directory of the snapshot name, checked to be a
// valid name (so it is one path component).
func (p *Provider) snapshotPath(name string) (string, error) {
	if !sandboxkey.ValidName(name) {
		return "", fmt.Errorf("invalid snapshot name %q: use letters, digits, '_', '.', '-' (at most 63, not starting with a punctuation mark): %w", name, runbox.ErrInvalidSpec)
	}
	dir, err := p.snapshotsPath()
	if err != nil {
		return "", err
	}
	return filepath.Join(dir, name), nil
}

// Snapshot holds sb frozen (its runboxd freezes every command, so the
// files are consistent: client.Hold), copies its upper layer and, unless
// opts say not, its workspace (reflinks where the filesystem has them),
// and releases the hold. The hold is not the user's pause: a sandbox
// paused before, or during the copy, stays paused after it, and one
// resumed during the copy thaws when the copy ends. The copy is made under
// a temporary name and renamed into place, so a snapshot is whole or
// absent.
func (p *Provider) Snapshot(ctx context.Context, sb runbox.Sandbox, name string, opts runbox.SnapshotOptions) (runbox.Snapshot, error) {
	fail := func(err error) (runbox.Snapshot, error) {
		return runbox.Snapshot{}, &runbox.Error{Op: "snapshot", Sandbox: sb.ID, Err: err}
	}
	if name == "" {
		name = "snap-" + randHex(6)
	}
	dst, err := p.snapshotPath(name)
	if err != nil {
		return fail(err)
	}
	if _, err := os.Lstat(dst); err == nil {
		return fail(fmt.Errorf("snapshot %s exists: pick another name or remove it (runbox snapshot rm): %w", name, runbox.ErrInvalidSpec))
	}
	sbDir := sb.Detail["dir"]
	if sbDir == "" || sb.Detail["root"] == "" {
		return fail(fmt.Errorf("sandbox %s has no overlay on the host's root (--rootfs, --host-root or rootless): %w", sb.ID, runbox.ErrUnsupported))
	}
	upper, err := liveUpperPath(sb)
	if err != nil {
		return fail(err)
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o700); err != nil {
		return fail(err)
	}
	tmp, err := os.MkdirTemp(filepath.Dir(dst), ".tmp-"+name+"-")
	if err != nil {
		return fail(err)
	}
	defer os.RemoveAll(tmp)

	cl := client.New(p.Dialer(sb), client.WithSandboxName(sb.ID))
	defer cl.Close()
	// A hold, not a pause: the user's pause and resume meanwhile change
	// only the user's flag, so neither thaws the copy (a resume takes
	// effect when the hold ends) nor is undone by it (a pause stands after
	// it), other snapshots hold on their own, and a snapshotter that dies
	// releases its hold with its connection.
	var hold interface{ Release() error }
	hold, err = cl.Hold(ctx, "snapshot "+name)
	if errors.Is(err, runbox.ErrUnsupported) {
		// A sandbox whose runboxd is older than holds: paused as before.
		hold, err = legacyPause(ctx, cl)
	}
	if err != nil {
		return fail(fmt.Errorf("freeze it for the copy: %w", err))
	}
	defer hold.Release()
	if snapshotCopying != nil {
		snapshotCopying(name)
	}
	snap := runbox.Snapshot{Name: name, Provider: ProviderName, Sandbox: sb.ID, Created: time.Now().UTC()}
	err = copyTree(upper, filepath.Join(tmp, snapshotLayer), cloneFiles)
	// A sandbox made from a snapshot sees that snapshot's layers under its
	// own: they go with it, below its changes. Nothing writes them, so hard
	// links serve: they are on the home's filesystem, as the snapshot is.
	lowers := snapshotLayersPath(sbDir)
	if _, serr := os.Lstat(lowers); serr != nil {
		// Made before the layers were kept beside the disk: in the layers.
		lowers = filepath.Dir(upper)
	}
	for i := 0; err == nil && i < stackedLayers(sb); i++ {
		err = copyTree(filepath.Join(lowers, stackedName(snapshotLayerDir, i)), filepath.Join(tmp, stackedName(snapshotLayer, i+1)), linkFiles)
	}
	if err == nil && !opts.NoWorkspace && sb.Detail["workdir"] != "" {
		err = copyTree(sb.Detail["workdir"], filepath.Join(tmp, snapshotWorkspace), cloneFiles)
		snap.Workspace = err == nil
	}
	// Released whether or not the copy worked. A hold that did not stand
	// to the end of the copy (its stream broke) may have let the commands
	// run during it: no snapshot then.
	herr := hold.Release()
	if err != nil {
		return fail(fmt.Errorf("copy: %w", err))
	}
	if herr != nil {
		return fail(fmt.Errorf("the sandbox was not held frozen for the whole copy: %w", herr))
	}
	snap.Bytes = diskUsage(tmp)
	snap.Detail = map[string]string{"dir": dst}
	b, err := json.MarshalIndent(snap, "", "  ")
	if err != nil {
		return fail(err)
	}
	if err := os.WriteFile(filepath.Join(tmp, snapshotMeta), b, 0o600); err != nil {
		return fail(err)
	}
	if err := os.Rename(tmp, dst); err != nil {
		if errors.Is(err, fs.ErrExist) || errors.Is(err, os.ErrExist) {
			return fail(fmt.Errorf("snapshot %s exists: %w", name, runbox.ErrInvalidSpec))
		}
		return fail(err)
	}
	return snap, nil
}

// legacyPause freezes a sandbox whose runboxd has no holds as Snapshot
// did before them: with the user's pause, unless the sandbox is paused
// already (then left paused); Release resumes it if it paused it. It has
// the races holds remove (a user's resume during the copy thaws it, a
// user's pause during it is undone).
func legacyPause(ctx context.Context, cl *client.Client) (interface{ Release() error }, error) {
	info, err := cl.Info(ctx)
	if err != nil {
		return nil, err
	}
	if info.Paused {
		return releaseFunc(func() error { return nil }), nil
	}
	if err := cl.Pause(ctx); err != nil {
		return nil, err
	}
	var once sync.Once
	var rerr error
	return releaseFunc(func() error {
		once.Do(func() {
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			defer cancel()
			rerr = cl.Resume(rctx)
		})
		return rerr
	}), nil
}

// releaseFunc is a func as a hold's Release.
type releaseFunc func() error

// Release calls f.
func (f releaseFunc) Release() error { return f() }

// liveUpperPath is where the host reaches sb's upper layer: in its state
// directory, or, when the layers are on the sandbox's own disk (mounted
// nowhere in the host's mount namespace), through the mount namespace of
// the FUSE server that serves its root.
func liveUpperPath(sb runbox.Sandbox) (string, error) {
	if !onOwnDisk(sb.Detail["dir"]) {
		return upperPath(sb.Detail["dir"]), nil
	}
	pid := sb.Detail["fuse_server_pid"]
	if _, err := strconv.Atoi(pid); err != nil {
		return "", fmt.Errorf("sandbox %s: its layers are on its own disk and no FUSE server is recorded to reach them through: %w", sb.ID, runbox.ErrSandboxLost)
	}
	// The pid must still be the sandbox's FUSE server, not a process that
	// took its number.
	exe, err := os.Readlink(filepath.Join("/proc", pid, "exe"))
	if err != nil || filepath.Base(exe) != filepath.Base(FuseServer) {
		return "", fmt.Errorf("sandbox %s: the FUSE server of its root (pid %s) is gone: %w", sb.ID, pid, runbox.ErrSandboxLost)
	}
	return filepath.Join("/proc", pid, "root", jail.FuseServerLayersPath, upperDir), nil
}

// Snapshots lists the snapshots under the home, oldest first.
func (p *Provider) Snapshots(ctx context.Context) ([]runbox.Snapshot, error) {
	dir, err := p.snapshotsPath()
	if err != nil {
		return nil, err
	}
	ents, err := os.ReadDir(dir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	var out []runbox.Snapshot
	for _, e := range ents {
		if s, err := p.readSnapshot(e.Name()); err == nil {
			out = append(out, s)
		}
	}
	slices.SortFunc(out, func(a, b runbox.Snapshot) int { return a.Created.Compare(b.Created) })
	return out, nil
}

// readSnapshot reads the snapshot name's meta.json.
func (p *Provider) readSnapshot(name string) (runbox.Snapshot, error) {
	dir, err := p.snapshotPath(name)
	if err != nil {
		return runbox.Snapshot{}, err
	}
	b, err := os.ReadFile(filepath.Join(dir, snapshotMeta))
	if errors.Is(err, fs.ErrNotExist) {
		return runbox.Snapshot{}, fmt.Errorf("no snapshot %s (runbox snapshot ls): %w", name, runbox.ErrInvalidSpec)
	}
	if err != nil {
		return runbox.Snapshot{}, err
	}
	var s runbox.Snapshot
	if err := json.Unmarshal(b, &s); err != nil {
		return runbox.Snapshot{}, fmt.Errorf("snapshot %s: %w", name, err)
	}
	return s, nil
}

// RemoveSnapshot deletes a snapshot. Sandboxes made from it keep working:
// their layer is hard links to its files, and their workspaces copies.
func (p *Provider) RemoveSnapshot(ctx context.Context, name string) error {
	if _, err := p.readSnapshot(name); err != nil {
		return &runbox.Error{Op: "remove snapshot", Err: err}
	}
	dir, _ := p.snapshotPath(name)
	// Renamed away first, so a half-removed snapshot is never listed.
	gone := filepath.Join(filepath.Dir(dir), ".rm-"+name+"-"+randHex(4))
	if err := os.Rename(dir, gone); err != nil {
		return &runbox.Error{Op: "remove snapshot", Err: err}
	}
	if err := makeRemovable(gone); err != nil {
		return &runbox.Error{Op: "remove snapshot", Err: err}
	}
	return os.RemoveAll(gone)
}

// makeRemovable opens up directories a sandbox left without owner write
// or search permission, so RemoveAll can empty them.
func makeRemovable(dir string) error {
	return filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			if fi, err := d.Info(); err == nil && fi.Mode().Perm()&0o700 != 0o700 {
				_ = os.Chmod(p, fi.Mode().Perm()|0o700)
			}
		}
		return nil
	})
}

// stackedName is the name of the i-th layer of a stack, top first: base
// itself, then base.1, base.2, ... A snapshot's directory holds its
// sandbox's changes as "layer" and, when that sandbox was itself made
// from a snapshot, that snapshot's layers below as "layer.1", ...; a
// sandbox made from it gets them as "snapshot", "snapshot.1", ...
func stackedName(base string, i int) string {
	if i == 0 {
		return base
	}
	return base + "." + strconv.Itoa(i)
}

// snapshotDepth is how many layers the snapshot in dir holds.
func snapshotDepth(dir string) int {
	n := 1
	for {
		if _, err := os.Lstat(filepath.Join(dir, stackedName(snapshotLayer, n))); err != nil {
			return n
		}
		n++
	}
}

// stackedLayers is how many snapshot layers sb stands on (0: made from
// none). A record from before stacks were recorded has one when it names
// a snapshot.
func stackedLayers(sb runbox.Sandbox) int {
	if n, err := strconv.Atoi(sb.Detail[extraSnapshotLayers]); err == nil && n >= 0 {
		return n
	}
	if sb.Detail["snapshot"] != "" {
		return 1
	}
	return 0
}

// snapshotLayersPath is the snapshot layers directory of the sandbox
// whose state directory is sbDir.
func snapshotLayersPath(sbDir string) string { return filepath.Join(sbDir, snapshotLayersDir) }

// snapshotLowers are the lower layers (in the snapshot layers directory,
// top first) of a sandbox standing on n snapshot layers.
func snapshotLowers(n int) []string {
	lowers := make([]string, n)
	for i := range lowers {
		lowers[i] = stackedName(snapshotLayerDir, i)
	}
	return lowers
}

// stackSnapshot puts every layer of the snapshot name in stack (a new
// sandbox's snapshot layers directory, made here, its root's alone), as
// hard links (see snapshotLayersDir), takes out of the sandbox's seeded
// upper layer (in layers) every file a snapshot layer also has, so the
// snapshot's version shows through (its own seeding was done the same way
// when its sandbox was made, and what else it holds the sandbox wrote),
// and returns how many layers it stacked.
func (p *Provider) stackSnapshot(name, layers, stack string, ids idMap) (int, error) {
	if _, err := p.readSnapshot(name); err != nil {
		return 0, err
	}
	dir, _ := p.snapshotPath(name)
	depth := snapshotDepth(dir)
	upper := filepath.Join(layers, upperDir)
	if err := os.Mkdir(stack, 0o700); err != nil {
		return 0, fmt.Errorf("snapshot %s: %w", name, err)
	}
	if err := ids.chown(stack); err != nil {
		return 0, fmt.Errorf("snapshot %s: %w", name, err)
	}
	for i := 0; i < depth; i++ {
		src := filepath.Join(dir, stackedName(snapshotLayer, i))
		if err := copyTree(src, filepath.Join(stack, stackedName(snapshotLayerDir, i)), linkFiles); err != nil {
			return 0, fmt.Errorf("snapshot %s: %w", name, err)
		}
		err := filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			rel, _ := filepath.Rel(src, path)
			if fi, err := os.Lstat(filepath.Join(upper, rel)); err == nil && !fi.IsDir() {
				return os.Remove(filepath.Join(upper, rel))
			}
			return nil
		})
		if err != nil {
			return 0, fmt.Errorf("snapshot %s: %w", name, err)
		}
	}
	return depth, nil
}

// snapshotWorkdir makes the workspace of a sandbox made from the snapshot
// name when the spec gives none: a copy of the snapshot's workspace in a
// new directory beside the home (HOME-workspaces/), or "" when the
// snapshot holds none.
func (p *Provider) snapshotWorkdir(name string) (string, error) {
	if _, err := p.readSnapshot(name); err != nil {
		return "", err
	}
	dir, _ := p.snapshotPath(name)
	src := filepath.Join(dir, snapshotWorkspace)
	if _, err := os.Lstat(src); err != nil {
		return "", nil
	}
	home, err := p.store().HomeDir()
	if err != nil {
		return "", err
	}
	parent := filepath.Clean(home) + workspacesSuffix
	if err := os.MkdirAll(parent, 0o700); err != nil {
		return "", fmt.Errorf("workspace: %w", err)
	}
	ws := filepath.Join(parent, name+"-"+randHex(6))
	if err := copyTree(src, ws, cloneFiles); err != nil {
		os.RemoveAll(ws)
		return "", fmt.Errorf("workspace from snapshot %s: %w", name, err)
	}
	return ws, nil
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
