// Package runboxdbin finds the runboxd binary a provider starts or copies
// into a sandbox, and checks that it can run in any root filesystem.
package runboxdbin

import (
	"bytes"
	"debug/elf"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// SharedLimitThreads is how many OS threads runboxd makes at start and
// keeps (`runboxd serve --threads`, jail.Config.Threads) where it shares a
// pids limit with the commands: the Go runtime aborts when it cannot make a
// thread it needs, so runboxd makes them before the commands can have filled
// the limit.
const SharedLimitThreads = 48

// SharedLimitAllowance is what a provider adds to the commands' pids limit
// where runboxd shares it: the threads runboxd keeps, and a few the runtime
// may still add, so the commands still get theirs.
const SharedLimitAllowance = SharedLimitThreads + 4

var (
	// ErrNotFound means the runboxd binary could not be found.
	ErrNotFound = errors.New("runboxd binary not found")
	// ErrNotStatic means the runboxd binary is dynamically linked, so it
	// cannot run in a root filesystem other than the one it was built for.
	ErrNotStatic = errors.New("runboxd is not a static binary")
)

// Locate finds runboxd: explicit when it is not empty, else
// $RUNBOX_RUNBOXD, else a runboxd beside the running executable, else PATH.
// The path it returns is absolute and names an executable file.
func Locate(explicit string) (string, error) {
	if explicit != "" {
		return check(explicit, "the provider's Runboxd setting")
	}
	if env := os.Getenv("RUNBOX_RUNBOXD"); env != "" {
		return check(env, "$RUNBOX_RUNBOXD")
	}
	if exe, err := os.Executable(); err == nil {
		if path, err := check(filepath.Join(filepath.Dir(exe), "runboxd"), "beside "+exe); err == nil {
			return path, nil
		}
	}
	if path, err := exec.LookPath("runboxd"); err == nil {
		return check(path, "PATH")
	}
	return "", fmt.Errorf("%w: build it (CGO_ENABLED=0 go build -o bin/ ./cmd/...) and put it beside runbox, in PATH, or name it in RUNBOX_RUNBOXD", ErrNotFound)
}

func check(path, from string) (string, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", fmt.Errorf("runboxd %s (from %s): %w", path, from, err)
	}
	fi, err := os.Stat(abs)
	if err != nil {
		return "", fmt.Errorf("runboxd %s (from %s): %w: %w", abs, from, ErrNotFound, err)
	}
	if fi.IsDir() || fi.Mode()&0o111 == 0 {
		return "", fmt.Errorf("runboxd %s (from %s) is not an executable file: %w", abs, from, ErrNotFound)
	}
	return abs, nil
}

// CheckStatic refuses a runboxd image (the bytes of the binary at path)
// that is not a static Linux executable: copied into another root
// filesystem (a busybox image, say), a dynamically linked binary fails with
// a baffling "no such file or directory".
func CheckStatic(bin []byte, path string) error {
	f, err := elf.NewFile(bytes.NewReader(bin))
	if err != nil {
		return fmt.Errorf("runboxd %s is not a Linux executable: %w", path, err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return fmt.Errorf("runboxd %s is dynamically linked; sandboxes need a static build (CGO_ENABLED=0 go build ./cmd/runboxd): %w", path, ErrNotStatic)
		}
	}
	return nil
}
