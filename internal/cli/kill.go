package cli

import (
	"fmt"
	"strconv"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"
)

func (a *app) killCmd() *cobra.Command {
	var sig string
	c := &cobra.Command{
		Use:   "kill -s SIGNAL SANDBOX EXEC_ID",
		Short: "Send a signal to every process of an exec",
		Long: `Send a signal to every process an exec started (not only its leader). SIGNAL
is a name (TERM, SIGTERM, int) or a number. To stop an exec for good, with a
grace period and a check that nothing survives, use runbox cancel.`,
		Args: exactArgs(2, "SANDBOX EXEC_ID"),
		RunE: func(c *cobra.Command, args []string) error {
			key, id := args[0], args[1]
			s, err := parseSignal(sig)
			if err != nil {
				return fail("kill", key, id, err)
			}
			_, cl, err := a.connect(c.Context(), key)
			if err != nil {
				return fail("kill", key, id, err)
			}
			defer cl.Close()
			if id, err = resolveExec(c.Context(), cl, id); err != nil {
				return fail("kill", key, id, err)
			}
			_, err = cl.Signal(c.Context(), id, s)
			return fail("kill", key, id, err)
		},
	}
	c.Flags().StringVarP(&sig, "signal", "s", "KILL", "signal name or number")
	return c
}

// parseSignal accepts "TERM", "sigterm", "SIGTERM" or "15".
func parseSignal(s string) (syscall.Signal, error) {
	if n, err := strconv.Atoi(s); err == nil {
		if n <= 0 || n > 64 {
			return 0, fmt.Errorf("-s %d: signal numbers go from 1 to 64", n)
		}
		return syscall.Signal(n), nil
	}
	name := strings.ToUpper(s)
	if !strings.HasPrefix(name, "SIG") {
		name = "SIG" + name
	}
	if sig := unix.SignalNum(name); sig != 0 {
		return sig, nil
	}
	return 0, fmt.Errorf("-s %s: unknown signal (give a name such as TERM, INT, KILL, or a number)", s)
}
