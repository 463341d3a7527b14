package mcpserver

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/client"
)

// bgExec is a background exec this session started: the server follows it
// to its end, keeping its latest output for exec_output.
type bgExec struct {
	id      string
	sandbox string
	timeout time.Duration
	proc    *client.Process
	done    chan struct{} // closed once result/err are set

	mu      sync.Mutex
	changed chan struct{} // closed and replaced when output arrives or the exec ends
	buf     []byte        // the latest output, both streams in the order read
	start   int64         // offset of buf[0] in the whole output
	limit   int
	result  *ExecResult
	err     error
}

// append records output, keeping the latest limit bytes.
func (b *bgExec) append(c runbox.Chunk) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf = append(b.buf, c.Data...)
	if over := len(b.buf) - b.limit; over > 0 {
		b.buf = append(b.buf[:0], b.buf[over:]...)
		b.start += int64(over)
	}
	close(b.changed)
	b.changed = make(chan struct{})
}

// finish records how the exec ended.
func (b *bgExec) finish(res *ExecResult, err error) {
	b.mu.Lock()
	b.result, b.err = res, err
	close(b.changed)
	b.changed = make(chan struct{})
	b.mu.Unlock()
	close(b.done)
}

// startBackground starts an exec that the session follows to its end.
func (s *Server) startBackground(ctx context.Context, st *session, ref *sandboxRef, command string, timeout time.Duration, opts []client.ExecOption) (ExecResult, error) {
	b := &bgExec{sandbox: ref.sb.ID, timeout: timeout, done: make(chan struct{}), changed: make(chan struct{}), limit: s.cfg.BackgroundBufferBytes}
	p, err := ref.cl.StartSpec(ctx, runbox.ExecSpec{Command: command}, append(opts, client.WithOnChunk(b.append))...)
	if err != nil {
		return ExecResult{}, err
	}
	b.id, b.proc = p.ID(), p
	st.mu.Lock()
	st.bg[b.id] = b
	st.mu.Unlock()
	go func() {
		// The session's context, not the call's: the exec outlives this
		// call, and is cancelled (stop protocol) when the session ends.
		r, err := p.Wait(st.ctx)
		if err != nil && !(errors.Is(err, context.Canceled) && r.Cancelled) {
			b.finish(nil, err)
			return
		}
		res := execResult(b.sandbox, r, timeout, s.cfg.OutputBytes)
		st.noteSpills(res)
		b.finish(&res, nil)
	}()
	return ExecResult{ID: b.id, Sandbox: b.sandbox, State: "running", TimeoutSecs: timeout.Seconds()}, nil
}

// background returns the session's background exec id.
func (st *session) background(id string) (*bgExec, error) {
	st.mu.Lock()
	defer st.mu.Unlock()
	b, ok := st.bg[id]
	if !ok {
		return nil, fmt.Errorf("%w: %q is not a background exec of this MCP session (exec_list shows the sandbox's execs)", runbox.ErrExecNotFound, id)
	}
	return b, nil
}

// ExecOutputInput is what exec_output takes.
type ExecOutputInput struct {
	ID          string  `json:"id" jsonschema:"the background exec's id"`
	Offset      int64   `json:"offset,omitempty" jsonschema:"byte offset in the exec's output to read from (default 0; pass the last call's next_offset)"`
	WaitSeconds float64 `json:"wait_seconds,omitempty" jsonschema:"wait up to this many seconds (at most 60) for output past offset or for the exec's end (default 0: return at once)"`
	MaxBytes    int     `json:"max_bytes,omitempty" jsonschema:"return at most this many bytes (default 32768)"`
}

// ExecOutput is what exec_output returns.
type ExecOutput struct {
	ID         string      `json:"id"`
	State      string      `json:"state" jsonschema:"running or exited"`
	Output     string      `json:"output" jsonschema:"output from offset on, stdout and stderr merged in the order printed"`
	Offset     int64       `json:"offset" jsonschema:"where output starts in the exec's whole output"`
	NextOffset int64       `json:"next_offset" jsonschema:"the offset to read from next"`
	Skipped    int64       `json:"skipped,omitempty" jsonschema:"bytes from the asked offset on that are no longer kept (the server keeps the latest output only); output starts after them"`
	More       bool        `json:"more" jsonschema:"more output is already there past next_offset"`
	Result     *ExecResult `json:"result,omitempty" jsonschema:"how the exec ended, once it has"`
}

