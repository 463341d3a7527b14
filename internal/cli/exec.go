package cli

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/client"
)

func (a *app) execCmd() *cobra.Command {
	var f execFlags
	c := &cobra.Command{
		Use:   "exec [flags] SANDBOX -- COMMAND...",
		Short: "Run a command in a sandbox",
		Long: `Run a command in a sandbox and exit with its status.

One COMMAND argument is a shell string, run by bash -c (sh -c where bash is
absent): runbox exec sb -- 'make && ./a.out | head'. Several arguments are a
program and its arguments, run directly without a shell: runbox exec sb -- ls -l /.
Put "--" before COMMAND when it has flags of its own.

Output streams to this terminal as it arrives, stdout and stderr apart; with
--json one JSON object is printed when the command ends instead. A timeout is
reported on stderr as "runbox: timed out after D".

With -t the command runs on a pseudo-terminal the size of this one, resized
with it; -t -i also types this process's stdin into it (raw mode when stdin
is a terminal, restored on exit). runbox sh SANDBOX opens an interactive shell.`,
		Args: func(c *cobra.Command, args []string) error {
			_, _, err := splitCommand(c, args, 1)
			return err
		},
		RunE: func(c *cobra.Command, args []string) error {
			before, command, _ := splitCommand(c, args, 1)
			key := before[0]
			if err := f.check(); err != nil {
				return fail("exec", key, f.id, err)
			}
			sb, cl, err := a.connect(c.Context(), key)
			if err != nil {
				return fail("exec", key, f.id, err)
			}
			defer cl.Close()
			return fail("exec", key, f.id, a.exec(c.Context(), cl, sb, command, &f))
		},
	}
	f.add(c.Flags())
	return c
}

// execFlags are the flags exec and run share.
type execFlags struct {
	timeout, grace, idle time.Duration
	id, session, cwd     string
	env                  []string
	interactive, tty     bool
	login, detach, json  bool
}

func (f *execFlags) add(fs *pflag.FlagSet) {
	fs.DurationVar(&f.timeout, "timeout", 0, "stop the command and everything it started after this long (0: no limit)")
	fs.DurationVar(&f.grace, "grace", 0, "time between SIGTERM and SIGKILL when stopping (default 5s)")
	fs.DurationVar(&f.idle, "idle-timeout", 0, "stop the command after this long without output (0: no limit)")
	fs.StringVar(&f.id, "id", "", "exec id (default: generated); an id that exists is attached to, not run again")
	fs.StringVar(&f.session, "session", "", "shell session to run in: its directory and exported environment carry over between execs")
	fs.StringVar(&f.cwd, "cwd", "", "working directory (default: the sandbox's)")
	fs.StringArrayVarP(&f.env, "env", "e", nil, "set an environment variable: K=V, or K to pass this process's value")
	fs.BoolVarP(&f.interactive, "interactive", "i", false, "stream this process's stdin to the command (default: stdin is /dev/null)")
	fs.BoolVarP(&f.tty, "tty", "t", false, "run on a PTY sized like this terminal (all output arrives as stdout; with -i, a terminal stdin is put in raw mode)")
	fs.BoolVar(&f.login, "login", false, "run the shell as a login shell")
	fs.BoolVar(&f.detach, "detach", false, "start the command, print its exec id and return")
	fs.BoolVar(&f.json, "json", false, "print the result as one JSON object instead of streaming output")
}

// check refuses flags runbox cannot honour yet, and nonsense combinations.
func (f *execFlags) check() error {
	switch {
	case f.timeout < 0 || f.grace < 0 || f.idle < 0:
		return fmt.Errorf("--timeout, --grace and --idle-timeout must not be negative: %w", runbox.ErrInvalidSpec)
	case f.detach && (f.interactive || f.json):
		return fmt.Errorf("--detach cannot be combined with -i or --json (use runbox attach): %w", runbox.ErrInvalidSpec)
	}
	for _, kv := range f.env {
		if k, _, _ := strings.Cut(kv, "="); k == "" {
			return fmt.Errorf("-e %q: expected K=V or K: %w", kv, runbox.ErrInvalidSpec)
		}
	}
	return nil
}

