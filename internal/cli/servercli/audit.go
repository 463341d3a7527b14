package servercli

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/runbox/runbox/internal/registry"
)

func (a *app) auditCmd() *cobra.Command {
	var db, tenant, sandbox string
	var asJSON bool
	var limit int
	c := &cobra.Command{
		Use:   "audit [--tenant T] [--sandbox S] [--limit N] [--json]",
		Short: "Print runbox serve's audit log: every exec and lifecycle call, and refused egress",
		Long: `Print the audit log of runbox serve from its registry database (--db,
default $RUNBOX_HOME/runbox.db), oldest first: one row per exec (tenant,
sandbox, exec id, command, start, end, exit code, signal, timed out,
cancelled, killed processes, bytes out) and per lifecycle call (create,
delete, reap, lost, recreate, ...); egress rows record an egress policy
change and egress-refused rows the connections a private sandbox's policy
refused (host, port, rule and count in DETAIL). An exec still running has
no end.
--json prints one JSON object per line.`,
		Args: exactArgs(0, "no arguments"),
		RunE: func(c *cobra.Command, _ []string) error {
			if limit < 0 {
				return fmt.Errorf("audit: --limit must not be negative")
			}
			store, err := registry.Open(c.Context(), a.dbPath(db))
			if err != nil {
				return fmt.Errorf("audit: %w", err)
			}
			defer store.Close()
			f := registry.AuditFilter{Tenant: tenant, Limit: limit}
			if sandbox != "" {
				if f.Sandboxes, err = auditSandboxIDs(c.Context(), store, tenant, sandbox); err != nil {
					return fmt.Errorf("audit: %w", err)
				}
			}
			rows, err := store.Audit(c.Context(), f)
			if err != nil {
				return fmt.Errorf("audit: %w", err)
			}
			if asJSON {
				for _, r := range rows {
					if err := writeJSON(a.stdout, auditToJSON(r)); err != nil {
						return err
					}
				}
				return nil
			}
			tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "TIME\tTENANT\tSANDBOX\tKIND\tEXEC\tEXIT\tOUTCOME\tDURATION\tCOMMAND/DETAIL")
			for _, r := range rows {
				exit, dur := "-", "-"
				if r.ExitCode != nil {
					exit = strconv.Itoa(*r.ExitCode)
				}
				if !r.Ended.IsZero() && r.Kind == registry.KindExec {
					dur = r.Ended.Sub(r.Started).Round(time.Millisecond).String()
				}
				outcome := r.Outcome
				if outcome == "" {
					outcome = "running"
				}
				what := r.Command
				if what == "" {
					what = r.Detail
				}
				cells := []string{r.Started.UTC().Format(time.RFC3339), r.Tenant, r.Sandbox, r.Kind, dash(r.ExecID), exit, outcome, dur, oneLine(what)}
				for i, c := range cells {
					cells[i] = printable(c)
				}
				fmt.Fprintln(tw, strings.Join(cells, "\t"))
			}
			return tw.Flush()
		},
	}
	fs := c.Flags()
	fs.StringVar(&db, "db", "", "the registry database (default $RUNBOX_HOME/runbox.db)")
	fs.StringVar(&tenant, "tenant", "", "only this tenant's rows")
	fs.StringVar(&sandbox, "sandbox", "", "only this sandbox's rows (its name or id; a removed sandbox: its id)")
	fs.IntVar(&limit, "limit", 0, "only the newest N rows (0: all)")
	fs.BoolVar(&asJSON, "json", false, "one JSON object per line")
	return c
}

