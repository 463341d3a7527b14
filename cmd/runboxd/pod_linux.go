package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"syscall"
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
	src, err := os.Open("/proc/self/exe")
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

// stopPID1 asks the runboxd that is PID 1 of this pid namespace to stop
// with the stop protocol (it drops SIGTERM, see stopSignalAsPID1): the
// preStop hook of a kubernetes sandbox's workload container, so deleting
// the pod stops every exec gracefully before the kubelet's SIGKILL.
func stopPID1(args []string) error {
	if len(args) != 0 {
		return errors.New("stop: takes no arguments")
	}
	if err := syscall.Kill(1, stopSignalAsPID1); err != nil {
		return fmt.Errorf("stop: signal PID 1: %w", err)
	}
	return nil
}
