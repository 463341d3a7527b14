package cli

import (
	"github.com/spf13/cobra"
)

// loginShell runs bash as a login shell where the sandbox has it, else sh.
const loginShell = "if command -v bash >/dev/null 2>&1; then exec bash -l; else exec sh -l; fi"

func (a *app) shCmd() *cobra.Command {
	var f execFlags
	c := &cobra.Command{
		Use:   "sh [flags] SANDBOX",
		Short: "Open an interactive shell in a sandbox",
		Long: `Open an interactive login shell (bash -l, or sh -l where bash is absent) in
a sandbox, on a pseudo-terminal the size of this one. When stdin is a
terminal it is put in raw mode, and restored when the shell exits. The
exit status is the shell's. The same as runbox exec -t -i SANDBOX -- SHELL.

When stdin is not a terminal, the shell reads it as typed input and exits
at its end. If this runbox process dies, however it dies, runboxd hangs the
shell up (SIGHUP, then the stop protocol), unless --keep-on-exit.`,
		Args: exactArgs(1, "SANDBOX"),
		RunE: func(c *cobra.Command, args []string) error {
			key := args[0]
			f.TTY, f.Interactive = true, true
			f.CancelOnExit = !f.Keep
			if err := f.check(); err != nil {
				return fail("sh", key, f.ID, err)
			}
			sb, cl, err := a.connect(c.Context(), key)
			if err != nil {
				return fail("sh", key, f.ID, err)
			}
			defer cl.Close()
			return fail("sh", key, f.ID, a.exec(c.Context(), cl, sb, []string{loginShell}, &f))
		},
	}
	fs := c.Flags()
	fs.StringVar(&f.Session, "session", "", "shell session to start in: its directory and exported environment")
	fs.StringVar(&f.Cwd, "cwd", "", "working directory (default: the sandbox's)")
	fs.StringArrayVarP(&f.Env, "env", "e", nil, "set an environment variable: K=V, or K to pass this process's value")
	fs.StringVar(&f.ID, "id", "", "exec id (default: generated)")
	fs.BoolVar(&f.Keep, "keep-on-exit", false, "leave the shell running if this runbox process dies (default: runboxd hangs it up)")
	return c
}