// options turns the flags into client options.
func (f *execFlags) options() []client.ExecOption {
	var opts []client.ExecOption
	if f.id != "" {
		opts = append(opts, client.WithID(f.id))
	}
	if f.timeout > 0 {
		opts = append(opts, client.WithTimeout(f.timeout))
	}
	if f.grace > 0 {
		opts = append(opts, client.WithGrace(f.grace))
	}
	if f.idle > 0 {
		opts = append(opts, client.WithIdleTimeout(f.idle))
	}
	if f.cwd != "" {
		opts = append(opts, client.WithCwd(f.cwd))
	}
	if f.session != "" {
		opts = append(opts, client.WithSession(f.session))
	}
	for _, kv := range f.env {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			v, ok = os.LookupEnv(k)
			if !ok {
				continue // like docker: an unset K is not passed
			}
		}
		opts = append(opts, client.WithEnv(k, v))
	}
	if f.login {
		opts = append(opts, client.WithLogin())
	}
	return opts
}

// splitCommand splits args into n operands before the command and the
// command itself. "--" ends the operands; without it the first n arguments
// are the operands.
func splitCommand(c *cobra.Command, args []string, n int) (before, command []string, err error) {
	dash := c.ArgsLenAtDash()
	if dash < 0 {
		dash = min(n, len(args))
	}
	before, command = args[:dash], args[dash:]
	switch {
	case len(before) != n && n == 0:
		return nil, nil, fmt.Errorf("%s: unexpected arguments before \"--\": %q (see '%s --help')", c.Name(), before, c.CommandPath())
	case len(before) != n:
		return nil, nil, fmt.Errorf("%s: expected SANDBOX -- COMMAND... (see '%s --help')", c.Name(), c.CommandPath())
	case len(command) == 0:
		return nil, nil, fmt.Errorf("%s: no command given after SANDBOX (see '%s --help')", c.Name(), c.CommandPath())
	}
	return before, command, nil
}

// specFor makes one argument a shell string and several an argv.
func specFor(command []string) runbox.ExecSpec {
	if len(command) == 1 {
		return runbox.ExecSpec{Command: command[0]}
	}
	return runbox.ExecSpec{Argv: command}
}

// exec runs command in sb through cl as f says, and reports the result: the
// command's non-zero status comes back as an *ExitError.
func (a *app) exec(ctx context.Context, cl *client.Client, sb runbox.Sandbox, command []string, f *execFlags) error {
	spec := specFor(command)
	opts := f.options()
	if f.tty {
		rows, cols := a.termSize()
		opts = append(opts, client.WithPTY(rows, cols))
	}

	if f.detach {
		p, err := cl.StartSpec(ctx, spec, opts...)
		if err != nil {
			return err
		}
		fmt.Fprintln(a.stdout, p.ID())
		return nil
	}

	if !f.json {
		opts = append(opts, client.WithStdout(a.stdout), client.WithStderr(a.stderr))
	}
	var res runbox.Result
	var err error
	if f.interactive || f.tty {
		res, err = a.execStarted(ctx, cl, spec, opts, f.interactive, f.tty)
	} else {
		res, err = cl.ExecSpec(ctx, spec, opts...)
	}
	// A cancelled context (Ctrl-C) still ends with the exec's real result:
	// the client cancelled it on the daemon and waited for it to stop.
	if err != nil && !(errors.Is(err, context.Canceled) && res.Cancelled) {
		return err
	}

	if f.json {
		cwd := res.Cwd // a session exec reports where it ended up
		if cwd == "" {
			cwd = execCwd(sb, f.cwd)
		}
		if err := writeJSON(a.stdout, resultJSON(res, cwd)); err != nil {
			return err
		}
	} else {
		a.reportStop(res, f.timeout, f.idle)
	}
	if res.ExitCode != 0 {
		return &ExitError{Code: res.ExitCode}
	}
	return nil
}

