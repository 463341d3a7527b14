package mcpserver_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

var allTools = []string{
	"exec", "exec_cancel", "exec_list", "exec_output",
	"file_delete", "file_edit", "file_list", "file_read", "file_write",
	"network_set", "port_expose",
	"sandbox_create", "sandbox_fork", "sandbox_list", "sandbox_pause", "sandbox_remove", "sandbox_resume", "sandbox_snapshot",
}

// Every tool is listed with an input and an output schema that are valid
// JSON Schemas of objects.
func TestToolsHaveSchemas(t *testing.T) {
	s := startStdio(t)
	res, err := s.cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tool := range res.Tools {
		names = append(names, tool.Name)
		if tool.Description == "" {
			t.Errorf("%s has no description", tool.Name)
		}
		for which, schema := range map[string]any{"input": tool.InputSchema, "output": tool.OutputSchema} {
			b, err := json.Marshal(schema)
			if err != nil || schema == nil {
				t.Errorf("%s: %s schema missing (%v)", tool.Name, which, err)
				continue
			}
			var js jsonschema.Schema
			if err := json.Unmarshal(b, &js); err != nil {
				t.Errorf("%s: %s schema does not parse: %v", tool.Name, which, err)
				continue
			}
			if _, err := js.Resolve(nil); err != nil {
				t.Errorf("%s: %s schema is not valid: %v", tool.Name, which, err)
			}
			if js.Type != "object" {
				t.Errorf("%s: %s schema has type %q, want object", tool.Name, which, js.Type)
			}
		}
	}
	slices.Sort(names)
	if !slices.Equal(names, allTools) {
		t.Errorf("tools %v, want %v", names, allTools)
	}
}

// exec returns the command's exit code and its two streams, apart, and
// non-zero exit codes are results, not tool errors.
func TestExecResult(t *testing.T) {
	s := startStdio(t)
	r := ok[execResult](t, s.cs, "exec", map[string]any{"command": "echo out; echo err >&2; exit 3"})
	if r.ExitCode != 3 || r.Stdout != "out\n" || r.Stderr != "err\n" || r.TimedOut || r.Cancelled || r.State != "exited" {
		t.Errorf("result %+v", r)
	}
	if r.Cwd != s.workdir {
		t.Errorf("cwd %q, want the workspace %q", r.Cwd, s.workdir)
	}
	r = ok[execResult](t, s.cs, "exec", map[string]any{"command": "cat; printf %s \"$GREETING\"", "stdin": "from stdin\n", "env": map[string]string{"GREETING": "hi"}})
	if r.Stdout != "from stdin\nhi" || r.ExitCode != 0 {
		t.Errorf("stdin and env: %+v", r)
	}
	// An empty command is the caller's error, said as a tool error.
	if msg := failing(t, s.cs, "exec", map[string]any{"command": "  "}); !strings.Contains(msg, "command is empty") {
		t.Errorf("empty command: %q", msg)
	}
}

// A command that outlives its timeout returns at the timeout with its
// output so far and timed_out, and nothing it started survives (counted on
// the host), and the sandbox lives on.
func TestExecTimeoutLeavesNothing(t *testing.T) {
	s := startStdio(t)
	m := marker()
	cmd := fmt.Sprintf("echo started; sleep %s & sleep %s", m, m)
	r := ok[execResult](t, s.cs, "exec", map[string]any{"command": cmd, "timeout_seconds": 1})
	if !r.TimedOut || r.Stdout != "started\n" || r.ExitCode != 143 || r.Killed < 2 || r.TimeoutSecs != 1 {
		t.Errorf("timed-out exec: %+v", r)
	}
	if r.DurationMS < 1000 {
		t.Errorf("stopped after %d ms, before its 1 s timeout", r.DurationMS)
	}
	if n := procs(t, m); n != 0 {
		t.Errorf("%d processes of the timed-out exec survive", n)
	}
	if r := ok[execResult](t, s.cs, "exec", map[string]any{"command": "echo still here"}); r.Stdout != "still here\n" {
		t.Errorf("the next exec: %+v", r)
	}
}

