package local_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/client"
	"github.com/runbox/runbox/internal/jail"
	"github.com/runbox/runbox/provider/host"
	"github.com/runbox/runbox/provider/local"
)

// probeEnv, set to "1", makes the test binary, run inside a sandbox, try
// the calls a sandbox must refuse and print one "name: result" line each,
// instead of running tests (see TestMain).
const probeEnv = "RUNBOX_LOCAL_PROBE"

// probeMain runs the probes when probeEnv asks for it and reports whether
// it did.
func probeMain() bool {
	if os.Getenv(probeEnv) != "1" {
		return false
	}
	report := func(name string, err error) {
		if err == nil {
			fmt.Printf("%s: allowed\n", name)
			return
		}
		fmt.Printf("%s: %v\n", name, errnoName(err))
	}
	_, err := unix.KeyctlInt(unix.KEYCTL_GET_KEYRING_ID, unix.KEY_SPEC_SESSION_KEYRING, 0, 0, 0)
	report("keyctl", err)
	// BPF_PROG_LOAD with no program: refused by the filter before the
	// kernel looks at the (invalid) attributes.
	_, _, e := unix.Syscall(unix.SYS_BPF, unix.BPF_PROG_LOAD, 0, 0)
	report("bpf", errnoErr(e))
	_, _, e = unix.Syscall6(unix.SYS_PERF_EVENT_OPEN, 0, 0, ^uintptr(0), ^uintptr(0), 0, 0)
	report("perf_event_open", errnoErr(e))
	report("mount", unix.Mount("tmpfs", "/mnt", "tmpfs", 0, ""))
	report("unshare(user)", unix.Unshare(unix.CLONE_NEWUSER))
	report("unshare(mount)", unix.Unshare(unix.CLONE_NEWNS))
	// clone3, which a filter cannot look into, with a new user namespace:
	// the sandbox's cap of zero nested user namespaces refuses it (Go uses
	// clone3 to start a process straight into a cgroup).
	cg, err := unix.Open("/sys/fs/cgroup/unified", unix.O_DIRECTORY|unix.O_RDONLY, 0)
	if err != nil {
		report("clone3(user)", fmt.Errorf("open cgroup: %w", err))
	} else {
		_, err = syscall.ForkExec("/bin/true", []string{"true"}, &syscall.ProcAttr{Sys: &syscall.SysProcAttr{
			Cloneflags: syscall.CLONE_NEWUSER, UseCgroupFD: true, CgroupFD: cg,
		}})
		report("clone3(user)", err)
	}
	return true
}

func errnoErr(e unix.Errno) error {
	if e == 0 {
		return nil
	}
	return e
}

// errnoName names an errno the way the tests compare it.
func errnoName(err error) string {
	var e unix.Errno
	if errors.As(err, &e) {
		return unix.ErrnoName(e)
	}
	return err.Error()
}

// TestKernelSurfaceRefused: inside a default sandbox, calls that reach
// past it fail with EPERM (the seccomp filter) and no user namespace can be
// made even through clone3 (ENOSPC: the sandbox's cap is zero).
func TestKernelSurfaceRefused(t *testing.T) {
	p := newProvider(t)
	ws := t.TempDir()
	_, c := create(t, p, runbox.SandboxSpec{Workdir: ws})
	probe := copyTestBinary(t, ws)
	out := run(t, c, probeEnv+"=1 /workspace/"+probe)
	want := map[string]string{
		"keyctl": "EPERM", "bpf": "EPERM", "perf_event_open": "EPERM", "mount": "EPERM",
		"unshare(user)": "EPERM", "unshare(mount)": "EPERM", "clone3(user)": "ENOSPC",
	}
	got := map[string]string{}
	for line := range strings.Lines(out) {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ": "); ok {
			got[k] = v
		}
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s in the sandbox: %q, want %s", k, got[k], v)
		}
	}
	// The same through the tools an attacker would use.
	for _, cmd := range []string{
		"mount -t tmpfs none /mnt",
		"unshare --user --map-root-user --mount sh -c 'mount -t tmpfs none /mnt'",
		"unshare -m true",
		"echo 1 > /proc/sys/user/max_user_namespaces",
	} {
		if res := exec(t, c, cmd); res.ExitCode == 0 {
			t.Errorf("%q succeeded in the sandbox", cmd)
		}
	}
	if got := run(t, c, "grep -E '^(NoNewPrivs|Seccomp):' /proc/self/status | tr -s '\\t ' ' '"); got != "NoNewPrivs: 1\nSeccomp: 2\n" {
		t.Errorf("a command's status: %q, want no_new_privs and a seccomp filter", got)
	}
}

