package cli_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// contains reports whether s contains every one of subs.
func contains(s string, subs ...string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}

func TestExecStreams(t *testing.T) {
	setHome(t)
	id := up(t, "--name", "box")
	o := rb(t, "exec", "box", "--", "echo out; echo err >&2; exit 3")
	if o.code != 3 || o.stdout != "out\n" || o.stderr != "err\n" {
		t.Errorf("exec shell string: %+v; want exit 3, out, err", o)
	}
	// Several arguments are an argv, run without a shell.
	o = rb(t, "exec", id[:5], "--", "sh", "-c", `printf '%s|' "$0" "$1"`, "a b", "$HOME")
	if o.code != 0 || o.stdout != "a b|$HOME|" {
		t.Errorf("exec argv by id prefix: %+v; want a b|$HOME|", o)
	}
	// stdin is /dev/null unless -i.
	o = runboxStdin(t, "ignored", "exec", id, "--", "cat")
	if o.code != 0 || o.stdout != "" {
		t.Errorf("exec cat without -i: %+v; want empty output", o)
	}
	o = runboxStdin(t, "line 1\nline 2\n", "exec", "-i", id, "--", "cat; echo done")
	if o.code != 0 || o.stdout != "line 1\nline 2\ndone\n" {
		t.Errorf("exec -i cat: %+v; want stdin echoed, then done", o)
	}
	o = rb(t, "exec", "-e", "GREETING=hi there", "--cwd", "/", id, "--", `echo "$GREETING"; pwd`)
	if o.code != 0 || o.stdout != "hi there\n/\n" {
		t.Errorf("exec -e --cwd: %+v", o)
	}
}

