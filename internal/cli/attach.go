package cli

import (
	"context"
	"errors"

	"github.com/spf13/cobra"

	"github.com/runbox/runbox/client"
)

func (a *app) attachCmd() *cobra.Command {
	var from uint64
	c := &cobra.Command{
		Use:   "attach SANDBOX EXEC_ID [--from SEQ]",
		Short: "Follow an exec's output to its end and exit with its status",
		Long: `Follow an exec started earlier (exec --detach, or one whose runbox exec was
interrupted): replay its output from sequence number SEQ (default: from the
start, as far as the replay ring reaches), stream the rest as it arrives, and
exit with the exec's status. Detaching (Ctrl-C) cancels the exec.`,
		Args: exactArgs(2, "SANDBOX EXEC_ID"),
		RunE: func(c *cobra.Command, args []string) error {
			key, id := args[0], args[1]
			_, cl, err := a.connect(c.Context(), key)
			if err != nil {
				return fail("attach", key, id, err)
			}
			defer cl.Close()
			res, err := cl.Attach(c.Context(), id,
				client.WithFromSeq(from), client.WithStdout(a.stdout), client.WithStderr(a.stderr))
			if err != nil && !(errors.Is(err, context.Canceled) && res.Cancelled) {
				return fail("attach", key, id, err)
			}
			a.reportStop(res, 0, 0)
			if res.ExitCode != 0 {
				return &ExitError{Code: res.ExitCode}
			}
			return nil
		},
	}
	c.Flags().Uint64Var(&from, "from", 0, "replay output from this sequence number (0: from the start)")
	return c
}
