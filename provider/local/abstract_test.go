package local_test

import (
	"fmt"
	"math/rand/v2"
	"net"
	"strings"
	"testing"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/internal/landlock"
)

// TestAbstractSocketsOutOfReach: a command in a default local sandbox (on
// the host's network namespace) cannot connect to an abstract unix socket
// the host listens on at a fresh random name, nor signal a process outside
// the sandbox; a socket of its own still works. Before the Landlock scope,
// it connected.
func TestAbstractSocketsOutOfReach(t *testing.T) {
	if landlock.ABI() < landlock.ScopeABI {
		t.Skipf("this kernel's Landlock ABI is %d, scoping needs %d (Linux 6.12)", landlock.ABI(), landlock.ScopeABI)
	}
	name := fmt.Sprintf("rbabs-%08x", rand.Uint32())
	ln, err := net.Listen("unix", "@"+name)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan struct{}, 1)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Write([]byte("host-secret\n"))
			c.Close()
			select {
			case accepted <- struct{}{}:
			default:
			}
		}
	}()
	p := newProvider(t)
	_, c := create(t, p, runbox.SandboxSpec{})
	probe := `import socket, sys
def dial(n):
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(10)
    try:
        s.connect("\0" + n)
        return "connected"
    except OSError as e:
        return "refused:" + type(e).__name__
own = socket.socket(socket.AF_UNIX); own.bind("\0own-` + name + `"); own.listen(1)
print(dial("` + name + `"))
print(dial("own-` + name + `"))`
	got := run(t, c, "python3 -c '"+probe+"'")
	t.Logf("probe: %q", got)
	lines := strings.Split(strings.TrimSpace(got), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "refused:") {
		t.Errorf("the host's abstract socket from the sandbox: %q, want refused", got)
	}
	if len(lines) == 2 && !strings.HasPrefix(lines[1], "connected") {
		t.Errorf("the sandbox's own abstract socket: %q, want connected", lines[1])
	}
	select {
	case <-accepted:
		t.Errorf("the host's listener accepted a connection from the sandbox")
	default:
	}
	// Nor a signal to a process outside (this test's own pid, not in the
	// sandbox's pid namespace anyway: its runboxd, PID 1, is outside the
	// commands' domain).
	if res := exec(t, c, "kill -0 1"); res.ExitCode == 0 {
		t.Errorf("kill -0 1 from a command succeeded: runboxd is outside the commands' domain")
	}
}
