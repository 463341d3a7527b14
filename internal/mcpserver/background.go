package mcpserver

import (
	"bytes"
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

// bgExec is an exec this session started: the server follows it to its
// end, keeping its latest output for exec_output, whether the call that
// started it still waits for it or has returned.
type bgExec struct {
	id      string
	sandbox string
	timeout time.Duration
	started time.Time
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

// tail returns the latest n bytes of output as text.
func (b *bgExec) tail(n int) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return text(b.buf[max(0, len(b.buf)-n):])
}

// running is the result of an exec that is still running after waiting
// wait: its output so far (keep bytes of its start and of its end, cut at
// line boundaries; none when keep is 0) and where exec_output goes on.
func (b *bgExec) running(wait time.Duration, keep int) ExecResult {
	b.mu.Lock()
	defer b.mu.Unlock()
	res := ExecResult{ID: b.id, Sandbox: b.sandbox, State: "running", TimeoutSecs: b.timeout.Seconds(),
		DurationMS: time.Since(b.started).Milliseconds(), waited: wait}
	if keep > 0 {
		res.outputFrom = b.start
		res.Output, res.outputHead, res.OutputDrop, res.OutputLine = cutLines(b.buf, keep)
	}
	res.NextOffset = b.start + int64(len(b.buf))
	return res
}

// startExec starts an exec that the session follows to its end.
func (s *Server) startExec(ctx context.Context, st *session, ref *sandboxRef, command string, timeout time.Duration, opts []client.ExecOption) (*bgExec, error) {
	b := &bgExec{sandbox: ref.sb.ID, timeout: timeout, started: time.Now(), done: make(chan struct{}), changed: make(chan struct{}), limit: s.cfg.BackgroundBufferBytes}
	p, err := ref.cl.StartSpec(ctx, runbox.ExecSpec{Command: command}, append(opts, client.WithOnChunk(b.append))...)
	if err != nil {
		return nil, err
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
		s.countDropped(st, ref, &res)
		st.noteSpills(res)
		b.finish(&res, nil)
	}()
	return b, nil
}

// background returns the session's exec id.
func (st *session) background(id string) (*bgExec, error) {
	st.mu.Lock()
	defer st.mu.Unlock()
	b, ok := st.bg[id]
	if !ok {
		return nil, fmt.Errorf("%w: %q is not an exec of this MCP session", runbox.ErrExecNotFound, id)
	}
	return b, nil
}

// ExecOutputInput is what exec_output takes.
type ExecOutputInput struct {
	ID          string  `json:"id" jsonschema:"the exec id"`
	Offset      int64   `json:"offset,omitempty" jsonschema:"byte offset to read from: the last result's next_offset (default 0)"`
	WaitSeconds float64 `json:"wait_seconds,omitempty" jsonschema:"wait up to this long for the command to finish (default 0: return at once)"`
}

// ExecOutput is what exec_output returns.
type ExecOutput struct {
	ID         string      `json:"id"`
	State      string      `json:"state"`
	Output     string      `json:"output"`
	Offset     int64       `json:"offset"`
	NextOffset int64       `json:"next_offset"`
	Skipped    int64       `json:"skipped,omitempty"`
	More       bool        `json:"more,omitempty"`
	Result     *ExecResult `json:"result,omitempty"`
}

// outputBytes bounds the output one exec_output returns.
const outputBytes = 32 << 10

func (s *Server) execOutput(ctx context.Context, st *session, _ *mcp.CallToolRequest, in ExecOutputInput) (*mcp.CallToolResult, ExecOutput, error) {
	b, err := st.background(in.ID)
	if err != nil {
		return nil, ExecOutput{}, err
	}
	if in.Offset < 0 {
		return nil, ExecOutput{}, fmt.Errorf("%w: offset must not be negative", runbox.ErrInvalidSpec)
	}
	wait, err := s.waitFor(in.WaitSeconds, 0)
	if err != nil {
		return nil, ExecOutput{}, err
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	select {
	case <-b.done:
	case <-timer.C:
	case <-ctx.Done():
		return nil, ExecOutput{}, ctx.Err()
	}
	b.mu.Lock()
	out, err := b.outputLocked(in.Offset, outputBytes)
	b.mu.Unlock()
	if err != nil {
		return nil, ExecOutput{}, err
	}
	return textResult(out.render()), out, nil
}

func (b *bgExec) outputLocked(offset int64, maxBytes int) (ExecOutput, error) {
	if b.err != nil {
		return ExecOutput{}, fmt.Errorf("exec %s: %w", b.id, b.err)
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
	if to < len(b.buf) {
		// Cut at a line boundary when there is one.
		if nl := bytes.LastIndexByte(b.buf[from:to], '\n'); nl >= 0 {
			to = from + nl + 1
		}
	}
	out.Output = text(b.buf[from:to])
	out.Offset, out.NextOffset = offset, b.start+int64(to)
	out.More = to < len(b.buf)
	return out, nil
}

func (o ExecOutput) render() string {
	var sb strings.Builder
	if o.Result != nil {
		sb.WriteString(o.Result.statusLine())
	} else {
		fmt.Fprintf(&sb, "exec %s is still running", o.ID)
	}
	fmt.Fprintf(&sb, "; output bytes %d-%d", o.Offset, o.NextOffset)
	if o.Skipped > 0 {
		fmt.Fprintf(&sb, " (%d bytes before are no longer kept)", o.Skipped)
	}
	switch {
	case o.More:
		fmt.Fprintf(&sb, "; more follows: exec_output {\"id\":%q,\"offset\":%d}", o.ID, o.NextOffset)
	case o.Result == nil:
		fmt.Fprintf(&sb, "; exec_output {\"id\":%q,\"offset\":%d,\"wait_seconds\":30} waits for more", o.ID, o.NextOffset)
	}
	sb.WriteString("\n")
	sb.WriteString(o.Output)
	if o.Output != "" && !strings.HasSuffix(o.Output, "\n") {
		sb.WriteString("\n")
	}
	if o.Result != nil {
		sb.WriteString(o.Result.leftovers())
	}
	return sb.String()
}

// ExecCancelInput is what exec_cancel takes.
type ExecCancelInput struct {
	ID      string `json:"id" jsonschema:"the exec id"`
	Sandbox string `json:"sandbox,omitempty" jsonschema:"sandbox id or name, for an exec this session did not start (default: this session's)"`
}

func (s *Server) execCancel(ctx context.Context, st *session, _ *mcp.CallToolRequest, in ExecCancelInput) (*mcp.CallToolResult, ExecResult, error) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.CallTimeout)
	defer cancel()
	if b, err := st.background(in.ID); err == nil {
		return s.cancelOwn(ctx, st, b)
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

// cancelOwn stops an exec of this session: a running one with everything
// it started, an ended one's leftovers (the processes it left running).
func (s *Server) cancelOwn(ctx context.Context, st *session, b *bgExec) (*mcp.CallToolResult, ExecResult, error) {
	select {
	case <-b.done:
		if b.err != nil {
			return nil, ExecResult{}, b.err
		}
		if b.result.LeftRunning == 0 {
			return textResult(b.result.render()), *b.result, nil
		}
	default:
	}
	if err := b.proc.Cancel(ctx); err != nil {
		return nil, ExecResult{}, err
	}
	select {
	case <-b.done:
	case <-ctx.Done():
		return nil, ExecResult{}, fmt.Errorf("cancel exec %s: %w", b.id, ctx.Err())
	}
	if b.err != nil {
		return nil, ExecResult{}, b.err
	}
	res := *b.result
	if res.LeftRunning > 0 {
		// It had ended, leaving processes behind: wait until the stop
		// protocol has stopped them.
		ref, err := st.sandbox(ctx, b.sandbox)
		if err != nil {
			return nil, ExecResult{}, err
		}
		if err := waitNoneLive(ctx, ref, b.id); err != nil {
			return nil, ExecResult{}, st.lost(ref, err)
		}
		res.Killed += res.LeftRunning
		res.LeftRunning = 0
		return textResult(fmt.Sprintf("stopped the %d processes exec %s left running\n", res.Killed, b.id) + res.render()), res, nil
	}
	return textResult(res.render()), res, nil
}

// waitNoneLive waits until the exec id has no live process.
func waitNoneLive(ctx context.Context, ref *sandboxRef, id string) error {
	for {
		infos, err := ref.cl.List(ctx, client.ListWithoutOutput())
		if err != nil {
			return err
		}
		live := 0
		for _, e := range infos {
			if e.ID == id {
				live = e.LiveProcesses
			}
		}
		if live == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("stop the processes exec %s left running: %d still live: %w", id, live, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// ExecListInput is what exec_list takes.
type ExecListInput struct {
	Sandbox string `json:"sandbox,omitempty" jsonschema:"sandbox id or name (default: this session's default sandbox)"`
}

// ExecInfo describes one exec in exec_list.
type ExecInfo struct {
	ID            string `json:"id"`
	State         string `json:"state"`
	Command       string `json:"command"`
	StartedAt     string `json:"started_at"`
	ExitCode      *int   `json:"exit_code,omitempty"`
	TimedOut      bool   `json:"timed_out,omitempty"`
	Cancelled     bool   `json:"cancelled,omitempty"`
	LiveProcesses int    `json:"live_processes"`
	Background    bool   `json:"background,omitempty"`
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
	infos, err := ref.cl.List(ctx, client.ListWithoutOutput())
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
