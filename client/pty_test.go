package client_test

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/client"
)

func TestPTYSizeAndResize(t *testing.T) {
	c := newClient(t)
	ctx := testCtx(t)
	res, err := c.Exec(ctx, "test -t 1 && stty size", client.WithPTY(24, 80))
	if err != nil {
		t.Fatal(err)
	}
	if string(res.Stdout) != "24 80\r\n" {
		t.Errorf("stdout %q, want %q", res.Stdout, "24 80\r\n")
	}
	// The command reads its line only after Resize has returned (the test
	// writes it then), so stty sees the new size without waiting on a clock.
	p, err := c.Start(ctx, "read line; echo got $line; stty size", client.WithPTY(24, 80))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Resize(ctx, 50, 132); err != nil {
		t.Fatal(err)
	}
	if err := p.WriteStdin(ctx, []byte("x\n")); err != nil {
		t.Fatal(err)
	}
	res, err = p.Wait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if want := "x\r\ngot x\r\n50 132\r\n"; string(res.Stdout) != want {
		t.Errorf("stdout %q, want %q", res.Stdout, want)
	}
	// A running exec without a PTY: it waits for its stdin to close, which
	// the test does after the resize.
	plain, err := c.Start(ctx, "cat >/dev/null", client.WithStdinStream())
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Resize(ctx, plain.ID(), 10, 10); !errors.Is(err, runbox.ErrInvalidSpec) {
		t.Errorf("resize without pty: %v, want ErrInvalidSpec", err)
	}
	if err := plain.CloseStdin(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := plain.Wait(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestPTYHangupRepeated: a command on a terminal that misses the stop
// protocol's first hangup (a shell's line editor can, when the signal lands
// just before it blocks reading the terminal) is hung up again within the
// grace, and is not left for SIGKILL. The command here acts out that miss:
// it ignores SIGTERM, takes the first SIGHUP as a trap that restores the
// default, and so dies of a later one.
func TestPTYHangupRepeated(t *testing.T) {
	c := newClient(t)
	ctx := testCtx(t)
	const grace = 20 * time.Second
	p, err := c.Start(ctx, `trap '' TERM; trap 'trap - HUP' HUP; echo ready; while :; do sleep 0.05; done`,
		client.WithPTY(24, 80), client.WithGrace(grace))
	if err != nil {
		t.Fatal(err)
	}
	var seen []byte
	for chunk, err := range p.Output(ctx, 0) {
		if err != nil {
			t.Fatalf("output: %v", err)
		}
		if seen = append(seen, chunk.Data...); bytes.Contains(seen, []byte("ready")) {
			break
		}
	}
	if err := c.Cancel(ctx, p.ID(), grace); err != nil {
		t.Fatal(err)
	}
	res, err := p.Wait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if res.Signal != "HUP" || res.ExitCode != 129 {
		t.Errorf("a terminal's command that ignores TERM and traps the first HUP, cancelled with a %v grace: %+v; want it ended by a later SIGHUP (exit 129), not SIGKILL after the grace", grace, res)
	}
}
