package cli_test

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
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
	must(t, "cancel", "--tombstone", id, "later")
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

// TestDetachAttachReplay: an exec started with exec --detach is followed by
// attach while it still runs, which replays it from line 1 with every line
// once, in order; attach --from SEQ afterwards prints exactly a suffix of
// that output on each stream, shorter the later SEQ, all of it from 1 and
// none past the end.
func TestDetachAttachReplay(t *testing.T) {
	setHome(t)
	id := up(t)
	const lines, gateAt = 600, 300
	gate := filepath.Join(os.TempDir(), fmt.Sprintf("rb-attach-gate-%d", rand.Int64()))
	t.Cleanup(func() { os.Remove(gate) })
	// Lines 1..600 (err<i> on stderr every 100th), stopping after line 300
	// until the gate file exists, pausing every 50 lines so the output
	// comes in several chunks.
	cmd := fmt.Sprintf(`i=1
while [ $i -le %[1]d ]; do
	echo line$i
	if [ $((i %% 100)) -eq 0 ]; then echo err$i >&2; fi
	if [ $i -eq %[2]d ]; then while [ ! -e %[3]s ]; do sleep 0.02; done; fi
	if [ $((i %% 50)) -eq 0 ]; then sleep 0.02; fi
	i=$((i+1))
done`, lines, gateAt, gate)
	var wantOut, wantErr strings.Builder
	for i := 1; i <= lines; i++ {
		fmt.Fprintf(&wantOut, "line%d\n", i)
		if i%100 == 0 {
			fmt.Fprintf(&wantErr, "err%d\n", i)
		}
	}
	if out := must(t, "exec", "--detach", "--id", "replay", "--timeout", "2m", id, "--", cmd); out != "replay\n" {
		t.Fatalf("exec --detach printed %q; want the exec id", out)
	}

	// Attach while the exec runs: it waits at the gate until this test has
	// seen line 300 through the attach.
	var stdout, stderr syncBuffer
	code := make(chan int, 1)
	go func() { code <- runboxIO(t, "", &stdout, &stderr, "attach", id, "replay") }()
	reached := fmt.Sprintf("\nline%d\n", gateAt)
	deadline := time.Now().Add(time.Minute)
	for !strings.Contains(stdout.String(), reached) {
		select {
		case c := <-code:
			t.Fatalf("attach exited %d before the exec reached its gate: stdout %q, stderr %q", c, stdout.String(), stderr.String())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("attach printed no line%d within a minute: %q", gateAt, stdout.String())
		}
	}
	if ps := must(t, "ps", id); !contains(ps, "replay", "running") {
		t.Errorf("ps while attached before the gate:\n%s\nwant replay running", ps)
	}
	must(t, "exec", id, "--", "touch "+gate)
	if c := <-code; c != 0 || stdout.String() != wantOut.String() || stderr.String() != wantErr.String() {
		t.Fatalf("attach while running: exit %d, stdout %q (%d bytes), stderr %q; want exit 0, line1..line%d once each (%d bytes), %q",
			c, clipString(stdout.String()), len(stdout.String()), stderr.String(), lines, wantOut.Len(), wantErr.String())
	}

	// After the end: --from 1 is everything; each later SEQ a suffix of it,
	// never longer than an earlier one's; far past the end, nothing.
	prevOut, prevErr := wantOut.String(), wantErr.String()
	skipped := false
	for from := 1; ; from *= 2 {
		o := rb(t, "attach", id, "replay", "--from", fmt.Sprint(from))
		if o.code != 0 {
			t.Fatalf("attach --from %d: %+v", from, o)
		}
		if from == 1 && (o.stdout != wantOut.String() || o.stderr != wantErr.String()) {
			t.Errorf("attach --from 1: stdout %q, stderr %q; want all of it", clipString(o.stdout), o.stderr)
		}
		if !strings.HasSuffix(prevOut, o.stdout) || !strings.HasSuffix(prevErr, o.stderr) {
			t.Fatalf("attach --from %d: stdout %q, stderr %q; want suffixes of the output from an earlier seq (%q, %q)",
				from, clipString(o.stdout), o.stderr, clipString(prevOut), prevErr)
		}
		if o.stdout != "" && len(o.stdout) < wantOut.Len() {
			skipped = true
		}
		prevOut, prevErr = o.stdout, o.stderr
		if o.stdout == "" && o.stderr == "" {
			break
		}
		if from > 1<<20 {
			t.Fatalf("attach --from %d still printed output", from)
		}
	}
	if !skipped {
		t.Errorf("no attach --from printed part of the output: --from skipped nothing or everything")
	}
}

// clipString shortens s for an error message.
func clipString(s string) string {
	if len(s) > 200 {
		return s[:200] + "..."
	}
	return s
}