// copyTestBinary copies the running test binary into dir (a sandbox's
// workspace) and returns its name there.
func copyTestBinary(t *testing.T, dir string) string {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	src, err := os.Open(self)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	dst, err := os.OpenFile(filepath.Join(dir, "probe.test"), os.O_CREATE|os.O_WRONLY, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		t.Fatal(err)
	}
	if err := dst.Close(); err != nil {
		t.Fatal(err)
	}
	return "probe.test"
}

// TestSandboxRootIsUnprivilegedOnHost: a default sandbox's root is root
// inside (uid 0, may chown) but an unprivileged uid on the host; what it
// writes to its root is owned by that uid on disk, and what it writes to
// the workspace by the same uid as inside (the workspace is id-mapped).
func TestSandboxRootIsUnprivilegedOnHost(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the uid range is mapped when runbox runs as root")
	}
	p := newProvider(t)
	ws := t.TempDir()
	sb, c := create(t, p, runbox.SandboxSpec{Workdir: ws, Disk: local.Unlimited})
	m := "unpriv" + strconv.Itoa(rand.IntN(1e9))
	if got := run(t, c, "id -u; touch /workspace/made-inside /etc/"+m+"; chown 1000:1000 /etc/"+m+"; echo ok"); got != "0\nok\n" {
		t.Fatalf("as the sandbox's root: %q", got)
	}
	proc, err := c.Start(context.Background(), "exec -a "+m+" sleep 300")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Cancel(context.Background(), proc.ID(), 0)
	var pid int
	if !poll(10*time.Second, func() bool { pid = findMarker(m); return pid > 0 }) {
		t.Fatal("the sandbox's sleep is not visible from the host")
	}
	var st syscall.Stat_t
	if err := syscall.Stat(fmt.Sprintf("/proc/%d", pid), &st); err != nil {
		t.Fatal(err)
	}
	if st.Uid != local.DefaultUIDBase {
		t.Errorf("the sandbox's root runs as host uid %d, want %d", st.Uid, local.DefaultUIDBase)
	}
	if err := syscall.Stat(filepath.Join(ws, "made-inside"), &st); err != nil || st.Uid != 0 {
		t.Errorf("a workspace file made by the sandbox's root: host owner %d (%v), want 0: the workspace is id-mapped", st.Uid, err)
	}
	// The upper layer is on the sandbox's own disk, mounted only in its
	// FUSE server's mount namespace.
	upper := filepath.Join("/proc", sb.Detail["fuse_server_pid"], "root", jail.FuseServerLayersPath, "upper", "etc", m)
	if err := syscall.Stat(upper, &st); err != nil || st.Uid != local.DefaultUIDBase+1000 {
		t.Errorf("a root file chowned to 1000 in the sandbox: host owner %d (%v), want %d", st.Uid, err, local.DefaultUIDBase+1000)
	}
}

// findMarker returns the pid of a host process whose command line holds
// marker, or 0.
func findMarker(marker string) int {
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline"); err == nil && strings.Contains(string(b), marker) {
			return pid
		}
	}
	return 0
}

