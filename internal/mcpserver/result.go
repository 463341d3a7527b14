package mcpserver

import (
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/runbox/runbox"
)

// ExecResult is how an exec ended (state "exited"), or that a background
// exec is running (state "running", with its id).
type ExecResult struct {
	ID      string `json:"id" jsonschema:"the exec's id (for exec_output, exec_cancel)"`
	Sandbox string `json:"sandbox" jsonschema:"the sandbox it ran in"`
	State   string `json:"state" jsonschema:"running (a background exec still going) or exited"`
	// The rest is set once the exec has exited.
	ExitCode    int     `json:"exit_code" jsonschema:"the command's exit status; 128+N when killed by signal N (143: TERM, 137: KILL)"`
	Signal      string  `json:"signal,omitempty" jsonschema:"the signal that ended the command, if any"`
	TimedOut    bool    `json:"timed_out" jsonschema:"the command outlived its timeout and was stopped with everything it started"`
	Cancelled   bool    `json:"cancelled" jsonschema:"the command was cancelled and stopped with everything it started"`
	OOMKilled   bool    `json:"oom_killed,omitempty" jsonschema:"the sandbox's memory limit killed a process of the command"`
	DurationMS  int64   `json:"duration_ms" jsonschema:"how long the command ran, in milliseconds"`
	TimeoutSecs float64 `json:"timeout_seconds" jsonschema:"the timeout the command ran with"`
	Stdout      string  `json:"stdout" jsonschema:"standard output: its start and its end when it was long (see stdout_dropped)"`
	Stderr      string  `json:"stderr" jsonschema:"standard error: its start and its end when it was long (see stderr_dropped)"`
	StdoutBytes int64   `json:"stdout_bytes" jsonschema:"bytes the command wrote to stdout"`
	StderrBytes int64   `json:"stderr_bytes" jsonschema:"bytes the command wrote to stderr"`
	StdoutDrop  int64   `json:"stdout_dropped" jsonschema:"bytes left out of the middle of stdout"`
	StderrDrop  int64   `json:"stderr_dropped" jsonschema:"bytes left out of the middle of stderr"`
	StdoutSpill string  `json:"stdout_spill,omitempty" jsonschema:"a file in the sandbox holding all of stdout (readable with file_read)"`
	StderrSpill string  `json:"stderr_spill,omitempty" jsonschema:"a file in the sandbox holding all of stderr (readable with file_read)"`
	Cwd         string  `json:"cwd,omitempty" jsonschema:"the shell session's working directory after the command"`
	Killed      int     `json:"killed" jsonschema:"processes runbox stopped (timeout or cancel)"`
	Survivors   int     `json:"survivors,omitempty" jsonschema:"processes that survived SIGKILL (should be 0)"`
	// stdoutHead and stderrHead are where the kept start of a stream ends
	// in Stdout/Stderr when bytes were left out after it (else 0).
	stdoutHead, stderrHead int
}

// execResult converts a runbox result.
func execResult(sandbox string, r runbox.Result, timeout time.Duration, head int) ExecResult {
	res := ExecResult{
		ID: r.ID, Sandbox: sandbox, State: "exited",
		ExitCode: r.ExitCode, Signal: r.Signal, TimedOut: r.TimedOut || r.IdleTimedOut, Cancelled: r.Cancelled,
		OOMKilled: r.OOMKilled, DurationMS: r.Duration.Milliseconds(), TimeoutSecs: timeout.Seconds(),
		StdoutBytes: r.StdoutBytes, StderrBytes: r.StderrBytes,
		StdoutDrop: r.StdoutDropped, StderrDrop: r.StderrDropped,
		StdoutSpill: r.StdoutSpill, StderrSpill: r.StderrSpill,
		Cwd: r.Cwd, Killed: r.Killed, Survivors: r.Survivors,
	}
	res.Stdout, res.stdoutHead = headTail(r.Stdout, r.StdoutDropped, head)
	res.Stderr, res.stderrHead = headTail(r.Stderr, r.StderrDropped, head)
	return res
}

// headTail returns a stream's kept bytes as text and, when bytes were left
// out after the first head bytes, where that head ends in the text.
func headTail(b []byte, dropped int64, head int) (string, int) {
	if dropped == 0 || head <= 0 || head > len(b) {
		return text(b), 0
	}
	h := text(b[:head])
	return h + text(b[head:]), len(h)
}

// text returns output as text: invalid UTF-8 bytes become U+FFFD.
func text(b []byte) string {
	if utf8.Valid(b) {
		return string(b)
	}
	return strings.ToValidUTF8(string(b), "\uFFFD")
}

// render is the result as a model reads it: one status line, then each
// non-empty stream, with a marker where bytes were left out.
func (r ExecResult) render() string {
	var b strings.Builder
	switch {
	case r.State == "running":
		fmt.Fprintf(&b, "started in the background: exec id %s in sandbox %s (timeout %gs). Read its output with exec_output, stop it with exec_cancel.", r.ID, r.Sandbox, r.TimeoutSecs)
		return b.String()
	case r.TimedOut:
		fmt.Fprintf(&b, "timed out after %gs: stopped with everything it started (%d processes); exit %d", r.TimeoutSecs, r.Killed, r.ExitCode)
	case r.Cancelled:
		fmt.Fprintf(&b, "cancelled: stopped with everything it started (%d processes); exit %d", r.Killed, r.ExitCode)
	default:
		fmt.Fprintf(&b, "exit %d", r.ExitCode)
	}
	if r.Signal != "" {
		fmt.Fprintf(&b, " (signal %s)", r.Signal)
	}
	if r.OOMKilled {
		b.WriteString(", out of memory")
	}
	fmt.Fprintf(&b, " in %s", (time.Duration(r.DurationMS) * time.Millisecond).String())
	if r.Cwd != "" {
		fmt.Fprintf(&b, ", cwd %s", r.Cwd)
	}
	if r.Survivors > 0 {
		fmt.Fprintf(&b, "; warning: %d processes survived SIGKILL", r.Survivors)
	}
	b.WriteString("\n")
	stream := func(name, out string, head int, dropped int64, spill string) {
		if out == "" && dropped == 0 {
			return
		}
		fmt.Fprintf(&b, "--- %s ---\n", name)
		if dropped > 0 {
			where := "not kept"
			if spill != "" {
				where = "all of it is in " + spill + " (file_read)"
			}
			b.WriteString(out[:head])
			fmt.Fprintf(&b, "\n[... %d bytes left out; %s ...]\n", dropped, where)
			out = out[head:]
		}
		b.WriteString(out)
		if !strings.HasSuffix(out, "\n") {
			b.WriteString("\n")
		}
	}
	stream("stdout", r.Stdout, r.stdoutHead, r.StdoutDrop, r.StdoutSpill)
	stream("stderr", r.Stderr, r.stderrHead, r.StderrDrop, r.StderrSpill)
	return b.String()
}
