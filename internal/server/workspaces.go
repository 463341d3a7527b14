package server

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/runbox/runbox/internal/homes"
)

// privateDirs makes the server's home and workspace root mode 0700 (made
// that way when absent), and tightens the root's existing sandbox
// directories to 0700, logging each one it tightens: a sandbox (or any
// host user) must not reach into another tenant's workspace through the
// host path, whatever directory the operator put them in.
func (s *Server) privateDirs() error {
	for _, dir := range []string{s.cfg.Home, s.cfg.WorkspaceDir} {
		if dir == "" {
			continue
		}
		if err := os.MkdirAll(filepath.Dir(dir), 0o700); err != nil {
			return fmt.Errorf("make %s: %w", filepath.Dir(dir), err)
		}
		if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("make %s: %w", dir, err)
		}
		if err := s.tighten(dir); err != nil {
			return err
		}
	}
	if s.cfg.Home != "" {
		if err := homes.Trusted(s.cfg.Home); err != nil {
			return err
		}
	}
	if s.cfg.WorkspaceDir == "" {
		return nil
	}
	ents, err := os.ReadDir(s.cfg.WorkspaceDir)
	if err != nil {
		return fmt.Errorf("read workspaces: %w", err)
	}
	for _, e := range ents {
		if e.IsDir() {
			if err := s.tighten(filepath.Join(s.cfg.WorkspaceDir, e.Name())); err != nil {
				return err
			}
		}
	}
	return nil
}

// tighten makes the directory dir (not a symlink) mode 0700 if it is
// wider, and logs it.
func (s *Server) tighten(dir string) error {
	st, err := os.Lstat(dir)
	if err != nil {
		return fmt.Errorf("check %s: %w", dir, err)
	}
	if !st.IsDir() {
		return fmt.Errorf("%s is not a directory (a symlink is refused)", dir)
	}
	if st.Mode().Perm()&0o077 == 0 {
		return nil
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return fmt.Errorf("make %s private: %w", dir, err)
	}
	s.log.Warn("directory made private", "dir", dir, "was", st.Mode().Perm().String(), "now", "drwx------")
	return nil
}
