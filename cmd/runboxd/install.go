package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// install copies this executable to the path in args: what the init
// container of a kubernetes sandbox runs (`runboxd install
// /.runbox/runboxd`) to put runboxd into the emptyDir the workload
// container starts it from. The copy is written beside the target and
// renamed into place, so a reader never sees half a binary.
func install(args []string, stdout io.Writer) error {
	if len(args) != 1 || args[0] == "" {
		return errors.New("install: want one argument, the destination path")
	}
	dst := args[0]
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("install: %w", err)
	}
	src, err := os.Open(self)
	if err != nil {
		return fmt.Errorf("install: %w", err)
	}
	defer src.Close()
	tmp, err := os.CreateTemp(filepath.Dir(dst), ".runboxd-install-*")
	if err != nil {
		return fmt.Errorf("install: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err := io.Copy(tmp, src); err != nil {
		tmp.Close()
		return fmt.Errorf("install: copy to %s: %w", tmp.Name(), err)
	}
	if err := tmp.Chmod(0o755); err != nil {
		tmp.Close()
		return fmt.Errorf("install: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("install: %w", err)
	}
	if err := os.Rename(tmp.Name(), dst); err != nil {
		return fmt.Errorf("install: %w", err)
	}
	fmt.Fprintf(stdout, "runboxd %s installed at %s\n", versionString(), dst)
	return nil
}
