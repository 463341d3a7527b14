package servercli

import (
	"context"
	"fmt"
	"strconv"
	"text/tabwriter"
	"time"

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
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Started.UTC().Format(time.RFC3339), r.Tenant,
					r.Sandbox, r.Kind, dash(r.ExecID), exit, outcome, dur, oneLine(what))
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
