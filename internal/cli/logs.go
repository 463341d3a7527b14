package cli

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/client"
	"github.com/runbox/runbox/internal/execrules"
)

// exitInterrupted is logs -f's status when Ctrl-C (or SIGTERM) ends the
// watch: 128+SIGINT, as a shell reports it.
const exitInterrupted = 130

func (a *app) logsCmd() *cobra.Command {
	var follow bool
	var from uint64
	c := &cobra.Command{
		Use:   "logs [-f] SANDBOX EXEC_ID",
		Short: "Show an exec's output; -f follows it (never stops the exec)",
		Long: `Show the output of an exec (exec --detach, or any other): the output the
sandbox still holds (its replay ring), stdout and stderr apart, from sequence
number SEQ with --from. EXEC_ID may be a unique prefix of the id.

Without -f the exec must have ended (a running exec is an error that says to
use -f). With -f (like docker logs -f) the output is followed as it arrives
until the exec ends. Either way runbox logs only watches: Ctrl-C (or SIGTERM)
ends the watch and never signals the exec, which keeps running (runbox attach
follows it and stops it on Ctrl-C; runbox cancel stops it).

Exit status: 0 once the output is shown (not the exec's status: runbox attach
gives that), 130 after Ctrl-C, 125 when runbox failed.`,
		Args: exactArgs(2, "SANDBOX EXEC_ID"),
		RunE: func(c *cobra.Command, args []string) error {
			key, id := args[0], args[1]
			_, cl, err := a.connect(c.Context(), key)
			if err != nil {
				return fail("logs", key, id, err)
			}
			defer cl.Close()
			if id, err = resolveExec(c.Context(), cl, id); err != nil {
				return fail("logs", key, id, err)
			}
			if !follow {
				running, err := execRunning(c.Context(), cl, id)
				if err != nil {
					return fail("logs", key, id, err)
				}
				if running {
					return fail("logs", key, id, fmt.Errorf("%w: it is still running: runbox logs -f %s %s follows it (without stopping it)", runbox.ErrNotRunning, key, id))
				}
			}
			// Ctrl-C ends Attach's context: the call returns and the exec
			// runs on; nothing here ever cancels or signals it.
			_, err = cl.Attach(c.Context(), id, client.WithFromSeq(from),
				client.WithStdout(a.stdout), client.WithStderr(a.stderr),
				client.WithOnGap(func(g runbox.OutputGap) { execrules.ReportGap(a.stderr, g) }))
			switch {
			case err != nil && c.Context().Err() != nil:
				return &ExitError{Code: exitInterrupted}
			case err != nil:
				return fail("logs", key, id, err)
			}
			return nil
		},
	}
	c.Flags().BoolVarP(&follow, "follow", "f", false, "follow the output until the exec ends (Ctrl-C stops watching, not the exec)")
	c.Flags().Uint64Var(&from, "from", 0, "show output from this sequence number (0: from the start)")
	return c
}

// execRunning reports whether the exec with id has not exited yet.
func execRunning(ctx context.Context, cl *client.Client, id string) (bool, error) {
	execs, err := cl.List(ctx, client.ListWithoutOutput())
	if err != nil {
		return false, err
	}
	for _, e := range execs {
		if e.ID == id {
			return e.State != runbox.ExecExited, nil
		}
	}
	return false, fmt.Errorf("%w: %s", runbox.ErrExecNotFound, id)
}
