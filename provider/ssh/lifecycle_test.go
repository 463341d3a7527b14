package ssh_test

import (
	"bytes"
	"context"
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/internal/providertest"
	"github.com/runbox/runbox/provider/ssh"
)

// withEnvVar counts live processes whose environment holds kv exactly.
func withEnvVar(t testing.TB, kv string) int {
	t.Helper()
	ents, _ := os.ReadDir("/proc")
	n := 0
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/environ")
		if err != nil {
			continue
		}
		st, _ := os.ReadFile("/proc/" + e.Name() + "/stat")
		if i := bytes.LastIndexByte(st, ')'); i > 0 && len(st) > i+2 && st[i+2] == 'Z' {
			continue
		}
		for v := range bytes.SplitSeq(b, []byte{0}) {
			if string(v) == kv {
				n++
				break
			}
		}
	}
	return n
}

// running reports whether pid is a live process (not a zombie: a detached
// runboxd's parent is this machine's init, which reaps it when it will).
func running(pid int) bool {
	st, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(st, ')')
	return i > 0 && len(st) > i+2 && st[i+2] != 'Z' && st[i+2] != 'X'
}

// waitCount polls (up to a minute) until want processes carry m, and
// returns the last count: a background child execs its sleep some time
// after the shell that started it has returned.
func waitCount(m string, want int) int {
	deadline := time.Now().Add(time.Minute)
	for {
		n, _ := providertest.ProcCount(m)
		if n == want || time.Now().After(deadline) {
			return n
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// marker returns a unique `sleep N` command.
func marker() string { return "sleep 3137" + strconv.Itoa(100000+rand.IntN(899999)) }

// users are the logins the lifecycle tests run as: the non-root user, and
// root when the tests run as root.
func users(t *testing.T) []string {
	us := []string{nonRootUser(t)}
	if os.Geteuid() == 0 {
		us = append(us, "root")
	}
	return us
}

// `runbox rm` (Remove) leaves nothing on the host: every process the
// sandbox started (background and setsid ones included) is gone, runboxd
// is gone, its state directory is gone; only the cached binary stays. As
// root, runboxd contains execs in cgroups; as a plain user, it tracks them
// through /proc; the sandbox's detail says which.
func TestRemoveLeavesNothing(t *testing.T) {
	for _, u := range users(t) {
		t.Run(u, func(t *testing.T) {
			e := newEnv(t, u)
			p := e.provider(t, "rbx")
			sb := create(t, p, runbox.SandboxSpec{})
			mode := sb.Detail["containment"]
			t.Logf("%s: containment %s", u, mode)
			switch {
			case u != "root" && mode != "proc":
				t.Errorf("containment %q for a non-root user here, want proc", mode)
			case u == "root" && mode != "cgroup2" && os.Getenv("RUNBOX_REQUIRE_CGROUP2") == "1":
				t.Errorf("containment %q for root with RUNBOX_REQUIRE_CGROUP2=1, want cgroup2", mode)
			}
			c := newClient(t, p, sb)
			m := marker()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			res, err := c.Exec(ctx, fmt.Sprintf("%s & setsid %s & nohup %s >/dev/null 2>&1 & echo started", m, m, m))
			if err != nil || !res.OK() {
				t.Fatalf("exec: %+v, %v", res, err)
			}
			if n := waitCount(m, 3); n != 3 {
				t.Fatalf("%d background sleeps run, want 3", n)
			}
			pid, _ := strconv.Atoi(sb.Detail["pid"])
			dir := sb.Detail["remote_dir"]
			if _, err := os.Stat(dir); err != nil {
				t.Fatalf("remote state directory: %v", err)
			}
			t0 := time.Now()
			if err := p.Remove(ctx, sb, false); err != nil {
				t.Fatalf("remove: %v", err)
			}
			t.Logf("rm took %v", time.Since(t0))
			if n, _ := providertest.ProcCount(m); n != 0 {
				t.Errorf("%d sleep(s) survived rm", n)
			}
			if running(pid) {
				t.Errorf("runboxd (pid %d) survived rm", pid)
			}
			if n := withEnvVar(t, "RUNBOX_SANDBOX="+sb.ID); n != 0 {
				t.Errorf("%d process(es) of the sandbox survived rm", n)
			}
			if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("state directory %s after rm: %v", dir, err)
			}
			if _, err := os.Stat(sb.Detail["dir"]); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("local record %s after rm: %v", sb.Detail["dir"], err)
			}
			if _, err := os.Stat(sb.Detail["runboxd"]); err != nil {
				t.Errorf("the cached runboxd is gone: %v", err)
			}
			if _, err := p.Get(ctx, sb.ID); !errors.Is(err, runbox.ErrSandboxNotFound) {
				t.Errorf("get after rm: %v; want ErrSandboxNotFound", err)
			}
		})
	}
}

// A remote runboxd that dies is runbox.ErrSandboxLost (with the end of its
// log), never an exit code; Get says it is lost; Remove needs force, and
// then kills what the sandbox's commands left running and removes its
// state.
func TestRemoteDaemonKilled(t *testing.T) {
	e := newEnv(t, nonRootUser(t))
	p := e.provider(t, "rbx")
	sb := create(t, p, runbox.SandboxSpec{})
	c := newClient(t, p, sb)
	m := marker()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if res, err := c.Exec(ctx, "setsid "+m+" & echo ok"); err != nil || !res.OK() {
		t.Fatalf("exec: %+v, %v", res, err)
	}
	pid, _ := strconv.Atoi(sb.Detail["pid"])
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_, err := c.Exec(ctx, "echo again")
	t.Logf("exec after runboxd was killed: %v", err)
	if !errors.Is(err, runbox.ErrSandboxLost) || !strings.Contains(err.Error(), "is not running") {
		t.Fatalf("exec after runboxd died: %v; want ErrSandboxLost saying runboxd is not running", err)
	}
	got, err := p.Get(ctx, sb.ID)
	if err != nil || got.Alive || !strings.Contains(got.Detail["lost"], "not running") {
		t.Errorf("get: alive %v, lost %q, %v; want not alive, saying why", got.Alive, got.Detail["lost"], err)
	}
	if err := p.Remove(ctx, sb, false); !errors.Is(err, runbox.ErrSandboxLost) {
		t.Errorf("remove without force: %v; want ErrSandboxLost", err)
	}
	if n := waitCount(m, 1); n != 1 {
		t.Fatalf("%d orphaned sleep(s) before rm -f, want 1", n)
	}
	if err := p.Remove(ctx, sb, true); err != nil {
		t.Fatalf("remove with force: %v", err)
	}
	if n, _ := providertest.ProcCount(m); n != 0 {
		t.Errorf("%d orphaned sleep(s) survived rm -f", n)
	}
	if _, err := os.Stat(sb.Detail["remote_dir"]); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("state directory after rm -f: %v", err)
	}
}

