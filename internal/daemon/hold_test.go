package daemon_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/client"
)

// holderSocketEnv makes the test binary (TestMain, through holdAndWait) a
// process that takes a hold on the daemon at that socket, says "held" on
// stdout and waits to be killed.
const holderSocketEnv = "RUNBOX_TEST_HOLDER_SOCKET"

// holdAndWait is the holder process of TestHoldEndsWithItsProcess (the
// test binary run again, os/exec's helper-process pattern): it takes a hold
// on the daemon at socket, says "held" and exits only when the hold is
// lost.
func holdAndWait(socket string) {
	c := client.DialUnix(socket)
	h, err := c.Hold(context.Background(), "test holder")
	if err != nil {
		fmt.Println("hold:", err)
		os.Exit(1)
	}
	fmt.Println("held")
	<-h.Lost()
	os.Exit(2)
}

// stopDaemon stops the daemon at socket with the Shutdown RPC and waits
// for Serve to return.
func stopDaemon(t *testing.T, socket string, served <-chan error) {
	t.Helper()
	c := client.DialUnix(socket)
	defer c.Close()
	if err := c.Shutdown(context.Background(), 200*time.Millisecond); err != nil {
		t.Errorf("shutdown: %v", err)
	}
	if err := <-served; err != nil {
		t.Errorf("serve: %v", err)
	}
}

// cpuTicks sums utime and stime of pid from /proc/PID/stat.
func cpuTicks(t *testing.T, pid int) int {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		t.Fatalf("stat of %d: %v", pid, err)
	}
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
	u, _ := strconv.Atoi(f[11])
	s, _ := strconv.Atoi(f[12])
	return u + s
}

// assertFrozen checks that the busy loop pid gains no CPU tick in 300 ms.
func assertFrozen(t *testing.T, what string, pid int) {
	t.Helper()
	c1 := cpuTicks(t, pid)
	time.Sleep(300 * time.Millisecond)
	if c2 := cpuTicks(t, pid); c1 != c2 {
		t.Fatalf("%s: the loop is running (%d then %d ticks), want it frozen", what, c1, c2)
	}
}

// assertRunning waits (up to 20 s) for the busy loop pid to gain ticks.
func assertRunning(t *testing.T, what string, pid int) {
	t.Helper()
	c1 := cpuTicks(t, pid)
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if cpuTicks(t, pid) > c1 {
			return
		}
	}
	t.Fatalf("%s: the loop does not run, want it running", what)
}

// busyLoop starts a spinning exec through c and returns its pid, once it
// runs; the exec is cancelled at cleanup.
func busyLoop(t *testing.T, ctx context.Context, c *client.Client) int {
	t.Helper()
	p, err := c.Start(ctx, "while :; do :; done")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = c.Cancel(context.Background(), p.ID(), runbox.NoGrace)
		_, _ = p.Wait(context.Background())
	})
	assertRunning(t, "start", p.Pid())
	return p.Pid()
}

// wantInfo checks what Info says over the wire.
func wantInfo(t *testing.T, ctx context.Context, c *client.Client, what string, paused bool, holds int) {
	t.Helper()
	info, err := c.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.Paused != paused || info.Holds != holds {
		t.Fatalf("%s: Info says paused %v, %d holds; want %v, %d", what, info.Paused, info.Holds, paused, holds)
	}
}

