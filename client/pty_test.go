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
	p, err := c.Start(ctx, "read line; echo got $line; sleep 0.3; stty size", client.WithPTY(24, 80))
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
	plain, err := c.Start(ctx, "sleep 0.2")
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Resize(ctx, plain.ID(), 10, 10); !errors.Is(err, runbox.ErrInvalidSpec) {
		t.Errorf("resize without pty: %v, want ErrInvalidSpec", err)
	}
	if _, err := plain.Wait(ctx); err != nil {
		t.Fatal(err)
	}
}
