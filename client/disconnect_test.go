package client_test

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/client"
)

// waitExited polls the daemon (through c) until the exec with id has a
// result, and returns it.
func waitExited(t *testing.T, c *client.Client, id string) runbox.Result {
	t.Helper()
	ctx := testCtx(t)
	for {
		infos, err := c.List(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range infos {
			if e.ID == id && e.Result != nil {
				return *e.Result
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("exec %s never ended", id)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// A client that goes away without the result takes an exec started
// WithCancelOnDisconnect with it.
func TestCancelOnDisconnect(t *testing.T) {
	observer := newClient(t)
	c := client.DialUnix(socketPath(t))
	id := fmt.Sprintf("cod-%d", rand.Int64())
	if _, err := c.Start(testCtx(t), "sleep 600", client.WithID(id), client.WithCancelOnDisconnect()); err != nil {
		t.Fatal(err)
	}
	c.Close() // the caller is gone: its stream closes without the result
	if res := waitExited(t, observer, id); !res.Cancelled {
		t.Errorf("exec after its only client left: %+v; want cancelled", res)
	}
}

// A broken connection that the client repairs (it re-attaches at once)
// does not cancel the exec: the daemon lingers before cancelling.
func TestCancelOnDisconnectSurvivesReconnect(t *testing.T) {
	dial, dials := dialCounting(t, 100*time.Millisecond)
	c := client.New(dial)
	defer c.Close()
	res, err := c.Exec(testCtx(t), "sleep 0.5; echo done", client.WithCancelOnDisconnect())
	if err != nil {
		t.Fatal(err)
	}
	if res.Cancelled || res.ExitCode != 0 || string(res.Stdout) != "done\n" || dials() < 2 {
		t.Errorf("exec across a reconnect: %+v after %d dials; want it to finish by itself", res, dials())
	}
}

// The client leaving races the exec ending by itself: whichever wins, the
// exec has one consistent outcome.
func TestCancelOnDisconnectRace(t *testing.T) {
	observer := newClient(t)
	for i := range 100 {
		c := client.DialUnix(socketPath(t))
		id := fmt.Sprintf("codrace-%d-%d", i, rand.Int64())
		_, err := c.Start(testCtx(t), "sleep 0.00$((RANDOM % 5))", client.WithID(id), client.WithCancelOnDisconnect())
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Duration(rand.IntN(5000)) * time.Microsecond) // a random moment, not a synchronisation
		c.Close()
		res := waitExited(t, observer, id)
		// Cancelled with exit 0 is consistent too: the cancel came while
		// the command ran, and it finished by itself before the signal.
		if !res.Cancelled && (res.ExitCode != 0 || res.Signal != "") {
			t.Fatalf("iteration %d: %+v; want exit 0 by itself, or cancelled", i, res)
		}
	}
}

// WithKillLeftovers stops what the command left running before the result;
// runbox.NoGrace skips SIGTERM.
func TestKillLeftoversAndNoGrace(t *testing.T) {
	c := newClient(t)
	ctx := testCtx(t)
	res, err := c.Exec(ctx, "sleep 600 & echo started", client.WithKillLeftovers())
	if err != nil {
		t.Fatal(err)
	}
	if res.ExitCode != 0 || res.Killed != 1 || res.LeftRunning != 0 {
		t.Errorf("WithKillLeftovers: %+v; want exit 0, 1 killed, none left running", res)
	}
	res, err = c.Exec(ctx, "sleep 600 &")
	if err != nil {
		t.Fatal(err)
	}
	if res.LeftRunning != 1 {
		t.Errorf("without it: %+v; want 1 left running", res)
	}
	if err := c.Cancel(ctx, res.ID, 0); err != nil {
		t.Fatal(err)
	}
	res, err = c.Exec(ctx, `trap "echo TERM; exit 0" TERM; while :; do sleep 0.05; done`,
		client.WithTimeout(200*time.Millisecond), client.WithGrace(runbox.NoGrace))
	if err != nil {
		t.Fatal(err)
	}
	if !res.TimedOut || res.Signal != "KILL" || string(res.Stdout) != "" {
		t.Errorf("NoGrace: %+v; want SIGKILL without a SIGTERM first", res)
	}
}
