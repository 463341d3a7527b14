package cli

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"time"

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
	// cancelOnExit: runboxd stops the exec if this process dies first.
	cancelOnExit bool
	// killLeftovers: stop background processes when the command exits.
	killLeftovers bool
	// keep (sh --keep-on-exit) is the opposite of cancelOnExit.
	keep bool

	fs *pflag.FlagSet // to tell --grace 0 from no --grace
}

func (f *execFlags) add(fs *pflag.FlagSet) {
	f.addCommon(fs)
	fs.BoolVar(&f.detach, "detach", false, "start the command, print its exec id and return")
}

// addCommon adds the flags exec and run share (run has no --detach).
func (f *execFlags) addCommon(fs *pflag.FlagSet) {
	f.fs = fs
	fs.DurationVar(&f.timeout, "timeout", 0, "stop the command and everything it started after this long (0: no limit)")
	fs.DurationVar(&f.grace, "grace", runbox.DefaultGrace, "time between SIGTERM and SIGKILL when stopping (0: SIGKILL at once)")
	fs.DurationVar(&f.idle, "idle-timeout", 0, "stop the command after this long without output (0: no limit)")
	fs.StringVar(&f.id, "id", "", "exec id (default: generated); an id that exists is attached to, not run again")
	fs.StringVar(&f.session, "session", "", "shell session to run in: its directory and exported environment carry over between execs")
	fs.StringVar(&f.cwd, "cwd", "", "working directory (default: the sandbox's)")
	fs.StringArrayVarP(&f.env, "env", "e", nil, "set an environment variable: K=V, or K to pass this process's value")
	fs.BoolVarP(&f.interactive, "interactive", "i", false, "stream this process's stdin to the command (default: stdin is /dev/null)")
	fs.BoolVarP(&f.tty, "tty", "t", false, "run on a PTY sized like this terminal (all output arrives as stdout; with -i, a terminal stdin is put in raw mode)")
	fs.BoolVar(&f.login, "login", false, "run the shell as a login shell")
	fs.BoolVar(&f.json, "json", false, "print the result as one JSON object instead of streaming output")
	fs.BoolVar(&f.cancelOnExit, "cancel-on-exit", true, "if this runbox process dies (any signal, even SIGKILL), runboxd stops the command; =false leaves it running (runbox attach follows it)")
	fs.BoolVar(&f.killLeftovers, "kill-leftovers", false, "when the command exits, stop what it left running in the background (by default it runs on: runbox ps shows it)")
}

