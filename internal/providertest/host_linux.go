package providertest

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/client"
)

// ProcFixture returns a Fixture for a provider whose sandboxes' processes
// are this machine's processes with the same pids (the host provider): it
// counts survivors and zombies in this machine's /proc, finds runboxd by the
// pid its Info reports, and kills it with a signal.
func ProcFixture(p runbox.Provider, spec runbox.SandboxSpec) Fixture {
	var pids sync.Map // sandbox id → daemon pid
	pid := func(t testing.TB, sb runbox.Sandbox) int {
		t.Helper()
		if v, ok := pids.Load(sb.ID); ok {
			return v.(int)
		}
		n := DaemonPid(t, p, sb)
		pids.Store(sb.ID, n)
		return n
	}
	return Fixture{
		Provider: p,
		Spec:     spec,
		CountProcesses: func(t testing.TB, _ runbox.Sandbox, marker string) int {
			t.Helper()
			n, err := ProcCount(marker)
			if err != nil {
				t.Fatalf("count processes: %v", err)
			}
			return n
		},
		Zombies: func(t testing.TB, sb runbox.Sandbox) int {
			t.Helper()
			n, err := ProcZombies(pid(t, sb))
			if err != nil {
				t.Fatalf("count zombies: %v", err)
			}
			return n
		},
		KillDaemon: func(t testing.TB, sb runbox.Sandbox) {
			t.Helper()
			if err := syscall.Kill(pid(t, sb), syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
				t.Fatalf("kill runboxd of %s: %v", sb.ID, err)
			}
		},
		DaemonRSS: func(t testing.TB, sb runbox.Sandbox) int64 {
			t.Helper()
			n, err := ProcRSS(pid(t, sb))
			if err != nil {
				t.Fatalf("daemon rss: %v", err)
			}
			return n
		},
	}
}

// DaemonPid returns the pid of sb's runboxd on this machine: the one its
// provider recorded (Detail["pid"]), else the one runboxd reports. The two
// differ in a pid namespace, where runboxd is PID 1 and a signal meant for
// it must not go to this machine's init.
func DaemonPid(t testing.TB, p runbox.Provider, sb runbox.Sandbox) int {
	t.Helper()
	if n, err := strconv.Atoi(sb.Detail["pid"]); err == nil && n > 0 {
		return n
	}
	c := client.New(p.Dialer(sb), client.WithSandboxName(sb.ID))
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	info, err := c.Info(ctx)
	if err != nil {
		t.Fatalf("info of sandbox %s: %v", sb.ID, err)
	}
	if info.Pid <= 1 {
		t.Fatalf("sandbox %s: runboxd reports pid %d, which is not a pid on this machine", sb.ID, info.Pid)
	}
	return info.Pid
}