// TestHostSecretsHidden: what of the host a sandbox on the host's root
// must not see — password hashes, root's and users' homes, /run (daemons'
// sockets, container engines'), SSH host keys, any runbox home — it does
// not, and no socket of anything is in its view.
func TestHostSecretsHidden(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: it plants secrets in /root, /home and /run; run the tests as root (CI does)")
	}
	m := "secret" + strconv.Itoa(rand.IntN(1e9))
	var planted []string
	listeners := plantSockets(t)
	for _, dir := range []string{"/root", "/home", "/run"} {
		if _, err := os.Stat(dir); err != nil {
			continue
		}
		p := filepath.Join(dir, ".runbox-test-"+m)
		if err := os.WriteFile(p, []byte(m), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.Remove(p) })
		planted = append(planted, p)
	}
	p := newProvider(t)
	_, c := create(t, p, runbox.SandboxSpec{})
	for _, f := range planted {
		if res := exec(t, c, "cat "+f); res.ExitCode == 0 || strings.Contains(string(res.Stdout), m) {
			t.Errorf("the host's %s is readable in the sandbox: %q", f, res.Stdout)
		}
	}
	if got := run(t, c, "grep -rl "+m+" /root /home /run /etc 2>/dev/null; true"); got != "" {
		t.Errorf("planted secret found in the sandbox at %q", got)
	}
	// The sandbox has a shadow file of its own: the host's users, no hashes.
	host, _ := os.ReadFile("/etc/shadow")
	inside := run(t, c, "cat /etc/shadow")
	if users(string(host)) != users(inside) {
		t.Errorf("the sandbox's /etc/shadow lists users %q, the host's %q", users(inside), users(string(host)))
	}
	for line := range strings.Lines(inside) {
		if f := strings.SplitN(line, ":", 3); len(f) == 3 && f[1] != "*" && f[1] != "" {
			t.Errorf("a password hash in the sandbox's /etc/shadow: %q", line)
		}
	}
	keys, _ := filepath.Glob("/etc/ssh/ssh_host_*_key")
	for _, k := range keys {
		if got := run(t, c, "wc -c < "+k); strings.TrimSpace(got) != "0" {
			t.Errorf("the host key %s reads %s bytes in the sandbox, want none", k, strings.TrimSpace(got))
		}
	}
	// No host socket connects, wherever it is: every socket file in the
	// sandbox's view is tried, the planted ones among them.
	socketsDontConnect(t, c, listeners)
	found := run(t, c, `find / \( -path /proc -o -path /sys \) -prune -o \( -name 'runboxd.sock' -o -name sandbox.json -o -name runboxd.log \) -print 2>/dev/null; true`)
	if strings.TrimSpace(found) != "" {
		t.Errorf("runbox state in the sandbox's view:\n%s", found)
	}
}

// plantSockets listens on unix sockets that any host user may connect to
// (mode 0777, in world-searchable directories): one in a fresh directory
// at a random place under /var/tmp, one under the host's /tmp, one in
// /run. Each accepts in the background and counts what connects.
func plantSockets(t *testing.T) map[string]*atomic.Int32 {
	t.Helper()
	tag := "rbsock" + strconv.Itoa(rand.IntN(1e9))
	var paths []string
	for _, parent := range []string{"/var/tmp", os.TempDir(), "/run"} {
		dir := filepath.Join(parent, tag, strconv.Itoa(rand.IntN(1e6)))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		os.Chmod(filepath.Join(parent, tag), 0o755)
		t.Cleanup(func() { os.RemoveAll(filepath.Join(parent, tag)) })
		paths = append(paths, filepath.Join(dir, "open.sock"))
	}
	accepted := map[string]*atomic.Int32{}
	for _, p := range paths {
		ln, err := net.Listen("unix", p)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ln.Close() })
		if err := os.Chmod(p, 0o777); err != nil {
			t.Fatal(err)
		}
		n := new(atomic.Int32)
		accepted[p] = n
		go func() {
			for {
				conn, err := ln.Accept()
				if err != nil {
					return
				}
				n.Add(1)
				conn.Close()
			}
		}()
	}
	return accepted
}

