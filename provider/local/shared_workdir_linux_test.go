package local_test

import (
	"context"
	"encoding/binary"
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

	"golang.org/x/sys/unix"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/client"
	"github.com/runbox/runbox/provider/local"
)

// TestSharedWorkdirRefused: a workdir that is not the caller's alone is
// refused (runbox.ErrUnsafeWorkdir, local.ErrSharedWorkdir,
// runbox.ErrInvalidSpec, naming the workdir), so what others left there, a
// service's unix socket above all, never is in a sandbox. Each case is a
// fresh directory at a random path holding a fresh listening socket of
// another (random) uid and gid, mode 0660 (the `--workdir /tmp` attack on
// a dockerd started with -H unix:///tmp/d.sock): sticky 1777 like /tmp, a
// 0777 one, and, as root, a 0775 one of another group, a 0755 one that
// grants another uid write through a POSIX ACL, and a 0755 one owned by
// another uid. A 0755 directory of the caller's, and a 0775 one of its
// user private group, still work. Before the rule, the sticky and 0777
// ones were accepted and the sandbox's root connected to the socket and
// read what the service sent; before the owner and ACL rules, so were
// those two.
func TestSharedWorkdirRefused(t *testing.T) {
	p := newProvider(t)
	base := t.TempDir()
	other := 1000 + rand.IntN(50000)
	mkdir := func(mode os.FileMode, uid, gid int) string {
		d := filepath.Join(base, "wd-"+randomName(t))
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(d, uid, gid); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(d, mode); err != nil {
			t.Fatal(err)
		}
		return d
	}
	me, myGroup := os.Geteuid(), os.Getegid()
	shared := []string{mkdir(0o777|os.ModeSticky, -1, -1), mkdir(0o777, -1, -1)}
	if me == 0 {
		acl := mkdir(0o755, -1, -1)
		grantWriteACL(t, acl, other)
		shared = append(shared, mkdir(0o775, -1, other+1), acl, mkdir(0o755, other, other))
	}
	for _, wd := range shared {
		sock, greeting := listenServiceAs(t, wd, other, other+1, 0o660)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		sb, err := p.Create(ctx, runbox.SandboxSpec{Workdir: wd})
		cancel()
		if err == nil {
			c := client.New(p.Dialer(sb), client.WithSandboxName(sb.ID))
			defer c.Close()
			defer p.Remove(context.Background(), sb, true)
			res := exec(t, c, "python3 -c 'import socket,sys; s=socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]); print(s.recv(100).decode())' /workspace/"+sock+" 2>&1; true")
			t.Errorf("workdir %s (not the caller's alone): created, want refused; the sandbox's connect to uid %d's socket: %q", wd, other, res.Stdout)
			if strings.Contains(string(res.Stdout), greeting) {
				t.Errorf("the sandbox talked to the service listening in the shared workdir %s", wd)
			}
			continue
		}
		if !errors.Is(err, runbox.ErrUnsafeWorkdir) || !errors.Is(err, local.ErrSharedWorkdir) || !errors.Is(err, runbox.ErrInvalidSpec) || !strings.Contains(err.Error(), wd) {
			t.Errorf("workdir %s: %v, want runbox.ErrUnsafeWorkdir and runbox.ErrInvalidSpec naming the workdir", wd, err)
		}
	}
	own := []string{mkdir(0o755, -1, -1)}
	if me == 0 { // root's user private group is root
		own = append(own, mkdir(0o775, -1, myGroup))
	}
	for _, wd := range own {
		_, c := create(t, p, runbox.SandboxSpec{Workdir: wd})
		if res := exec(t, c, "touch /workspace/ok && echo ok"); strings.TrimSpace(string(res.Stdout)) != "ok" {
			t.Errorf("workdir %s of the caller's: %q %q", wd, res.Stdout, res.Stderr)
		}
	}
}

