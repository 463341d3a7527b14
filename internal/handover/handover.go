// Package handover finds the runbox binary an invocation is handed to and
// replaces this process with it.
//
// runbox is three binaries kept in one directory, so that each command
// pays only the package inits of what it links (Go runs every linked
// package's init before main): the front (cmd/runbox) runs the hot path
// itself and hands everything else to runbox-full (cmd/runbox-full, every
// provider and the sandbox commands); the commands of the control plane and
// its tools (serve, mcp, token, audit, man: a server, a database, the MCP
// SDK, a man page generator) live in runbox-server (cmd/runbox-server),
// to which both the front and runbox-full hand them. A handover is an
// execve: stdin, stdout, stderr, the terminal, signals and the exit status
// are the new binary's own, as if it had been called.
//
// The package links nothing beyond the standard library's os and syscall
// layers: the front imports it.
package handover

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"syscall"
)

// Binary is a runbox binary that another one hands invocations to.
type Binary struct {
	// Name is its file name, looked for beside the running executable and
	// on PATH.
	Name string
	// Env names the environment variable that gives its path, overriding
	// the search.
	Env string
}

var (
	// Full is runbox-full (cmd/runbox-full): every provider and every
	// command but ServerCommands.
	Full = Binary{Name: "runbox-full", Env: "RUNBOX_FULL"}
	// Server is runbox-server (cmd/runbox-server): the whole command tree,
	// ServerCommands included.
	Server = Binary{Name: "runbox-server", Env: "RUNBOX_SERVER"}
)

// ServerCommands are the commands only runbox-server links: runbox serve
// (its HTTP server, Prometheus metrics and SQLite registry), runbox mcp
// (the MCP SDK), runbox token and runbox audit (the registry) and runbox
// man (cobra's man page generator). runbox and runbox-full hand them to
// runbox-server.
var ServerCommands = []string{"serve", "mcp", "token", "audit", "man"}

// IsServerCommand reports whether name is one of ServerCommands.
func IsServerCommand(name string) bool { return slices.Contains(ServerCommands, name) }

// DelegatedEnv is set in the environment of the binary an invocation is
// handed to, to the path of the binary that handed it; the receiver unsets
// it first thing (it is not for the processes it starts). A binary that
// finds it set when about to hand over refuses (an $RUNBOX_FULL naming the
// front would otherwise loop).
const DelegatedEnv = "RUNBOX_DELEGATED"

// ErrNotFound is wrapped by the errors saying that the binary an
// invocation needs cannot be found or run.
var ErrNotFound = errors.New("not found")

// Exec replaces this process with b, run with args (the invocation's
// arguments without the program name). It returns only when b cannot be
// found or started, with an error (wrapping ErrNotFound when it cannot be
// found) that names what needed it (why, e.g. "runbox serve"), b, and how
// to get it.
func (b Binary) Exec(args []string, why string) error {
	if from := os.Getenv(DelegatedEnv); from != "" {
		return fmt.Errorf("%s: %s %w: %s handed it back (is $%s a runbox that hands over?)", why, b.Name, ErrNotFound, from, b.Env)
	}
	path, err := b.Find()
	if err != nil {
		return fmt.Errorf("%s needs %s: %w", why, b.Name, err)
	}
	self, _ := os.Executable()
	if sameFile(path, self) {
		return fmt.Errorf("%s needs %s: %s %w: %s is this binary (check $%s)", why, b.Name, b.Name, ErrNotFound, path, b.Env)
	}
	env := append(os.Environ(), DelegatedEnv+"="+self)
	err = syscall.Exec(path, append([]string{path}, args...), env)
	return fmt.Errorf("%s needs %s: run %s: %w", why, b.Name, path, err)
}

// Find returns b's path: $Env, else b.Name beside the running executable,
// else on PATH.
func (b Binary) Find() (string, error) {
	if p := os.Getenv(b.Env); p != "" {
		if err := isExecutable(p); err != nil {
			return "", fmt.Errorf("$%s=%s: %w", b.Env, p, err)
		}
		return p, nil
	}
	var beside, self string
	if exe, err := os.Executable(); err == nil {
		self = filepath.Base(exe)
		beside = filepath.Join(filepath.Dir(exe), b.Name)
		if isExecutable(beside) == nil {
			return beside, nil
		}
	}
	if p, err := exec.LookPath(b.Name); err == nil {
		return p, nil
	}
	return "", fmt.Errorf("%s %w beside this %s (%s) nor on PATH: build the binaries with `CGO_ENABLED=0 go build -o bin/ ./cmd/...` and keep them in one directory, or set $%s to its path",
		b.Name, ErrNotFound, self, beside, b.Env)
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

// sameFile reports whether a and b name one file.
func sameFile(a, b string) bool {
	if a == "" || b == "" {
		return false
	}
	sa, err := os.Stat(a)
	if err != nil {
		return false
	}
	sb, err := os.Stat(b)
	return err == nil && os.SameFile(sa, sb)
}
