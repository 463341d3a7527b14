package docker_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/runbox/runbox"
	rbclient "github.com/runbox/runbox/client"
)

// TestSharedWorkdirRefused: a docker sandbox's workspace is a bind its
// container's root uses as the engine's root does, so a workdir that is
// not the caller's alone is refused (runbox.ErrUnsafeWorkdir, an invalid
// spec naming it): a fresh sticky 1777 directory at a random path holding
// a listening socket of a random other uid (0660, as a dockerd started
// with -H unix:///tmp/d.sock leaves its own), and, as root, a 0755
// directory of that uid. Before the rule the container's root connected
// to the socket and read the service's greeting.
func TestSharedWorkdirRefused(t *testing.T) {
	needEngine(t)
	p := newProvider(t, false)
	base := t.TempDir()
	other := 1000 + rand.IntN(50000)
	mkdir := func(mode os.FileMode, uid int) string {
		d := filepath.Join(base, fmt.Sprintf("wd-%d", rand.Uint64()))
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(d, mode); err != nil {
			t.Fatal(err)
		}
		if uid >= 0 {
			if err := os.Chown(d, uid, uid); err != nil {
				t.Fatal(err)
			}
		}
		return d
	}
	shared := []string{mkdir(0o777|os.ModeSticky, -1)}
	if os.Geteuid() == 0 {
		shared = append(shared, mkdir(0o755, other))
	}
	for _, wd := range shared {
		ln, err := net.Listen("unix", filepath.Join(wd, "d.sock"))
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		os.Chown(filepath.Join(wd, "d.sock"), other, other)
		os.Chmod(filepath.Join(wd, "d.sock"), 0o660)
		greeting := fmt.Sprintf("service-%d", rand.Uint64())
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
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		sb, err := p.Create(ctx, runbox.SandboxSpec{Image: toolsImage, Workdir: wd})
		if err == nil {
			c := rbclient.New(p.Dialer(sb), rbclient.WithSandboxName(sb.ID))
			res, rerr := c.Exec(ctx, "python3 -c 'import socket; s=socket.socket(socket.AF_UNIX); s.connect(\"/workspace/d.sock\"); print(s.recv(100).decode())' 2>&1; true")
			c.Close()
			p.Remove(context.Background(), sb, true)
			t.Errorf("workdir %s (not the caller's alone): created, want refused; the container's connect to uid %d's socket: %v %q (the greeting: %v)",
				wd, other, rerr, res.Stdout, strings.Contains(string(res.Stdout), greeting))
		} else if !errors.Is(err, runbox.ErrUnsafeWorkdir) || !errors.Is(err, runbox.ErrInvalidSpec) || !strings.Contains(err.Error(), wd) {
			t.Errorf("workdir %s: %v, want runbox.ErrUnsafeWorkdir naming it", wd, err)
		}
		cancel()
	}
}
