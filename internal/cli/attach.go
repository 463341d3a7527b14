package cli

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/client"
	"github.com/runbox/runbox/internal/execrules"
)

// cancelTimeout bounds the cancel attach sends on Ctrl-C: the exec's grace
// plus time for the daemon to answer.
const cancelTimeout = 2 * time.Minute

func (a *app) attachCmd() *cobra.Command {
	var from uint64
	c := &cobra.Command{
		Use:   "attach SANDBOX EXEC_ID [--from SEQ]",
		Short: "Follow an exec to its end and exit with its status; Ctrl-C stops the exec (runbox logs -f only watches)",
		Long: `Follow an exec started earlier (exec --detach, or one whose runbox exec was
interrupted): replay its output from sequence number SEQ (default: from the
start, as far as the replay ring reaches), stream the rest as it arrives, and
exit with the exec's status. EXEC_ID may be a unique prefix of the id.

An interrupted runbox exec --cancel-on-exit=false prints the SEQ to resume
from. Ctrl-C (or SIGTERM) cancels the exec with the stop protocol and exits
with its status, as with runbox exec. To watch an exec without ever stopping
it, use runbox logs -f.`,
		Args: exactArgs(2, "SANDBOX EXEC_ID"),
		RunE: func(c *cobra.Command, args []string) error {
			key, id := args[0], args[1]
			_, cl, err := a.connect(c.Context(), key)
			if err != nil {
				return fail("attach", key, id, err)
			}
			defer cl.Close()
			if id, err = resolveExec(c.Context(), cl, id); err != nil {
				return fail("attach", key, id, err)
			}
			// Ctrl-C cancels the exec on the daemon; the attach reads on
			// to its result.
			ctx := context.WithoutCancel(c.Context())
			cancelled := make(chan struct{})
			stop := context.AfterFunc(c.Context(), func() {
				defer close(cancelled)
				cctx, cancel := context.WithTimeout(ctx, cancelTimeout)
				defer cancel()
				if err := cl.Cancel(cctx, id, 0); err != nil {
					fmt.Fprintln(a.stderr, "runbox: "+oneLine(fail("cancel", key, id, err).Error()))
				}
			})
			// A cancel under way ends before the client closes (it
			// would fail with "use of closed network connection").
			defer func() {
				if !stop() {
					<-cancelled
				}
			}()
			res, err := cl.Attach(ctx, id, client.WithFromSeq(from),
				client.WithStdout(a.stdout), client.WithStderr(a.stderr),
				client.WithOnGap(func(g runbox.OutputGap) { execrules.ReportGap(a.stderr, g) }))
			if err != nil {
				return fail("attach", key, id, err)
			}
			execrules.ReportStop(a.stderr, res, 0, 0)
			execrules.ReportLeftovers(a.stderr, res, key)
			if code := execrules.ExitStatus(res); code != 0 {
				return &ExitError{Code: code}
			}
			return nil
		},
	}
	c.Flags().Uint64Var(&from, "from", 0, "replay output from this sequence number (0: from the start)")
	return c
}
