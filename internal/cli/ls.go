package cli

import (
	"errors"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/runbox/runbox"
)

func (a *app) lsCmd() *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:   "ls [--json]",
		Short: "List sandboxes",
		Long: `List every sandbox of every provider: host sandboxes recorded under
$RUNBOX_HOME, and docker sandboxes (containers labelled by runbox) on the
engine DOCKER_HOST names. STATUS is "up" when the sandbox's runboxd answered
within a second, "lost" otherwise (remove a lost sandbox with runbox rm -f).
A provider that cannot be reached here is noted on stderr and skipped.`,
		Args: exactArgs(0, "no arguments"),
		RunE: func(c *cobra.Command, _ []string) error {
			var all []runbox.Sandbox
			for _, p := range a.allProviders() {
				sbs, err := p.List(c.Context())
				if errors.Is(err, runbox.ErrProviderUnavailable) {
					fmt.Fprintf(a.stderr, "runbox: %s sandboxes not listed: %v\n", p.Name(), unavailableReason(err))
					continue
				}
				if err != nil {
					return fail("list", "", "", err)
				}
				all = append(all, sbs...)
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
	return c
}

func status(sb runbox.Sandbox) string {
	if sb.Alive {
		return "up"
	}
	return "lost"
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
