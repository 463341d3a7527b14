package mcpserver

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"path"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/client"
)

// ExecResult is how an exec ended (state "exited"), or that it is still
// running (state "running": started in the background, or still going when
// exec stopped waiting for it), with its id for exec_output. Its fields
// carry no schema descriptions: the result's text, which a model reads,
// says what each means, and tools/list stays small.
type ExecResult struct {
	ID          string  `json:"id"`
	Sandbox     string  `json:"sandbox"`
	State       string  `json:"state"`
	ExitCode    int     `json:"exit_code"`
	Signal      string  `json:"signal,omitempty"`
	TimedOut    bool    `json:"timed_out,omitempty"`
	Cancelled   bool    `json:"cancelled,omitempty"`
	OOMKilled   bool    `json:"oom_killed,omitempty"`
	DurationMS  int64   `json:"duration_ms"`
	TimeoutSecs float64 `json:"timeout_seconds"`
	Cwd         string  `json:"cwd,omitempty"`
	Stdout      string  `json:"stdout"`
	Stderr      string  `json:"stderr"`
	StdoutBytes int64   `json:"stdout_bytes,omitempty"`
	StderrBytes int64   `json:"stderr_bytes,omitempty"`
	StdoutDrop  int64   `json:"stdout_dropped,omitempty"`
	StderrDrop  int64   `json:"stderr_dropped,omitempty"`
	StdoutLines int64   `json:"stdout_dropped_lines,omitempty"`
	StderrLines int64   `json:"stderr_dropped_lines,omitempty"`
	StdoutSpill string  `json:"stdout_spill,omitempty"`
	StderrSpill string  `json:"stderr_spill,omitempty"`
	Killed      int     `json:"killed,omitempty"`
	LeftRunning int     `json:"left_running,omitempty"`
	Survivors   int     `json:"survivors,omitempty"`
	// A running exec's output so far (both streams merged) and where
	// exec_output goes on.
	Output     string `json:"output,omitempty"`
	OutputDrop int64  `json:"output_dropped,omitempty"`
	OutputLine int64  `json:"output_dropped_lines,omitempty"`
	NextOffset int64  `json:"next_offset,omitempty"`
	// stdoutHead, stderrHead and outputHead are where the kept start of a
	// stream ends in its text when bytes were left out after it (else 0);
	// outputFrom is the offset of Output's first byte; waited how long exec
	// waited.
	stdoutHead, stderrHead, outputHead int
	outputFrom                         int64
	waited                             time.Duration
}

// execResult converts a runbox result, its streams cut at line
// boundaries (head is how many bytes of the start the daemon kept).
func execResult(sandbox string, r runbox.Result, timeout time.Duration, head int) ExecResult {
	res := ExecResult{
		ID: r.ID, Sandbox: sandbox, State: "exited",
		ExitCode: r.ExitCode, Signal: r.Signal, TimedOut: r.TimedOut || r.IdleTimedOut, Cancelled: r.Cancelled,
		OOMKilled: r.OOMKilled, DurationMS: r.Duration.Milliseconds(), TimeoutSecs: timeout.Seconds(),
		StdoutBytes: r.StdoutBytes, StderrBytes: r.StderrBytes,
		StdoutSpill: r.StdoutSpill, StderrSpill: r.StderrSpill,
		Cwd: r.Cwd, Killed: r.Killed, Survivors: r.Survivors, LeftRunning: r.LeftRunning,
	}
	res.Stdout, res.stdoutHead, res.StdoutDrop = headTail(r.Stdout, r.StdoutDropped, head)
	res.Stderr, res.stderrHead, res.StderrDrop = headTail(r.Stderr, r.StderrDropped, head)
	return res
}

// headTail returns a stream's kept bytes as text, where its kept start
// ends in that text, and the bytes left out, when the daemon left out
// dropped bytes after the first head bytes: the start is cut back to its
// last line end and the end begins after its first one, so that no line
// is shown in part.
func headTail(b []byte, dropped int64, head int) (string, int, int64) {
	if dropped == 0 || head <= 0 || head > len(b) {
		return text(b), 0, 0
	}
	h, t := b[:head], b[head:]
	if nl := bytes.LastIndexByte(h, '\n'); nl >= 0 {
		dropped += int64(len(h) - nl - 1)
		h = h[:nl+1]
	}
	if nl := bytes.IndexByte(t, '\n'); nl >= 0 && nl < len(t)-1 {
		dropped += int64(nl + 1)
		t = t[nl+1:]
	}
	ht := text(h)
	return ht + text(t), len(ht), dropped
}

// cutLines keeps keep bytes of the start and of the end of b, cut at line
// boundaries, and says where the start ends in the text and how many bytes
// and whole lines were left out between.
func cutLines(b []byte, keep int) (out string, head int, dropped, lines int64) {
	if len(b) <= 2*keep {
		return text(b), 0, 0, 0
	}
	h, t := b[:keep], b[len(b)-keep:]
	if nl := bytes.LastIndexByte(h, '\n'); nl >= 0 {
		h = h[:nl+1]
	}
	if nl := bytes.IndexByte(t, '\n'); nl >= 0 && nl < len(t)-1 {
		t = t[nl+1:]
	}
	mid := b[len(h) : len(b)-len(t)]
	ht := text(h)
	return ht + text(t), len(ht), int64(len(mid)), int64(bytes.Count(mid, []byte{'\n'}))
}

// maxCountBytes bounds how much of a spill file countDropped reads to
// count the lines left out.
const maxCountBytes = 64 << 20

