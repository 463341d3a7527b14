package supervisor

import (
	"os"
	"strings"
	"testing"

	"github.com/runbox/runbox"
)

func ownOOMScoreAdj(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("/proc/self/oom_score_adj")
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// TestCommandOOMScoreAdj: commands, and what they fork, are the OOM
// killer's first choice (1000) by default, while the daemon keeps its own
// value; a negative setting leaves commands with the daemon's.
func TestCommandOOMScoreAdj(t *testing.T) {
	daemon := ownOOMScoreAdj(t)
	if daemon == "1000" {
		// Started at the top (as a command in a runbox sandbox, say): a
		// command's raised value could not be told from the daemon's. Only
		// a process with CAP_SYS_RESOURCE may lower its own.
		if err := os.WriteFile("/proc/self/oom_score_adj", []byte("999"), 0); err != nil {
			t.Skipf("this test process runs at oom_score_adj 1000, the highest, and cannot lower it (%v): a command's raised value could not be told from the daemon's. Run the test as root, or from a shell whose /proc/self/oom_score_adj is below 1000", err)
		}
		t.Cleanup(func() { os.WriteFile("/proc/self/oom_score_adj", []byte("1000"), 0) })
		daemon = ownOOMScoreAdj(t)
	}
	// The command waits for a line on stdin, sent once Start has returned,
	// when the daemon has set the value: then it reads its own (a builtin,
	// no fork) and forks a child that reads its. (A process it forked in
	// the instant before the daemon set the value would keep the daemon's.)
	const command = "read go; read v < /proc/self/oom_score_adj; echo $v; sh -c 'cat /proc/self/oom_score_adj'"
	runAfterStart := func(s *Supervisor) runbox.Result {
		t.Helper()
		e, _, err := s.Start(runbox.ExecSpec{Command: command, StdinStream: true})
		if err != nil {
			t.Fatal(err)
		}
		if err := e.WriteStdin([]byte("go\n")); err != nil {
			t.Fatal(err)
		}
		if err := e.CloseStdin(); err != nil {
			t.Fatal(err)
		}
		return waitResult(t, e)
	}
	// One supervisor at a time: each reaps every child of the process.
	withSup := func(cfg Config, f func(s *Supervisor)) {
		s, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer shutdown(t, s)
		f(s)
	}
	withSup(Config{CgroupMode: "off"}, func(s *Supervisor) {
		for range 10 {
			res := runAfterStart(s)
			if got := string(res.Stdout); got != "1000\n1000\n" || res.ExitCode != 0 {
				t.Fatalf("a command and its child: %q (exit %d, stderr %q), want 1000 and 1000", got, res.ExitCode, res.Stderr)
			}
		}
	})
	if got := ownOOMScoreAdj(t); got != daemon {
		t.Errorf("the daemon's own oom_score_adj changed from %s to %s", daemon, got)
	}
	withSup(Config{CgroupMode: "off", CommandOOMScoreAdj: -1}, func(s *Supervisor) {
		if got := string(runAfterStart(s).Stdout); got != daemon+"\n"+daemon+"\n" {
			t.Errorf("with CommandOOMScoreAdj -1: %q, want the daemon's %s twice", got, daemon)
		}
	})
}