// socketsDontConnect tries, from inside the sandbox, to connect to every
// socket file in its view and to each planted path, and fails the test
// for each that connects or that a planted listener saw.
func socketsDontConnect(t *testing.T, c *client.Client, planted map[string]*atomic.Int32) {
	t.Helper()
	script := `import os, socket, sys
paths = set(sys.argv[1:])
for top, dirs, files in os.walk("/"):
    if top in ("/proc", "/sys"):
        dirs[:] = []
        continue
    for f in files:
        p = os.path.join(top, f)
        try:
            if os.path.stat.S_ISSOCK(os.lstat(p).st_mode):
                paths.add(p)
        except OSError:
            pass
for p in sorted(paths):
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(2)
    try:
        s.connect(p)
        print("connected", p)
    except OSError as e:
        print("refused", p, e.errno)
    finally:
        s.close()
`
	cmd := "python3 -"
	for p := range planted {
		cmd += " " + p
	}
	out := run(t, c, cmd+" <<'PROBE'\n"+script+"PROBE\n")
	tried := 0
	for line := range strings.Lines(out) {
		tried++
		if p, ok := strings.CutPrefix(strings.TrimSpace(line), "connected "); ok {
			t.Errorf("a command in the sandbox connected to the host's socket %s", p)
		}
	}
	for p, n := range planted {
		if n.Load() != 0 {
			t.Errorf("the planted socket %s accepted %d connections from the sandbox", p, n.Load())
		}
	}
	t.Logf("%d socket paths tried from inside the sandbox:\n%s", tried, out)
}

// users returns the first field of each line, joined.
func users(passwd string) string {
	var names []string
	for line := range strings.Lines(passwd) {
		if name, _, ok := strings.Cut(line, ":"); ok {
			names = append(names, name)
		}
	}
	return strings.Join(names, ",")
}

// TestHomeUnderWorkdirIsHidden is the escape the issue reported: the
// runbox home inside the workspace (runbox up run from ~ with the default
// ~/.runbox) showed another sandbox's socket — a host sandbox, whose
// runboxd is host root — and a command ran `touch` on the host through it.
// Now the home is masked inside the workspace too, and a socket reached
// anyway asks for the sandbox's secret.
func TestHomeUnderWorkdirIsHidden(t *testing.T) {
	needLocal(t)
	ws, err := os.MkdirTemp("", "rbw")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(ws) })
	home := filepath.Join(ws, "h") // short: socket paths
	bin := os.Getenv("RUNBOX_RUNBOXD")
	hp := &host.Provider{Home: home, Runboxd: bin}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	victim, err := hp.Create(ctx, runbox.SandboxSpec{Workdir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { hp.Remove(context.Background(), victim, true) })
	lp := &local.Provider{Home: home, Runboxd: bin}
	_, c := create(t, lp, runbox.SandboxSpec{Workdir: ws})
	rel, err := filepath.Rel(ws, victim.Detail["socket"])
	if err != nil {
		t.Fatal(err)
	}
	inside := filepath.Join(local.WorkspacePath, rel)
	if got := run(t, c, "ls -A /workspace/h | wc -l; test -e "+inside+" && echo visible; true"); strings.TrimSpace(got) != "0" {
		t.Errorf("the runbox home inside the workspace: %q, want it empty", got)
	}
	marker := filepath.Join("/var/tmp", "runbox-escape-"+strconv.Itoa(rand.IntN(1e9)))
	defer os.Remove(marker)
	probe := copyTestBinary(t, ws)
	run(t, c, "RUNBOX_PROVIDERTEST_ATTACKER=1 /workspace/"+probe+" "+inside+" "+marker+" || true")
	if _, err := os.Stat(marker); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a command in the local sandbox made %s on the host through the host sandbox's runboxd", marker)
	}
	// And the home itself is refused as a workspace.
	for _, wd := range []string{home, filepath.Join(home, "sandboxes")} {
		_, err := lp.Create(ctx, runbox.SandboxSpec{Workdir: wd})
		if !errors.Is(err, runbox.ErrInvalidSpec) || !strings.Contains(err.Error(), "runbox home") {
			t.Errorf("create with workdir %s: %v, want a refusal naming the runbox home", wd, err)
		}
	}
}

