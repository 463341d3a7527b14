package cli_test

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

func TestDetachAttach(t *testing.T) {
	setHome(t)
	id := up(t)
	if out := must(t, "exec", "--detach", "--id", "job", id, "--", "echo hi; sleep 0.2; echo bye >&2; exit 4"); out != "job\n" {
		t.Fatalf("exec --detach printed %q; want job", out)
	}
	o := rb(t, "attach", id, "job")
	if o.code != 4 || o.stdout != "hi\n" || o.stderr != "bye\n" {
		t.Errorf("attach: %+v; want exit 4, hi, bye", o)
	}
	// Attaching again replays from the ring; --from skips what was seen.
	o = rb(t, "attach", id, "job", "--from", "2")
	if o.code != 4 || o.stdout != "" || o.stderr != "bye\n" {
		t.Errorf("attach --from 2: %+v; want exit 4 and only the second chunk", o)
	}
	if o := rb(t, "attach", id, "nosuch"); o.code != 125 || !contains(o.stderr, id, "nosuch", "no such exec") {
		t.Errorf("attach to an unknown exec: %+v; want 125", o)
	}
}

func TestCancel(t *testing.T) {
	setHome(t)
	id := up(t)
	must(t, "exec", "--detach", "--id", "long", id, "--", "sleep 30")
	if o := rb(t, "cancel", "--grace", "1s", id, "long"); o.code != 0 || o.stdout != "" || o.stderr != "" {
		t.Errorf("cancel: %+v; want a silent success", o)
	}
	o := rb(t, "attach", id, "long")
	if o.code != 143 || o.stderr != "runbox: cancelled\n" {
		t.Errorf("attach to a cancelled exec: %+v; want 143, cancelled", o)
	}
	// Cancelling an id that never started leaves a tombstone: it never runs.
	must(t, "cancel", id, "later")
	o = rb(t, "exec", "--id", "later", id, "--", "echo ran")
	if o.code != 125 || o.stdout != "" || !contains(o.stderr, id, "later", "cancelled") {
		t.Errorf("exec of a cancelled id: %+v; want 125, exec cancelled", o)
	}
}

func TestKill(t *testing.T) {
	setHome(t)
	id := up(t)
	// A sleep no other test runs, so finding it means this exec got there.
	sleep := fmt.Sprintf("sleep 30.%06d", rand.IntN(1e6))
	must(t, "exec", "--detach", "--id", "trapper", id, "--", "trap 'exit 9' USR1; "+sleep+" & wait")
	// The trap must be set before the signal arrives; wait for the sleep.
	o := rb(t, "exec", id, "--", "for i in $(seq 100); do pgrep -fx '"+sleep+"' >/dev/null && exit 0; sleep 0.05; done; exit 1")
	if o.code != 0 {
		t.Fatalf("the detached exec did not start its sleep: %+v", o)
	}
	if o := rb(t, "kill", "-s", "usr1", id, "trapper"); o.code != 0 {
		t.Fatalf("kill -s usr1: %+v", o)
	}
	if o := rb(t, "attach", id, "trapper"); o.code != 9 {
		t.Errorf("attach after kill -s USR1: %+v; want the trap's exit 9", o)
	}
	if o := rb(t, "kill", "-s", "NOPE", id, "trapper"); o.code != 125 || !contains(o.stderr, "NOPE") {
		t.Errorf("kill -s NOPE: %+v; want 125", o)
	}
}
