package local_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	osexec "os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/client"
	"github.com/runbox/runbox/internal/providertest"
	"github.com/runbox/runbox/provider/local"
)

// TestIsolation checks what a command inside sees: only the sandbox's
// processes with runboxd as PID 1, its own hostname, a root whose writes go
// to the overlay and not the host, the workspace shared with the host, and
// no host mount beyond those it was given.
func TestIsolation(t *testing.T) {
	p := newProvider(t)
	ws := t.TempDir()
	sb, c := create(t, p, runbox.SandboxSpec{Name: "iso-" + strconv.Itoa(rand.IntN(1e6)), Workdir: ws})

	if got := run(t, c, "cat /proc/1/cmdline | tr '\\0' ' '"); !strings.Contains(got, "runboxd jail") {
		t.Errorf("PID 1 is %q, want runboxd", got)
	}
	// The sandbox's processes: runboxd, this shell, and what it runs.
	pids := strings.Fields(run(t, c, "ls /proc | grep -E '^[0-9]+$'"))
	if len(pids) > 6 {
		t.Errorf("%d processes visible in the sandbox, want only its own: %v", len(pids), pids)
	}
	if got := strings.TrimSpace(run(t, c, "hostname")); got != sb.Name {
		t.Errorf("hostname %q, want the sandbox's name %q", got, sb.Name)
	}
	if got := strings.TrimSpace(run(t, c, "pwd")); got != local.WorkspacePath {
		t.Errorf("working directory %q, want %s", got, local.WorkspacePath)
	}

	marker := "runbox-iso-" + strconv.Itoa(rand.IntN(1e9))
	run(t, c, "echo in-sandbox > /etc/"+marker+" && cat /etc/"+marker)
	if _, err := os.Stat("/etc/" + marker); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("/etc/%s written in the sandbox shows on the host: %v", marker, err)
	}
	if got := run(t, c, "cat /etc/"+marker); got != "in-sandbox\n" {
		t.Errorf("/etc/%s does not persist in the sandbox: %q", marker, got)
	}
	run(t, c, "echo from-sandbox > /workspace/out")
	if b, err := os.ReadFile(filepath.Join(ws, "out")); err != nil || string(b) != "from-sandbox\n" {
		t.Errorf("workspace write on the host: %q, %v", b, err)
	}

	// Mount points: only what the sandbox was given.
	allowed := []string{"/", "/proc", "/dev", "/dev/pts", "/dev/shm", "/tmp", "/sys", "/sys/fs/cgroup",
		"/sys/fs/cgroup/unified", local.WorkspacePath,
		// What hides the host: homes of the sandbox's own, a fresh /run,
		// masked container engines' state.
		"/root", "/home", "/run",
		// runboxd's spill files, on a directory of the sandbox's own
		// rather than through its FUSE root.
		local.SpillDir}
	for _, d := range []string{"null", "zero", "full", "random", "urandom", "tty"} {
		allowed = append(allowed, "/dev/"+d)
	}
	for line := range strings.Lines(run(t, c, "cat /proc/self/mountinfo")) {
		f := strings.Fields(line)
		// /proc's own masks (hidden or read-only parts) are mounts too.
		// So are the empty read-only tmpfs masks over the host's secrets.
		mask := strings.Contains(line, " - tmpfs tmpfs ro,size=4k,")
		if len(f) > 4 && !slices.Contains(allowed, f[4]) && !mask && !strings.HasPrefix(f[4], "/proc/") && !strings.HasPrefix(f[4], "/etc/ssh/ssh_host_") {
			t.Errorf("unexpected mount in the sandbox: %s", strings.TrimSpace(line))
		}
	}
	home := filepath.Dir(filepath.Dir(sb.Detail["dir"]))
	if got := run(t, c, "ls -A "+home+" 2>/dev/null | wc -l"); strings.TrimSpace(got) != "0" {
		t.Errorf("the runbox home %s is visible in the sandbox (%s entries)", home, strings.TrimSpace(got))
	}
}