// TestHoldOverTheWire: a hold freezes the commands until released, a
// user's Resume during it does not thaw them and a Pause during it stands
// after; a new exec meanwhile is refused with runbox.ErrSandboxPaused; and
// a hold ends with its client's connection (Client.Close, no Release).
func TestHoldOverTheWire(t *testing.T) {
	_, socket, served := serve(t)
	defer stopDaemon(t, socket, served)
	ctx := testCtx(t)
	c := client.DialUnix(socket)
	defer c.Close()
	pid := busyLoop(t, ctx, c)

	h, err := c.Hold(ctx, "test")
	if err != nil {
		t.Fatal(err)
	}
	wantInfo(t, ctx, c, "held", false, 1)
	assertFrozen(t, "held", pid)
	if _, err := c.Exec(ctx, "true"); !errors.Is(err, runbox.ErrSandboxPaused) {
		t.Errorf("exec while held: %v, want ErrSandboxPaused", err)
	}
	if err := c.Pause(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.Resume(ctx); err != nil {
		t.Fatal(err)
	}
	wantInfo(t, ctx, c, "held, paused and resumed", false, 1)
	assertFrozen(t, "held, paused and resumed", pid)
	if err := c.Pause(ctx); err != nil {
		t.Fatal(err)
	}
	if err := h.Release(); err != nil {
		t.Fatalf("release: %v", err)
	}
	wantInfo(t, ctx, c, "paused during a hold, released", true, 0)
	assertFrozen(t, "paused during a hold, released", pid)
	if err := c.Resume(ctx); err != nil {
		t.Fatal(err)
	}
	assertRunning(t, "resumed", pid)

	// A hold whose client is closed without Release ends with its
	// connection.
	other := client.DialUnix(socket)
	h2, err := other.Hold(ctx, "closed")
	if err != nil {
		t.Fatal(err)
	}
	assertFrozen(t, "held by the other client", pid)
	other.Close()
	assertRunning(t, "the holder's client closed", pid)
	wantInfo(t, ctx, c, "the holder's client closed", false, 0)
	select {
	case <-h2.Lost():
	case <-time.After(20 * time.Second):
		t.Fatal("the closed client's hold does not say it is lost")
	}
	if err := h2.Release(); err == nil {
		t.Error("release of a hold lost with its client: nil, want the loss")
	}
}

// TestHoldEndsWithItsProcess: a process holding the sandbox that is
// SIGKILLed (a killed snapshotter) leaves it running: its hold ends with
// its socket, with no one to release it.
func TestHoldEndsWithItsProcess(t *testing.T) {
	_, socket, served := serve(t)
	defer stopDaemon(t, socket, served)
	ctx := testCtx(t)
	c := client.DialUnix(socket)
	defer c.Close()
	pid := busyLoop(t, ctx, c)

	// The holder is a child of this binary, which the supervisor (a
	// subreaper reaping every child) reaps: it is killed, never waited.
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	proc, err := os.StartProcess(os.Args[0], []string{os.Args[0], "-test.run=^$"}, &os.ProcAttr{
		Env:   append(os.Environ(), holderSocketEnv+"="+socket),
		Files: []*os.File{nil, w, os.Stderr},
	})
	w.Close()
	if err != nil {
		t.Fatal(err)
	}
	defer proc.Kill()
	line, err := bufio.NewReader(r).ReadString('\n')
	if err != nil || line != "held\n" {
		t.Fatalf("holder said %q, %v", line, err)
	}
	wantInfo(t, ctx, c, "held by the holder", false, 1)
	assertFrozen(t, "held by the holder", pid)
	if err := syscall.Kill(proc.Pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	assertRunning(t, "the holder killed", pid)
	wantInfo(t, ctx, c, "the holder killed", false, 0)

	// The same with the user's pause standing: it stays paused.
	if err := c.Pause(ctx); err != nil {
		t.Fatal(err)
	}
	h, err := c.Hold(ctx, "test")
	if err != nil {
		t.Fatal(err)
	}
	if !h.Paused() {
		t.Error("the hold does not say the user's pause stood")
	}
	if err := h.Release(); err != nil {
		t.Fatal(err)
	}
	wantInfo(t, ctx, c, "paused, held and released", true, 0)
	assertFrozen(t, "paused, held and released", pid)
	if err := c.Resume(ctx); err != nil {
		t.Fatal(err)
	}
	assertRunning(t, "resumed", pid)
}
