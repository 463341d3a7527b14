package cli

import (
	"encoding/json"
	"errors"
	"time"

	"github.com/spf13/cobra"

	"github.com/runbox/runbox"
)

func (a *app) inspectCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "inspect SANDBOX",
		Short: "Print a sandbox's record and its runboxd's state as JSON",
		Long: `Print a sandbox as JSON: its provider record and, when its runboxd answers,
the daemon's state (version, cgroup mode, exec counts, goroutines, open files).
A local sandbox's detail holds its limits: memory, tmp_size and disk in bytes,
pids, cpus and cpu_shares. A paused sandbox has detail.paused "true" and
daemon.paused true (a docker sandbox's runboxd is frozen with it: its daemon
holds paused alone).`,
		Args: exactArgs(1, "SANDBOX"),
		RunE: func(c *cobra.Command, args []string) error {
			key := args[0]
			p, sb, err := a.find(c.Context(), key)
			if err != nil {
				return fail("inspect", key, "", err)
			}
			out := inspectJSON{sandboxJSON: sandboxToJSON(sb)}
			if sb.Alive {
				cl := a.clientFor(p, sb)
				defer cl.Close()
				info, err := cl.Info(c.Context())
				if errors.Is(err, runbox.ErrSandboxPaused) {
					// Frozen with its container (docker): the provider
					// knows it is paused; its runboxd answers once resumed.
					info, err = runbox.DaemonInfo{Paused: true}, nil
				}
				if err != nil {
					return fail("inspect", key, "", err)
				}
				// As docker's record says a pause, for every provider;
				// and the holds (a snapshot copying it).
				out.Detail = withFrozen(out.Detail, info)
				out.Daemon = &daemonJSON{
					Version:    info.Version,
					Pid:        info.Pid,
					CgroupMode: info.CgroupMode,
					Running:    info.Running,
					Retained:   info.Retained,
					Total:      info.Total,
					StartedAt:  info.StartedAt,
					Goroutines: info.Goroutines,
					OpenFDs:    info.OpenFDs,
					Paused:     info.Paused,
					Holds:      info.Holds,
				}
			}
			// Indented, and with "->" and "<" as they are (MarshalIndent
			// would print \u003e).
			enc := json.NewEncoder(a.stdout)
			enc.SetIndent("", "  ")
			enc.SetEscapeHTML(false)
			if err := enc.Encode(out); err != nil {
				return fail("inspect", key, "", err)
			}
			return nil
		},
	}
}

// inspectJSON is what inspect prints: the sandbox, and its daemon when it
// answers (null otherwise).
type inspectJSON struct {
	sandboxJSON
	Daemon *daemonJSON `json:"daemon"`
}

// daemonJSON is runboxd's state.
type daemonJSON struct {
	Version    string    `json:"version"`
	Pid        int       `json:"pid"`
	CgroupMode string    `json:"cgroup_mode"`
	Running    int       `json:"running"`
	Retained   int       `json:"retained"`
	Total      uint64    `json:"total"`
	StartedAt  time.Time `json:"started_at"`
	Goroutines int       `json:"goroutines"`
	OpenFDs    int       `json:"open_fds"`
	Paused     bool      `json:"paused"`
	// Holds counts the holds that keep the commands frozen besides the
	// user's pause (a snapshot copying the sandbox).
	Holds int `json:"holds"`
}
