package host_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/client"
	"github.com/runbox/runbox/internal/processrecord"
)

// TestRemoveLostSandboxKillsLeftovers: runboxd dies by SIGKILL while an
// exec's tree runs (a background sleep, one that ignores SIGTERM, one in a
// new session, one double-forked away and, as root in cgroup2 mode, one
// that moved itself out of the exec's cgroup); `Remove(force)` must leave
// none of them alive, counted in /proc, and must not touch a process of the
// same user that is not the sandbox's. Twenty rounds per containment mode,
// each with a random delay before the kill.
func TestRemoveLostSandboxKillsLeftovers(t *testing.T) {
	for _, mode := range []string{"auto", "off"} {
		t.Run("cgroup="+mode, func(t *testing.T) {
			p := newProvider(t)
			// A process of this user, not the sandbox's: it must survive.
			bystander := exec.Command("sleep", strconv.Itoa(31338000+rand.IntN(999)))
			if err := bystander.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { bystander.Process.Kill(); bystander.Wait() })
			for round := range 20 {
				lostRound(t, p, mode, round)
			}
			if processGone(bystander.Process.Pid) {
				t.Errorf("a process of this user outside every sandbox was killed")
			}
		})
	}
}

// lostRound is one round of TestRemoveLostSandboxKillsLeftovers.
func lostRound(t *testing.T, p interface {
	runbox.Provider
	Dialer(runbox.Sandbox) runbox.Dialer
}, mode string, round int) {
	sb, err := p.Create(t.Context(), runbox.SandboxSpec{DaemonArgs: []string{"--cgroup", mode}})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	home := filepath.Dir(filepath.Dir(sb.Detail["dir"]))
	rec, err := processrecord.Read(filepath.Join(home, "sandboxes", sb.ID))
	if err != nil {
		t.Fatal(err)
	}
	if rec.DaemonMark == "" || (mode == "off") != (rec.Cgroup == "") {
		t.Fatalf("record: marker %q, cgroup %q: want runboxd's marker, and its cgroup in cgroup2 mode only", rec.DaemonMark, rec.Cgroup)
	}
	m := strconv.Itoa(31339000 + rand.IntN(999))
	want := 4
	escape := ""
	if root := cgroup2Root(); rec.Cgroup != "" && os.Geteuid() == 0 && root != "" {
		escape = fmt.Sprintf("(echo $BASHPID > %s && exec sleep %s) & ", filepath.Join(root, "cgroup.procs"), m)
		want++
	}
	c := client.New(p.Dialer(sb), client.WithSandboxName(sb.ID))
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := c.Exec(ctx, escape+"sleep "+m+" & (trap '' TERM; exec sleep "+m+") & setsid sleep "+m+" & (sleep "+m+" &) ; wait")
		done <- err
	}()
	for deadline := time.Now().Add(time.Minute); len(sleepers(m)) < want; {
		if time.Now().After(deadline) {
			t.Fatalf("round %d: %d of %d `sleep %s` started", round, len(sleepers(m)), want, m)
		}
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(time.Duration(rand.IntN(30)) * time.Millisecond)
	syscall.Kill(rec.Pid, syscall.SIGKILL)
	if err := p.Remove(ctx, sb, true); err != nil {
		t.Fatalf("round %d: remove: %v", round, err)
	}
	if err := <-done; err == nil {
		t.Errorf("round %d: the exec returned no error though runboxd was killed", round)
	}
	if left := sleepers(m); len(left) > 0 {
		t.Errorf("round %d (cgroup %s): %d of %d `sleep %s` survive runboxd's death and rm -f", round, mode, len(left), want, m)
		for _, pid := range left {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	if rec.Cgroup != "" {
		if _, err := os.Stat(rec.Cgroup); !os.IsNotExist(err) {
			t.Errorf("round %d: runboxd's cgroup %s is still there (%v)", round, rec.Cgroup, err)
		}
	}
}
