package local_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/client"
	"github.com/runbox/runbox/provider/local"
)

// fuseAttackEntries is how many entries the attack's directory holds: the
// server builds a table of 8 bytes per entry for every handle of it that
// is read, and keeps it until the handle is closed.
const fuseAttackEntries = 20000

// TestFuseServerMemoryBound: a sandbox's FUSE server, which serves its
// root from outside it, is in a cgroup of the sandbox's from its start,
// with the sandbox's memory limit (at least local.FuseServerMinMemory),
// and a hostile command cannot make it grow past that. The command holds
// thousands of handles of a directory of 20,000 entries open, each read
// once after a change to the directory (so that the kernel's cached
// listing is stale and every read reaches the server, which keeps a table
// of the listing per handle). Before the server had a group of its own it
// was in the caller's cgroup, under no limit of the sandbox's, and this
// attack took it to 396 MiB here (and to 428 MiB with 2,400 handles of an
// 18,234-entry directory in a sandbox of --memory 256M whose commands
// stayed under 78 MiB). Now the kernel kills it at its
// limit (the server's VmRSS, sampled while the attack runs, and its
// cgroup's peak stay within it); runboxd still answers, the sandbox is not
// lost, an exec says why no command can start, and removal leaves no
// cgroup behind.
func TestFuseServerMemoryBound(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the FUSE root and its cgroup need root")
	}
	p := newProvider(t)
	dir := bigHostDir(t, fuseAttackEntries)
	sb, c := create(t, p, runbox.SandboxSpec{Memory: 64 << 20})
	bound := int64(max(64<<20, local.FuseServerMinMemory))
	pid := sb.Detail["fuse_server_pid"]
	if pid == "" {
		t.Fatalf("no FUSE server in the sandbox's detail %v", sb.Detail)
	}
	cg := fuseServerCgroupOf(sb.ID)

	// In the sandbox's group from its start: /proc/PID/cgroup names it.
	procCgroup, err := os.ReadFile(filepath.Join("/proc", pid, "cgroup"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range cg.procLines {
		if !strings.Contains(string(procCgroup), want+"\n") {
			t.Errorf("/proc/%s/cgroup = %q, want a line %q", pid, procCgroup, want)
		}
	}
	// And nothing of this process (which started it) is left there.
	tasks, _ := filepath.Glob("/proc/self/task/*/cgroup")
	for _, f := range tasks {
		if b, err := os.ReadFile(f); err == nil && strings.Contains(string(b), "fuse-server") {
			t.Errorf("%s = %q: a thread of the provider is in the FUSE server's group", f, b)
		}
	}
	if got := sb.Detail["fuse_server_memory"]; got != strconv.FormatInt(bound, 10) {
		t.Errorf("inspect detail fuse_server_memory = %q, want %d", got, bound)
	}
	if b, err := os.ReadFile(cg.limit); err != nil || strings.TrimSpace(string(b)) != strconv.FormatInt(bound, 10) {
		t.Errorf("%s = %q (%v), want %d", cg.limit, b, err, bound)
	}

	// The attack: handles enough for half as much again as the bound.
	handles := int(bound * 3 / 2 / (8 * fuseAttackEntries))
	sampler := sampleRSS(pid)
	res := longExec(t, c, fmt.Sprintf(`ulimit -n %d && python3 -c '
import os, sys
d, n = sys.argv[1], int(sys.argv[2])
fds = []
for i in range(n):
    fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
    os.listdir(fd)
    fds.append(fd)
    t = os.path.join(d, ".t")
    os.close(os.open(t, os.O_CREAT | os.O_WRONLY, 0o644))
    os.unlink(t)
print(len(fds))
' %s %d`, handles+64, dir, handles))
	peakRSS, hwm := sampler.stop()
	t.Logf("attack: %d handles asked; exit %d, stdout %q, stderr tail %q; the server's sampled VmRSS peak %d MiB, VmHWM %d MiB, bound %d MiB",
		handles, res.ExitCode, res.Stdout, tail(res.Stderr, 200), peakRSS>>20, hwm>>20, bound>>20)

	// Mapped files (the server's binary, libc, charged where they were
	// first read) count in VmRSS and not always in the group: a margin
	// for them.
	const mapped = 16 << 20
	if peakRSS > bound+mapped || hwm > bound+mapped {
		t.Errorf("the FUSE server's resident memory reached %d MiB (VmHWM %d MiB), past its bound of %d MiB", peakRSS>>20, hwm>>20, bound>>20)
	}
	if b, err := os.ReadFile(cg.peak); err != nil {
		t.Errorf("the server's cgroup peak: %v", err)
	} else if n := mustInt(t, string(b)); n > bound {
		t.Errorf("%s = %d, past the bound %d", cg.peak, n, bound)
	}
	// The attack reached the bound (else it proved nothing): the kernel
	// killed the server there, in its own group.
	if n := oomKillCount(t, cg.oom); n < 1 {
		t.Errorf("%s: oom_kill %d: the attack never reached the server's bound", cg.oom, n)
	}

	// runboxd answers, the sandbox is not lost, and an exec says why
	// nothing can start.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, spec := range []runbox.ExecSpec{{Command: "true"}, {Argv: []string{"ls", "/"}}} {
		_, err = c.ExecSpec(ctx, spec)
		if err == nil || errors.Is(err, runbox.ErrSandboxLost) || !errors.Is(err, runbox.ErrSpawn) || errors.Is(err, runbox.ErrCommandNotFound) {
			t.Errorf("exec %+v after the server's end: %v, want a spawn error (not a lost sandbox, not a missing command)", spec, err)
		} else if !strings.Contains(err.Error(), "root filesystem is gone") || !strings.Contains(err.Error(), "memory limit") {
			t.Errorf("exec %+v after the server's end: %v, want it to say the root filesystem is gone and why", spec, err)
		}
	}
	got, err := p.Get(ctx, sb.ID)
	if err != nil || !got.Alive {
		t.Errorf("get after the server's end: alive %v, %v; want alive", got.Alive, err)
	}

	// Removal removes the server's group.
	c.Close()
	if err := p.Remove(ctx, sb, true); err != nil {
		t.Fatalf("remove: %v", err)
	}
	for _, d := range cg.dirs {
		if _, err := os.Stat(d); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s is left after remove (%v)", d, err)
		}
	}
}

