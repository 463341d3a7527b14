package local_test

import (
	"context"
	"errors"
	"os"
	osexec "os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/provider/local"
)

// needRootDisk skips t unless it runs as root: only root loop-mounts a
// sandbox's disk.
func needRootDisk(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("a disk bound needs root (a loop-mounted filesystem); rootless sandboxes have none (TestRootlessDiskRefused)")
	}
}

// loopsUnder returns the loop devices whose backing file lies under dir,
// as the kernel lists them (/sys/block/loop*/loop/backing_file).
func loopsUnder(t *testing.T, dir string) []string {
	t.Helper()
	if real, err := filepath.EvalSymlinks(dir); err == nil {
		dir = real
	}
	files, _ := filepath.Glob("/sys/block/loop*/loop/backing_file")
	var devs []string
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err == nil && strings.HasPrefix(strings.TrimSpace(string(b)), dir+"/") {
			devs = append(devs, f+": "+strings.TrimSpace(string(b)))
		}
	}
	return devs
}

// mountsUnder counts this mount namespace's mounts under dir.
func mountsUnder(t *testing.T, dir string) int {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 4 && strings.HasPrefix(f[4], dir+"/") {
			n++
		}
	}
	return n
}

// allocated is what path takes on the host's disk, in bytes.
func allocated(t *testing.T, path string) int64 {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	return st.Blocks * 512
}

// TestDiskBound: a sandbox with --disk 64M that writes 200 MiB into its
// overlay gets ENOSPC, and so does a write to its private /root (the same
// filesystem: the bound holds for every place it writes outside its
// workspace, not for a list of them); the sandbox lives on (the next
// command runs, and writes again once it has deleted the file), the host
// gave it no more than the bound, and its workspace is not bounded. On the
// old code the 200 MiB were written (the attack wrote 2 GiB).
func TestDiskBound(t *testing.T) {
	needRootDisk(t)
	p := newProvider(t)
	const bound = 64 << 20
	sb, c := create(t, p, runbox.SandboxSpec{Disk: bound})
	if sb.Detail["disk"] != strconv.Itoa(bound) {
		t.Errorf("detail disk = %q, want %d", sb.Detail["disk"], bound)
	}
	res := exec(t, c, "dd if=/dev/zero of=/var/tmp/fill bs=1M count=200 2>&1; echo dd=$?; df -B1 --output=avail / | tail -1; dd if=/dev/zero of=/root/more bs=1M count=8 2>&1; echo root=$?")
	out := string(res.Stdout)
	if !strings.Contains(out, "No space left on device") || strings.Contains(out, "dd=0") || strings.Contains(out, "root=0") {
		t.Fatalf("a 200 MiB write into a 64 MiB disk, then one into /root, did not both fail with ENOSPC:\n%s", out)
	}
	image := filepath.Join(sb.Detail["dir"], "disk.img")
	if got := allocated(t, image); got > bound {
		t.Errorf("the sandbox's disk takes %d bytes on the host, more than its %d bound", got, bound)
	}
	if got := strings.TrimSpace(run(t, c, "rm /var/tmp/fill && echo again > /etc/again && cat /etc/again")); got != "again" {
		t.Errorf("after ENOSPC, the next command said %q", got)
	}
	// The workspace is the user's own directory: not bounded.
	if got := run(t, c, "dd if=/dev/zero of=/workspace/big bs=1M count=80 2>/dev/null && stat -c %s /workspace/big"); strings.TrimSpace(got) != strconv.Itoa(80<<20) {
		t.Errorf("a write of 80 MiB into the workspace: %q", got)
	}
}

// TestDefaultDiskBound: a default sandbox, as root, has a disk of
// min(DefaultMaxDisk, half the free space) (the detail says so, and the
// sandbox's root reports that size), and an allocation past it is ENOSPC
// (fallocate, so the test does not write gigabytes).
func TestDefaultDiskBound(t *testing.T) {
	needRootDisk(t)
	p := newProvider(t)
	sb, c := create(t, p, runbox.SandboxSpec{})
	disk, err := strconv.ParseInt(sb.Detail["disk"], 10, 64)
	if err != nil || disk < local.MinDisk || disk > local.DefaultMaxDisk {
		t.Fatalf("detail disk = %q, want a default bound up to %d", sb.Detail["disk"], int64(local.DefaultMaxDisk))
	}
	if d, err := local.DefaultDisk(p.Home); err != nil || (d < local.DefaultMaxDisk && d > disk+disk/10) {
		t.Errorf("DefaultDisk = %d, %v; the sandbox got %d", d, err, disk)
	}
	size := mustInt(t, run(t, c, "df -B1 --output=size / | tail -1"))
	if size > disk || size < disk*9/10 {
		t.Errorf("the sandbox's root is %d bytes, want about its %d bound", size, disk)
	}
	out := string(exec(t, c, "fallocate -l "+strconv.FormatInt(disk+(1<<20), 10)+" /var/tmp/big 2>&1; echo rc=$?").Stdout)
	if !strings.Contains(out, "No space left on device") {
		t.Errorf("fallocate past the default bound:\n%s", out)
	}
	if got := run(t, c, "rm -f /var/tmp/big && fallocate -l 32M /var/tmp/ok && echo ok"); strings.TrimSpace(got) != "ok" {
		t.Errorf("an allocation within the bound: %q", got)
	}
}