// countDropped counts the lines left out of each stream of res by reading
// that part of its spill file (the only place it is); a stream without a
// spill file, or with too much left out, keeps no count.
func (s *Server) countDropped(st *session, ref *sandboxRef, res *ExecResult) {
	ctx, cancel := context.WithTimeout(st.ctx, s.cfg.CallTimeout)
	defer cancel()
	count := func(spill, kept string, head int, dropped int64) int64 {
		if spill == "" || dropped == 0 || dropped > maxCountBytes {
			return 0
		}
		// The kept start is text; its length in bytes is where the middle
		// starts unless invalid UTF-8 was replaced (then no count).
		if !utf8.ValidString(kept[:head]) {
			return 0
		}
		rc, _, err := ref.cl.ReadFile(ctx, path.Base(spill), client.InRoot(path.Dir(spill)), client.WithRange(int64(head), dropped))
		if err != nil {
			return 0
		}
		defer rc.Close()
		var n int64
		buf := make([]byte, 64<<10)
		for {
			k, err := rc.Read(buf)
			n += int64(bytes.Count(buf[:k], []byte{'\n'}))
			if err == io.EOF {
				return n
			}
			if err != nil {
				return 0
			}
		}
	}
	res.StdoutLines = count(res.StdoutSpill, res.Stdout, res.stdoutHead, res.StdoutDrop)
	res.StderrLines = count(res.StderrSpill, res.Stderr, res.stderrHead, res.StderrDrop)
}

// text returns output as text: invalid UTF-8 bytes become U+FFFD.
func text(b []byte) string {
	if utf8.Valid(b) {
		return string(b)
	}
	return strings.ToValidUTF8(string(b), "\uFFFD")
}

// seconds formats a duration in milliseconds for a model to read.
func seconds(ms int64) string {
	d := time.Duration(ms) * time.Millisecond
	if d >= time.Second {
		d = d.Round(100 * time.Millisecond)
	}
	return d.String()
}

// statusLine is the result's first line: the exit status, or that it
// timed out, was cancelled or is still running; the duration; the cwd.
func (r ExecResult) statusLine() string {
	var b strings.Builder
	switch {
	case r.State == "running" && r.waited == 0:
		fmt.Fprintf(&b, "started in the background: exec id %s (stopped at its timeout of %gs). exec_output {\"id\":%q} reads its output, exec_cancel {\"id\":%q} stops it.",
			r.ID, r.TimeoutSecs, r.ID, r.ID)
		return b.String()
	case r.State == "running":
		fmt.Fprintf(&b, "still running after %s (exec id %s; it runs on until it ends or its timeout of %gs). Collect the rest with exec_output {\"id\":%q,\"offset\":%d,\"wait_seconds\":30}; stop it with exec_cancel {\"id\":%q}.",
			seconds(r.waited.Milliseconds()), r.ID, r.TimeoutSecs, r.ID, r.NextOffset, r.ID)
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
	fmt.Fprintf(&b, " in %s", seconds(r.DurationMS))
	if r.Cwd != "" {
		fmt.Fprintf(&b, ", cwd %s", r.Cwd)
	}
	if r.Survivors > 0 {
		fmt.Fprintf(&b, "; warning: %d processes survived SIGKILL", r.Survivors)
	}
	return b.String()
}

// leftovers says what the command left running and how to stop it ("" for
// nothing).
func (r ExecResult) leftovers() string {
	if r.LeftRunning == 0 {
		return ""
	}
	return fmt.Sprintf("--- left running: %d background process(es) it started (a server, a \"&\") still run; exec_cancel {\"id\":%q} stops them, exec_list shows them ---\n",
		r.LeftRunning, r.ID)
}

// render is the result as a model reads it: the status line, then each
// non-empty stream cut at line boundaries with a marker where lines were
// left out, then what the command left running.
func (r ExecResult) render() string {
	var b strings.Builder
	b.WriteString(r.statusLine())
	b.WriteString("\n")
	stream := func(name, out string, head int, dropped, lines int64, firstLine string) {
		if out == "" && dropped == 0 {
			return
		}
		fmt.Fprintf(&b, "--- %s ---\n", name)
		if dropped > 0 {
			b.WriteString(out[:head])
			fmt.Fprintf(&b, "[... %d bytes", dropped)
			if lines > 0 {
				fmt.Fprintf(&b, " (%d lines)", lines)
			}
			fmt.Fprintf(&b, " left out; %s ...]\n", firstLine)
			out = out[head:]
		}
		b.WriteString(out)
		if !strings.HasSuffix(out, "\n") {
			b.WriteString("\n")
		}
	}
	spillHint := func(spill, kept string, head int) string {
		if spill == "" {
			return "not kept: rerun with less output (| tail, | grep, > file)"
		}
		return fmt.Sprintf("file_read {\"path\":%q,\"offset\":%d} reads on from there", spill, strings.Count(kept[:head], "\n")+1)
	}
	if r.State == "running" {
		stream("output so far (stdout and stderr)", r.Output, r.outputHead, r.OutputDrop, r.OutputLine,
			fmt.Sprintf("exec_output {\"id\":%q,\"offset\":%d} reads them", r.ID, r.outputFrom+int64(r.outputHead)))
		return b.String()
	}
	if r.StdoutDrop > 0 {
		stream("stdout", r.Stdout, r.stdoutHead, r.StdoutDrop, r.StdoutLines, spillHint(r.StdoutSpill, r.Stdout, r.stdoutHead))
	} else {
		stream("stdout", r.Stdout, 0, 0, 0, "")
	}
	if r.StderrDrop > 0 {
		stream("stderr", r.Stderr, r.stderrHead, r.StderrDrop, r.StderrLines, spillHint(r.StderrSpill, r.Stderr, r.stderrHead))
	} else {
		stream("stderr", r.Stderr, 0, 0, 0, "")
	}
	b.WriteString(r.leftovers())
	return b.String()
}