// TestFuseServerBoundNormalWork: under the least bound the FUSE server
// gets (a sandbox of --memory 64M: local.FuseServerMinMemory), ordinary
// work that goes through it runs to the end and the server is never
// killed: a walk of the whole host root (`find / -xdev`), the package
// database read as apt and dpkg read it, and a pip-like tree of a few
// thousand files written, listed and read back.
func TestFuseServerBoundNormalWork(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the FUSE root and its cgroup need root")
	}
	p := newProvider(t)
	sb, c := create(t, p, runbox.SandboxSpec{Memory: 64 << 20})
	cg := fuseServerCgroupOf(sb.ID)
	pid := sb.Detail["fuse_server_pid"]
	sampler := sampleRSS(pid)
	longRun := func(command string) string {
		t.Helper()
		res := longExec(t, c, command)
		if res.ExitCode != 0 {
			t.Fatalf("%q: exit %d, stderr %q", command, res.ExitCode, tail(res.Stderr, 500))
		}
		return string(res.Stdout)
	}
	if n := mustInt(t, longRun("find / -xdev 2>/dev/null | wc -l")); n < 1000 {
		t.Errorf("find / -xdev found %d names", n)
	}
	longRun("dpkg -l >/dev/null && cat /var/lib/dpkg/info/*.list >/dev/null && ls -R /usr/share/doc >/dev/null")
	longRun(`set -e
d=/usr/local/lib/python3/dist-packages
for i in $(seq 1 60); do
  mkdir -p $d/pkg$i/sub
  for j in $(seq 1 50); do echo "x = $i$j" > $d/pkg$i/sub/mod$j.py; done
done
test "$(find $d -name '*.py' | wc -l)" = 3000
cat $d/pkg*/sub/*.py | wc -l`)
	peakRSS, hwm := sampler.stop()
	t.Logf("the server's sampled VmRSS peak %d MiB, VmHWM %d MiB", peakRSS>>20, hwm>>20)
	if n := oomKillCount(t, cg.oom); n != 0 {
		t.Errorf("%s: oom_kill %d: normal work killed the FUSE server", cg.oom, n)
	}
	if err := unix.Kill(mustInt32(t, pid), 0); err != nil {
		t.Errorf("the FUSE server %s is gone: %v", pid, err)
	}
}

// fuseServerCgroup is where a sandbox's FUSE server's cgroup is on this
// host: the lines /proc/PID/cgroup has for it, its memory limit, peak and
// OOM-kill counter files, and its directories.
type fuseServerCgroup struct {
	procLines        []string
	limit, peak, oom string
	dirs             []string
}

