package cli

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/runbox/runbox"
)

func (a *app) cancelCmd() *cobra.Command {
	var grace time.Duration
	c := &cobra.Command{
		Use:   "cancel [--grace D] SANDBOX EXEC_ID",
		Short: "Stop an exec and everything it started",
		Long: `Stop an exec with the stop protocol: SIGTERM to every process it started, up to
the grace period, then SIGKILL; returns once they are gone. Cancelling is
idempotent, and cancelling an id that has not started yet means it never will
(runbox says so on stderr). EXEC_ID may be a unique prefix of the id.

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
			if !known {
				fmt.Fprintf(a.stderr, "runbox: sandbox %s has no exec %s: left a tombstone, so an exec started with that id will be refused\n", key, id)
			}
			return nil
		},
	}
	c.Flags().DurationVar(&grace, "grace", 0, "time between SIGTERM and SIGKILL (default: the exec's own; 0: SIGKILL at once)")
	return c
}