// grantWriteACL gives uid write into dir through a POSIX access ACL
// (user:UID:rwx, mask rwx; the owning group keeps r-x), as `setfacl -m
// u:UID:rwx` does, and shows that uid can now create a file there.
func grantWriteACL(t *testing.T, dir string, uid int) {
	t.Helper()
	const all = 0xffffffff
	var b []byte
	b = binary.LittleEndian.AppendUint32(b, 2)
	for _, e := range [][3]uint32{{0x01, 7, all}, {0x02, 7, uint32(uid)}, {0x04, 5, all}, {0x10, 7, all}, {0x20, 5, all}} {
		b = binary.LittleEndian.AppendUint16(b, uint16(e[0]))
		b = binary.LittleEndian.AppendUint16(b, uint16(e[1]))
		b = binary.LittleEndian.AppendUint32(b, e[2])
	}
	if err := unix.Setxattr(dir, "system.posix_acl_access", b, 0); err != nil {
		t.Skipf("no POSIX ACLs on %s: %v", dir, err)
	}
	// The directories above it must let uid reach it for the proof.
	for d := filepath.Dir(dir); d != "/" && d != os.TempDir(); d = filepath.Dir(d) {
		if err := os.Chmod(d, 0o711); err != nil {
			t.Fatal(err)
		}
	}
	touch := osexec.Command("/bin/sh", "-c", "echo x > \"$1\"/by-acl", "sh", dir)
	touch.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(uid)}}
	if out, err := touch.CombinedOutput(); err != nil {
		t.Fatalf("uid %d cannot write into %s through its ACL, so the case shows nothing: %v %s", uid, dir, err, out)
	}
}

// TestSharedWorkdirRefusedRootless: rootless too (`runbox run` as an
// unprivileged user), a working directory that is not the user's alone
// and holds a service's socket open to anyone is refused as the sandbox's
// workspace (exit 125, the message naming why), and the command never
// talks to the service: a sticky 1777 one, and a 0755 one of root's.
// Before the rule, the sandbox connected to the sticky one's service and
// read its greeting; before the owner rule, to root's.
func TestSharedWorkdirRefusedRootless(t *testing.T) {
	needLocal(t)
	if os.Geteuid() != 0 {
		t.Skip("needs root to switch to an unprivileged user: run the tests as root (CI does)")
	}
	dir, home, _ := nobodyDirs(t)
	for _, mode := range []os.FileMode{0o777 | os.ModeSticky, 0o755} {
		wd := filepath.Join(dir, "shared-"+randomName(t))
		if err := os.Mkdir(wd, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(wd, mode); err != nil {
			t.Fatal(err)
		}
		sockName, greeting := listenService(t, wd)
		cmd := osexec.Command(filepath.Join(dir, "runbox"), "run", "--",
			"python3 -c 'import socket,sys; s=socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]); print(s.recv(100).decode())' /workspace/"+sockName)
		cmd.Dir = wd
		cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + home, "RUNBOX_HOME=" + home,
			"RUNBOX_RUNBOXD=" + filepath.Join(dir, "runboxd"), "DOCKER_HOST=unix://" + filepath.Join(home, "no-docker.sock")}
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
		out, err := cmd.CombinedOutput()
		if strings.Contains(string(out), greeting) {
			t.Errorf("the rootless sandbox talked to the service listening in its workdir %s (mode %v, root's):\n%s", wd, mode, out)
		}
		var exit *osexec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != 125 || !strings.Contains(string(out), "is not yours alone") {
			t.Errorf("runbox run in %s (mode %v, root's) as uid %d: %v, want exit 125 saying it is not the user's alone:\n%s", wd, mode, nobody, err, out)
		}
	}
}

