package providertest

import (
	"bytes"
	"net"
	"os"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// EndpointPid returns the pid of the process serving the unix socket sock
// (SO_PEERCRED), or 0 when nothing accepts on it: a remote sandbox's
// persistent endpoint (internal/endpoint), as the ssh and kubernetes
// endpoint tests find it.
func EndpointPid(t testing.TB, sock string) int {
	t.Helper()
	c, err := net.Dial("unix", sock)
	if err != nil {
		return 0
	}
	defer c.Close()
	raw, err := c.(*net.UnixConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var cred *syscall.Ucred
	raw.Control(func(fd uintptr) {
		cred, err = syscall.GetsockoptUcred(int(fd), syscall.SOL_SOCKET, syscall.SO_PEERCRED)
	})
	if err != nil {
		t.Fatal(err)
	}
	return int(cred.Pid)
}

// WaitGone waits for pid to exit, or to be a zombie with every thread
// gone, failing t after a minute (a failure, not a hang); what says what
// should have ended it. A zombie leader alone is not enough: a killed
// process's other threads may still be ending, its descriptors (a
// listening socket that still queues connections, then resets them) open
// until the last one has.
func WaitGone(t testing.TB, pid int, what string) {
	t.Helper()
	for deadline := time.Now().Add(60 * time.Second); ; {
		if syscall.Kill(pid, 0) != nil {
			return
		}
		proc := "/proc/" + strconv.Itoa(pid)
		st, _ := os.ReadFile(proc + "/stat")
		tasks, _ := os.ReadDir(proc + "/task")
		if bytes.Contains(st, []byte(") Z")) && len(tasks) <= 1 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: endpoint pid %d still runs", what, pid)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
