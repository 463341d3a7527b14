package mcpserver

import (
	"context"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/client"
)

// ExecInput is what the exec tool takes.
type ExecInput struct {
	Command        string            `json:"command" jsonschema:"shell command (bash -c)"`
	Background     bool              `json:"background,omitempty" jsonschema:"return at once with the exec id: for servers and watchers"`
	TimeoutSeconds float64           `json:"timeout_seconds,omitempty" jsonschema:"stop it, with everything it started, after this long (default 120)"`
	WaitSeconds    float64           `json:"wait_seconds,omitempty" jsonschema:"return after this long with the command still running (default 30); keep below your client's request timeout"`
	Cwd            string            `json:"cwd,omitempty" jsonschema:"working directory for this command only"`
	Env            map[string]string `json:"env,omitempty" jsonschema:"extra environment variables"`
	Stdin          string            `json:"stdin,omitempty" jsonschema:"text on standard input (default: none)"`
	Sandbox        string            `json:"sandbox,omitempty" jsonschema:"sandbox id or name (default: this session's)"`
}

// hintOn and hintOff are the values of the tools' optional annotation
// hints (the SDK takes them by pointer).
var (
	hintOn  = true
	hintOff = false
)

func (s *Server) addExecTools() {
	mcp.AddTool(s.mcp, &mcp.Tool{
		Name:  "exec",
		Title: "Run a shell command",
		Description: `Run a shell command in the sandbox: builds, tests, git, package installs, scripts. Commands share one shell session: cd and export carry over.
Waits up to wait_seconds (default 30) for the command. A command still running then keeps running and the result says so, with its exec id: collect the rest with exec_output. At timeout_seconds (default 120) it is stopped with everything it started.
For a server or watcher set background: true (returns at once; exec_output reads it, exec_cancel stops it).
The result's first line gives the exit status, duration and cwd; long output keeps its start and end, cut at line boundaries, and says where the rest is.
Not for reading or editing files: file_read, file_edit and file_write are cheaper and exact.`,
		Annotations: &mcp.ToolAnnotations{DestructiveHint: &hintOn, OpenWorldHint: &hintOn},
	}, call(s, s.exec))
	mcp.AddTool(s.mcp, &mcp.Tool{
		Name:  "exec_output",
		Title: "Collect a running command's output",
		Description: `Read the output of an exec that was still running (or started with background: true), from offset on (stdout and stderr merged), and its result once it has ended.
Pass the offset the last result gave; wait_seconds waits for the command to finish (returning as soon as it does).`,
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true, OpenWorldHint: &hintOff},
	}, call(s, s.execOutput))
	mcp.AddTool(s.mcp, &mcp.Tool{
		Name:        "exec_cancel",
		Title:       "Stop a command",
		Description: `Stop an exec and every process it started, background ones included (SIGTERM, a grace period, then SIGKILL), and return its result.`,
		Annotations: &mcp.ToolAnnotations{DestructiveHint: &hintOn, IdempotentHint: true, OpenWorldHint: &hintOff},
	}, call(s, s.execCancel))
	mcp.AddTool(s.mcp, &mcp.Tool{
		Name:        "exec_list",
		Title:       "List commands",
		Description: `List the sandbox's execs: running ones, and recently ended ones with their exit codes and the processes they left running.`,
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true, OpenWorldHint: &hintOff},
	}, call(s, s.execList))
}

// timeoutFor returns the timeout an exec runs with: the asked one, or the
// default. One above MaxTimeout, the operator's ceiling, is refused.
func (s *Server) timeoutFor(seconds float64, background bool) (time.Duration, error) {
	switch {
	case math.IsNaN(seconds) || math.IsInf(seconds, 0) || seconds < 0:
		return 0, fmt.Errorf("%w: timeout_seconds must be a positive number of seconds, not %v", runbox.ErrInvalidSpec, seconds)
	case seconds == 0 && background:
		return s.cfg.MaxTimeout, nil
	case seconds == 0:
		return s.cfg.Timeout, nil
	case seconds > s.cfg.MaxTimeout.Seconds():
		return 0, fmt.Errorf("%w: timeout_seconds %v: at most %v seconds (the ceiling)",
			ErrOverCeiling, seconds, s.cfg.MaxTimeout.Seconds())
	case seconds == s.cfg.MaxTimeout.Seconds():
		return s.cfg.MaxTimeout, nil
	}
	return max(time.Duration(seconds*float64(time.Second)), time.Millisecond), nil
}

// call runs a tool's body as one call of the MCP session req came on: its
// context ends with the call (an MCP cancellation) or with the session.
func call[In, Out any](s *Server, body func(ctx context.Context, st *session, req *mcp.CallToolRequest, in In) (*mcp.CallToolResult, Out, error)) mcp.ToolHandlerFor[In, Out] {
	return func(ctx context.Context, req *mcp.CallToolRequest, in In) (*mcp.CallToolResult, Out, error) {
		var zero Out
		st, err := s.sessionFor(req.Session)
		if err != nil {
			return nil, zero, err
		}
		ctx, done, err := st.begin(ctx)
		if err != nil {
			return nil, zero, err
		}
		defer done()
		res, out, err := body(ctx, st, req, in)
		if err != nil {
			return nil, zero, explain(err)
		}
		return res, out, nil
	}
}

// textResult is a tool result whose text is txt (the structured result is
// added by the SDK).
func textResult(txt string) *mcp.CallToolResult {
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: txt}}}
}

