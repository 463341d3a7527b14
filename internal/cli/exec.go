package cli

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/client"
	"github.com/runbox/runbox/internal/execrules"
)

func (a *app) execCmd() *cobra.Command {
	var f execFlags
	var line commandLine
	c := &cobra.Command{
		Use:   "exec [flags] SANDBOX COMMAND...",
		Short: "Run a command in a sandbox",
		Long: `Run a command in a sandbox and exit with its status.

One COMMAND argument is a shell string, run by bash -c (sh -c where bash is
absent): runbox exec sb -- 'make && ./a.out | head'. Several arguments are a
program and its arguments, run directly without a shell: runbox exec sb ls -l /.
As with docker exec, runbox's flags come before SANDBOX (or between SANDBOX
and "--"); from COMMAND's first word on, every argument is the command's.
"--" before COMMAND is accepted: runbox exec sb -- ls -l /.

Output streams to this terminal as it arrives, stdout and stderr apart; with
--json one JSON object is printed when the command ends instead. A timeout is
reported on stderr as "runbox: timed out after D".

With -t the command runs on a pseudo-terminal the size of this one, resized
with it; -t -i also types this process's stdin into it (raw mode when stdin
is a terminal, restored on exit). runbox sh SANDBOX opens an interactive shell.`,
		Args: func(c *cobra.Command, args []string) (err error) {
			line, err = splitCommand(c, args, 1)
			return err
		},
		RunE: func(c *cobra.Command, _ []string) error {
			key, command := line.before[0], line.command
			if err := f.check(); err != nil {
				return fail("exec", key, f.ID, err)
			}
			sb, cl, err := a.connect(c.Context(), key)
			if err != nil {
				return fail("exec", key, f.ID, err)
			}
			defer cl.Close()
			return fail("exec", key, f.ID, a.exec(c.Context(), cl, sb, command, &f))
		},
	}
	f.add(c.Flags())
	c.Flags().SetInterspersed(false) // flags after SANDBOX are the command's
	return c
}

// execFlags are the flags exec, run and sh share (package execrules has
// their rules, which the runbox front follows too).
type execFlags struct {
	execrules.Flags

	fs *pflag.FlagSet // to tell --grace 0 from no --grace
}

func (f *execFlags) add(fs *pflag.FlagSet) { f.addFlags(fs, true) }

// addCommon adds the flags exec and run share (run has no --detach).
func (f *execFlags) addCommon(fs *pflag.FlagSet) { f.addFlags(fs, false) }

func (f *execFlags) addFlags(fs *pflag.FlagSet, exec bool) {
	f.fs = fs
	f.Flags = execrules.NewFlags()
	for _, d := range execrules.Defs {
		if !d.RunToo && !exec {
			continue
		}
		switch p := f.Target(d.Name).(type) {
		case *time.Duration:
			fs.DurationVarP(p, d.Name, d.Short, *p, d.Usage)
		case *string:
			fs.StringVarP(p, d.Name, d.Short, *p, d.Usage)
		case *[]string:
			fs.StringArrayVarP(p, d.Name, d.Short, *p, d.Usage)
		case *bool:
			fs.BoolVarP(p, d.Name, d.Short, *p, d.Usage)
		}
	}
}

// check refuses flags runbox cannot honour yet, and nonsense combinations
// (execrules.Flags.Check).
func (f *execFlags) check() error {
	f.GraceSet = f.fs != nil && f.fs.Changed("grace")
	return f.Check()
}

// commandLine is a command's operands and the command that follows them,
// as splitCommand found them.
type commandLine struct {
	before, command []string
}