func fuseServerCgroupOf(id string) fuseServerCgroup {
	v1 := filepath.Join("/sys/fs/cgroup/memory", "runbox-local", id)
	if _, err := os.Stat(v1); err == nil {
		mem := filepath.Join(v1, "fuse-server")
		return fuseServerCgroup{
			procLines: []string{
				"memory:/runbox-local/" + id + "/fuse-server",
				"pids:/runbox-local/" + id + "/fuse-server",
			},
			limit: filepath.Join(mem, "memory.limit_in_bytes"),
			peak:  filepath.Join(mem, "memory.max_usage_in_bytes"),
			oom:   filepath.Join(mem, "memory.oom_control"),
			dirs:  []string{mem, filepath.Join("/sys/fs/cgroup/pids", "runbox-local", id, "fuse-server")},
		}
	}
	v2 := filepath.Join("/sys/fs/cgroup", "runbox-local", id+".fuse-server")
	return fuseServerCgroup{
		procLines: []string{"0::/runbox-local/" + id + ".fuse-server"},
		limit:     filepath.Join(v2, "memory.max"),
		peak:      filepath.Join(v2, "memory.peak"),
		oom:       filepath.Join(v2, "memory.events"),
		dirs:      []string{v2},
	}
}

// oomKillCount reads the oom_kill counter of a memory.oom_control (v1) or
// memory.events (v2) file.
func oomKillCount(t *testing.T, path string) int64 {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Errorf("%v", err)
		return -1
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "oom_kill "); ok {
			return mustInt(t, v)
		}
	}
	t.Errorf("%s has no oom_kill counter: %q", path, b)
	return -1
}

// bigHostDir makes, on the host's root filesystem (the sandbox's lower
// layer: a separate /var/tmp would not be in it), a world-readable
// directory of n empty files, removed when the test ends.
func bigHostDir(t *testing.T, n int) string {
	t.Helper()
	var root unix.Stat_t
	if err := unix.Stat("/", &root); err != nil {
		t.Fatal(err)
	}
	parent := ""
	for _, d := range []string{"/var/tmp", "/var", "/"} {
		var st unix.Stat_t
		if unix.Stat(d, &st) == nil && st.Dev == root.Dev {
			parent = d
			break
		}
	}
	dir, err := os.MkdirTemp(parent, "runbox-fusemem-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		f, err := os.OpenFile(filepath.Join(dir, fmt.Sprintf("entry-%06d", i)), os.O_CREATE|os.O_WRONLY, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	return dir
}

// rssSampler samples a process's VmRSS and VmHWM until stopped.
type rssSampler struct {
	done     chan struct{}
	wg       sync.WaitGroup
	rss, hwm int64
}

// sampleRSS samples pid's resident memory every 10 ms, keeping the
// largest values seen, until the process is gone or stop is called.
func sampleRSS(pid string) *rssSampler {
	s := &rssSampler{done: make(chan struct{})}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for {
			rss, hwm, ok := readRSS(pid)
			if !ok {
				return
			}
			s.rss, s.hwm = max(s.rss, rss), max(s.hwm, hwm)
			select {
			case <-s.done:
				return
			case <-tick.C:
			}
		}
	}()
	return s
}

// stop ends the sampling and returns the largest VmRSS and VmHWM seen, in
// bytes.
func (s *rssSampler) stop() (rss, hwm int64) {
	close(s.done)
	s.wg.Wait()
	return s.rss, s.hwm
}

// readRSS reads VmRSS and VmHWM of pid, in bytes; ok is false once the
// process is gone.
func readRSS(pid string) (rss, hwm int64, ok bool) {
	f, err := os.Open(filepath.Join("/proc", pid, "status"))
	if err != nil {
		return 0, 0, false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, _ := strings.Cut(sc.Text(), ":")
		kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		if err != nil {
			continue
		}
		switch k {
		case "VmRSS":
			rss = kb << 10
		case "VmHWM":
			hwm = kb << 10
		}
	}
	return rss, hwm, rss > 0
}

// longExec runs command in the sandbox, with room for the slow work
// these tests do through the FUSE server on a loaded machine, and returns
// its result.
func longExec(t *testing.T, c *client.Client, command string) runbox.Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	res, err := c.Exec(ctx, command, client.WithTimeout(15*time.Minute))
	if err != nil {
		t.Fatalf("%q: %v", command, err)
	}
	return res
}

func mustInt32(t *testing.T, s string) int {
	t.Helper()
	return int(mustInt(t, s))
}

func tail(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}
