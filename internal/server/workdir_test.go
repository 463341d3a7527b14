package server_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/runbox/runbox"
)

// plantSecret makes a fresh file at a random path outside every root the
// tests give the server, and returns its path and content.
func plantSecret(t *testing.T) (string, string) {
	t.Helper()
	dir, err := os.MkdirTemp("", "rbsecret")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	secret := fmt.Sprintf("secret-%d", rand.Uint64())
	path := filepath.Join(dir, "secret.txt")
	if err := os.WriteFile(path, []byte(secret), 0o600); err != nil {
		t.Fatal(err)
	}
	return path, secret
}

// TestWorkdirSymlinkEscape: a tenant makes a sandbox in ROOT/a, plants
// "escape -> /" from inside it, and asks for a second sandbox with workdir
// ROOT/a/escape. The server must refuse it (invalid argument naming the
// path) rather than start a sandbox whose workspace is the host's root;
// so too a link planted at a random depth and a path with "..".
func TestWorkdirSymlinkEscape(t *testing.T) {
	root := t.TempDir()
	ts := startServer(t, func(c *serverConfig) { c.WorkdirRoots = []string{root} })
	ctx := ctxT(t)
	srv := ts.tenant(t, "a")
	secretPath, secret := plantSecret(t)

	if err := os.MkdirAll(filepath.Join(root, "a", "sub", "dir"), 0o700); err != nil {
		t.Fatal(err)
	}
	first, err := srv.Create(ctx, runbox.SandboxSpec{Workdir: filepath.Join(root, "a")})
	if err != nil {
		t.Fatal(err)
	}
	r, _, err := srv.Run(ctx, first.ID, runbox.ExecSpec{Command: "ln -s / escape && ls -ld escape"})
	if err != nil || r.ExitCode != 0 {
		t.Fatalf("plant the link: %v %+v", err, r)
	}

	// A link at a random depth, to a directory outside the root.
	deep := filepath.Join(root, "d")
	for range 1 + rand.IntN(5) {
		deep = filepath.Join(deep, fmt.Sprintf("l%d", rand.IntN(100)))
	}
	if err := os.MkdirAll(deep, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Dir(secretPath), filepath.Join(deep, "link")); err != nil {
		t.Fatal(err)
	}

	secretRel := strings.TrimPrefix(secretPath, "/")
	for _, c := range []struct{ workdir, read string }{
		{filepath.Join(root, "a", "escape"), secretRel},
		{filepath.Join(root, "a", "escape", "tmp"), strings.TrimPrefix(secretRel, "tmp/")},
		{filepath.Join(deep, "link"), "secret.txt"},
		{root + "/a/../../" + filepath.Base(filepath.Dir(secretPath)), "secret.txt"},
	} {
		sb, err := srv.Create(ctx, runbox.SandboxSpec{Workdir: c.workdir})
		if err == nil {
			r, _, rerr := srv.Run(ctx, sb.ID, runbox.ExecSpec{Command: "pwd; cat " + c.read})
			srv.Remove(ctx, sb, true)
			t.Errorf("workdir %s: created %s; it reads outside the root: %v %q (secret %s found: %v)",
				c.workdir, sb.ID, rerr, r.Stdout, secret, strings.Contains(string(r.Stdout), secret))
			continue
		}
		if !errors.Is(err, runbox.ErrInvalidSpec) || !strings.Contains(err.Error(), "workdir") {
			t.Errorf("workdir %s: want an invalid-argument error naming the workdir, got %v", c.workdir, err)
		}
	}
	// The link is still there, and an ordinary subdirectory still works.
	if _, err := os.Lstat(filepath.Join(root, "a", "escape")); err != nil {
		t.Fatal(err)
	}
	if _, err := srv.Create(ctx, runbox.SandboxSpec{Workdir: filepath.Join(root, "a", "sub", "dir")}); err != nil {
		t.Fatalf("a plain subdirectory: %v", err)
	}
}

// TestWorkdirNotTheServersOwnRefused: a tenant's workdir under a workdir
// root must be the server's alone. Refused, as an invalid argument naming
// the path and why: a fresh sticky 1777 directory at a random name under
// the root holding another uid's listening socket (0660), a directory a
// tenant's own sandbox made and opened with `chmod 1777` in its
// workspace, and, as root, a 0755 directory owned by another uid; a plain
// subdirectory still works. Before the rule, each was accepted.
func TestWorkdirNotTheServersOwnRefused(t *testing.T) {
	root := t.TempDir()
	ts := startServer(t, func(c *serverConfig) { c.WorkdirRoots = []string{root} })
	ctx := ctxT(t)
	srv := ts.tenant(t, "a")
	other := 1000 + rand.IntN(50000)

	sticky := filepath.Join(root, fmt.Sprintf("shared-%d", rand.Uint64()))
	if err := os.Mkdir(sticky, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(sticky, 0o777|os.ModeSticky); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("unix", filepath.Join(sticky, "d.sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	os.Chown(filepath.Join(sticky, "d.sock"), other, other)
	os.Chmod(filepath.Join(sticky, "d.sock"), 0o660)

	mine := filepath.Join(root, "a")
	if err := os.MkdirAll(filepath.Join(mine, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	first, err := srv.Create(ctx, runbox.SandboxSpec{Workdir: mine})
	if err != nil {
		t.Fatal(err)
	}
	if r, _, err := srv.Run(ctx, first.ID, runbox.ExecSpec{Command: "mkdir opened && chmod 1777 opened"}); err != nil || r.ExitCode != 0 {
		t.Fatalf("open a directory from inside: %v %+v", err, r)
	}
	refused := []string{sticky, filepath.Join(mine, "opened")}
	if os.Geteuid() == 0 {
		theirs := filepath.Join(root, "theirs")
		if err := os.Mkdir(theirs, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(theirs, other, other); err != nil {
			t.Fatal(err)
		}
		refused = append(refused, theirs)
	}
	for _, wd := range refused {
		sb, err := srv.Create(ctx, runbox.SandboxSpec{Workdir: wd})
		if err == nil {
			srv.Remove(ctx, sb, true)
			t.Errorf("workdir %s (not the server's alone): created %s, want refused", wd, sb.ID)
			continue
		}
		if !errors.Is(err, runbox.ErrInvalidSpec) || !strings.Contains(err.Error(), wd) || !strings.Contains(err.Error(), "not yours alone") {
			t.Errorf("workdir %s: want an invalid-argument error naming it and why, got %v", wd, err)
		}
	}
	if _, err := srv.Create(ctx, runbox.SandboxSpec{Workdir: filepath.Join(mine, "sub")}); err != nil {
		t.Errorf("a plain subdirectory: %v", err)
	}
}
