package cli

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/runbox/runbox"
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
			// Every sandbox is found before any is removed.
			type target struct {
				p   runbox.Provider
				sb  runbox.Sandbox
				err error
			}
			targets := make([]target, len(args))
			for i, key := range args {
				p, sb, err := a.find(c.Context(), key)
				targets[i] = target{p, sb, err}
			}
			failed := false
			for i, key := range args {
				t := targets[i]
				err := t.err
				if err == nil {
					err = t.p.Remove(c.Context(), t.sb, force)
				}
				if err != nil {
					fmt.Fprintln(a.stderr, "runbox: "+oneLine(fail("remove", key, "", err).Error()))
					failed = true
					continue
				}
				a.forgetName(t.sb)
				fmt.Fprintln(a.stdout, t.sb.ID)
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
