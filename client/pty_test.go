package client_test

import (
	"errors"
	"testing"

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