// listenServiceAs is listenService with the socket owned by uid:gid, mode
// perm, as another user's service would leave it.
func listenServiceAs(t *testing.T, dir string, uid, gid int, perm os.FileMode) (name, greeting string) {
	t.Helper()
	name, greeting = listenService(t, dir)
	p := filepath.Join(dir, name)
	if err := os.Chown(p, uid, gid); err != nil && os.Geteuid() == 0 {
		t.Fatal(err)
	}
	if err := os.Chmod(p, perm); err != nil {
		t.Fatal(err)
	}
	return name, greeting
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

// TestWorkdirSwapRace: the directory a sandbox gets is the one that was
// checked, whatever happens to its path after the check. A goroutine keeps
// exchanging (renameat2 RENAME_EXCHANGE: both names always exist, neither
// is a link) the caller's 0755 workdir, which holds a marker file, with a
// sticky 1777 directory holding another uid's listening socket, while
// sandboxes are made from the workdir's path, id-mapped (the default as
// root) and plain-bound (--host-root). Every create is either refused
// (ErrUnsafeWorkdir: the check saw the shared one; or the jail saw the
// path replaced) or makes a sandbox whose /workspace holds the marker and
// not the socket. Before the check and the bind used one handle, the
// id-mapped tree was cloned from the path after the check, and a sandbox
// got the shared directory.
func TestWorkdirSwapRace(t *testing.T) {
	p := newProvider(t)
	if os.Geteuid() != 0 {
		t.Skip("needs root for the other uid's socket and --host-root: run the tests as root (CI does)")
	}
	base := t.TempDir()
	mine, shared := filepath.Join(base, "wd-"+randomName(t)), filepath.Join(base, "sh-"+randomName(t))
	for _, d := range []string{mine, shared} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(shared, 0o777|os.ModeSticky); err != nil {
		t.Fatal(err)
	}
	marker := "mine-" + randomName(t)
	if err := os.WriteFile(filepath.Join(mine, marker), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	other := 1000 + rand.IntN(50000)
	sock, _ := listenServiceAs(t, shared, other, other, 0o660)

	stop := make(chan struct{})
	swapped := make(chan int)
	go func() {
		n := 0
		defer func() { swapped <- n }()
		for {
			select {
			case <-stop:
				return
			default:
			}
			if err := unix.Renameat2(unix.AT_FDCWD, mine, unix.AT_FDCWD, shared, unix.RENAME_EXCHANGE); err != nil {
				t.Errorf("exchange: %v", err)
				return
			}
			n++
			time.Sleep(time.Duration(rand.IntN(300)) * time.Microsecond)
		}
	}()
	const rounds = 50
	made, refused := 0, 0
	for i := range 2 * rounds {
		spec := runbox.SandboxSpec{Workdir: mine, HostRoot: i%2 == 1}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		sb, err := p.Create(ctx, spec)
		cancel()
		if err != nil {
			if !errors.Is(err, runbox.ErrUnsafeWorkdir) && !strings.Contains(err.Error(), "replaced after it was checked") {
				t.Errorf("create %d (host root %v): %v, want refused as not the caller's or as replaced", i, spec.HostRoot, err)
			}
			refused++
			continue
		}
		made++
		c := client.New(p.Dialer(sb), client.WithSandboxName(sb.ID))
		res := exec(t, c, "ls -A /workspace")
		c.Close()
		if err := p.Remove(context.Background(), sb, true); err != nil {
			t.Errorf("remove: %v", err)
		}
		if ls := string(res.Stdout); !strings.Contains(ls, marker) || strings.Contains(ls, sock) {
			t.Errorf("create %d (host root %v): /workspace is not the directory checked: %q %q", i, spec.HostRoot, ls, res.Stderr)
		}
	}
	close(stop)
	n := <-swapped
	t.Logf("%d sandboxes made, %d refused, %d exchanges", made, refused, n)
	if made == 0 {
		t.Errorf("no sandbox made in %d creates: the race was never on the bind", 2*rounds)
	}
}

// TestCLIUpSharedWorkdir: `runbox up --workdir DIR` with DIR a fresh
// sticky 1777 directory at a random path, holding a listening socket of
// another uid (0660), exits 125 with a message naming DIR, why and what to
// do instead, and makes no sandbox; `up --mkdir --workdir` makes a
// directory that passes the rule even under a umask of 0 (mode 0755, as
// the caller). Before the rule, up made the sandbox; before --mkdir's mode,
// its directory was 0777 under umask 0 and then refused.
func TestCLIUpSharedWorkdir(t *testing.T) {
	rb := localCLI(t)
	wd := filepath.Join(t.TempDir(), "shared-"+randomName(t))
	if err := os.Mkdir(wd, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(wd, 0o777|os.ModeSticky); err != nil {
		t.Fatal(err)
	}
	other := 1000 + rand.IntN(50000)
	listenServiceAs(t, wd, other, other, 0o660)
	code, out, errs := rb("up", "--workdir", wd)
	if code == 0 {
		rb("rm", "-f", strings.TrimSpace(out))
	}
	for _, want := range []string{wd, "not yours alone", "sticky", "mktemp -d"} {
		if code != 125 || !strings.Contains(errs, want) {
			t.Errorf("up --workdir STICKY: exit %d, stderr %q; want 125 and %q", code, errs, want)
		}
	}
	if code, out, _ := rb("ls", "-q"); code != 0 || out != "" {
		t.Errorf("after the refusal, ls -q: exit %d %q; want no sandbox", code, out)
	}
	old := unix.Umask(0)
	defer unix.Umask(old)
	made := filepath.Join(t.TempDir(), "a", "b")
	upLocal(t, rb, "--mkdir", "--workdir", made)
	if fi, err := os.Stat(made); err != nil || fi.Mode().Perm() != 0o755 {
		t.Errorf("up --mkdir under umask 0 made %v %v; want 0755", fi, err)
	}
}