// TestNoMachineWidePowers: commands in a sandbox run as root, but without
// the capabilities that reach past it: no device nodes, no mounts, no
// kernel parameters.
func TestNoMachineWidePowers(t *testing.T) {
	p := newProvider(t)
	_, c := create(t, p, runbox.SandboxSpec{})
	for _, cmd := range []string{
		"mknod /tmp/disk b 8 0",                   // a block device to mount the host's disk
		"mount -t tmpfs none /mnt",                // any mount (CAP_SYS_ADMIN)
		"echo 1 > /proc/sys/vm/overcommit_memory", // a kernel parameter
		"hostname other",                          // fine in its UTS namespace, but needs CAP_SYS_ADMIN
	} {
		if res := exec(t, c, cmd); res.ExitCode == 0 {
			t.Errorf("%q succeeded in the sandbox", cmd)
		}
	}
	// What commands do need still works (a signal to a process of their
	// own; runboxd, PID 1, is outside their Landlock domain: security rule
	// 6, TestAbstractSocketsOutOfReach).
	run(t, c, "id -u && chown nobody /tmp && touch /etc/ok && { sleep 30 & kill -0 $! && kill $!; }")
}

// TestCommandsStayInTheirCgroup: a command cannot move itself out of its
// exec's cgroup, neither through the sandbox's cgroup tree (read-only to
// commands) nor through runboxd's own handle on it (out of their reach), so
// a timeout still ends it with everything it started.
func TestCommandsStayInTheirCgroup(t *testing.T) {
	p := newProvider(t)
	for _, hostRoot := range []bool{false, true} {
		t.Run(fmt.Sprintf("hostroot=%v", hostRoot), func(t *testing.T) {
			if hostRoot && os.Geteuid() != 0 {
				t.Skip("--host-root needs root: run the tests as root (CI does)")
			}
			_, c := create(t, p, runbox.SandboxSpec{HostRoot: hostRoot})
			testStaysInCgroup(t, c)
		})
	}
	// Without cgroups (a rootless sandbox, or --cgroup=off) runboxd tracks
	// an exec's processes through /proc: the same escapes must not work.
	t.Run("proc", func(t *testing.T) {
		_, c := create(t, p, runbox.SandboxSpec{DaemonArgs: []string{"--cgroup=off"}})
		testStaysInCgroup(t, c)
	})
}

func testStaysInCgroup(t *testing.T, c *client.Client) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	info, err := c.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	const leave = `echo $$ > /sys/fs/cgroup/unified/cgroup.procs; for f in /proc/1/fd/*; do echo $$ > "$f/cgroup.procs"; done`
	t.Logf("runboxd tracks execs in %s mode", info.CgroupMode)
	switch info.CgroupMode {
	case "cgroup2":
		got := run(t, c, "sh -c '"+leave+" 2>/dev/null; cat /proc/self/cgroup'")
		if !strings.Contains(got, "0::/runboxd-") {
			t.Errorf("after trying to leave, the command's cgroup is %q, want its exec's", strings.TrimSpace(got))
		}
	case "proc":
		// No exec cgroup to leave: the escapee below also drops its
		// environment (env -i), where runboxd's per-exec marker lives, and
		// leaves its process group and session (setsid), the ways out of
		// /proc tracking there are.
	default:
		t.Fatalf("runboxd reports cgroup mode %q", info.CgroupMode)
	}
	m := "leave" + strconv.Itoa(rand.IntN(1e9))
	// setsid: not in the exec's process group either; env -i: without the
	// environment it inherited.
	res := exec(t, c, "setsid env -i sh -c ': "+m+"; "+leave+" 2>/dev/null; sleep 300; true' & sleep 300",
		client.WithTimeout(2*time.Second), client.WithGrace(time.Second))
	if !res.TimedOut {
		t.Errorf("exec with a 2s timeout: %+v, want timed out", res)
	}
	if !poll(10*time.Second, func() bool { return countMarker(t, m) == 0 }) {
		t.Errorf("%d processes that tried to leave their cgroup survived the timeout", countMarker(t, m))
	}
}

