package jail

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// hideHost replaces, in the sandbox's root at root, what of the host a
// sandbox must not see: cfg.Private directories (and cfg.Direct ones,
// made first) by empty ones of its own,
// cfg.Fresh ones by an empty tmpfs, cfg.MaskFiles by an empty read-only
// file. A path the root does not have is skipped.
func hideHost(cfg Config, root string) error {
	for _, p := range cfg.Direct {
		if err := os.MkdirAll(filepath.Join(root, p), 0o700); err != nil {
			return fmt.Errorf("jail: %s: %w", p, err)
		}
	}
	for _, p := range append(cfg.Private[:len(cfg.Private):len(cfg.Private)], cfg.Direct...) {
		dst := filepath.Join(root, p)
		fi, err := os.Stat(dst)
		if err != nil || !fi.IsDir() {
			continue
		}
		src := filepath.Join(cfg.PrivateDir, strings.ReplaceAll(strings.Trim(p, "/"), "/", "_"))
		if err := os.MkdirAll(src, fi.Mode().Perm()); err != nil {
			return fmt.Errorf("jail: private %s: %w", p, err)
		}
		if err := bind(src, dst, 0); err != nil {
			return fmt.Errorf("jail: private %s: %w", p, err)
		}
	}
	for _, p := range cfg.Fresh {
		dst := filepath.Join(root, p)
		if fi, err := os.Lstat(dst); err != nil || !fi.IsDir() {
			continue // absent, or a link (/var/run -> /run)
		}
		if err := unix.Mount("tmpfs", dst, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=755"); err != nil {
			return fmt.Errorf("jail: fresh %s: %w", p, err)
		}
	}
	for _, f := range cfg.MaskFiles {
		dst := filepath.Join(root, f)
		if fi, err := os.Lstat(dst); err != nil || !fi.Mode().IsRegular() {
			continue
		}
		if err := unix.Mount(filepath.Join(root, "dev/null"), dst, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("jail: hide %s: %w", f, err)
		}
		// Not nodev: the mask is the null device, which must open (and
		// read empty) where the host's file was; read-only, it takes no
		// writes.
		if err := unix.Mount("", dst, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NOEXEC, ""); err != nil {
			return fmt.Errorf("jail: hide %s: %w", f, err)
		}
	}
	return nil
}

// mountWorkspace puts the workspace at WorkspacePath: the id-mapped tree
// the provider sent (attached with move_mount), else a bind of
// cfg.Workspace (through the handle Enter opened first, if any). Neither honours setuid bits or device files.
func mountWorkspace(cfg Config, root string) error {
	if cfg.Workspace == "" {
		return nil
	}
	dst := filepath.Join(root, WorkspacePath)
	if cfg.WorkspaceTreeFD <= 0 {
		src := cfg.Workspace
		if cfg.workspaceFD > 0 {
			src = fmt.Sprintf("/proc/self/fd/%d", cfg.workspaceFD)
		}
		if err := bind(src, dst, 0); err != nil {
			return fmt.Errorf("jail: workspace: %w", err)
		}
		if err := unix.Mount("", dst, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_NOSUID|unix.MS_NODEV, ""); err != nil {
			return fmt.Errorf("jail: workspace nosuid: %w", err)
		}
		return nil
	}
	defer unix.Close(cfg.WorkspaceTreeFD)
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return fmt.Errorf("jail: workspace: %w", err)
	}
	if err := unix.MoveMount(cfg.WorkspaceTreeFD, "", unix.AT_FDCWD, dst, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return fmt.Errorf("jail: attach the id-mapped workspace: %w", err)
	}
	return nil
}

// under reports whether path p lies inside (or is) dir, and p relative to
// dir.
func under(dir, p string) (string, bool) {
	if dir == "" {
		return "", false
	}
	rel, err := filepath.Rel(filepath.Clean(dir), filepath.Clean(p))
	if err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
		return "", false
	}
	return rel, true
}

// scratchLower is where a LowerTree is attached.
const scratchLower = Scratch + "/lower"

// attachTrees attaches the detached mounts the provider sent: a private
// tmpfs at Scratch first, then the layers at LayersPath and the lower
// tree at scratchLower. Each descriptor is closed.
func attachTrees(cfg *Config) error {
	if !cfg.LayersTree && !cfg.LowerTree {
		return nil
	}
	if err := unix.Mount("tmpfs", Scratch, "tmpfs", noSuidDevExec, "mode=700,size=64k"); err != nil {
		return fmt.Errorf("jail: scratch %s: %w", Scratch, err)
	}
	for _, t := range []struct {
		fd   *int
		at   string
		what string
	}{{&cfg.LayersTreeFD, LayersPath, "the layers"}, {&cfg.LowerTreeFD, scratchLower, "the id-mapped root"}} {
		if *t.fd <= 0 {
			continue
		}
		err := os.Mkdir(t.at, 0o700)
		if err == nil {
			err = unix.MoveMount(*t.fd, "", unix.AT_FDCWD, t.at, unix.MOVE_MOUNT_F_EMPTY_PATH)
		}
		unix.Close(*t.fd)
		*t.fd = -1
		if err != nil {
			return fmt.Errorf("jail: attach %s: %w", t.what, err)
		}
	}
	return nil
}