// defaultOutputBytes is exec_output's default max_bytes.
const defaultOutputBytes = 32 << 10

func (s *Server) execOutput(ctx context.Context, st *session, _ *mcp.CallToolRequest, in ExecOutputInput) (*mcp.CallToolResult, ExecOutput, error) {
	b, err := st.background(in.ID)
	if err != nil {
		return nil, ExecOutput{}, err
	}
	if in.Offset < 0 || in.MaxBytes < 0 || in.WaitSeconds < 0 {
		return nil, ExecOutput{}, fmt.Errorf("%w: offset, wait_seconds and max_bytes must not be negative", runbox.ErrInvalidSpec)
	}
	maxBytes := in.MaxBytes
	if maxBytes == 0 {
		maxBytes = defaultOutputBytes
	}
	wait := min(time.Duration(in.WaitSeconds*float64(time.Second)), MaxOutputWait)
	out, err := b.read(ctx, in.Offset, maxBytes, wait)
	if err != nil {
		return nil, ExecOutput{}, err
	}
	return textResult(out.render()), out, nil
}

// read returns the output from offset, waiting up to wait for some when
// there is none yet and the exec is running.
func (b *bgExec) read(ctx context.Context, offset int64, maxBytes int, wait time.Duration) (ExecOutput, error) {
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for {
		b.mu.Lock()
		end := b.start + int64(len(b.buf))
		if offset < end || b.result != nil || b.err != nil {
			defer b.mu.Unlock()
			return b.outputLocked(offset, maxBytes)
		}
		changed := b.changed
		b.mu.Unlock()
		select {
		case <-changed:
		case <-timer.C:
			b.mu.Lock()
			defer b.mu.Unlock()
			return b.outputLocked(offset, maxBytes)
		case <-ctx.Done():
			return ExecOutput{}, ctx.Err()
		}
	}
}

func (b *bgExec) outputLocked(offset int64, maxBytes int) (ExecOutput, error) {
	if b.err != nil {
		return ExecOutput{}, fmt.Errorf("background exec %s: %w", b.id, b.err)
	}
	out := ExecOutput{ID: b.id, State: "running", Result: b.result}
	if b.result != nil {
		out.State = "exited"
	}
	end := b.start + int64(len(b.buf))
	if offset > end {
		offset = end
	}
	if offset < b.start {
		out.Skipped = b.start - offset
		offset = b.start
	}
	from := int(offset - b.start)
	to := min(len(b.buf), from+maxBytes)
	out.Output = text(b.buf[from:to])
	out.Offset, out.NextOffset = offset, b.start+int64(to)
	out.More = to < len(b.buf)
	return out, nil
}

func (o ExecOutput) render() string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "exec %s is %s; output bytes %d to %d", o.ID, o.State, o.Offset, o.NextOffset)
	if o.Skipped > 0 {
		fmt.Fprintf(&sb, " (%d earlier bytes are no longer kept)", o.Skipped)
	}
	if o.More {
		sb.WriteString("; more output follows: call again with offset next_offset")
	}
	sb.WriteString("\n")
	sb.WriteString(o.Output)
	if o.Output != "" && !strings.HasSuffix(o.Output, "\n") {
		sb.WriteString("\n")
	}
	if o.Result != nil {
		sb.WriteString("=== result ===\n")
		sb.WriteString(o.Result.render())
	}
	return sb.String()
}

// ExecCancelInput is what exec_cancel takes.
type ExecCancelInput struct {
	ID      string `json:"id" jsonschema:"the exec's id"`
	Sandbox string `json:"sandbox,omitempty" jsonschema:"sandbox id or name, for an exec this session did not start in the background (default: this session's default sandbox)"`
}

