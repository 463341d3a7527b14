package local_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/provider/local"
)

// TestDefaultLimits: a local sandbox created with no limits, as root, gets
// the defaults by construction: the memory and pids limits are in its real
// cgroup files, a fork bomb stops below the pids default, a write to /tmp
// past its size fails with ENOSPC, and inspect's detail shows them. Before
// the defaults, the fork bomb ran to its own cap (DefaultPids+200
// processes), /tmp took the whole write and the cgroup files held no limit.
func TestDefaultLimits(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("default limits need cgroups, which only root makes here")
	}
	p := newProvider(t)
	sb, c := create(t, p, runbox.SandboxSpec{})
	d := local.DefaultLimits()
	if d.Memory <= 0 || d.Memory > local.DefaultMaxMemory || d.Pids <= 0 || d.Pids > local.DefaultPids || d.TmpSize <= 0 || d.TmpSize > d.Memory/2 {
		t.Fatalf("DefaultLimits() = %+v", d)
	}

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	got, err := p.Get(ctx, sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"memory":     strconv.FormatInt(d.Memory, 10),
		"pids":       strconv.FormatInt(d.Pids, 10),
		"cpu_shares": strconv.FormatUint(d.CPUShares, 10),
		"tmp_size":   strconv.FormatInt(d.TmpSize, 10),
	}
	for k, v := range want {
		if got.Detail[k] != v {
			t.Errorf("inspect detail %s = %q, want %q", k, got.Detail[k], v)
		}
	}

	// The limits in the real cgroup files (v1 here; v2 on a unified host).
	memFile, pidsFile := cgroupFiles(t, sb.ID)
	if b, err := os.ReadFile(memFile); err != nil || strings.TrimSpace(string(b)) != want["memory"] {
		t.Errorf("%s = %q (%v), want %s", memFile, b, err, want["memory"])
	}
	if b, err := os.ReadFile(pidsFile); err != nil || strings.TrimSpace(string(b)) == "max" {
		t.Errorf("%s = %q (%v), want a limit", pidsFile, b, err)
	}

	// The fork bomb: children that sleep, forked until fork fails or the
	// bomb's own cap, well past the default, is reached.
	bombCap := d.Pids + 200
	bomb := fmt.Sprintf(`python3 -c '
import os, time
kids, e = [], 0
try:
    while len(kids) < %d:
        pid = os.fork()
        if pid == 0:
            time.sleep(600)
            os._exit(0)
        kids.append(pid)
except OSError as err:
    e = err.errno
procs = sum(1 for d in os.listdir("/proc") if d.isdigit())
for pid in kids:
    os.kill(pid, 9)
for pid in kids:
    os.waitpid(pid, 0)
print(len(kids), e, procs)
'`, bombCap)
	out := strings.Fields(run(t, c, bomb))
	if len(out) != 3 {
		t.Fatalf("fork bomb printed %q", out)
	}
	n, _ := strconv.ParseInt(out[0], 10, 64)
	if n >= d.Pids || out[1] != "11" { // EAGAIN
		t.Errorf("fork bomb forked %d processes (errno %s), want fewer than the default %d and EAGAIN", n, out[1], d.Pids)
	}
	if procs := mustInt(t, out[2]); procs > d.Pids+10 {
		t.Errorf("%d processes in the sandbox during the bomb, more than the default %d", procs, d.Pids)
	}

	// /tmp: a write past its size is ENOSPC, and /dev/shm is bounded too.
	over := d.TmpSize + 64<<20
	res := exec(t, c, fmt.Sprintf("head -c %d /dev/zero > /tmp/big; s=$?; stat -c %%s /tmp/big; rm -f /tmp/big; exit $s", over))
	if res.ExitCode == 0 || !strings.Contains(string(res.Stderr), "No space left on device") {
		t.Errorf("writing %d bytes to /tmp: exit %d, stderr %q, want ENOSPC", over, res.ExitCode, res.Stderr)
	}
	if size := mustInt(t, string(res.Stdout)); size > d.TmpSize {
		t.Errorf("/tmp took %d bytes, more than its %d", size, d.TmpSize)
	}
	for _, dir := range []string{"/tmp"} {
		size := run(t, c, "df -B1 --output=size "+dir+" | tail -1")
		if mustInt(t, size) > d.TmpSize {
			t.Errorf("%s is %s bytes, more than %d", dir, strings.TrimSpace(size), d.TmpSize)
		}
	}
}

// TestUnlimitedIsNoLimit: local.Unlimited (runbox up --memory 0 --pids 0)
// asks for no memory or pids limit and no bound on /tmp.
func TestUnlimitedIsNoLimit(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("default limits need cgroups, which only root makes here")
	}
	p := newProvider(t)
	sb, c := create(t, p, runbox.SandboxSpec{Memory: local.Unlimited, Pids: local.Unlimited})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	got, err := p.Get(ctx, sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"memory", "pids", "tmp_size"} {
		if v, ok := got.Detail[k]; ok {
			t.Errorf("inspect detail %s = %q, want none", k, v)
		}
	}
	if size := run(t, c, "df -B1 --output=size /tmp | tail -1"); mustInt(t, size) <= local.DefaultLimits().TmpSize {
		t.Errorf("/tmp is %s bytes although the memory is unlimited", strings.TrimSpace(size))
	}
}

// cgroupFiles returns the sandbox's memory limit and pids limit files.
func cgroupFiles(t *testing.T, id string) (memory, pids string) {
	t.Helper()
	v1 := filepath.Join("/sys/fs/cgroup/memory", "runbox-local", id)
	if _, err := os.Stat(v1); err == nil {
		return filepath.Join(v1, "commands", "memory.limit_in_bytes"),
			filepath.Join("/sys/fs/cgroup/pids", "runbox-local", id, "commands", "pids.max")
	}
	v2 := filepath.Join("/sys/fs/cgroup", "runbox-local", id)
	return filepath.Join(v2, "memory.max"), filepath.Join(v2, "pids.max")
}

func mustInt(t *testing.T, s string) int64 {
	t.Helper()
	n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
	if err != nil {
		t.Fatalf("not a number: %q", s)
	}
	return n
}
