package processrecord

import (
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/runbox/runbox/internal/strangertest"
)

// TestExecDataOfAProcessMidExec: right after os/exec's Start returns, the
// child may still be inside its exec, with an empty cmdline and environ
// in /proc (6-9% of 500 starts here, more under load). ReadExecData must
// still see what the exec was given: survivor counts find processes by
// their arguments, and the sweep of a dead runboxd's leftovers by the
// mark in their environment, so one read empty is one that survives.
// Before, a plain read missed them.
func TestExecDataOfAProcessMidExec(t *testing.T) {
	for range 300 {
		arg := strconv.Itoa(1_000_000 + rand.IntN(1_000_000))
		mark := "RUNBOX_DAEMON=" + strangertest.RandomHex(16)
		cmd := exec.Command("sleep", arg)
		cmd.Env = append(os.Environ(), mark)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		args, aerr := ReadExecData(cmd.Process.Pid, "cmdline", time.Second)
		env, eerr := ReadExecData(cmd.Process.Pid, "environ", time.Second)
		cmd.Process.Kill()
		cmd.Wait()
		if aerr != nil || eerr != nil {
			t.Fatal(aerr, eerr)
		}
		if got := string(args); got != "sleep\x00"+arg+"\x00" {
			t.Fatalf("cmdline of a sleep just started: %q", got)
		}
		if !strings.Contains(string(env), "\x00"+mark+"\x00") {
			t.Fatalf("environ of a sleep just started lacks %s: %q", mark, env)
		}
	}
}

// TestExecDataOfAZombieIsEmpty: a zombie's cmdline is empty, and reading
// it does not wait.
func TestExecDataOfAZombieIsEmpty(t *testing.T) {
	cmd := exec.Command("sh", "-c", "exit 0")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	for {
		if st, _, err := ProcStat(cmd.Process.Pid); err != nil || st == 'Z' {
			break
		}
		time.Sleep(time.Millisecond)
	}
	if b, err := ReadExecData(cmd.Process.Pid, "cmdline", time.Hour); err != nil || len(b) != 0 {
		t.Errorf("zombie's cmdline: %q, %v", b, err)
	}
}
