package cli

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/internal/branching"
)

func (a *app) pauseCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "pause SANDBOX",
		Short: "Freeze every process of a sandbox's commands",
		Long: `Freeze every process of the sandbox's commands (a local sandbox: each exec's
cgroup through cgroup.freeze, or SIGSTOP of its process tree where there is no
cgroup; docker: the engine's pause). Exec deadlines and idle timeouts stop while
paused and go on with the time they had left after resume; nothing is lost.
A new exec on a paused sandbox exits 125 with "sandbox is paused". Pausing a
paused sandbox does nothing; a sandbox paused while a snapshot copies it stays
paused after the snapshot. Prints the sandbox's id.`,
		Args: exactArgs(1, "SANDBOX"),
		RunE: func(c *cobra.Command, args []string) error {
			return a.setPaused(c.Context(), args[0], true)
		},
	}
}

func (a *app) resumeCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "resume SANDBOX",
		Short: "Thaw a paused sandbox",
		Long: `Thaw what runbox pause froze: its commands run on, each exec with the time it
had left before its deadline. Resuming a running sandbox does nothing. While a
snapshot copies the sandbox its commands stay frozen until the copy ends (runbox
ls says "held"), then run on. Prints the sandbox's id.`,
		Args: exactArgs(1, "SANDBOX"),
		RunE: func(c *cobra.Command, args []string) error {
			return a.setPaused(c.Context(), args[0], false)
		},
	}
}

// setPaused pauses or resumes the sandbox named key: through its provider
// when that is a runbox.Pauser, else through its runboxd.
func (a *app) setPaused(ctx context.Context, key string, pause bool) error {
	op := "resume"
	if pause {
		op = "pause"
	}
	p, sb, err := a.find(ctx, key)
	if err != nil {
		return fail(op, key, "", err)
	}
	if err := a.pauseSandbox(ctx, p, sb, pause); err != nil {
		return fail(op, key, "", err)
	}
	fmt.Fprintln(a.stdout, sb.ID)
	return nil
}

// pauseSandbox pauses (or resumes) sb, as serve does (branching.SetPaused).
func (a *app) pauseSandbox(ctx context.Context, p runbox.Provider, sb runbox.Sandbox, pause bool) error {
	return branching.SetPaused(ctx, p, sb, pause, func() (branching.Daemon, func()) {
		cl := a.clientFor(p, sb)
		return cl, func() { cl.Close() }
	})
}