// waitFor returns how long a call waits: the asked number of seconds, or
// def; at most the operator's MaxWait.
func (s *Server) waitFor(seconds float64, def time.Duration) (time.Duration, error) {
	switch {
	case math.IsNaN(seconds) || math.IsInf(seconds, 0) || seconds < 0:
		return 0, fmt.Errorf("%w: wait_seconds must be a positive number of seconds, not %v", runbox.ErrInvalidSpec, seconds)
	case seconds == 0:
		return def, nil
	case seconds >= s.cfg.MaxWait.Seconds():
		return s.cfg.MaxWait, nil
	}
	return time.Duration(seconds * float64(time.Second)), nil
}

func (s *Server) exec(ctx context.Context, st *session, req *mcp.CallToolRequest, in ExecInput) (*mcp.CallToolResult, ExecResult, error) {
	if strings.TrimSpace(in.Command) == "" {
		return nil, ExecResult{}, fmt.Errorf("%w: command is empty", runbox.ErrInvalidSpec)
	}
	timeout, err := s.timeoutFor(in.TimeoutSeconds, in.Background)
	if err != nil {
		return nil, ExecResult{}, err
	}
	wait, err := s.waitFor(in.WaitSeconds, s.cfg.Wait)
	if err != nil {
		return nil, ExecResult{}, err
	}
	ref, err := st.sandbox(ctx, in.Sandbox)
	if err != nil {
		return nil, ExecResult{}, err
	}
	st.mu.Lock()
	ref.shellUsed = true
	st.mu.Unlock()
	opts := []client.ExecOption{
		client.WithTimeout(timeout), client.WithSession(st.shell),
		client.WithOutputLimits(s.cfg.OutputBytes, s.cfg.OutputBytes),
	}
	if s.cfg.Grace > 0 {
		opts = append(opts, client.WithGrace(s.cfg.Grace))
	}
	if in.Cwd != "" {
		opts = append(opts, client.WithCwd(in.Cwd))
	}
	for k, v := range in.Env {
		opts = append(opts, client.WithEnv(k, v))
	}
	if in.Stdin != "" {
		opts = append(opts, client.WithStdin([]byte(in.Stdin)))
	}
	b, err := s.startExec(ctx, st, ref, in.Command, timeout, opts)
	if err != nil {
		return nil, ExecResult{}, st.lost(ref, err)
	}
	if in.Background {
		res := b.running(0, 0)
		return textResult(res.render()), res, nil
	}
	if tok := req.Params.GetProgressToken(); tok != nil {
		p := &progress{session: req.Session, token: tok, total: timeout.Seconds(), start: time.Now(), b: b}
		stop := p.run(ctx, s.cfg.ProgressInterval)
		defer stop()
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	select {
	case <-b.done:
	case <-timer.C:
		// The command runs on under its own timeout; exec_output
		// continues from here.
		res := b.running(wait, s.cfg.OutputBytes)
		return textResult(res.render()), res, nil
	case <-ctx.Done():
		// The call was cancelled (or the session ended): stop the command
		// with the stop protocol and return how it ended.
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.CallTimeout)
		defer cancel()
		if err := b.proc.Cancel(cctx); err != nil {
			return nil, ExecResult{}, st.lost(ref, err)
		}
		select {
		case <-b.done:
		case <-cctx.Done():
			return nil, ExecResult{}, fmt.Errorf("cancel exec %s: %w", b.id, cctx.Err())
		}
	}
	if b.err != nil {
		st.forgetExec(b, false)
		return nil, ExecResult{}, st.lost(ref, b.err)
	}
	res := *b.result
	// The model has the whole result: keep no copy of the output, nor the
	// exec at all unless exec_cancel may still stop what it left running.
	st.forgetExec(b, res.LeftRunning > 0)
	return textResult(res.render()), res, nil
}

// forgetExec drops an ended exec whose result the model was given from the
// session (keep: only its output, for exec_cancel to stop its leftovers).
func (st *session) forgetExec(b *bgExec, keep bool) {
	b.mu.Lock()
	b.start += int64(len(b.buf))
	b.buf = nil
	b.mu.Unlock()
	if !keep {
		st.mu.Lock()
		delete(st.bg, b.id)
		st.mu.Unlock()
	}
}

// noteSpills lets file_read open the spill files of a result this session
// was given.
func (st *session) noteSpills(res ExecResult) {
	st.mu.Lock()
	defer st.mu.Unlock()
	for _, p := range []string{res.StdoutSpill, res.StderrSpill} {
		if p != "" {
			st.spills[p] = true
		}
	}
}

// progress reports a running exec's latest output lines to a client that
// asked for progress, every interval while the call waits: a client that
// resets its request timeout on progress keeps waiting.
type progress struct {
	session *mcp.ServerSession
	token   any
	total   float64
	start   time.Time
	b       *bgExec
}

// progressTail bounds the output a progress notification carries.
const progressTail = 1 << 10

// run sends a notification every interval until stop is called.
func (p *progress) run(ctx context.Context, interval time.Duration) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			// Progress must grow with every notification: seconds elapsed.
			_ = p.session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{
				ProgressToken: p.token, Progress: time.Since(p.start).Seconds(), Total: p.total,
				Message: lastLines(p.b.tail(progressTail), 5),
			})
		}
	}()
	return func() { cancel(); <-done }
}

// lastLines returns the last n lines of s.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
