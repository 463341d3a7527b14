package local_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/provider/host"
)

// planted is a file a test made on the host for a sandbox to try to read.
type planted struct {
	path, content string
	readable      bool // what an unprivileged stranger on the host may read
}

// plantHostFiles makes, at fresh random paths on the host's root
// filesystem (outside every directory runbox hides), a 0600 root file in a
// fresh 0700 directory, a 0640 file of a random group, a 0600 file of a
// random unprivileged user, and a world-readable file beside them as the
// control. Each is removed when t ends.
func plantHostFiles(t *testing.T) []planted {
	t.Helper()
	var rootStat syscall.Stat_t
	if err := syscall.Stat("/", &rootStat); err != nil {
		t.Fatal(err)
	}
	// Directories on the root filesystem itself (the sandbox's lower layer
	// is that filesystem alone).
	var bases []string
	for _, b := range []string{"/var/tmp", "/opt", "/srv", "/var/lib", "/etc", "/usr/local/share", "/var/cache"} {
		var st syscall.Stat_t
		if syscall.Stat(b, &st) == nil && st.Dev == rootStat.Dev {
			bases = append(bases, b)
		}
	}
	if len(bases) == 0 {
		t.Fatal("no directory of the root filesystem to plant files in")
	}
	word := func() string { return fmt.Sprintf("rbp%08x", rand.Uint32()) }
	var out []planted
	plant := func(dirMode os.FileMode, fileMode os.FileMode, uid, gid int, readable bool) {
		top := filepath.Join(bases[rand.IntN(len(bases))], word())
		dir := top
		for range rand.IntN(3) {
			dir = filepath.Join(dir, word())
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(top) })
		if err := os.Chmod(dir, dirMode); err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, word())
		content := "secret-" + word()
		if err := os.WriteFile(p, []byte(content+"\n"), fileMode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, fileMode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(p, uid, gid); err != nil {
			t.Fatal(err)
		}
		out = append(out, planted{p, content, readable})
	}
	someone := 1000 + rand.IntN(50000)
	plant(0o700, 0o600, 0, 0, false)                     // root's, in root's directory
	plant(0o755, 0o640, 0, 1000+rand.IntN(50000), false) // a group's
	plant(0o755, 0o600, someone, someone, false)         // another user's
	plant(0o755, 0o644, 0, 0, true)                      // anyone's: the control
	return out
}

// TestRootOnlyHostFilesUnreadable: a command in a default local sandbox,
// as sandbox root, reads on the host only what an unprivileged stranger
// may: fresh files planted at random paths, readable only by root, by a
// group or by another user, stay unreadable (by cat, through
// /proc/self/root, by a copy-up for writing), and the host's file is
// unchanged after the attempt; a world-readable one beside them reads.
// Before the FUSE root, the host's root was id-mapped into the sandbox and
// sandbox root read all of them.
func TestRootOnlyHostFilesUnreadable(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the host's ownership is planted as root; rootless sandboxes read with the caller's own rights")
	}
	p := newProvider(t)
	files := plantHostFiles(t)
	_, c := create(t, p, runbox.SandboxSpec{})
	for _, f := range files {
		res := exec(t, c, fmt.Sprintf("cat %[1]s; cat /proc/self/root%[1]s; cp %[1]s /tmp/copy && cat /tmp/copy; echo appended >> %[1]s; cat %[1]s", f.path))
		got := string(res.Stdout)
		if f.readable {
			if !strings.Contains(got, f.content) {
				t.Errorf("world-readable %s: the sandbox read %q, want its content (the control)", f.path, got)
			}
			continue
		}
		if strings.Contains(got, f.content) {
			t.Errorf("%s (not world-readable): the sandbox read it: %q", f.path, got)
		}
		b, err := os.ReadFile(f.path)
		if err != nil || string(b) != f.content+"\n" {
			t.Errorf("%s on the host after the attempt: %q, %v", f.path, b, err)
		}
	}
	// The whole tree, the way an attacker searching for secrets would.
	var secrets []string
	for _, f := range files {
		secrets = append(secrets, f.content)
	}
	res := exec(t, c, "grep -rhs -e "+strings.Join(secrets, " -e ")+" /var /opt /srv /etc /usr/local 2>/dev/null | head; true")
	for _, f := range files {
		if !f.readable && strings.Contains(string(res.Stdout), f.content) {
			t.Errorf("a search of the tree found %s's content", f.path)
		}
	}
}

// TestOtherRunboxHomesUnreadable: another runbox home on the host (a
// server's, another user's: here a host sandbox's at a fresh random path
// outside every masked directory) is out of a local sandbox's reach: its
// secret does not read, and its runboxd socket does not connect. Before
// the FUSE root, sandbox root read the secret (its owner, through the
// id-mapped root), which let it drive that runboxd as host root.
func TestOtherRunboxHomesUnreadable(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("a home closed to others is planted as root")
	}
	needLocal(t)
	top := filepath.Join("/var/tmp", fmt.Sprintf("rbh%08x", rand.Uint32()))
	t.Cleanup(func() { os.RemoveAll(top) })
	home := filepath.Join(top, "h")
	hp := &host.Provider{Home: home, Runboxd: os.Getenv("RUNBOX_RUNBOXD")}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	victim, err := hp.Create(ctx, runbox.SandboxSpec{Workdir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { hp.Remove(context.Background(), victim, true) })
	sockPath := victim.Detail["socket"]
	secretPath := filepath.Join(filepath.Dir(sockPath), "secret")
	secret, err := os.ReadFile(secretPath)
	if err != nil || len(secret) == 0 {
		t.Fatalf("the victim's secret at %s: %v", secretPath, err)
	}
	p := newProvider(t)
	_, c := create(t, p, runbox.SandboxSpec{})
	res := exec(t, c, "od -An -tx1 "+secretPath+" | tr -d ' \\n'; ls -la "+filepath.Dir(sockPath)+"; "+
		"python3 -c 'import socket,sys; s=socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]); print(\"connected\")' "+sockPath)
	want := fmt.Sprintf("%x", secret)
	if strings.Contains(string(res.Stdout), want) {
		t.Errorf("the local sandbox read another home's secret %s", secretPath)
	}
	if strings.Contains(string(res.Stdout), "connected") {
		t.Errorf("the local sandbox connected to another home's runboxd socket %s", sockPath)
	}
}
