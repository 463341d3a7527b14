package mcpserver

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/client"
)

// ExecInput is what the exec tool takes.
type ExecInput struct {
	Command        string            `json:"command" jsonschema:"the shell command, run by bash -c (sh -c where bash is absent)"`
	TimeoutSeconds float64           `json:"timeout_seconds,omitempty" jsonschema:"stop the command and everything it started after this many seconds (default 120 for a foreground command; at most the server's ceiling)"`
	Cwd            string            `json:"cwd,omitempty" jsonschema:"working directory (default: the shell session's)"`
	Env            map[string]string `json:"env,omitempty" jsonschema:"environment variables to set for this command"`
	Stdin          string            `json:"stdin,omitempty" jsonschema:"text given to the command on its standard input (default: none, stdin is /dev/null)"`
	Session        string            `json:"session,omitempty" jsonschema:"shell session to run in (default: this MCP session's own): cd and export carry over between commands of a session"`
	Background     bool              `json:"background,omitempty" jsonschema:"start the command and return its id at once (for servers and watchers); read its output with exec_output"`
	Sandbox        string            `json:"sandbox,omitempty" jsonschema:"sandbox id or name (default: this session's default sandbox)"`
	ID             string            `json:"id,omitempty" jsonschema:"exec id to use (default: generated); an id that exists is attached to, never run twice"`
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
		Description: `Run a shell command in the sandbox and return its exit code, stdout and stderr.
Commands of one MCP session share a persistent shell session: cd and export carry over to the next exec.
A command that outlives timeout_seconds (default 120) is stopped together with every process it started, and the call returns at the timeout with the output so far (timed_out: true); nothing is left running.
For servers, watchers and other long-running commands set background: true: the call returns the exec id at once; use exec_output to read its output and result, exec_cancel to stop it.
Long output keeps its start and its end; the middle is counted in stdout_dropped and kept whole in stdout_spill, a file readable with file_read.`,
		Annotations: &mcp.ToolAnnotations{DestructiveHint: &hintOn, OpenWorldHint: &hintOn},
	}, call(s, s.exec))
	mcp.AddTool(s.mcp, &mcp.Tool{
		Name:  "exec_output",
		Title: "Read a background command's output",
		Description: `Return what a background exec printed from byte offset (stdout and stderr merged, in the order printed), waiting up to wait_seconds for more output or for its end, and its result once it has ended.
Call it again with offset set to next_offset to follow the output.`,
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true, OpenWorldHint: &hintOff},
	}, call(s, s.execOutput))
	mcp.AddTool(s.mcp, &mcp.Tool{
		Name:        "exec_cancel",
		Title:       "Stop a command",
		Description: `Stop an exec and every process it started (SIGTERM, a grace period, then SIGKILL) and return its result. Cancelling an exec that has ended returns its result and changes nothing.`,
		Annotations: &mcp.ToolAnnotations{DestructiveHint: &hintOn, IdempotentHint: true, OpenWorldHint: &hintOff},
	}, call(s, s.execCancel))
	mcp.AddTool(s.mcp, &mcp.Tool{
		Name:        "exec_list",
		Title:       "List commands",
		Description: `List the execs the sandbox keeps: running ones, and recently ended ones with their exit codes.`,
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

func (s *Server) exec(ctx context.Context, st *session, req *mcp.CallToolRequest, in ExecInput) (*mcp.CallToolResult, ExecResult, error) {
	if strings.TrimSpace(in.Command) == "" {
		return nil, ExecResult{}, fmt.Errorf("%w: command is empty", runbox.ErrInvalidSpec)
	}
	timeout, err := s.timeoutFor(in.TimeoutSeconds, in.Background)
	if err != nil {
		return nil, ExecResult{}, err
	}
	ref, err := st.sandbox(ctx, in.Sandbox)
	if err != nil {
		return nil, ExecResult{}, err
	}
	shell := in.Session
	if shell == "" {
		shell = st.shell
		st.mu.Lock()
		ref.shellUsed = true
		st.mu.Unlock()
	}
	opts := []client.ExecOption{
		client.WithTimeout(timeout), client.WithSession(shell),
		client.WithOutputLimits(s.cfg.OutputBytes, s.cfg.OutputBytes),
	}
	if in.ID != "" {
		opts = append(opts, client.WithID(in.ID))
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
	if in.Background {
		res, err := s.startBackground(ctx, st, ref, in.Command, timeout, opts)
		if err != nil {
			return nil, ExecResult{}, st.lost(ref, err)
		}
		return textResult(res.render()), res, nil
	}
	if tok := req.Params.GetProgressToken(); tok != nil {
		p := &progress{session: req.Session, token: tok, total: timeout.Seconds(), start: time.Now()}
		opts = append(opts, client.WithOnChunk(p.chunk))
		stop := p.run(ctx, s.cfg.ProgressInterval)
		defer stop()
	}
	r, err := ref.cl.ExecSpec(ctx, runbox.ExecSpec{Command: in.Command}, opts...)
	// A cancelled call still ends with the exec's real result: the client
	// stopped it on the daemon and waited for that.
	if err != nil && !(errors.Is(err, context.Canceled) && r.Cancelled) {
		return nil, ExecResult{}, st.lost(ref, err)
	}
	res := execResult(ref.sb.ID, r, timeout, s.cfg.OutputBytes)
	st.noteSpills(res)
	return textResult(res.render()), res, nil
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
// asked for progress.
type progress struct {
	session *mcp.ServerSession
	token   any
	total   float64
	start   time.Time

	mu    sync.Mutex
	tail  []byte // the latest output, at most progressTail bytes
	fresh bool   // output arrived since the last notification
}

// progressTail bounds the output a progress notification carries.
const progressTail = 1 << 10

func (p *progress) chunk(c runbox.Chunk) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.tail = append(p.tail, c.Data...)
	if n := len(p.tail); n > progressTail {
		p.tail = append(p.tail[:0], p.tail[n-progressTail:]...)
	}
	p.fresh = true
}

// run sends a notification every interval while output arrives, until
// stop is called.
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
			p.mu.Lock()
			fresh, msg := p.fresh, lastLines(text(p.tail), 5)
			p.fresh = false
			p.mu.Unlock()
			if !fresh {
				continue
			}
			// Progress must grow with every notification: seconds elapsed.
			_ = p.session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{
				ProgressToken: p.token, Progress: time.Since(p.start).Seconds(), Total: p.total, Message: msg,
			})
		}
	}()
	return func() { cancel(); <-done }
}

// lastLines returns the last n non-empty lines of s.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
