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
idempotent, and cancelling an id that has not started yet means it never will.`,
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
			return fail("cancel", key, id, cl.Cancel(c.Context(), id, grace))
		},
	}
	c.Flags().DurationVar(&grace, "grace", 0, "time between SIGTERM and SIGKILL (default: the exec's own)")
	return c
}
