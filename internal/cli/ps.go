package cli

import (
	"fmt"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/client"
)

func (a *app) psCmd() *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:   "ps SANDBOX [--json]",
		Short: "List a sandbox's execs",
		Long: `List the execs a sandbox's runboxd keeps: running ones, and exited ones until
their retention ends. PROCS counts processes still alive: for an exec that
exited, what it left running in the background (its STATE says so too).
runbox cancel SANDBOX EXEC_ID stops them; runbox exec --kill-leftovers stops
them as the command exits.`,
		Args: exactArgs(1, "SANDBOX"),
		RunE: func(c *cobra.Command, args []string) error {
			key := args[0]
			_, cl, err := a.connect(c.Context(), key)
			if err != nil {
				return fail("ps", key, "", err)
			}
			defer cl.Close()
			execs, err := cl.List(c.Context(), client.ListWithoutOutput())
			if err != nil {
				return fail("ps", key, "", err)
			}
			if asJSON {
				out := make([]execInfoJSON, 0, len(execs))
				for _, e := range execs {
					out = append(out, execInfoToJSON(e))
				}
				return writeJSON(a.stdout, out)
			}
			tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "EXEC ID\tPID\tSTATE\tEXIT\tPROCS\tSTARTED\tCOMMAND")
			for _, e := range execs {
				exit := ""
				if e.Result != nil {
					exit = strconv.Itoa(e.Result.ExitCode)
					switch {
					case e.Result.TimedOut:
						exit += " (timed out)"
					case e.Result.IdleTimedOut:
						exit += " (idle)"
					case e.Result.Cancelled:
						exit += " (cancelled)"
					}
				}
				state := e.State.String()
				if e.State == runbox.ExecExited && e.LiveProcesses > 0 {
					state += fmt.Sprintf(" (%d left running)", e.LiveProcesses)
				}
				fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%d\t%s\t%s\n", e.ID, e.Pid, state, exit,
					e.LiveProcesses, ago(e.StartedAt), truncate(e.Command, 60))
			}
			return tw.Flush()
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print a JSON array")
	return c
}

// execInfoJSON is one element of ps --json.
type execInfoJSON struct {
	ID            string          `json:"id"`
	Pid           int             `json:"pid"`
	State         string          `json:"state"`
	Command       string          `json:"command"`
	StartedAt     time.Time       `json:"started_at"`
	LiveProcesses int             `json:"live_processes"`
	Result        *execResultInfo `json:"result,omitempty"`
}

// execResultInfo is how an exited exec ended, in ps --json.
type execResultInfo struct {
	ExitCode     int    `json:"exit_code"`
	Signal       string `json:"signal"`
	TimedOut     bool   `json:"timed_out"`
	Cancelled    bool   `json:"cancelled"`
	IdleTimedOut bool   `json:"idle_timed_out"`
	DurationMS   int64  `json:"duration_ms"`
	Killed       int    `json:"killed"`
}

func execInfoToJSON(e runbox.ExecInfo) execInfoJSON {
	out := execInfoJSON{
		ID:            e.ID,
		Pid:           e.Pid,
		State:         e.State.String(),
		Command:       e.Command,
		StartedAt:     e.StartedAt,
		LiveProcesses: e.LiveProcesses,
	}
	if r := e.Result; r != nil {
		out.Result = &execResultInfo{
			ExitCode:     r.ExitCode,
			Signal:       r.Signal,
			TimedOut:     r.TimedOut,
			Cancelled:    r.Cancelled,
			IdleTimedOut: r.IdleTimedOut,
			DurationMS:   r.Duration.Milliseconds(),
			Killed:       r.Killed,
		}
	}
	return out
}

// ago formats how long ago t was, coarsely ("3s ago", "5m ago").
func ago(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	d := time.Since(t)
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds ago", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm ago", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh ago", int(d.Hours()))
	}
	return fmt.Sprintf("%dd ago", int(d.Hours()/24))
}

// truncate shortens s to at most n runes for a table cell.
func truncate(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}