// A timeout above --max-timeout is refused, naming the ceiling; one at
// the ceiling runs; one not named is --timeout.
func TestExecTimeoutCapped(t *testing.T) {
	s := startStdio(t, "--timeout", "1500ms", "--max-timeout", "3s")
	if msg := failing(t, s.cs, "exec", map[string]any{"command": "true", "timeout_seconds": 3600}); !strings.Contains(msg, "at most 3 seconds (the ceiling)") {
		t.Errorf("asked 3600 s over a 3 s ceiling: %q", msg)
	}
	if r := ok[execResult](t, s.cs, "exec", map[string]any{"command": "true", "timeout_seconds": 3}); r.TimeoutSecs != 3 {
		t.Errorf("asked the ceiling, 3 s: got %v", r.TimeoutSecs)
	}
	if r := ok[execResult](t, s.cs, "exec", map[string]any{"command": "true"}); r.TimeoutSecs != 1.5 {
		t.Errorf("default timeout: got %v s, want 1.5", r.TimeoutSecs)
	}
	if msg := failing(t, s.cs, "exec", map[string]any{"command": "true", "timeout_seconds": -1}); !strings.Contains(msg, "timeout_seconds") {
		t.Errorf("negative timeout: %q", msg)
	}
}

// cd and export in one exec carry over to the next: one persistent shell
// session per MCP session.
func TestExecSessionCarriesOver(t *testing.T) {
	s := startStdio(t)
	r := ok[execResult](t, s.cs, "exec", map[string]any{"command": "mkdir -p sub/dir && cd sub/dir && export GREETING=hello"})
	want := filepath.Join(s.workdir, "sub/dir")
	if r.ExitCode != 0 || r.Cwd != want {
		t.Fatalf("cd: %+v", r)
	}
	r = ok[execResult](t, s.cs, "exec", map[string]any{"command": "pwd; echo $GREETING"})
	if r.Stdout != want+"\nhello\n" {
		t.Errorf("next exec printed %q, want %q", r.Stdout, want+"\nhello\n")
	}
}

// A client's cancellation of an exec in progress stops it in the sandbox
// with everything it started; the exec ends cancelled, the sandbox lives
// on.
func TestExecCancelledByClient(t *testing.T) {
	s := startStdio(t)
	m := marker()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := s.cs.CallTool(ctx, &mcp.CallToolParams{Name: "exec", Arguments: map[string]any{
			"command": fmt.Sprintf("sleep %s & sleep %s", m, m), "timeout_seconds": 600}})
		done <- err
	}()
	eventually(t, "the exec's two sleeps run", func() bool { return procs(t, m) >= 2 })
	cancel() // the SDK sends notifications/cancelled
	if err := <-done; err == nil {
		t.Error("the cancelled call returned no error")
	}
	eventually(t, "no process of the cancelled exec survives", func() bool { return procs(t, m) == 0 })
	// The daemon keeps the cancelled exec, with its result once the stop
	// protocol has confirmed that nothing survives.
	type listed struct {
		Execs []struct {
			Command   string `json:"command"`
			Cancelled bool   `json:"cancelled"`
			ExitCode  *int   `json:"exit_code"`
		} `json:"execs"`
	}
	eventually(t, "exec_list shows the cancelled exec's result", func() bool {
		for _, e := range ok[listed](t, s.cs, "exec_list", nil).Execs {
			if strings.Contains(e.Command, m) && e.ExitCode != nil {
				if !e.Cancelled || *e.ExitCode != 143 {
					t.Errorf("the cancelled exec: %+v (exit %d)", e, *e.ExitCode)
				}
				return true
			}
		}
		return false
	})
	if r := ok[execResult](t, s.cs, "exec", map[string]any{"command": "echo alive"}); r.Stdout != "alive\n" {
		t.Errorf("after the cancel: %+v", r)
	}
}

// When the client goes away (stdin closes) during a long exec, runbox mcp
// stops it at once, removes the session's sandbox and exits.
func TestClientGoneStopsExec(t *testing.T) {
	s := startStdio(t)
	m := marker()
	go func() {
		_, _ = s.cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "exec", Arguments: map[string]any{
			"command": "sleep " + m, "timeout_seconds": 600}})
	}()
	eventually(t, "the exec runs", func() bool { return procs(t, m) >= 1 })
	s.close(t) // closes stdin, waits for runbox mcp to exit
	if n := procs(t, m); n != 0 {
		t.Errorf("%d processes survive the session", n)
	}
	if sbs := hostSandboxes(t, s.home); len(sbs) != 0 {
		t.Errorf("sandboxes left after the session: %v", sbs)
	}
}

