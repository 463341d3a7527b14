package cli

import (
	"fmt"

	"github.com/spf13/cobra"
)

func (a *app) rmCmd() *cobra.Command {
	var force bool
	c := &cobra.Command{
		Use:   "rm [-f] SANDBOX...",
		Short: "Stop every exec in a sandbox and destroy it",
		Long: `Remove sandboxes: stop every exec with the stop protocol (SIGTERM, grace,
SIGKILL), end the sandbox's runboxd and delete its record. Prints each removed
sandbox's id. A sandbox whose runboxd is already gone ("lost" in runbox ls) is
only removed with -f, since processes it started may have outlived it.`,
		Args: func(c *cobra.Command, args []string) error {
			if len(args) == 0 {
				return fmt.Errorf("%s: expected at least one SANDBOX (see '%s --help')", c.Name(), c.CommandPath())
			}
			return nil
		},
		RunE: func(c *cobra.Command, args []string) error {
			failed := false
			for _, key := range args {
				p, sb, err := a.find(c.Context(), key)
				if err == nil {
					err = p.Remove(c.Context(), sb, force)
				}
				if err != nil {
					fmt.Fprintln(a.stderr, "runbox: "+oneLine(fail("remove", key, "", err).Error()))
					failed = true
					continue
				}
				fmt.Fprintln(a.stdout, sb.ID)
			}
			if failed {
				// Each failure is already reported above.
				return &ExitError{Code: ExitStatusFailure}
			}
			return nil
		},
	}
	c.Flags().BoolVarP(&force, "force", "f", false, "also remove sandboxes whose runboxd is gone")
	return c
}
