package cli_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/runbox/runbox/internal/cli"
)

func TestRun(t *testing.T) {
	setHome(t)
	if o := rb(t, "run", "--", "exit 7"); o.code != 7 {
		t.Errorf("run -- 'exit 7': exit %d, stderr %q; want 7", o.code, o.stderr)
	}
	o := rb(t, "run", "--name", "tmp", "--", "echo hello; echo oops >&2")
	if o.code != 0 || o.stdout != "hello\n" || o.stderr != "oops\n" {
		t.Errorf("run echo: %+v; want exit 0, stdout hello, stderr oops", o)
	}
	// Every throwaway sandbox is gone, even after a failing command.
	if sbs := lsJSON(t); len(sbs) != 0 {
		t.Errorf("sandboxes left after run: %+v", sbs)
	}
}

func TestRunTimeoutRemovesSandbox(t *testing.T) {
	setHome(t)
	o := rb(t, "run", "--timeout", "500ms", "--grace", "1s", "--", "sleep 30")
	if o.code != 143 || o.stderr != "runbox: timed out after 500ms\n" {
		t.Errorf("run --timeout 500ms -- 'sleep 30': %+v; want exit 143 and the timeout message", o)
	}
	if sbs := lsJSON(t); len(sbs) != 0 {
		t.Errorf("sandboxes left after a timed-out run: %+v", sbs)
	}
}

func TestRunCreateFailure(t *testing.T) {
	setHome(t)
	o := rb(t, "run", "--image", "busybox", "--", "true")
	if o.code != 125 || !contains(o.stderr, "runbox: create", "image") {
		t.Errorf("run --image on the host provider: %+v; want 125 and a create error", o)
	}
}

// Ctrl-C (the context ending) cancels the command in the sandbox, exits
// with its status, and still removes the throwaway sandbox.
func TestRunInterrupted(t *testing.T) {
	setHome(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stdout := &syncBuffer{written: make(chan struct{})}
	var stderr syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- cli.Main(ctx, cli.ServerCommands{}, []string{"run", "--grace", "1s", "--", "echo up; sleep 30"}, strings.NewReader(""), stdout, &stderr)
	}()
	select {
	case <-stdout.written:
	case code := <-done:
		t.Fatalf("run ended before the interrupt: exit %d, %q", code, stderr.String())
	case <-time.After(time.Minute):
		t.Fatal("no output within a minute")
	}
	cancel()
	var code int
	select {
	case code = <-done:
	case <-time.After(time.Minute):
		t.Fatal("run did not return within a minute of the interrupt")
	}
	if code != 143 || stderr.String() != "runbox: cancelled\n" {
		t.Errorf("interrupted run: exit %d, stderr %q; want 143, cancelled", code, stderr.String())
	}
	if sbs := lsJSON(t); len(sbs) != 0 {
		t.Errorf("sandboxes left after an interrupted run: %+v", sbs)
	}
}