// splitCommand splits args into n operands before the command and the
// command itself, as docker exec and docker run do: c's flags are not
// interspersed (SetInterspersed(false)), so flags parse up to the first
// operand, and the command starts at the word after the n operands; from
// there every argument is the command's, "-la" included. "--" is still
// accepted before the command. Between the operands and the command,
// arguments that start with "-" are c's own flags (runbox exec SB
// --timeout 5s -- make), up to the first word that is not one.
//
// It parses those flags, so it is called once per invocation (from Args).
func splitCommand(c *cobra.Command, args []string, n int) (commandLine, error) {
	var cl commandLine
	if dash := c.ArgsLenAtDash(); dash >= 0 {
		cl.before, cl.command = args[:dash], args[dash:]
	} else {
		cl.before, cl.command = args[:min(n, len(args))], args[min(n, len(args)):]
		if rest := cl.command; len(cl.before) == n && n > 0 && len(rest) > 0 && strings.HasPrefix(rest[0], "-") && rest[0] != "-" {
			if rest[0] == "--" {
				cl.command = rest[1:]
			} else {
				fs := c.Flags()
				if err := fs.Parse(rest); err != nil {
					return cl, c.FlagErrorFunc()(c, err)
				}
				if help, _ := fs.GetBool("help"); help {
					return cl, pflag.ErrHelp
				}
				cl.command = fs.Args()
			}
		}
	}
	switch {
	case len(cl.before) != n && n == 0:
		return cl, fmt.Errorf("%s: unexpected arguments before \"--\": %q (see '%s --help')", c.Name(), cl.before, c.CommandPath())
	case len(cl.before) != n:
		return cl, fmt.Errorf("%s: expected SANDBOX COMMAND... (see '%s --help')", c.Name(), c.CommandPath())
	case len(cl.command) == 0:
		return cl, fmt.Errorf("%s: no command given after SANDBOX (see '%s --help')", c.Name(), c.CommandPath())
	}
	return cl, nil
}

// exec runs command in sb through cl as f says, and reports the result: the
// command's non-zero status comes back as an *ExitError (see execrules.ExitStatus).
func (a *app) exec(ctx context.Context, cl *client.Client, sb runbox.Sandbox, command []string, f *execFlags) error {
	spec := f.Spec(command)
	var opts []client.ExecOption
	if f.TTY {
		rows, cols := a.termSize()
		opts = append(opts, client.WithPTY(rows, cols))
	}

	if f.Detach {
		p, err := cl.StartSpec(ctx, spec, opts...)
		if err != nil {
			return err
		}
		fmt.Fprintln(a.stdout, p.ID())
		return nil
	}

	if f.CancelOnExit {
		opts = append(opts, client.WithCancelOnDisconnect())
	}
	if f.ID == "" {
		// The id is chosen here so an interrupted exec can be named.
		f.ID = execrules.NewExecID()
		spec.ID = f.ID
	}
	var lastSeq atomic.Uint64 // of the last chunk delivered, for attach --from
	opts = append(opts, client.WithOnChunk(func(c runbox.Chunk) { lastSeq.Store(c.Seq) }))
	if !f.JSON {
		// Streamed, the output is on this terminal: runboxd spills only
		// from the first byte the stream misses, if any.
		opts = append(opts, client.WithStdout(a.stdout), client.WithStderr(a.stderr),
			client.WithOnGap(func(g runbox.OutputGap) { execrules.ReportGap(a.stderr, g) }),
			client.WithSpill(runbox.SpillUnsent))
	}

	run := func(ctx context.Context) (runbox.Result, error) {
		if f.Interactive || f.TTY {
			return a.execStarted(ctx, cl, spec, opts, f.Interactive, f.TTY)
		}
		return cl.ExecSpec(ctx, spec, opts...)
	}
	var res runbox.Result
	var err error
	if f.CancelOnExit {
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
				err, f.ID, sb.ID, f.ID, lastSeq.Load()+1, sb.ID, f.ID)
		}
		if err != nil {
			return err
		}
	}

	if f.JSON {
		if err := execrules.WriteJSON(a.stdout, execrules.ResultJSON(res)); err != nil {
			return err
		}
	} else {
		execrules.ReportStop(a.stderr, res, f.Timeout, f.Idle)
		execrules.ReportLeftovers(a.stderr, res, sb.ID)
	}
	if code := execrules.ExitStatus(res); code != 0 {
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