// TestNetworkNone: with network "none" the sandbox has only loopback, and
// loopback works.
func TestNetworkNone(t *testing.T) {
	p := newProvider(t)
	_, c := create(t, p, runbox.SandboxSpec{Network: local.NetworkNone})
	got := run(t, c, "tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '")
	if strings.TrimSpace(got) != "lo" {
		t.Errorf("interfaces with network none: %q, want only lo", got)
	}
	// Loopback is up: a listener and a connection to it.
	got = run(t, c, `python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(); socket.create_connection(s.getsockname()); print("connected")'`)
	if strings.TrimSpace(got) != "connected" {
		t.Errorf("loopback connection with network none: %q", got)
	}
	// And nothing else is reachable.
	got = run(t, c, `python3 -c 'import socket
try:
    socket.create_connection(("1.1.1.1", 53), timeout=5)
    print("reached")
except OSError as e:
    print("unreachable", e.errno)'`)
	if !strings.HasPrefix(got, "unreachable") {
		t.Errorf("connection off the sandbox with network none: %q", got)
	}
}

// TestSignalsFromInside: no signal a command sends to PID 1 ends the
// sandbox, and the commands themselves start with default dispositions.
func TestSignalsFromInside(t *testing.T) {
	p := newProvider(t)
	_, c := create(t, p, runbox.SandboxSpec{})
	run(t, c, "for s in $(seq 1 64); do kill -$s 1 2>/dev/null; done; sleep 0.2")
	if got := run(t, c, "echo still here; grep SigIgn /proc/self/status"); !strings.Contains(got, "still here") || !strings.Contains(got, "0000000000000000") {
		t.Errorf("after every signal to PID 1: %q; want the sandbox serving, nothing ignored", got)
	}
}