// SIGTERM to runbox mcp during a long exec stops the exec at once with
// everything it started, removes the session's sandbox, and runbox mcp
// exits 0.
func TestSignalStopsExec(t *testing.T) {
	s := startStdio(t)
	m := marker()
	go func() {
		_, _ = s.cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "exec", Arguments: map[string]any{
			"command": fmt.Sprintf("sleep %s & sleep %s", m, m), "timeout_seconds": 600}})
	}()
	eventually(t, "the exec runs", func() bool { return procs(t, m) >= 2 })
	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := s.cmd.Wait(); err != nil {
		t.Errorf("runbox mcp after SIGTERM: %v; stderr: %s", err, s.stderr)
	}
	s.cmd = nil
	if n := procs(t, m); n != 0 {
		t.Errorf("%d processes survive", n)
	}
	if sbs := hostSandboxes(t, s.home); len(sbs) != 0 {
		t.Errorf("sandboxes left: %v", sbs)
	}
}

// A background exec returns its id at once; exec_output follows its output
// by offset and gives its result once it has ended; exec_cancel stops it
// with everything it started.
func TestBackgroundExec(t *testing.T) {
	s := startStdio(t)
	m := marker()
	r := ok[execResult](t, s.cs, "exec", map[string]any{"background": true,
		"command": fmt.Sprintf("for i in 1 2 3; do echo line$i; done; echo oops >&2; sleep %s & sleep %s", m, m)})
	if r.State != "running" || r.ID == "" {
		t.Fatalf("background start: %+v", r)
	}
	type output struct {
		State      string      `json:"state"`
		Output     string      `json:"output"`
		Offset     int64       `json:"offset"`
		NextOffset int64       `json:"next_offset"`
		Result     *execResult `json:"result"`
	}
	var all string
	var offset int64
	// Counted on the host: the two sleeps, and the shell waiting for the
	// second while running in a session.
	eventually(t, "the background exec's output", func() bool {
		o := ok[output](t, s.cs, "exec_output", map[string]any{"id": r.ID, "offset": offset, "wait_seconds": 5})
		if o.Offset != offset || o.State != "running" {
			t.Fatalf("exec_output: %+v", o)
		}
		all += o.Output
		offset = o.NextOffset
		return strings.Count(all, "\n") == 4
	})
	// stdout's lines in order; stderr's line merged in where it was read
	// (the two streams are separate pipes: no order between them).
	if strings.Replace(all, "oops\n", "", 1) != "line1\nline2\nline3\n" || offset != int64(len(all)) {
		t.Errorf("output %q, next offset %d", all, offset)
	}
	eventually(t, "both sleeps run", func() bool { return procs(t, m) >= 2 })
	// Reading again from 0 gives it all again; past the end, nothing.
	if o := ok[output](t, s.cs, "exec_output", map[string]any{"id": r.ID}); o.Output != all {
		t.Errorf("from 0: %q", o.Output)
	}
	c := ok[execResult](t, s.cs, "exec_cancel", map[string]any{"id": r.ID})
	if !c.Cancelled || c.State != "exited" || c.Killed < 2 {
		t.Errorf("exec_cancel: %+v", c)
	}
	if n := procs(t, m); n != 0 {
		t.Errorf("%d processes survive exec_cancel", n)
	}
	o := ok[output](t, s.cs, "exec_output", map[string]any{"id": r.ID, "offset": offset})
	if o.State != "exited" || o.Result == nil || !o.Result.Cancelled || o.Output != "" {
		t.Errorf("exec_output after the cancel: %+v", o)
	}
	if msg := failing(t, s.cs, "exec_output", map[string]any{"id": "nope"}); !strings.Contains(msg, "exec_list") {
		t.Errorf("unknown id: %q", msg)
	}
}

// A background exec still running when the session ends is stopped with
// everything it started.
func TestBackgroundExecEndsWithSession(t *testing.T) {
	s := startStdio(t)
	m := marker()
	ok[execResult](t, s.cs, "exec", map[string]any{"background": true, "command": fmt.Sprintf("sleep %s & sleep %s", m, m)})
	eventually(t, "both sleeps run", func() bool { return procs(t, m) >= 2 })
	s.close(t)
	if n := procs(t, m); n != 0 {
		t.Errorf("%d processes survive the session", n)
	}
}

