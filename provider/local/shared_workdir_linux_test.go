package local_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"net"
	"os"
	osexec "os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/client"
	"github.com/runbox/runbox/provider/local"
)

// TestSharedWorkdirRefused: a workdir other users can write into is
// refused (local.ErrSharedWorkdir, runbox.ErrInvalidSpec), so what they
// left there, a service's unix socket above all, never is in a sandbox.
// The cases, each a fresh directory at a random path: sticky 1777 like
// /tmp with a listening socket of the test's in it (the `--workdir /tmp`
// attack on a dockerd started with -H unix:///tmp/d.sock), a 0777 one,
// and, as root, a 0775 one of another group; a plain 0755 directory of
// the caller's still works. Before the rule, each was accepted and the
// sandbox connected to the socket and read what the service sent.
func TestSharedWorkdirRefused(t *testing.T) {
	p := newProvider(t)
	base := t.TempDir()
	mkdir := func(mode os.FileMode, gid int) string {
		d := filepath.Join(base, "wd-"+randomName(t))
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
		if gid >= 0 {
			if err := os.Chown(d, -1, gid); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.Chmod(d, mode); err != nil {
			t.Fatal(err)
		}
		return d
	}
	sticky := mkdir(0o777|os.ModeSticky, -1)
	sockName, greeting := listenService(t, sticky)
	shared := []string{sticky, mkdir(0o777, -1)}
	if os.Geteuid() == 0 {
		shared = append(shared, mkdir(0o775, 1000+rand.IntN(50000)))
	}
	for _, wd := range shared {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		sb, err := p.Create(ctx, runbox.SandboxSpec{Workdir: wd})
		cancel()
		if err == nil {
			c := client.New(p.Dialer(sb), client.WithSandboxName(sb.ID))
			defer c.Close()
			defer p.Remove(context.Background(), sb, true)
			res := exec(t, c, "python3 -c 'import socket,sys; s=socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]); print(s.recv(100).decode())' /workspace/"+sockName+" 2>&1; true")
			t.Errorf("workdir %s (shared with other users): created, want refused; the sandbox's connect to the service's socket: %q", wd, res.Stdout)
			if strings.Contains(string(res.Stdout), greeting) {
				t.Errorf("the sandbox talked to the service listening in the shared workdir %s", wd)
			}
			continue
		}
		if !errors.Is(err, local.ErrSharedWorkdir) || !errors.Is(err, runbox.ErrInvalidSpec) || !strings.Contains(err.Error(), wd) {
			t.Errorf("workdir %s: %v, want local.ErrSharedWorkdir and runbox.ErrInvalidSpec naming the workdir", wd, err)
		}
	}
	_, c := create(t, p, runbox.SandboxSpec{Workdir: mkdir(0o755, -1)})
	if res := exec(t, c, "touch /workspace/ok && echo ok"); strings.TrimSpace(string(res.Stdout)) != "ok" {
		t.Errorf("a 0755 workdir of the caller's: %q %q", res.Stdout, res.Stderr)
	}
}

// TestSharedWorkdirRefusedRootless: rootless too (`runbox run` as an
// unprivileged user), a sticky 1777 working directory holding a service's
// socket open to anyone is refused as the sandbox's workspace (exit 125,
// the message naming why), and the command never talks to the service.
// Before the rule, the sandbox connected and read the service's greeting.
func TestSharedWorkdirRefusedRootless(t *testing.T) {
	needLocal(t)
	if os.Geteuid() != 0 {
		t.Skip("needs root to switch to an unprivileged user: run the tests as root (CI does)")
	}
	dir, home, _ := nobodyDirs(t)
	sticky := filepath.Join(dir, "shared-"+randomName(t))
	if err := os.Mkdir(sticky, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(sticky, 0o777|os.ModeSticky); err != nil {
		t.Fatal(err)
	}
	sockName, greeting := listenService(t, sticky)
	cmd := osexec.Command(filepath.Join(dir, "runbox"), "run", "--",
		"python3 -c 'import socket,sys; s=socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]); print(s.recv(100).decode())' /workspace/"+sockName)
	cmd.Dir = sticky
	cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + home, "RUNBOX_HOME=" + home,
		"RUNBOX_RUNBOXD=" + filepath.Join(dir, "runboxd"), "DOCKER_HOST=unix://" + filepath.Join(home, "no-docker.sock")}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
	out, err := cmd.CombinedOutput()
	if strings.Contains(string(out), greeting) {
		t.Errorf("the rootless sandbox talked to the service listening in its shared workdir %s:\n%s", sticky, out)
	}
	var exit *osexec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 125 || !strings.Contains(string(out), "shared with other users") {
		t.Errorf("runbox run in the sticky %s as uid %d: %v, want exit 125 saying it is shared:\n%s", sticky, nobody, err, out)
	}
}

// listenService starts a unix socket listener of the test's, open to
// anyone as many services' sockets in /tmp are, at a fresh name in dir; it
// greets each connection with a fresh word. It returns the socket's name
// and the greeting, and closes when t ends.
func listenService(t *testing.T, dir string) (name, greeting string) {
	t.Helper()
	name = "d-" + randomName(t) + ".sock"
	ln, err := net.Listen("unix", filepath.Join(dir, name))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	if err := os.Chmod(filepath.Join(dir, name), 0o777); err != nil {
		t.Fatal(err)
	}
	greeting = "service-" + randomName(t)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Write([]byte(greeting + "\n"))
			c.Close()
		}
	}()
	return name, greeting
}
