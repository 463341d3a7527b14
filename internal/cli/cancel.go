package cli

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/runbox/runbox"
)

func (a *app) cancelCmd() *cobra.Command {
	var grace time.Duration
	var tombstone bool
	c := &cobra.Command{
		Use:   "cancel [--grace D] [--tombstone] SANDBOX EXEC_ID",
		Short: "Stop an exec and everything it started",
		Long: `Stop an exec with the stop protocol: SIGTERM to every process it started, up to
the grace period, then SIGKILL; returns once they are gone. Cancelling is
idempotent. EXEC_ID may be a unique prefix of the id.

An id the sandbox has never seen (mistyped, say) is an error, exit status 125:
runboxd still leaves a tombstone for it, so that an exec started with that
id later is refused. With --tombstone that is what was asked for (cancel an
exec before it starts, racing its runbox exec --id): runbox says so on
stderr and exits 0.

An exec that has exited may have left processes running in the background
(runbox ps counts them in PROCS); cancelling it stops them.`,
		Args: exactArgs(2, "SANDBOX EXEC_ID"),
		RunE: func(c *cobra.Command, args []string) error {
			key, id := args[0], args[1]
			if grace < 0 {
				return fail("cancel", key, id, fmt.Errorf("--grace must not be negative: %w", runbox.ErrInvalidSpec))
			}
			_, cl, err := a.connect(c.Context(), key)
			if err != nil {
				return fail("cancel", key, id, err)
			}
			defer cl.Close()
			if id, err = resolveExec(c.Context(), cl, id); err != nil {
				return fail("cancel", key, id, err)
			}
			g := grace
			if g == 0 && c.Flags().Changed("grace") {
				g = runbox.NoGrace
			}
			known, err := cl.CancelKnown(c.Context(), id, g)
			if err != nil {
				return fail("cancel", key, id, err)
			}
			switch {
			case !known && tombstone:
				fmt.Fprintf(a.stderr, "runbox: sandbox %s has no exec %s: left a tombstone, so an exec started with that id will be refused\n", key, id)
			case !known:
				return fail("cancel", key, id, fmt.Errorf("%w (the sandbox never saw this id; a tombstone now refuses an exec started with it)", runbox.ErrExecNotFound))
			}
			return nil
		},
	}
	c.Flags().BoolVar(&tombstone, "tombstone", false, "an id the sandbox has not seen is no error: leave its tombstone on purpose, so an exec started with it is refused")
	c.Flags().DurationVar(&grace, "grace", 0, "time between SIGTERM and SIGKILL (default: the exec's own; 0: SIGKILL at once)")
	return c
}