func TestExecJSON(t *testing.T) {
	setHome(t)
	wd := t.TempDir()
	if err := os.Mkdir(filepath.Join(wd, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	id := up(t, "--workdir", wd)
	o := rb(t, "exec", "--json", "--id", "j1", "--cwd", "sub", id, "--", "printf out; printf err >&2; exit 3")
	if o.code != 3 {
		t.Fatalf("exec --json exit 3: %+v", o)
	}
	if strings.Count(o.stdout, "\n") != 1 {
		t.Errorf("exec --json printed %q; want one line", o.stdout)
	}
	var got map[string]any
	if err := json.Unmarshal([]byte(o.stdout), &got); err != nil {
		t.Fatalf("exec --json output %q: %v", o.stdout, err)
	}
	want := []string{"id", "exit_code", "signal", "timed_out", "cancelled", "idle_timed_out", "duration_ms",
		"stdout", "stderr", "stdout_dropped", "stderr_dropped", "cwd", "killed", "oom_killed",
		"pid", "stdout_bytes", "stderr_bytes", "stdout_spill", "stderr_spill", "spill_truncated", "stdout_spill_offset", "stderr_spill_offset",
		"cwd_fallback_from", "survivors", "left_running", "stream_gaps", "stream_lost"}
	var keys []string
	for k := range got {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	slices.Sort(want)
	if !slices.Equal(keys, want) {
		t.Errorf("exec --json fields %v; want %v", keys, want)
	}
	for k, v := range map[string]any{
		"id": "j1", "exit_code": 3.0, "signal": "", "timed_out": false, "cancelled": false,
		"idle_timed_out": false, "stdout": "out", "stderr": "err", "stdout_dropped": 0.0,
		"stderr_dropped": 0.0, "cwd": filepath.Join(wd, "sub"), "killed": 0.0,
	} {
		if got[k] != v {
			t.Errorf("exec --json %s = %#v; want %#v", k, got[k], v)
		}
	}
	if o.stderr != "" {
		t.Errorf("exec --json wrote %q on stderr; want nothing", o.stderr)
	}

	// Invalid UTF-8 comes as text with U+FFFD, plus the exact bytes.
	o = rb(t, "exec", "--json", id, "--", `printf 'a\377b'`)
	got = nil
	if err := json.Unmarshal([]byte(o.stdout), &got); err != nil {
		t.Fatalf("exec --json binary output %q: %v", o.stdout, err)
	}
	if got["stdout"] != "a\uFFFDb" || got["stdout_base64"] != "Yf9i" || got["stderr_base64"] != nil {
		t.Errorf("exec --json with invalid UTF-8: %v", got)
	}

	// A timeout shows in the JSON, with the command's status.
	o = rb(t, "exec", "--json", "--timeout", "300ms", "--grace", "1s", id, "--", "sleep 30")
	got = nil
	if err := json.Unmarshal([]byte(o.stdout), &got); err != nil {
		t.Fatalf("exec --json timeout %q: %v", o.stdout, err)
	}
	if o.code != 143 || got["timed_out"] != true || got["exit_code"] != 143.0 || got["signal"] != "TERM" {
		t.Errorf("exec --json --timeout: exit %d, %v; want 143, timed_out, TERM", o.code, got)
	}
}

func TestExecTimeoutMessage(t *testing.T) {
	setHome(t)
	id := up(t)
	o := rb(t, "exec", "--timeout", "1s", "--grace", "1s", id, "--", "echo begun; sleep 30")
	if o.code != 143 || o.stdout != "begun\n" || o.stderr != "runbox: timed out after 1s\n" {
		t.Errorf("exec --timeout 1s: %+v; want exit 143, begun, and the timeout message", o)
	}
}

func TestExecNoSuchSandbox(t *testing.T) {
	setHome(t)
	o := rb(t, "exec", "nosuch", "--", "true")
	if o.code != 125 || !strings.HasPrefix(o.stderr, "runbox: ") || !contains(o.stderr, "nosuch", "no such sandbox") ||
		strings.Count(o.stderr, "\n") != 1 {
		t.Errorf("exec nosuch: %+v; want 125 and one line naming nosuch", o)
	}
}

// A runboxd killed while an exec runs is a runbox failure (125) naming the
// sandbox, not an exit status.
func TestExecDaemonKilled(t *testing.T) {
	setHome(t)
	id := up(t)
	var sb sandboxJSON
	if err := json.Unmarshal([]byte(must(t, "inspect", id)), &sb); err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(sb.Detail["pid"])
	if err != nil {
		t.Fatalf("inspect: pid %q", sb.Detail["pid"])
	}

	stdout := &syncBuffer{written: make(chan struct{})}
	var stderr syncBuffer
	done := make(chan int, 1)
	go func() {
		// The orphaned sleep outlives the daemon; keep it short.
		done <- runboxIO(t, "", stdout, &stderr, "exec", id, "--", "echo up; sleep 5")
	}()
	select {
	case <-stdout.written:
	case code := <-done:
		t.Fatalf("exec ended before runboxd was killed: exit %d, %q", code, stderr.String())
	case <-time.After(time.Minute):
		t.Fatal("no output within a minute")
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	var code int
	select {
	case code = <-done:
	case <-time.After(time.Minute):
		t.Fatal("exec did not return within a minute of runboxd's death")
	}
	msg := stderr.String()
	if code != 125 || !contains(msg, "runbox: exec", id, "sandbox lost") || strings.Count(msg, "\n") != 1 {
		t.Errorf("exec while runboxd was killed: exit %d, stderr %q; want 125 and one line naming %s", code, msg, id)
	}

	// The dead sandbox: exec fails at once, ls says lost, rm needs -f.
	if o := rb(t, "exec", id, "--", "true"); o.code != 125 || !contains(o.stderr, id, "sandbox lost") {
		t.Errorf("exec on a dead sandbox: %+v; want 125, sandbox lost", o)
	}
	if sbs := lsJSON(t); len(sbs) != 1 || sbs[0].Alive {
		t.Errorf("ls after the kill: %+v; want one dead sandbox", sbs)
	}
	if o := rb(t, "rm", id); o.code != 125 || !contains(o.stderr, id, "force") {
		t.Errorf("rm of a dead sandbox: %+v; want 125 suggesting force", o)
	}
	if out := must(t, "rm", "-f", id); out != id+"\n" {
		t.Errorf("rm -f printed %q; want the id", out)
	}
}