// TestDiskUnlimited: local.Unlimited (--disk 0) is no bound: no disk
// detail, and the sandbox may write as much as the host's filesystem has
// free. Its FUSE root's layers are still on a filesystem of their own (an
// image the size of the home's filesystem: see TestFuseRootHostInodeReuse
// for why), sparse and mounted with discard: what the sandbox writes and
// deletes goes back to the host (on the old code's image without discard,
// the deleted 64 MiB stayed allocated in the image).
func TestDiskUnlimited(t *testing.T) {
	needRootDisk(t)
	p := newProvider(t)
	sb, c := create(t, p, runbox.SandboxSpec{Disk: local.Unlimited})
	if sb.Detail["disk"] != "" {
		t.Errorf("detail disk = %q, want none", sb.Detail["disk"])
	}
	var st syscall.Statfs_t
	if err := syscall.Statfs(p.Home, &st); err != nil {
		t.Fatal(err)
	}
	image := filepath.Join(sb.Detail["dir"], "disk.img")
	fi, err := os.Stat(image)
	if err != nil {
		t.Fatalf("the FUSE root's layers have no image of their own: %v", err)
	}
	if host := int64(st.Blocks) * st.Bsize; fi.Size() != host {
		t.Errorf("an unbounded sandbox's image is %d bytes, want the host filesystem's %d", fi.Size(), host)
	}
	if free, avail := int64(st.Bavail)*st.Bsize, mustInt(t, run(t, c, "df -B1 --output=avail / | tail -1")); avail < free {
		t.Errorf("an unbounded sandbox may write %d bytes, less than the %d free on the host's filesystem", avail, free)
	}
	before := allocated(t, image)
	run(t, c, "dd if=/dev/urandom of=/var/tmp/big bs=1M count=64 status=none && sync")
	if grown := allocated(t, image) - before; grown < 64<<20 {
		t.Fatalf("the image grew by %d bytes for 64 MiB written", grown)
	}
	run(t, c, "rm /var/tmp/big && sync")
	if kept := allocated(t, image) - before; kept > 8<<20 {
		t.Errorf("the image keeps %d bytes of a deleted 64 MiB file: not given back to the host", kept)
	}
}

// TestDiskNoLeak: 20 create/write/remove cycles, and a sandbox whose
// runboxd was killed (removed without force, as runbox rm does), leave no
// loop device and no mount behind, and no image.
func TestDiskNoLeak(t *testing.T) {
	needRootDisk(t)
	p := newProvider(t)
	cycles := 20
	if testing.Short() {
		cycles = 3
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	for i := range cycles + 1 {
		sb, c := create(t, p, runbox.SandboxSpec{Disk: 32 << 20})
		run(t, c, "echo hi > /etc/cycle && dd if=/dev/zero of=/var/tmp/f bs=1M count=8 2>/dev/null")
		if l := loopsUnder(t, p.Home); len(l) != 1 {
			t.Fatalf("cycle %d: loop devices of the home: %v, want the sandbox's one", i, l)
		}
		c.Close()
		if i == cycles {
			// The crash path: runboxd is gone when rm comes.
			pid, _ := strconv.Atoi(sb.Detail["pid"])
			if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			if !poll(10*time.Second, func() bool { return syscall.Kill(pid, 0) != nil }) {
				t.Fatalf("runboxd %d outlived SIGKILL", pid)
			}
		}
		if err := p.Remove(ctx, sb, false); err != nil {
			t.Fatalf("cycle %d: remove: %v", i, err)
		}
		if l := loopsUnder(t, p.Home); len(l) != 0 {
			t.Fatalf("cycle %d: loop devices left after remove: %v", i, l)
		}
		if n := mountsUnder(t, p.Home); n != 0 {
			t.Fatalf("cycle %d: %d mounts left under the home after remove", i, n)
		}
		if _, err := os.Stat(sb.Detail["dir"]); err == nil {
			t.Fatalf("cycle %d: the sandbox's directory is still there", i)
		}
	}
}

// TestDiskTooSmall: a bound below MinDisk is an invalid spec.
func TestDiskTooSmall(t *testing.T) {
	needRootDisk(t)
	p := newProvider(t)
	_, err := p.Create(context.Background(), runbox.SandboxSpec{Workdir: t.TempDir(), Disk: 1 << 20})
	if !errors.Is(err, runbox.ErrInvalidSpec) {
		t.Fatalf("create with a 1 MiB disk: %v, want an invalid spec", err)
	}
	if l := loopsUnder(t, p.Home); len(l) != 0 {
		t.Errorf("loop devices left: %v", l)
	}
}

// TestRootlessDiskRefused: without root there is no loop-mounted
// filesystem to bound a sandbox's disk, so `runbox run --disk 64M` as an
// unprivileged user fails (exit 125, saying why) instead of making an
// unbounded sandbox; without --disk the same user's sandbox runs (its disk
// use is not bounded, as docs/security.md says).
func TestRootlessDiskRefused(t *testing.T) {
	needLocal(t)
	if os.Geteuid() != 0 {
		t.Skip("needs root to switch to an unprivileged user: run the tests as root (CI does)")
	}
	dir, home, ws := nobodyDirs(t)
	runAs := func(args ...string) (string, int) {
		cmd := osexec.Command(filepath.Join(dir, "runbox"), args...)
		cmd.Dir = ws
		cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + home, "RUNBOX_HOME=" + home,
			"RUNBOX_RUNBOXD=" + filepath.Join(dir, "runboxd"), "DOCKER_HOST=unix://" + filepath.Join(home, "no-docker.sock")}
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
		out, _ := cmd.CombinedOutput()
		return string(out), cmd.ProcessState.ExitCode()
	}
	out, code := runAs("run", "--disk", "64M", "--", "echo made")
	if code != 125 || strings.Contains(out, "made") || !strings.Contains(out, "needs root") {
		t.Errorf("rootless run --disk 64M: exit %d, want 125 and a refusal:\n%s", code, out)
	}
	if out, code := runAs("run", "--", "echo made"); code != 0 || strings.TrimSpace(out) != "made" {
		t.Errorf("rootless run without --disk: exit %d:\n%s", code, out)
	}
}
