package front

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
)

// FullBinary is the file name of the binary that links every provider and
// command (cmd/runbox-full).
const FullBinary = "runbox-full"

// FullEnv names the environment variable that gives the full binary's
// path, overriding the search beside runbox and on PATH.
const FullEnv = "RUNBOX_FULL"

// DelegatedEnv is set in the full binary's environment by the runbox that
// handed it an invocation; the full binary unsets it. A runbox that finds
// it set refuses to hand over again ($RUNBOX_FULL naming the front would
// otherwise loop).
const DelegatedEnv = "RUNBOX_DELEGATED"

// ErrFullBinaryMissing is returned when an invocation needs the full
// binary and it cannot be found or run.
var ErrFullBinaryMissing = errors.New(FullBinary + " not found")

// ExecFull replaces this process with the full binary, run with args (the
// invocation's arguments without the program name), so that its stdio,
// terminal, signals and exit status are the full binary's own, as if it had
// been called. It returns only when the full binary cannot be found or
// started, with an error naming what was needed and how to get it.
func ExecFull(args []string, why string) error {
	if os.Getenv(DelegatedEnv) != "" {
		return fmt.Errorf("%s: %w: %s handed it back (is $%s the runbox front?)", why, ErrFullBinaryMissing, os.Getenv(DelegatedEnv), FullEnv)
	}
	path, err := FindFull()
	if err != nil {
		return fmt.Errorf("%s needs %s: %w", why, FullBinary, err)
	}
	self, _ := os.Executable()
	env := append(os.Environ(), DelegatedEnv+"="+self)
	err = syscall.Exec(path, append([]string{path}, args...), env)
	return fmt.Errorf("%s needs %s: run %s: %w", why, FullBinary, path, err)
}

// FindFull returns the full binary's path: $RUNBOX_FULL, else runbox-full
// beside the running executable, else on PATH.
func FindFull() (string, error) {
	if p := os.Getenv(FullEnv); p != "" {
		if err := isExecutable(p); err != nil {
			return "", fmt.Errorf("$%s=%s: %w", FullEnv, p, err)
		}
		return p, nil
	}
	var beside string
	if self, err := os.Executable(); err == nil {
		beside = filepath.Join(filepath.Dir(self), FullBinary)
		if isExecutable(beside) == nil {
			return beside, nil
		}
	}
	if p, err := exec.LookPath(FullBinary); err == nil {
		return p, nil
	}
	return "", fmt.Errorf("%w beside this runbox (%s) nor on PATH: build both binaries with `CGO_ENABLED=0 go build -o bin/ ./cmd/...` and keep them in one directory, or set $%s to its path",
		ErrFullBinaryMissing, beside, FullEnv)
}

// isExecutable reports why path is not an executable regular file.
func isExecutable(path string) error {
	st, err := os.Stat(path)
	if err != nil {
		return err
	}
	if st.IsDir() || st.Mode()&0o111 == 0 {
		return fmt.Errorf("%s is not an executable file", path)
	}
	return nil
}
