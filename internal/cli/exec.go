package cli

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/client"
	"github.com/runbox/runbox/internal/execcli"
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
	return c
}

// execFlags are the flags exec, run and sh share (package execcli has
// their rules, which the runbox front follows too).
type execFlags struct {
	execcli.Flags

	// Set by a runbox front that handed over an exec whose stream broke
	// after it had shown output (hidden flags, see docs/cli.md): the exec
	// exists; follow it from sequence number from, and count the gaps
	// and bytes the front already reported.
	from     uint64
	fromGaps int
	fromLost int64

	fs *pflag.FlagSet // to tell --grace 0 from no --grace
}

func (f *execFlags) add(fs *pflag.FlagSet) { f.addFlags(fs, true) }

// addCommon adds the flags exec and run share (run has no --detach).
func (f *execFlags) addCommon(fs *pflag.FlagSet) { f.addFlags(fs, false) }

func (f *execFlags) addFlags(fs *pflag.FlagSet, exec bool) {
	f.fs = fs
	f.Flags = execcli.NewFlags()
	for _, d := range execcli.Defs {
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
	if exec {
		fs.Uint64Var(&f.from, "from", 0, "")
		fs.IntVar(&f.fromGaps, "from-gaps", 0, "")
		fs.Int64Var(&f.fromLost, "from-lost", 0, "")
		for _, name := range []string{"from", "from-gaps", "from-lost"} {
			_ = fs.MarkHidden(name)
		}
	}
}

// check refuses flags runbox cannot honour yet, and nonsense combinations
// (execcli.Flags.Check).
func (f *execFlags) check() error {
	f.GraceSet = f.fs != nil && f.fs.Changed("grace")
	if f.from > 0 && f.ID == "" {
		return fmt.Errorf("--from needs --id: %w", runbox.ErrInvalidSpec)
	}
	return f.Check()
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

// exec runs command in sb through cl as f says, and reports the result: the
// command's non-zero status comes back as an *ExitError (see execcli.ExitStatus).
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
		f.ID = execcli.NewExecID()
		spec.ID = f.ID
	}
	var lastSeq atomic.Uint64 // of the last chunk delivered, for attach --from
	if f.from > 0 {
		// Handed over by the runbox front after it showed output up to
		// from-1: follow the exec from there, never run it again.
		opts = append(opts, client.WithFromSeq(f.from))
		lastSeq.Store(f.from - 1)
	}
	opts = append(opts, client.WithOnChunk(func(c runbox.Chunk) { lastSeq.Store(c.Seq) }))
	if !f.JSON {
		// Streamed, the output is on this terminal: runboxd spills only
		// from the first byte the stream misses, if any.
		opts = append(opts, client.WithStdout(a.stdout), client.WithStderr(a.stderr),
			client.WithOnGap(func(g runbox.OutputGap) { execcli.ReportGap(a.stderr, g) }),
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

	res.StreamGaps += f.fromGaps
	res.StreamLost += f.fromLost
	if f.JSON {
		if err := execcli.WriteJSON(a.stdout, execcli.ResultJSON(res)); err != nil {
			return err
		}
	} else {
		execcli.ReportStop(a.stderr, res, f.Timeout, f.Idle)
		execcli.ReportLeftovers(a.stderr, res, sb.ID)
	}
	if code := execcli.ExitStatus(res); code != 0 {
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