// auditSandboxIDs resolves audit --sandbox S to the sandbox ids audit rows
// carry: S itself, and the ids of tenant's (every tenant's, for "")
// registered sandboxes named S. A removed sandbox's rows keep only its id,
// so an S that no registered sandbox and no audit row knows is an error
// (registry.ErrNotFound) saying so, not an empty table.
func auditSandboxIDs(ctx context.Context, store *registry.Store, tenant, s string) ([]string, error) {
	recs, err := store.ListSandboxes(ctx, tenant)
	if err != nil {
		return nil, err
	}
	ids := []string{s}
	for _, r := range recs {
		if r.Name == s && r.ID != s {
			ids = append(ids, r.ID)
		}
		if r.ID == s {
			return ids, nil
		}
	}
	if len(ids) > 1 {
		return ids, nil
	}
	rows, err := store.Audit(ctx, registry.AuditFilter{Tenant: tenant, Sandbox: s, Limit: 1})
	if err != nil {
		return nil, err
	}
	if len(rows) == 0 {
		return nil, fmt.Errorf("--sandbox %q: %w: no registered sandbox has that name or id and no audit row has that id "+
			"(a removed sandbox's rows keep only its id, not its name: find the id with runbox audit without --sandbox)",
			s, registry.ErrNotFound)
	}
	return ids, nil
}

// printable is an audit table cell as a terminal may show it: every
// control character (C0 with tab, DEL, C1), formatting character (bidi
// overrides, zero-width marks), line or paragraph separator and invalid
// byte written as a Go escape (\x1b, \u202e, \xff). The log keeps what a
// tenant sent (commands, exec ids, host names), but its table is read on
// an operator's terminal, where those would rewrite the screen, start a
// line that looks like another tenant's row, or split the columns
// (tabwriter takes a tab as a cell and a form feed as a line). Every cell
// goes through it, whoever filled the column.
func printable(s string) string {
	clean := true
	for _, r := range s {
		if !safeRune(r) {
			clean = false
			break
		}
	}
	if clean {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			fmt.Fprintf(&b, "\\x%02x", s[i])
		case !safeRune(r):
			q := strconv.QuoteRuneToASCII(r)
			b.WriteString(q[1 : len(q)-1])
		default:
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	return b.String()
}

// safeRune reports whether r shows as itself on a terminal, moving the
// cursor only forward on its line.
func safeRune(r rune) bool {
	return r != utf8.RuneError && !unicode.IsControl(r) && !unicode.Is(unicode.Cf, r) &&
		!unicode.Is(unicode.Zl, r) && !unicode.Is(unicode.Zp, r)
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// auditJSON is one audit row in audit --json.
type auditJSON struct {
	ID          int64      `json:"id"`
	Tenant      string     `json:"tenant"`
	Sandbox     string     `json:"sandbox"`
	Kind        string     `json:"kind"`
	ExecID      string     `json:"exec_id,omitempty"`
	Command     string     `json:"command,omitempty"`
	Started     time.Time  `json:"started"`
	Ended       *time.Time `json:"ended"`
	ExitCode    *int       `json:"exit_code"`
	Signal      string     `json:"signal,omitempty"`
	TimedOut    bool       `json:"timed_out"`
	Cancelled   bool       `json:"cancelled"`
	Killed      int        `json:"killed"`
	StdoutBytes int64      `json:"stdout_bytes"`
	StderrBytes int64      `json:"stderr_bytes"`
	Outcome     string     `json:"outcome"`
	Detail      string     `json:"detail,omitempty"`
}

func auditToJSON(r registry.AuditRow) auditJSON {
	out := auditJSON{ID: r.ID, Tenant: r.Tenant, Sandbox: r.Sandbox, Kind: r.Kind, ExecID: r.ExecID, Command: r.Command,
		Started: r.Started.UTC(), ExitCode: r.ExitCode, Signal: r.Signal, TimedOut: r.TimedOut, Cancelled: r.Cancelled,
		Killed: r.Killed, StdoutBytes: r.StdoutBytes, StderrBytes: r.StderrBytes, Outcome: r.Outcome, Detail: r.Detail}
	if !r.Ended.IsZero() {
		e := r.Ended.UTC()
		out.Ended = &e
	}
	if out.Outcome == "" {
		out.Outcome = "running"
	}
	return out
}
