package cli

import (
	"errors"
	"fmt"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/runbox/runbox"
)

func (a *app) lsCmd() *cobra.Command {
	var asJSON, quiet bool
	c := &cobra.Command{
		Use:   "ls [--json | -q]",
		Short: "List sandboxes",
		Long: `List every sandbox of every provider: host sandboxes recorded under
$RUNBOX_HOME, and docker sandboxes (containers labelled by runbox) on the
engine DOCKER_HOST names. STATUS is "up" when the sandbox's runboxd answered
within a second, "paused" when it did and the sandbox is paused (runbox
pause), "held" when it is not paused but held frozen for a while by a
snapshot copying it, "lost" otherwise (remove a lost sandbox with runbox rm -f).
A provider that cannot be reached here is noted on stderr and skipped, except
a docker engine that was never started (its socket does not exist): it has
no sandboxes to list. With a server (RUNBOX_HOST) only the server's sandboxes
are listed, and a server that does not answer is an error. -q prints the ids
alone, one a line (docker ps -q).`,
		Args: exactArgs(0, "no arguments"),
		RunE: func(c *cobra.Command, _ []string) error {
			// Through a server, the server is the only place to list: a
			// server that cannot be used is an error, not a warning.
			srv, err := a.remoteServer()
			if err != nil {
				return fail("list", "", "", err)
			}
			var all []runbox.Sandbox
			for _, p := range a.allProviders() {
				from := len(all)
				sbs, err := p.List(c.Context())
				if errors.Is(err, runbox.ErrProviderUnavailable) && srv == nil {
					if neverStarted(err) {
						continue
					}
					fmt.Fprintf(a.stderr, "runbox: %s sandboxes not listed: %v\n", p.Name(), unavailableReason(err))
					continue
				}
				if err != nil {
					return fail("list", "", "", err)
				}
				all = append(all, sbs...)
				if !quiet {
					a.markPaused(c.Context(), p, all[from:])
				}
			}
			if quiet {
				for _, sb := range all {
					fmt.Fprintln(a.stdout, sb.ID)
				}
				return nil
			}
			if asJSON {
				out := make([]sandboxJSON, 0, len(all))
				for _, sb := range all {
					out = append(out, sandboxToJSON(sb))
				}
				return writeJSON(a.stdout, out)
			}
			tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "SANDBOX ID\tNAME\tPROVIDER\tSTATUS\tCREATED")
			for _, sb := range all {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", sb.ID, sb.Name, sb.Provider, status(sb), ago(sb.Created))
			}
			return tw.Flush()
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print a JSON array")
	c.Flags().BoolVarP(&quiet, "quiet", "q", false, "print only the sandbox ids, one a line")
	c.MarkFlagsMutuallyExclusive("json", "quiet")
	return c
}

// neverStarted reports whether err, a provider's ErrProviderUnavailable,
// says its engine's unix socket does not exist: no engine was ever
// started there, so it holds no sandbox to warn about.
func neverStarted(err error) bool {
	return errors.Is(err, syscall.ENOENT)
}

// status is a sandbox's STATUS column: lost, paused (its user's pause,
// held or not), held (frozen for a snapshot's copy only) or up.
func status(sb runbox.Sandbox) string {
	switch {
	case !sb.Alive:
		return "lost"
	case sb.Detail["paused"] == "true":
		return "paused"
	case sb.Detail["held"] != "":
		return "held"
	}
	return "up"
}

// sandboxJSON is a sandbox in ls --json and inspect.
type sandboxJSON struct {
	ID       string            `json:"id"`
	Name     string            `json:"name"`
	Provider string            `json:"provider"`
	Created  time.Time         `json:"created"`
	Alive    bool              `json:"alive"`
	Detail   map[string]string `json:"detail"`
}

func sandboxToJSON(sb runbox.Sandbox) sandboxJSON {
	return sandboxJSON{
		ID:       sb.ID,
		Name:     sb.Name,
		Provider: sb.Provider,
		Created:  sb.Created,
		Alive:    sb.Alive,
		Detail:   sb.Detail,
	}
}

// unavailableReason is why a provider is unavailable, on one short line:
// what follows "provider unavailable: " in err's message.
func unavailableReason(err error) string {
	msg := oneLine(err.Error())
	if _, after, ok := strings.Cut(msg, runbox.ErrProviderUnavailable.Error()+": "); ok {
		return after
	}
	return msg
}