// TestForkBomb: a fork bomb under a pids limit is stopped with everything
// it made, and the sandbox serves the next command at once — whether the
// bomb's leader stays (and times out) or returns at once (and the exec that
// started it is cancelled).
func TestForkBomb(t *testing.T) {
	p := newProvider(t)
	_, c := create(t, p, runbox.SandboxSpec{Pids: 256})
	bomb := func(marker, tail string) string { return ": " + marker + "; f(){ f|f& }; f" + tail }

	m := "bomb" + strconv.Itoa(rand.IntN(1e9))
	res := exec(t, c, bomb(m, "; sleep 60"), client.WithTimeout(3*time.Second), client.WithGrace(time.Second))
	if !res.TimedOut {
		t.Errorf("fork bomb with a 3s timeout: %+v, want timed out", res)
	}
	if n := countMarker(t, m); n != 0 {
		t.Errorf("%d fork bomb processes survived the timeout", n)
	}
	// The daemon's own clock says whether it answered within a second.
	// A minute bounds a hang; the claim is that it works, not how fast.
	if res := exec(t, c, "echo ok", client.WithTimeout(time.Minute)); res.ExitCode != 0 || string(res.Stdout) != "ok\n" {
		t.Errorf("echo ok after the bomb: %+v", res)
	}

	// As written, the bomb's leader returns at once and the bomb runs on in
	// the background, as a background job does; cancelling its exec ends it.
	m = "bomb" + strconv.Itoa(rand.IntN(1e9))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	proc, err := c.Start(ctx, bomb(m, ""), client.WithTimeout(3*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := proc.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.Cancel(ctx, proc.ID(), time.Second); err != nil {
		t.Fatalf("cancel the bomb's exec: %v", err)
	}
	if !poll(10*time.Second, func() bool { return countMarker(t, m) == 0 }) {
		t.Errorf("%d fork bomb processes survived cancelling their exec", countMarker(t, m))
	}
	// A minute bounds a hang; the claim is that it works, not how fast.
	if res := exec(t, c, "echo ok", client.WithTimeout(time.Minute)); res.ExitCode != 0 || string(res.Stdout) != "ok\n" {
		t.Errorf("echo ok after the cancelled bomb: %+v", res)
	}
}

// TestMemoryLimit: a command that outgrows the memory limit is killed and
// reported OOMKilled; the sandbox keeps serving.
func TestMemoryLimit(t *testing.T) {
	p := newProvider(t)
	_, c := create(t, p, runbox.SandboxSpec{Memory: 256 << 20})
	// bash holds the whole 1 GiB in a variable.
	res := exec(t, c, `x=$(head -c 1073741824 /dev/zero | tr '\0' a); echo ${#x}`)
	if !res.OOMKilled || res.ExitCode != 137 {
		t.Errorf("1 GiB under a 256 MiB limit: exit %d signal %q oom_killed %v, want 137, KILL, true", res.ExitCode, res.Signal, res.OOMKilled)
	}
	if got := run(t, c, "echo ok"); got != "ok\n" {
		t.Errorf("echo ok after the OOM kill: %q", got)
	}
	if res := exec(t, c, "exit 137"); res.OOMKilled {
		t.Error("a command exiting 137 by itself is reported OOMKilled")
	}
}

// hostState is what a sandbox could leave behind on the host.
type hostState struct {
	mounts  int // mounts under the home
	cgroups []string
	entries []string // under the home's sandboxes directory
}

func snapshot(t testing.TB, home string) hostState {
	t.Helper()
	var s hostState
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(strings.NewReader(string(b)))
	for sc.Scan() {
		if strings.Contains(sc.Text(), home) {
			s.mounts++
		}
	}
	for _, root := range []string{"/sys/fs/cgroup/unified", "/sys/fs/cgroup/memory", "/sys/fs/cgroup/pids", "/sys/fs/cgroup/cpu", "/sys/fs/cgroup"} {
		ents, _ := os.ReadDir(filepath.Join(root, "runbox-local"))
		for _, e := range ents {
			if e.IsDir() {
				s.cgroups = append(s.cgroups, filepath.Join(root, "runbox-local", e.Name()))
			}
		}
	}
	ents, _ := os.ReadDir(filepath.Join(home, "sandboxes"))
	for _, e := range ents {
		if !strings.HasPrefix(e.Name(), ".") {
			s.entries = append(s.entries, e.Name())
		}
	}
	return s
}

// TestRemoveLeavesNothing: 50 create/exec/rm cycles, with limits (so v1
// cgroups exist) and a background process running at rm, leave no mount,
// cgroup, state directory or process behind.
func TestRemoveLeavesNothing(t *testing.T) {
	p := newProvider(t)
	before := snapshot(t, p.Home)
	m := "rmcycle" + strconv.Itoa(rand.IntN(1e9))
	cycles := 50
	if testing.Short() {
		cycles = 5
	}
	var servers []int // the FUSE servers of the sandboxes' roots
	for i := range cycles {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		sb, err := p.Create(ctx, runbox.SandboxSpec{Workdir: t.TempDir(), Memory: 512 << 20, Pids: 512})
		if err != nil {
			cancel()
			t.Fatalf("cycle %d: create: %v", i, err)
		}
		if pid, err := strconv.Atoi(sb.Detail["fuse_server_pid"]); err == nil {
			servers = append(servers, pid)
		}
		c := client.New(p.Dialer(sb))
		if _, err := c.Exec(ctx, "sleep 3"+m+" >/dev/null 2>&1 & echo hi > /etc/cycle"); err != nil {
			t.Fatalf("cycle %d: exec: %v", i, err)
		}
		c.Close()
		if err := p.Remove(ctx, sb, false); err != nil {
			t.Fatalf("cycle %d: remove: %v", i, err)
		}
		cancel()
	}
	after := snapshot(t, p.Home)
	if after.mounts != before.mounts || !slices.Equal(after.cgroups, before.cgroups) || !slices.Equal(after.entries, before.entries) {
		t.Errorf("after %d cycles the host has changed:\nbefore %+v\nafter  %+v", cycles, before, after)
	}
	if n := countMarker(t, m); n != 0 {
		t.Errorf("%d background processes survived their sandbox's removal", n)
	}
	if os.Geteuid() == 0 && len(servers) != cycles {
		t.Errorf("%d of %d sandboxes said which FUSE server serves their root", len(servers), cycles)
	}
	// Each ends with its sandbox's last process (it may take a moment to
	// read the unmount).
	for _, pid := range servers {
		if !poll(10*time.Second, func() bool {
			comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
			return err != nil || strings.TrimSpace(string(comm)) != local.FuseServer
		}) {
			t.Errorf("the FUSE server %d outlived its sandbox", pid)
		}
	}
}

// TestRootless: as an unprivileged user, `runbox run -- id -u` works and
// prints 0 (root in the sandbox's user namespace), through the CLI binary.
func TestRootless(t *testing.T) {
	needLocal(t)
	if os.Geteuid() != 0 {
		t.Skip("needs root to switch to an unprivileged user: run the tests as root (CI does)")
	}
	dir, home, ws := nobodyDirs(t)
	cmd := osexec.Command(filepath.Join(dir, "runbox"), "run", "--", "id -u; echo hi > /workspace/f")
	cmd.Dir = ws
	cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + home, "RUNBOX_HOME=" + home,
		"RUNBOX_RUNBOXD=" + filepath.Join(dir, "runboxd"), "DOCKER_HOST=unix://" + filepath.Join(home, "no-docker.sock")}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
	out, err := cmd.CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "0" {
		t.Fatalf("runbox run -- id -u as uid %d: %v\n%s", nobody, err, out)
	}
	if b, err := os.ReadFile(filepath.Join(ws, "f")); err != nil || string(b) != "hi\n" {
		t.Errorf("workspace write as uid %d: %q, %v", nobody, b, err)
	}
	if ents, _ := os.ReadDir(filepath.Join(home, "sandboxes")); len(ents) > 1 { // the lock file
		t.Errorf("run left sandbox state behind: %v", ents)
	}
}

// TestImageRefused: the local provider has no images and says what to use.
func TestImageRefused(t *testing.T) {
	p := newProvider(t)
	_, err := p.Create(context.Background(), runbox.SandboxSpec{Image: "debian:12"})
	if !errors.Is(err, errors.ErrUnsupported) || !strings.Contains(err.Error(), "--rootfs") {
		t.Errorf("create with an image: %v; want ErrUnsupported pointing to --rootfs", err)
	}
}

func countMarker(t testing.TB, marker string) int {
	t.Helper()
	n, err := providertest.ProcCount(marker)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// poll calls cond until it holds or d has passed.
func poll(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestLostSandbox: a sandbox whose runboxd was killed is listed as lost,
// fails execs with ErrSandboxLost, and is removed (no force needed: nothing
// of it outlives its PID 1) with its cgroups and state.
func TestLostSandbox(t *testing.T) {
	p := newProvider(t)
	before := snapshot(t, p.Home)
	m := "lost" + strconv.Itoa(rand.IntN(1e9))
	sb, c := create(t, p, runbox.SandboxSpec{Memory: 256 << 20})
	run(t, c, "sleep 3"+m+" >/dev/null 2>&1 &")
	pid, err := strconv.Atoi(sb.Detail["pid"])
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if !poll(10*time.Second, func() bool {
		got, err := p.Get(ctx, sb.ID)
		return err == nil && !got.Alive
	}) {
		t.Fatal("the sandbox is not reported lost after its runboxd was killed")
	}
	if _, err := c.Exec(ctx, "true"); !errors.Is(err, runbox.ErrSandboxLost) {
		t.Errorf("exec in a lost sandbox: %v, want ErrSandboxLost", err)
	}
	if n := countMarker(t, m); n != 0 {
		t.Errorf("%d processes outlived the sandbox's PID 1", n)
	}
	got, _ := p.Get(ctx, sb.ID)
	if err := p.Remove(ctx, got, false); err != nil {
		t.Fatalf("remove a lost sandbox: %v", err)
	}
	if after := snapshot(t, p.Home); !slices.Equal(after.cgroups, before.cgroups) || !slices.Equal(after.entries, before.entries) {
		t.Errorf("a removed lost sandbox left something:\nbefore %+v\nafter  %+v", before, after)
	}
}

// TestCPULimit: --cpus becomes a CFS quota on the sandbox's cgroup, which
// a command inside the sandbox is subject to.
func TestCPULimit(t *testing.T) {
	p := newProvider(t)
	sb, c := create(t, p, runbox.SandboxSpec{CPUs: 0.5})
	var quota string
	if v1 := sb.Detail["cgroup1"]; v1 != "" {
		b, err := os.ReadFile(filepath.Join("/sys/fs/cgroup/cpu", v1, "cpu.cfs_quota_us"))
		if err != nil {
			t.Fatal(err)
		}
		quota = strings.TrimSpace(string(b))
	} else {
		b, err := os.ReadFile(filepath.Join(sb.Detail["cgroup2"], "cpu.max"))
		if err != nil {
			t.Fatal(err)
		}
		quota = strings.Fields(string(b))[0]
	}
	if quota != "50000" {
		t.Errorf("CFS quota for 0.5 CPUs: %q, want 50000 per 100000", quota)
	}
	// A busy loop inside gets about half a CPU: its CPU time over 1 s of
	// wall time stays well under a full CPU's.
	out := run(t, c, `python3 -c '
import time, resource
end = time.monotonic() + 1
while time.monotonic() < end: pass
print(resource.getrusage(resource.RUSAGE_SELF).ru_utime)'`)
	used, err := strconv.ParseFloat(strings.TrimSpace(out), 64)
	if err != nil {
		t.Fatalf("cpu time %q: %v", out, err)
	}
	if used > 0.8 {
		t.Errorf("a busy loop used %.2fs of CPU in 1s under a 0.5 CPU limit", used)
	}
}

// TestOddHomePath: a runbox home whose path has characters overlayfs's
// option parser treats specially (',' and ':') still works.
func TestOddHomePath(t *testing.T) {
	p := newProvider(t)
	odd, err := os.MkdirTemp("", "rb,l:")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(odd) }) // after the sandbox's removal
	q := &local.Provider{Home: odd, Runboxd: p.Runboxd}
	_, c := create(t, q, runbox.SandboxSpec{})
	if got := run(t, c, "echo x > /etc/odd && cat /etc/odd"); got != "x\n" {
		t.Errorf("overlay write with home %s: %q", odd, got)
	}
}

// TestRelativeFilePaths: a relative path in a file call means the same as
// in a command: relative to the workspace.
func TestRelativeFilePaths(t *testing.T) {
	p := newProvider(t)
	ws := t.TempDir()
	_, c := create(t, p, runbox.SandboxSpec{Workdir: ws})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := c.WriteFile(ctx, "rel.txt", strings.NewReader("relative\n")); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(ws, "rel.txt")); err != nil || string(b) != "relative\n" {
		t.Errorf("rel.txt written through the files API: %q, %v; want it in the workspace", b, err)
	}
	if got := run(t, c, "cat rel.txt"); got != "relative\n" {
		t.Errorf("cat rel.txt in the sandbox: %q", got)
	}
}