// A runboxd built for another architecture than the host's is refused
// with both named, before anything is uploaded.
func TestArchMismatch(t *testing.T) {
	e := newEnv(t, nonRootUser(t))
	bin, err := providertest.BuildRunboxd()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	// e_machine, at offset 18 of the ELF header: claim another machine.
	other := elf.EM_AARCH64
	if elf.Machine(binary.LittleEndian.Uint16(b[18:])) == elf.EM_AARCH64 {
		other = elf.EM_X86_64
	}
	binary.LittleEndian.PutUint16(b[18:], uint16(other))
	path := filepath.Join(e.dir, "runboxd-other")
	if err := os.WriteFile(path, b, 0o755); err != nil {
		t.Fatal(err)
	}
	p := e.provider(t, "rbx")
	p.Runboxd = path
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err = p.Create(ctx, runbox.SandboxSpec{})
	t.Logf("create with a runboxd for %v: %v", other, err)
	if !errors.Is(err, ssh.ErrArchMismatch) || !strings.Contains(err.Error(), strings.TrimPrefix(other.String(), "EM_")) {
		t.Fatalf("create: %v; want ssh.ErrArchMismatch naming %v", err, other)
	}
	home := "/root"
	if e.user != "root" {
		home = "/home/" + e.user
	}
	if matches, _ := filepath.Glob(filepath.Join(home, ".cache/runbox/*runboxd-*")); len(matches) > 0 {
		for _, m := range matches {
			if fi, err := os.Stat(m); err == nil && fi.Size() == int64(len(b)) {
				if got, _ := os.ReadFile(m); bytes.Equal(got, b) {
					t.Errorf("the mismatched binary was uploaded to %s", m)
				}
			}
		}
	}
}

// A runboxd that cannot start fails Create with the reason from its log,
// and leaves no state on the host and no record here.
func TestDaemonThatCannotStart(t *testing.T) {
	e := newEnv(t, nonRootUser(t))
	p := e.provider(t, "rbx")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	_, err := p.Create(ctx, runbox.SandboxSpec{DaemonArgs: []string{"--cgroup=bogus"}})
	t.Logf("create: %v", err)
	if err == nil || !strings.Contains(err.Error(), "unknown cgroup mode") {
		t.Fatalf("create with a runboxd that exits at once: %v; want its log's reason", err)
	}
	if sbs, err := p.List(ctx); err != nil || len(sbs) != 0 {
		t.Errorf("list after the failed create: %v, %v; want none", sbs, err)
	}
	var rerr *runbox.Error
	if !errors.As(err, &rerr) || rerr.Sandbox == "" {
		t.Fatalf("the error %v does not name the sandbox", err)
	}
	home := "/root"
	if e.user != "root" {
		home = "/home/" + e.user
	}
	if _, err := os.Stat(filepath.Join(home, ".local/state/runbox/sandboxes", rerr.Sandbox)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("state of %s left on the host: %v", rerr.Sandbox, err)
	}
}
