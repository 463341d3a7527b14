package ssh_test

import (
	"context"
	"testing"
	"time"

	"github.com/runbox/runbox"
)

func TestSmoke(t *testing.T) {
	e := newEnv(t, nonRootUser(t))
	p := e.provider(t, "rbx")
	sb := create(t, p, runbox.SandboxSpec{})
	t.Logf("%+v", sb)
	c := newClient(t, p, sb)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := c.Exec(ctx, "id -un; pwd; echo $RUNBOX_SANDBOX")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s %s %d", res.Stdout, res.Stderr, res.ExitCode)
	if err := p.Remove(ctx, sb, false); err != nil {
		t.Fatal(err)
	}
}
