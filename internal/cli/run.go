package cli

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/runbox/runbox"
)

// removeTimeout bounds removing run's throwaway sandbox once the command
// ended; it covers the stop protocol of anything the command left running.
const removeTimeout = 2 * time.Minute

func (a *app) runCmd() *cobra.Command {
	var uf upFlags
	var ef execFlags
	var line commandLine
	c := &cobra.Command{
		Use:   "run [up flags] [exec flags] [--] COMMAND...",
		Short: "Run a command in a throwaway sandbox: create, run, remove",
		Long: `Create a sandbox, run one command in it, and remove the sandbox, even when the
command or runbox failed. Exits with the command's status, or 125 when runbox
itself failed. COMMAND is read as by "runbox exec": one argument is a shell
string, several are an argv.`,
		Args: func(c *cobra.Command, args []string) (err error) {
			line, err = splitCommand(c, args, 0)
			return err
		},
		RunE: func(c *cobra.Command, _ []string) error {
			command := line.command
			if err := ef.check(); err != nil {
				return fail("run", "", ef.ID, err)
			}
			p, spec, err := a.upSpec(&uf)
			if err != nil {
				return fail("create", uf.name, "", err)
			}
			ctx := c.Context()
			sb, err := a.create(ctx, p, spec)
			if err != nil {
				return fail("create", uf.name, "", err)
			}
			defer a.removeAfterRun(ctx, p, sb)
			cl := a.clientFor(p, sb)
			defer cl.Close()
			return fail("exec", sb.ID, ef.ID, a.exec(ctx, cl, sb, command, &ef))
		},
	}
	uf.add(c.Flags(), a.env.Provider)
	ef.addCommon(c.Flags())          // no --detach: the sandbox goes when the command ends
	c.Flags().SetInterspersed(false) // flags after COMMAND's first word are the command's
	return c
}

// removeAfterRun removes run's sandbox, even after Ctrl-C cancelled ctx. A
// failure is reported but does not replace the command's status.
func (a *app) removeAfterRun(ctx context.Context, p runbox.Provider, sb runbox.Sandbox) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), removeTimeout)
	defer cancel()
	if err := p.Remove(ctx, sb, true); err != nil {
		fmt.Fprintln(a.stderr, "runbox: "+oneLine(fail("remove", sb.ID, "", err).Error()))
		return
	}
	a.forgetName(sb)
}
