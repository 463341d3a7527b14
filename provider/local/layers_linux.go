package local

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/internal/jail"
)

// layersDir is the directory, in a sandbox's state directory, holding its
// overlay's layers and private directories. It belongs to the sandbox's
// root; a mapped runboxd gets it as a detached mount (jail.LayersTree), as
// the directories above it are closed to a mapped root.
const layersDir = "fs"

// prepareLayers makes the directory of the sandbox's layers, on a bounded
// filesystem of its own when there is a bound (or a FUSE root), and the
// layers in it (see makeLayers).
func (s *launching) prepareLayers() error {
	l := s.l
	var err error
	if s.disk, err = diskBound(s.spec, l.Home, s.rootless); err != nil {
		return err
	}
	// Everything the sandbox writes outside its workspace lies in the
	// layers: their own bounded filesystem holds them all. A FUSE root's
	// layers are on a filesystem of their own even with no bound, never on
	// the host root's (see unboundedDisk).
	image := s.disk
	if s.fuseRoot && s.disk == 0 {
		if image, err = unboundedDisk(l.Home); err != nil {
			return err
		}
	}
	s.layers = filepath.Join(l.Dir, layersDir)
	if image > 0 {
		if s.dk, err = newDisk(l.Dir, image, s.disk == 0); err != nil {
			return err
		}
		dk := s.dk
		s.atEnd = append(s.atEnd, func() { dk.Close() })
		s.layers = dk.Path()
	} else if err := os.Mkdir(s.layers, 0o700); err != nil {
		return fmt.Errorf("state dir: %w", err)
	}
	var mountPoints []string
	if s.fuseRoot {
		mountPoints = []string{SpillDir}
		if s.rec.Workdir != "" {
			mountPoints = append(mountPoints, jail.WorkspacePath)
		}
	}
	return makeLayers(s.layers, s.lower, s.ids, mountPoints)
}

// cloneLayers returns a detached mount of the layers for the jail or
// the FUSE server to attach.
func (s *launching) cloneLayers() (int, error) {
	if s.dk != nil {
		return s.dk.mount()
	}
	fd, err := unix.OpenTree(unix.AT_FDCWD, s.layers, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
	if err != nil {
		return -1, fmt.Errorf("clone the mount of %s: %w", s.layers, err)
	}
	return fd, nil
}

// inLayers is the path of name in the layers as runboxd sees them: in
// the detached mount it is sent when it gets one (see jail.LayersTree).
func (s *launching) inLayers(name string) string {
	if s.ids.mapped() || s.dk != nil {
		return filepath.Join(jail.LayersPath, name)
	}
	return filepath.Join(s.layers, name)
}

// stackFromSnapshot stacks the layers of the snapshot the sandbox is made
// from under its own, and records which and how deep; only a FUSE root
// can have them.
func (p *Provider) stackFromSnapshot(s *launching) error {
	spec, rec := s.spec, s.rec
	if spec.FromSnapshot == "" {
		return nil
	}
	if !s.fuseRoot {
		return fmt.Errorf("snapshot %s: a local sandbox stacks a snapshot on the host's root served through %s; not with --rootfs, --host-root or without root: %w",
			spec.FromSnapshot, FuseServer, runbox.ErrUnsupported)
	}
	depth, err := p.stackSnapshot(spec.FromSnapshot, s.layers, snapshotLayersPath(s.l.Dir), s.ids)
	if err != nil {
		return err
	}
	if rec.Extra == nil {
		rec.Extra = map[string]string{}
	}
	rec.Extra["snapshot"] = spec.FromSnapshot
	rec.Extra[extraSnapshotLayers] = strconv.Itoa(depth)
	return nil
}

// makeLayers closes the layers directory to everyone but the sandbox's
// root and makes in it the overlay's upper, work and mount point
// directories, and, on the host's root, the sanitised copies of the
// host's password files in the upper layer, and the directories of
// mountPoints (see seedMountPoints).
func makeLayers(layers, lower string, ids idMap, mountPoints []string) error {
	// It exists already (it may be the root of the sandbox's disk, 0755).
	if err := os.Chmod(layers, 0o700); err != nil {
		return fmt.Errorf("state dir: %w", err)
	}
	// Chown, not Lchown: layers is a fresh directory or the root of the
	// sandbox's disk, reached through /proc/self/fd.
	if ids.mapped() {
		if err := os.Chown(layers, ids.hostUID, ids.hostGID); err != nil {
			return fmt.Errorf("state dir: %w", err)
		}
	}
	for _, d := range []string{upperDir, workDir, mergedDir} {
		p := filepath.Join(layers, d)
		if err := os.Mkdir(p, 0o755); err != nil {
			return fmt.Errorf("state dir: %w", err)
		}
		if err := ids.chown(p); err != nil {
			return fmt.Errorf("state dir: %w", err)
		}
	}
	if ids.swapped != 0 {
		// Served through FUSE: the upper layer's root is the sandbox's
		// root directory, kept as its root's on-disk id (see onDisk).
		if err := lchownMapped(filepath.Join(layers, upperDir), 0, 0, ids); err != nil {
			return fmt.Errorf("state dir: %w", err)
		}
		if err := makeFuseDevice(layers, ids); err != nil {
			return err
		}
	}
	if lower == "/" {
		if err := sanitizeSecrets("/", filepath.Join(layers, upperDir), ids); err != nil {
			return fmt.Errorf("upper layer: %w", err)
		}
	}
	if ids.swapped != 0 {
		if err := seedUnreadable("/", filepath.Join(layers, upperDir), ids); err != nil {
			return fmt.Errorf("upper layer: %w", err)
		}
		if err := seedMountPoints("/", filepath.Join(layers, upperDir), mountPoints, ids); err != nil {
			return fmt.Errorf("upper layer: %w", err)
		}
	}
	return nil
}