// reportStop says on stderr why runbox stopped the command, if it did.
func (a *app) reportStop(res runbox.Result, timeout, idle time.Duration) {
	switch {
	case res.TimedOut && timeout > 0:
		fmt.Fprintf(a.stderr, "runbox: timed out after %v\n", timeout)
	case res.TimedOut:
		fmt.Fprintln(a.stderr, "runbox: timed out")
	case res.IdleTimedOut && idle > 0:
		fmt.Fprintf(a.stderr, "runbox: no output for %v: stopped\n", idle)
	case res.IdleTimedOut:
		fmt.Fprintln(a.stderr, "runbox: stopped after no output for the idle timeout")
	case res.Cancelled:
		fmt.Fprintln(a.stderr, "runbox: cancelled")
	case res.OOMKilled:
		fmt.Fprintln(a.stderr, "runbox: killed: out of memory (the sandbox's memory limit)")
	}
	if res.Survivors > 0 {
		fmt.Fprintf(a.stderr, "runbox: warning: %d processes survived SIGKILL\n", res.Survivors)
	}
	if res.SpillTruncated {
		fmt.Fprintln(a.stderr, "runbox: warning: a spill file holds only the start of its stream, or none of it (the sandbox's spill budget ran out, or a write failed)")
	}
	if res.StreamGaps > 0 {
		where := "the sandbox's replay ring no longer had it"
		if res.StdoutSpill != "" || res.StderrSpill != "" {
			where = "the spill files " + strings.TrimSpace(res.StdoutSpill+" "+res.StderrSpill) + " have all of it"
		}
		fmt.Fprintf(a.stderr, "runbox: warning: %d bytes of output are missing above (%d gaps): %s\n",
			res.StreamLost, res.StreamGaps, where)
	}
}

// execResult is the JSON object exec --json prints. Stdout and Stderr are the
// output as text; when a stream is not valid UTF-8, its text has each invalid
// byte replaced by U+FFFD and StdoutBase64/StderrBase64 carry the exact bytes.
// StdoutSpill/StderrSpill appear only when the daemon wrote a stream's full
// output to a file in the sandbox, and SpillTruncated only when such a file
// holds less than the whole stream.
type execResult struct {
	ID            string `json:"id"`
	ExitCode      int    `json:"exit_code"`
	Signal        string `json:"signal"`
	TimedOut      bool   `json:"timed_out"`
	Cancelled     bool   `json:"cancelled"`
	IdleTimedOut  bool   `json:"idle_timed_out"`
	DurationMS    int64  `json:"duration_ms"`
	Stdout        string `json:"stdout"`
	Stderr        string `json:"stderr"`
	StdoutBase64  string `json:"stdout_base64,omitempty"`
	StderrBase64  string `json:"stderr_base64,omitempty"`
	StdoutDropped int64  `json:"stdout_dropped"`
	StderrDropped int64  `json:"stderr_dropped"`
	Cwd           string `json:"cwd"`
	Killed        int    `json:"killed"`
	OOMKilled     bool   `json:"oom_killed"`
	StdoutSpill   string `json:"stdout_spill,omitempty"`
	StderrSpill   string `json:"stderr_spill,omitempty"`
	// SpillTruncated says a spill file holds less than the whole stream
	// (the spill budget ran out, the disk filled, a write failed): it holds
	// the stream's first bytes, or was removed to make room.
	SpillTruncated bool `json:"spill_truncated,omitempty"`
}

func resultJSON(r runbox.Result, cwd string) execResult {
	out := execResult{
		ID:             r.ID,
		ExitCode:       r.ExitCode,
		Signal:         r.Signal,
		TimedOut:       r.TimedOut,
		Cancelled:      r.Cancelled,
		IdleTimedOut:   r.IdleTimedOut,
		DurationMS:     r.Duration.Milliseconds(),
		StdoutDropped:  r.StdoutDropped,
		StderrDropped:  r.StderrDropped,
		Cwd:            cwd,
		Killed:         r.Killed,
		OOMKilled:      r.OOMKilled,
		StdoutSpill:    r.StdoutSpill,
		StderrSpill:    r.StderrSpill,
		SpillTruncated: r.SpillTruncated,
	}
	out.Stdout, out.StdoutBase64 = text(r.Stdout)
	out.Stderr, out.StderrBase64 = text(r.Stderr)
	return out
}

// text returns b as a string, and when b is not valid UTF-8 also its exact
// bytes in base64.
func text(b []byte) (s, b64 string) {
	if utf8.Valid(b) {
		return string(b), ""
	}
	return strings.ToValidUTF8(string(b), "\uFFFD"), base64.StdEncoding.EncodeToString(b)
}

// execCwd is the directory the command ran in: --cwd resolved against the
// sandbox's working directory, when the provider reports one.
func execCwd(sb runbox.Sandbox, cwd string) string {
	workdir := sb.Detail["workdir"]
	switch {
	case cwd == "":
		return workdir
	case filepath.IsAbs(cwd) || workdir == "":
		return cwd
	}
	return filepath.Join(workdir, cwd)
}

// writeJSON prints v as one line of JSON.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return fmt.Errorf("write json: %w", err)
	}
	return nil
}
