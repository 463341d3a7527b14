package supervisor

import (
	"bufio"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/runbox/runbox"
)

// pidsV1Group makes a fresh cgroup v1 pids group for the test, or skips
// where there is none to make (RUNBOX_REQUIRE_LOCAL=1 makes that a
// failure: the local provider's pids limit relies on it).
func pidsV1Group(t testing.TB) string {
	t.Helper()
	mnt := ""
	if f, err := os.Open("/proc/self/mountinfo"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			pre, post, _ := strings.Cut(sc.Text(), " - ")
			if f := strings.Fields(post); len(f) == 3 && f[0] == "cgroup" && strings.Contains(","+f[2]+",", ",pids,") {
				mnt = strings.Fields(pre)[4]
			}
		}
		f.Close()
	}
	if mnt == "" || os.Geteuid() != 0 {
		if os.Getenv("RUNBOX_REQUIRE_LOCAL") == "1" {
			t.Fatal("a cgroup v1 pids hierarchy and root are required (RUNBOX_REQUIRE_LOCAL=1)")
		}
		t.Skip("needs root and a cgroup v1 pids hierarchy (/sys/fs/cgroup/pids): run the tests as root on such a machine (CI does)")
	}
	dir := filepath.Join(mnt, "runbox-test-"+marker())
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for range 100 {
			if err := os.Remove(dir); err == nil {
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
		b, _ := os.ReadFile(filepath.Join(dir, "tasks"))
		t.Errorf("cgroup %s left behind, holding tasks %q", dir, b)
	})
	return dir
}

// TestExecsStartInSpawnThreadCgroups: given a v1 group's tasks file, every
// exec starts in that group, and of the daemon only its spawn thread is in
// it — so a pids limit there counts the commands and one thread, not the
// threads the daemon needs to serve.
func TestExecsStartInSpawnThreadCgroups(t *testing.T) {
	group := pidsV1Group(t)
	tasks, err := os.OpenFile(filepath.Join(group, "tasks"), os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer tasks.Close()
	s, err := New(Config{CgroupMode: "off", ExecCgroupsV1: []*os.File{tasks}})
	if err != nil {
		t.Fatal(err)
	}
	defer shutdown(t, s)

	for range 3 {
		res := run(t, s, runbox.ExecSpec{Argv: []string{"cat", filepath.Join(group, "tasks")}})
		if res.ExitCode != 0 {
			t.Fatalf("cat tasks: %+v", res)
		}
		ids := strings.Fields(string(res.Stdout))
		ours := 0
		for _, id := range ids {
			if _, err := os.Stat("/proc/self/task/" + id); err == nil {
				ours++
			}
		}
		// The spawn thread, and cat itself.
		if len(ids) != 2 || ours != 1 {
			t.Errorf("tasks in the group while cat runs: %v (%d of the daemon's), want the spawn thread and cat", ids, ours)
		}
	}
	threads, _ := os.ReadDir("/proc/self/task")
	if len(threads) < 2 {
		t.Fatalf("the daemon has %d threads", len(threads))
	}

	// A limit there is the commands' limit: pids.max 4 is the spawn
	// thread and three processes.
	if err := os.WriteFile(filepath.Join(group, "pids.max"), []byte("4"), 0); err != nil {
		t.Fatal(err)
	}
	res := run(t, s, runbox.ExecSpec{Argv: []string{"sh", "-c", "sleep 0.3 & sleep 0.3 & sleep 0.3 & wait; echo done"}})
	if !strings.Contains(string(res.Stderr), "fork") && !strings.Contains(string(res.Stderr), "Resource temporarily unavailable") {
		t.Errorf("three children of a command under a limit of 3 processes: %+v, want a failed fork", res)
	}
	for i := range 3 {
		if res := run(t, s, runbox.ExecSpec{Argv: []string{"echo", strconv.Itoa(i)}}); res.ExitCode != 0 {
			t.Errorf("echo after the limit was reached: %+v", res)
		}
	}
}

// BenchmarkSpawnThread: an exec of /bin/true forked on the caller's thread
// and on the spawn thread (a channel round trip to another thread more), in
// the same run.
func BenchmarkSpawnThread(b *testing.B) {
	for _, onThread := range []bool{false, true} {
		name := map[bool]string{false: "caller-thread", true: "spawn-thread"}[onThread]
		b.Run(name, func(b *testing.B) {
			cfg := Config{CgroupMode: "off"}
			if onThread {
				tasks, err := os.OpenFile(filepath.Join(pidsV1Group(b), "tasks"), os.O_WRONLY, 0)
				if err != nil {
					b.Fatal(err)
				}
				defer tasks.Close()
				cfg.ExecCgroupsV1 = []*os.File{tasks}
			}
			s, err := New(cfg)
			if err != nil {
				b.Fatal(err)
			}
			defer s.Shutdown(context.Background(), time.Second)
			for b.Loop() {
				e, _, err := s.Start(runbox.ExecSpec{Argv: []string{"/bin/true"}})
				if err != nil {
					b.Fatal(err)
				}
				<-e.Done()
				if res := e.Result(); res.ExitCode != 0 {
					b.Fatalf("true: %+v", res)
				}
			}
		})
	}
}

// TestSpawnSetupFailureFailsNew: a spawn thread whose setup fails (a
// commands' view that cannot be built) stops the supervisor from starting,
// with the setup's error, rather than serving commands without it.
func TestSpawnSetupFailureFailsNew(t *testing.T) {
	boom := errors.New("no view")
	s, err := New(Config{CgroupMode: "off", SpawnSetup: func(string) error { return boom }})
	if err == nil {
		shutdown(t, s)
		t.Fatal("New succeeded with a failing SpawnSetup")
	}
	if !errors.Is(err, boom) {
		t.Errorf("New: %v; want it to wrap the setup's error", err)
	}
	var mode string
	s, err = New(Config{CgroupMode: "off", SpawnSetup: func(m string) error { mode = m; return nil }})
	if err != nil {
		t.Fatal(err)
	}
	defer shutdown(t, s)
	if mode != ModeProc {
		t.Errorf("SpawnSetup got mode %q, want %q", mode, ModeProc)
	}
	if r := run(t, s, runbox.ExecSpec{Command: "echo ok"}); string(r.Stdout) != "ok\n" {
		t.Errorf("exec through the spawn thread: %q", r.Stdout)
	}
}