// Progress notifications carry the latest output of a running exec when
// the client sends a progress token.
func TestExecProgress(t *testing.T) {
	s := startStdio(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = s.cs.CallTool(ctx, &mcp.CallToolParams{Name: "exec", Meta: mcp.Meta{"progressToken": "tok-1"},
			Arguments: map[string]any{"command": "for i in $(seq 1 600); do echo tick$i; sleep 0.1; done", "timeout_seconds": 120}})
	}()
	eventually(t, "a progress notification with output", func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return len(s.progress) >= 2
	})
	cancel()
	<-done
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, p := range s.progress {
		if p.ProgressToken != "tok-1" || !strings.Contains(p.Message, "tick") || p.Total != 120 {
			t.Errorf("notification %d: %+v", i, p)
		}
		if i > 0 && p.Progress <= s.progress[i-1].Progress {
			t.Errorf("progress did not grow: %v then %v", s.progress[i-1].Progress, p.Progress)
		}
	}
}

// Many calls in one session all run, in order.
func TestManySequentialExecs(t *testing.T) {
	s := startStdio(t)
	ok[execResult](t, s.cs, "exec", map[string]any{"command": "export N=0"})
	for i := 1; i <= 200; i++ {
		r := ok[execResult](t, s.cs, "exec", map[string]any{"command": "N=$((N+1)); export N; echo $N"})
		if want := fmt.Sprintf("%d\n", i); r.Stdout != want || r.ExitCode != 0 {
			t.Fatalf("exec %d: %+v", i, r)
		}
	}
}

// Long output keeps its start and end, counts what was left out exactly,
// and names a spill file that file_read can read.
func TestExecLongOutputSpills(t *testing.T) {
	s := startStdio(t)
	r := ok[execResult](t, s.cs, "exec", map[string]any{"command": "seq 1 100000"})
	if r.StdoutDrop == 0 || r.StdoutSpill == "" || int64(len(r.Stdout))+r.StdoutDrop != r.StdoutBytes {
		t.Fatalf("long output: dropped %d, spill %q, kept %d of %d", r.StdoutDrop, r.StdoutSpill, len(r.Stdout), r.StdoutBytes)
	}
	if !strings.HasPrefix(r.Stdout, "1\n2\n") || !strings.HasSuffix(r.Stdout, "99999\n100000\n") {
		t.Errorf("head or tail missing")
	}
	f := ok[fileRead](t, s.cs, "file_read", map[string]any{"path": r.StdoutSpill, "offset": 50000, "limit": 2})
	if f.Content != "50000\n50001\n" {
		t.Errorf("spill lines 50000-50001: %q", f.Content)
	}
	if _, err := os.Stat(r.StdoutSpill); err != nil {
		t.Errorf("the spill file on the host: %v", err)
	}
}

type fileRead struct {
	Path      string `json:"path"`
	Size      int64  `json:"size"`
	Binary    bool   `json:"binary"`
	Content   string `json:"content"`
	Base64    string `json:"content_base64"`
	StartLine int64  `json:"start_line"`
	EndLine   int64  `json:"end_line"`
	Truncated bool   `json:"truncated"`
}

// TestPortExposeOnStdio: on stdio there is no server address to hand out,
// so port_expose says why and what to use instead (port-forward); and a
// model's allow list is held to the operator's --allow and needs network
// private.
func TestPortExposeOnStdio(t *testing.T) {
	s := startStdio(t, "--allow-network", "private", "--allow", "*.python.org")
	msg := failing(t, s.cs, "port_expose", map[string]any{"port": 8000})
	if !strings.Contains(msg, "runbox serve") || !strings.Contains(msg, "port-forward") {
		t.Errorf("port_expose on stdio: %q, want it to name runbox serve and port-forward", msg)
	}
	if msg := failing(t, s.cs, "sandbox_create", map[string]any{"network": "private", "allow": []string{"evil.example"}}); !strings.Contains(msg, "*.python.org") {
		t.Errorf("an allow outside the operator's: %q, want it to name what is allowed", msg)
	}
	if msg := failing(t, s.cs, "sandbox_create", map[string]any{"allow": []string{"pypi.python.org"}}); !strings.Contains(msg, "network private") {
		t.Errorf("allow without network private: %q", msg)
	}
}