func (s *Server) execCancel(ctx context.Context, st *session, _ *mcp.CallToolRequest, in ExecCancelInput) (*mcp.CallToolResult, ExecResult, error) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.CallTimeout)
	defer cancel()
	if b, err := st.background(in.ID); err == nil {
		if err := b.proc.Cancel(ctx); err != nil {
			return nil, ExecResult{}, err
		}
		select {
		case <-b.done:
		case <-ctx.Done():
			return nil, ExecResult{}, fmt.Errorf("cancel exec %s: %w", in.ID, ctx.Err())
		}
		if b.err != nil {
			return nil, ExecResult{}, b.err
		}
		return textResult(b.result.render()), *b.result, nil
	}
	ref, err := st.sandbox(ctx, in.Sandbox)
	if err != nil {
		return nil, ExecResult{}, err
	}
	if err := ref.cl.Cancel(ctx, in.ID, 0); err != nil {
		return nil, ExecResult{}, st.lost(ref, err)
	}
	// Stopped: its result is there to read.
	r, err := ref.cl.Attach(ctx, in.ID)
	if err != nil {
		return nil, ExecResult{}, st.lost(ref, err)
	}
	res := execResult(ref.sb.ID, r, 0, 0)
	return textResult(res.render()), res, nil
}

// ExecListInput is what exec_list takes.
type ExecListInput struct {
	Sandbox string `json:"sandbox,omitempty" jsonschema:"sandbox id or name (default: this session's default sandbox)"`
}

// ExecInfo describes one exec in exec_list.
type ExecInfo struct {
	ID            string `json:"id"`
	State         string `json:"state" jsonschema:"starting, running, stopping or exited"`
	Command       string `json:"command"`
	StartedAt     string `json:"started_at" jsonschema:"RFC 3339"`
	ExitCode      *int   `json:"exit_code,omitempty" jsonschema:"set once exited"`
	TimedOut      bool   `json:"timed_out,omitempty"`
	Cancelled     bool   `json:"cancelled,omitempty"`
	LiveProcesses int    `json:"live_processes" jsonschema:"its processes still alive (background children of an exited command count)"`
	Background    bool   `json:"background,omitempty" jsonschema:"started in the background by this MCP session"`
}

// ExecList is what exec_list returns.
type ExecList struct {
	Sandbox string     `json:"sandbox"`
	Execs   []ExecInfo `json:"execs"`
}

func (s *Server) execList(ctx context.Context, st *session, _ *mcp.CallToolRequest, in ExecListInput) (*mcp.CallToolResult, ExecList, error) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.CallTimeout)
	defer cancel()
	ref, err := st.sandbox(ctx, in.Sandbox)
	if err != nil {
		return nil, ExecList{}, err
	}
	infos, err := ref.cl.List(ctx)
	if err != nil {
		return nil, ExecList{}, st.lost(ref, err)
	}
	out := ExecList{Sandbox: ref.sb.ID, Execs: make([]ExecInfo, 0, len(infos))}
	var sb strings.Builder
	fmt.Fprintf(&sb, "%d execs in sandbox %s\n", len(infos), ref.sb.ID)
	for _, e := range infos {
		_, bgErr := st.background(e.ID)
		info := ExecInfo{ID: e.ID, State: e.State.String(), Command: e.Command,
			StartedAt: e.StartedAt.UTC().Format(time.RFC3339), LiveProcesses: e.LiveProcesses, Background: bgErr == nil}
		status := e.State.String()
		if e.State == runbox.ExecExited && e.Result == nil {
			// The leader exited; the stop protocol is still confirming
			// that nothing else survives.
			info.State, status = "stopping", "stopping"
		}
		if r := e.Result; r != nil {
			code := r.ExitCode
			info.ExitCode, info.TimedOut, info.Cancelled = &code, r.TimedOut, r.Cancelled
			status = fmt.Sprintf("exited %d", code)
		}
		out.Execs = append(out.Execs, info)
		fmt.Fprintf(&sb, "%s  %-10s  %d live  %s\n", e.ID, status, e.LiveProcesses, oneLine(e.Command, 80))
	}
	return textResult(sb.String()), out, nil
}

// oneLine shortens s to one line of at most n runes.
func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}
