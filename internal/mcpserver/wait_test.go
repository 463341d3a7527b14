package mcpserver_test

import (
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/runbox/runbox/internal/mcpserver/mcptest"
)

// runningResult is exec's result for a command still running when exec
// stopped waiting, and exec_output's.
type runningResult struct {
	ID         string      `json:"id"`
	State      string      `json:"state"`
	Output     string      `json:"output"`
	NextOffset int64       `json:"next_offset"`
	Offset     int64       `json:"offset"`
	Result     *execResult `json:"result"`
}

// exec waits wait_seconds for its command, then returns the output so far
// with the command still running (first line says so, with the exec id);
// the command runs on, and exec_output collects the rest and its exit
// status.
func TestExecBoundedWait(t *testing.T) {
	s := startStdio(t)
	m := marker()
	// The second line comes once a file exists, so the test decides when.
	gate := s.workdir + "/gate-" + m
	cmd := fmt.Sprintf("echo first; while [ ! -e %s ]; do sleep 0.05; done; echo second; exit 7", gate)
	res := s.call(t, "exec", map[string]any{"command": cmd, "wait_seconds": 0.5})
	if res.IsError {
		t.Fatalf("exec: %s", mcptest.ResultText(res))
	}
	r := decode[runningResult](t, res)
	txt := mcptest.ResultText(res)
	first, _, _ := strings.Cut(txt, "\n")
	if r.State != "running" || r.ID == "" || r.Output != "first\n" || r.NextOffset != 6 {
		t.Fatalf("still running: %+v\n%s", r, txt)
	}
	if !strings.HasPrefix(first, "still running after 500ms") || !strings.Contains(first, r.ID) || !strings.Contains(first, "exec_output") {
		t.Errorf("first line: %q", first)
	}
	// Not finished: exec_output without waiting says it still runs.
	o := ok[runningResult](t, s.cs, "exec_output", map[string]any{"id": r.ID, "offset": r.NextOffset})
	if o.State != "running" || o.Output != "" || o.Result != nil {
		t.Errorf("exec_output while running: %+v", o)
	}
	ok[struct{}](t, s.cs, "file_write", map[string]any{"path": gate, "content": "go"})
	o = ok[runningResult](t, s.cs, "exec_output", map[string]any{"id": r.ID, "offset": r.NextOffset, "wait_seconds": 120})
	if o.State != "exited" || o.Output != "second\n" || o.Result == nil || o.Result.ExitCode != 7 {
		t.Errorf("exec_output at the end: %+v", o)
	}
	// Its shell session saved nothing it should not have: the next exec
	// runs as usual.
	if r := ok[execResult](t, s.cs, "exec", map[string]any{"command": "echo next"}); r.Stdout != "next\n" {
		t.Errorf("next exec: %+v", r)
	}
	if msg := failing(t, s.cs, "exec", map[string]any{"command": "true", "wait_seconds": -1}); !strings.Contains(msg, "wait_seconds") {
		t.Errorf("negative wait: %q", msg)
	}
	if msg := failing(t, s.cs, "exec_output", map[string]any{"id": "nope"}); strings.Count(msg, "exec_list") != 1 {
		t.Errorf("unknown id: the hint is not said once: %q", msg)
	}
}

// A command that leaves a process running in the background says so in
// its result, naming how to stop it; exec_cancel with its id stops it.
func TestExecLeftoversNamed(t *testing.T) {
	s := startStdio(t)
	m := marker()
	res := s.call(t, "exec", map[string]any{"command": fmt.Sprintf("sleep %s >/dev/null 2>&1 & echo started", m)})
	r := decode[struct {
		ID          string `json:"id"`
		ExitCode    int    `json:"exit_code"`
		LeftRunning int    `json:"left_running"`
	}](t, res)
	txt := mcptest.ResultText(res)
	if r.ExitCode != 0 || r.LeftRunning != 1 {
		t.Fatalf("result: %+v\n%s", r, txt)
	}
	if !strings.Contains(txt, "left running: 1 background process") || !strings.Contains(txt, `exec_cancel {"id":"`+r.ID+`"}`) {
		t.Errorf("the text does not name the leftover and how to stop it: %s", txt)
	}
	if n := procs(t, m); n != 1 {
		t.Fatalf("%d leftover processes, want 1", n)
	}
	c := ok[execResult](t, s.cs, "exec_cancel", map[string]any{"id": r.ID})
	if c.Killed < 1 {
		t.Errorf("exec_cancel: %+v", c)
	}
	if n := procs(t, m); n != 0 {
		t.Errorf("%d leftover processes survive exec_cancel", n)
	}
}

// Long output is cut at line boundaries: the kept start ends with a whole
// line and the kept end starts with one; the marker counts the bytes and
// lines left out and names the spill file and the line to read on from.
func TestExecOutputCutAtLines(t *testing.T) {
	s := startStdio(t)
	const n = 100000
	res := s.call(t, "exec", map[string]any{"command": fmt.Sprintf("seq 1 %d", n)})
	var r struct {
		execResult
		Lines int64 `json:"stdout_dropped_lines"`
	}
	r.execResult = decode[execResult](t, res)
	r.Lines = decode[struct {
		Lines int64 `json:"stdout_dropped_lines"`
	}](t, res).Lines
	lines := strings.Split(strings.TrimSuffix(r.Stdout, "\n"), "\n")
	// Every kept line is whole: 1..h then t..n, and the counts add up.
	h := 0
	for h < len(lines) && lines[h] == strconv.Itoa(h+1) {
		h++
	}
	tail := lines[h:]
	for i, l := range tail {
		if want := strconv.Itoa(n - len(tail) + 1 + i); l != want {
			t.Fatalf("kept line %d of the end is %q, want %q (a line cut in part)", i, l, want)
		}
	}
	if h == 0 || len(tail) == 0 || r.Lines != int64(n-h-len(tail)) || int64(len(r.Stdout))+r.StdoutDrop != r.StdoutBytes {
		t.Fatalf("kept %d+%d lines, %d left out (want %d); bytes %d+%d of %d", h, len(tail), r.Lines, n-h-len(tail), len(r.Stdout), r.StdoutDrop, r.StdoutBytes)
	}
	txt := mcptest.ResultText(res)
	marker := fmt.Sprintf("[... %d bytes (%d lines) left out; file_read {\"path\":%q,\"offset\":%d} reads on from there ...]\n", r.StdoutDrop, r.Lines, r.StdoutSpill, h+1)
	if !strings.Contains(txt, strconv.Itoa(h)+"\n"+marker+strconv.Itoa(h+int(r.Lines)+1)+"\n") {
		t.Errorf("no marker %q between the kept lines in:\n%s...", marker, txt[:min(len(txt), 300)])
	}
	f := ok[fileRead](t, s.cs, "file_read", map[string]any{"path": r.StdoutSpill, "offset": h + 1, "limit": 1})
	if f.Content != strconv.Itoa(h+1)+"\n" {
		t.Errorf("the first line left out: %q", f.Content)
	}
}