// graceGiven reports whether --grace was given (0 then means none).
func (f *execFlags) graceGiven() bool {
	return f.fs != nil && f.fs.Changed("grace")
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
	switch {
	case !f.graceGiven(): // the daemon's default
	case f.grace > 0:
		opts = append(opts, client.WithGrace(f.grace))
	default:
		opts = append(opts, client.WithGrace(runbox.NoGrace))
	}
	if f.killLeftovers {
		opts = append(opts, client.WithKillLeftovers())
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
// command's non-zero status comes back as an *ExitError (see exitStatus).
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

	if f.cancelOnExit {
		opts = append(opts, client.WithCancelOnDisconnect())
	}
	if f.id == "" {
		// The id is chosen here so an interrupted exec can be named.
		f.id = newExecID()
		opts = append(opts, client.WithID(f.id))
	}
	var lastSeq atomic.Uint64 // of the last chunk delivered, for attach --from
	opts = append(opts, client.WithOnChunk(func(c runbox.Chunk) { lastSeq.Store(c.Seq) }))
	if !f.json {
		// Streamed, the output is on this terminal: runboxd spills only
		// from the first byte the stream misses, if any.
		opts = append(opts, client.WithStdout(a.stdout), client.WithStderr(a.stderr),
			client.WithOnGap(func(g runbox.OutputGap) { a.reportGap(g) }),
			client.WithSpill(runbox.SpillUnsent))
	}

	run := func(ctx context.Context) (runbox.Result, error) {
		if f.interactive || f.tty {
			return a.execStarted(ctx, cl, spec, opts, f.interactive, f.tty)
		}
		return cl.ExecSpec(ctx, spec, opts...)
	}
	var res runbox.Result
	var err error
	if f.cancelOnExit {
		// A cancelled context (Ctrl-C, SIGTERM) cancels the exec on the
		// daemon, and the call still ends with the exec's real result.
		res, err = run(ctx)
		if err != nil && !(errors.Is(err, context.Canceled) && res.Cancelled) {
			return err
		}
	} else {
		// Ctrl-C or SIGTERM leave the exec running: say how to follow it.
		res, err = runDetachable(ctx, run)
		if errors.Is(err, errInterrupted) {
			return fmt.Errorf("%w; exec %s keeps running: runbox attach %s %s --from %d follows it (runbox cancel %s %s stops it)",
				err, f.id, sb.ID, f.id, lastSeq.Load()+1, sb.ID, f.id)
		}
		if err != nil {
			return err
		}
	}

	if f.json {
		if err := writeJSON(a.stdout, resultJSON(res)); err != nil {
			return err
		}
	} else {
		a.reportStop(res, f.timeout, f.idle)
		a.reportLeftovers(res, sb.ID)
	}
	if code := exitStatus(res); code != 0 {
		return &ExitError{Code: code}
	}
	return nil
}

// errInterrupted is why runbox stopped following an exec it left running.
var errInterrupted = errors.New("interrupted")

// runDetachable runs run on a context that ctx's end does not cancel, and
// returns errInterrupted as soon as ctx ends: the exec keeps running.
func runDetachable(ctx context.Context, run func(context.Context) (runbox.Result, error)) (runbox.Result, error) {
	type outcome struct {
		res runbox.Result
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		res, err := run(context.WithoutCancel(ctx))
		done <- outcome{res, err}
	}()
	select {
	case o := <-done:
		return o.res, o.err
	case <-ctx.Done():
		return runbox.Result{}, errInterrupted
	}
}

// newExecID returns a fresh exec id.
func newExecID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// ExitTimedOut is the exit status of a command that runbox stopped for a
// timeout and that then exited by itself (GNU timeout's 124): a timeout is
// never a success.
const ExitTimedOut = 124

// exitStatus is the status runbox exits with for res: the command's own,
// except after a timeout, when a command that exited by itself (it handled
// runbox's SIGTERM) gives 124; one killed by a signal gives 128+N.
func exitStatus(res runbox.Result) int {
	if (res.TimedOut || res.IdleTimedOut) && res.Signal == "" {
		return ExitTimedOut
	}
	return res.ExitCode
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
		if spills := spillPaths(res); spills != "" {
			where = "the sandbox's spill files have it: " + spills
		}
		fmt.Fprintf(a.stderr, "runbox: warning: %d bytes of output are missing above (%d gaps): %s\n",
			res.StreamLost, res.StreamGaps, where)
	}
}

// reportGap marks, where it happens in the streamed output, a cut: output
// that left the daemon's replay ring before this stream read it.
func (a *app) reportGap(g runbox.OutputGap) {
	fmt.Fprintf(a.stderr, "\nrunbox: [... %d bytes of output left out here (chunks %d-%d left the replay ring); the end of the output names the spill file that has them ...]\n",
		g.Bytes, g.FromSeq, g.ToSeq-1)
}

// reportLeftovers says on stderr that the command left processes running.
func (a *app) reportLeftovers(res runbox.Result, sandbox string) {
	if res.LeftRunning == 0 {
		return
	}
	fmt.Fprintf(a.stderr, "runbox: %d process(es) this command started still run in the background (runbox ps %s shows them; runbox cancel %s %s stops them)\n",
		res.LeftRunning, sandbox, sandbox, res.ID)
}

// spillPaths lists res's spill files, each with the stream offset it
// starts at when that is not 0 ("PATH (from byte N of stdout)").
func spillPaths(res runbox.Result) string {
	var parts []string
	for _, s := range []struct {
		path, stream string
		off          int64
	}{{res.StdoutSpill, "stdout", res.StdoutSpillOffset}, {res.StderrSpill, "stderr", res.StderrSpillOffset}} {
		switch {
		case s.path == "":
		case s.off > 0:
			parts = append(parts, fmt.Sprintf("%s (from byte %d of %s)", s.path, s.off, s.stream))
		default:
			parts = append(parts, s.path)
		}
	}
	return strings.Join(parts, ", ")
}