// TestAgentWorkloadsUnderMapping: what agents do in a sandbox still works
// with its root mapped to an unprivileged host uid: a package installed
// with apt-get (from the host's package lists, so no update is needed;
// RUNBOX_TEST_APT=1 makes it required, CI sets it) and one that ships a
// setuid file (sudo, as root: layerchmod), a Python package
// installed into the overlay with pip, git in the workspace, and a system
// user made with useradd.
func TestAgentWorkloadsUnderMapping(t *testing.T) {
	p := newProvider(t)
	ws := t.TempDir()
	_, c := create(t, p, runbox.SandboxSpec{Workdir: ws})
	t.Run("apt-get", func(t *testing.T) {
		if os.Getenv("RUNBOX_TEST_APT") != "1" {
			t.Skip("RUNBOX_TEST_APT=1 is not set: this case runs apt-get install in a sandbox and needs Debian's archive reachable; run `apt-get update`, then `RUNBOX_TEST_APT=1 go test -run 'TestAgentWorkloadsUnderMapping/apt-get' ./provider/local/` (.ci/run sets it)")
		}
		res := exec(t, c, "apt-get install -y -q sl >/tmp/apt.log 2>&1 || { tail -20 /tmp/apt.log; exit 1; }; /usr/games/sl -h >/dev/null 2>&1; test -x /usr/games/sl",
			client.WithTimeout(5*time.Minute))
		if res.ExitCode != 0 {
			t.Errorf("apt-get install in the sandbox: exit %d\n%s%s", res.ExitCode, res.Stdout, res.Stderr)
		}
	})
	t.Run("apt-get setuid", func(t *testing.T) {
		if os.Getenv("RUNBOX_TEST_APT") != "1" {
			t.Skip("RUNBOX_TEST_APT=1 is not set: this case runs apt-get install sudo in a sandbox and needs Debian's archive reachable; run `apt-get update`, then `RUNBOX_TEST_APT=1 go test -run 'TestAgentWorkloadsUnderMapping/apt-get' ./provider/local/` (.ci/run sets it)")
		}
		if os.Geteuid() != 0 {
			t.Skip("needs root: a rootless sandbox's root does not own the host's /usr/bin; run the tests as root (CI does)")
		}
		if _, err := os.Stat("/usr/bin/sudo"); err == nil {
			t.Skip("sudo is installed on this machine, whose root the sandbox sees: apt-get would install nothing; TestDpkgInstallsSetuid covers the same without it")
		}
		// sudo ships /usr/bin/sudo 4755: before layerchmod, dpkg stopped
		// on EPERM setting its mode.
		res := exec(t, c, "apt-get install -y -q sudo >/tmp/apt-sudo.log 2>&1 || { tail -20 /tmp/apt-sudo.log; exit 1; }; stat -c '%a %U' /usr/bin/sudo",
			client.WithTimeout(5*time.Minute))
		if res.ExitCode != 0 || string(res.Stdout) != "4755 root\n" {
			t.Errorf("apt-get install sudo in the sandbox: exit %d, %q, want \"4755 root\"\n%s", res.ExitCode, res.Stdout, res.Stderr)
		}
	})
	t.Run("pip", func(t *testing.T) {
		if exec(t, c, "python3 -m pip --version").ExitCode != 0 {
			t.Skip("the sandbox sees this machine's root, which has no pip for python3: apt-get install python3-pip to run this case")
		}
		// A wheel made by hand (no network, no build backend needed).
		mk := `import zipfile
with zipfile.ZipFile("/workspace/rbprobe-1.0-py3-none-any.whl", "w") as z:
    z.writestr("rbprobe.py", "VALUE = 42\n")
    z.writestr("rbprobe-1.0.dist-info/METADATA", "Metadata-Version: 2.1\nName: rbprobe\nVersion: 1.0\n")
    z.writestr("rbprobe-1.0.dist-info/WHEEL", "Wheel-Version: 1.0\nGenerator: hand\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
    z.writestr("rbprobe-1.0.dist-info/RECORD", "")
`
		run(t, c, "python3 -c '"+mk+"'")
		got := run(t, c, "python3 -m pip install -q --no-index --break-system-packages /workspace/rbprobe-1.0-py3-none-any.whl 2>&1 | grep -v WARNING; cd / && python3 -c 'import rbprobe; print(rbprobe.VALUE)'")
		if !strings.HasSuffix(got, "42\n") {
			t.Errorf("pip install into the overlay: %q", got)
		}
	})
	t.Run("git and useradd", func(t *testing.T) {
		got := run(t, c, `cd /workspace && git init -q r && cd r && git -c user.email=a@b -c user.name=a commit -q --allow-empty -m m && git log --oneline | wc -l
useradd -m agent && su agent -c 'id -un; touch ~/x && ls ~'`)
		if got != "1\nagent\nx\n" {
			t.Errorf("git and useradd in the sandbox: %q", got)
		}
	})
}
