package servercli

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/spf13/cobra"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/client"
	"github.com/runbox/runbox/internal/buildinfo"
	"github.com/runbox/runbox/internal/cli"
	"github.com/runbox/runbox/internal/mcpserver"
	"github.com/runbox/runbox/provider/host"
)

// mcpFlags are runbox mcp's flags.
type mcpFlags struct {
	provider, image, workdir, sandbox string
	keep, allowHost                   bool
	timeout, maxTimeout, grace        time.Duration
	memory, maxMemory                 string
	disk, maxDisk                     string
	pids, maxPids                     int64
	cpus, maxCPUs                     float64
	network                           string
	allowNetworks                     []string
	allow                             []string
}

func (a *app) mcpCmd() *cobra.Command {
	var f mcpFlags
	c := &cobra.Command{
		Use:   "mcp [--provider P [--allow-host]] [--image I] [--workdir DIR] [--sandbox SANDBOX] [--keep]",
		Short: "Serve runbox as MCP tools on stdin/stdout (for AI agents)",
		Long: `Serve the Model Context Protocol on stdin and stdout, so an MCP agent (Claude
Code, Cursor, VS Code, Goose, ...) runs its shell commands and file edits in a
runbox sandbox: claude mcp add runbox -- runbox mcp

Tools: exec (a persistent shell session per MCP session; timeout, background),
exec_output, exec_cancel, exec_list, file_read, file_write, file_edit,
file_list, file_delete, sandbox_create, sandbox_list, sandbox_remove.

Each MCP session gets a default sandbox on first use (--provider, --image,
--workdir; the local provider's workspace defaults to the current directory),
removed when the session ends unless --keep. The model makes sandboxes only
with --provider (host, which isolates nothing, only with --allow-host), within
the ceilings --max-memory, --max-pids, --max-cpus, --max-timeout and the
network modes none, --network and --allow-network; it sees and controls only
the sandboxes its session made. --sandbox binds the session to one existing
sandbox instead: its only one, never removed. With RUNBOX_HOST and
RUNBOX_TOKEN (or --host and --token) set, sandboxes, execs and files go
through that runbox serve (its provider, workspaces, quotas and audit log)
instead of this machine's providers. A command that outlives its timeout
(default 2m, at most --max-timeout) returns at the timeout with its output so
far, and nothing it started keeps running. Diagnostics go to stderr. See
docs/mcp.md.`,
		Args: exactArgs(0, "no arguments"),
		RunE: func(c *cobra.Command, _ []string) error {
			cfg, err := a.mcpConfig(f)
			if err != nil {
				return fmt.Errorf("mcp: %w", err)
			}
			place, provider, err := a.mcpPlace(f.provider)
			if err != nil {
				return fmt.Errorf("mcp: %w", err)
			}
			cfg.Provider = provider
			if err := a.mcpCheckPlace(c.Context(), place, f); err != nil {
				return fmt.Errorf("mcp: %w", err)
			}
			mcpserver.Version = buildinfo.Current()
			srv := mcpserver.New(place, cfg)
			return srv.RunIO(c.Context(), io.NopCloser(a.stdin), nopWriteCloser{a.stdout})
		},
	}
	fs := c.Flags()
	fs.StringVar(&f.provider, "provider", a.env.Provider, "provider of every sandbox the sessions make, the only one offered to the model ($RUNBOX_PROVIDER sets the default)")
	fs.BoolVar(&f.allowHost, "allow-host", false, "allow --provider host (or a --sandbox of the host provider): the model then runs commands on this machine with no isolation")
	fs.StringVar(&f.image, "image", "", "image of the default sandboxes (providers that use images)")
	fs.StringVar(&f.workdir, "workdir", "", "workspace of the default sandboxes (default: the current directory; local: mounted at /workspace)")
	fs.StringVar(&f.sandbox, "sandbox", "", "bind every session to this existing sandbox: its only one, never removed by runbox mcp (no sandbox_create, sandbox_remove)")
	fs.BoolVar(&f.keep, "keep", false, "keep the default sandboxes when their sessions end")
	fs.DurationVar(&f.timeout, "timeout", mcpserver.DefaultTimeout, "timeout of an exec that names none")
	fs.DurationVar(&f.maxTimeout, "max-timeout", mcpserver.DefaultMaxTimeout, "the longest timeout an exec may ask for (and a background exec's default)")
	fs.DurationVar(&f.grace, "grace", 0, "time between SIGTERM and SIGKILL when a command is stopped (default 5s)")
	fs.StringVar(&f.memory, "memory", "", "memory of a sandbox that names none, e.g. 2G (default: the provider's)")
	fs.StringVar(&f.maxMemory, "max-memory", "8G", "the most memory a model may ask a sandbox to have")
	fs.StringVar(&f.disk, "disk", "", "disk bound (outside the workspace) of a sandbox that names none, e.g. 4G (default: the provider's)")
	fs.StringVar(&f.maxDisk, "max-disk", "20G", "the most disk a model may ask a sandbox to have")
	fs.Int64Var(&f.pids, "pids", 0, "process and thread limit of a sandbox that names none (default: the provider's)")
	fs.Int64Var(&f.maxPids, "max-pids", mcpserver.DefaultMaxPids, "the most processes and threads a model may ask a sandbox to have")
	fs.Float64Var(&f.cpus, "cpus", 0, "CPU limit of a sandbox that names none, e.g. 1.5 (default: the provider's)")
	fs.Float64Var(&f.maxCPUs, "max-cpus", mcpserver.DefaultMaxCPUs, "the most CPUs a model may ask a sandbox to have (default: this machine's count)")
	fs.StringVar(&f.network, "network", "", "network mode of a sandbox that names none (default: the provider's)")
	fs.StringSliceVar(&f.allowNetworks, "allow-network", nil, "network modes a model may ask for besides none and --network (e.g. host, private)")
	fs.StringSliceVar(&f.allow, "allow", nil, "names a model may let a --network private sandbox reach (*, *.example.com, or a name); none: it opens no name")
	return c
}

// mcpConfig is the server's configuration from the flags, its defaults
// within its ceilings.
func (a *app) mcpConfig(f mcpFlags) (mcpserver.Config, error) {
	mem, err := cli.ParseBytes(f.memory)
	if err != nil {
		return mcpserver.Config{}, fmt.Errorf("--memory: %w", err)
	}
	maxMem, err := cli.ParseBytes(f.maxMemory)
	if err != nil || maxMem <= 0 {
		return mcpserver.Config{}, fmt.Errorf("--max-memory %q: want a size above zero, e.g. 8G", f.maxMemory)
	}
	disk, err := cli.ParseBytes(f.disk)
	if err != nil {
		return mcpserver.Config{}, fmt.Errorf("--disk: %w", err)
	}
	maxDisk, err := cli.ParseBytes(f.maxDisk)
	if err != nil || maxDisk <= 0 {
		return mcpserver.Config{}, fmt.Errorf("--max-disk %q: want a size above zero, e.g. 20G", f.maxDisk)
	}
	if f.maxPids <= 0 || !(f.maxCPUs > 0) {
		return mcpserver.Config{}, fmt.Errorf("--max-pids and --max-cpus must be above zero")
	}
	limits := mcpserver.Limits{Memory: mem, Pids: f.pids, CPUs: f.cpus, MaxMemory: maxMem, MaxPids: f.maxPids, Disk: disk, MaxDisk: maxDisk,
		MaxCPUs: f.maxCPUs, Network: f.network, Networks: f.allowNetworks, Allow: f.allow}
	if err := limits.Check(); err != nil {
		return mcpserver.Config{}, err
	}
	return mcpserver.Config{
		Spec: runbox.SandboxSpec{Image: f.image, Workdir: f.workdir}, Limits: limits,
		Sandbox: f.sandbox, Keep: f.keep, Timeout: f.timeout, MaxTimeout: f.maxTimeout, Grace: f.grace,
		Logger: slog.New(slog.NewTextHandler(a.stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	}, nil
}

// mcpCheckPlace refuses, before serving, what the operator did not allow:
// the host provider without --allow-host (on this machine; a runbox serve
// offers what its operator lists), and a --sandbox that is not there.
func (a *app) mcpCheckPlace(ctx context.Context, place mcpserver.Sandboxes, f mcpFlags) error {
	_, remote := place.(*mcpserver.Remote)
	provider := f.provider
	if f.sandbox != "" {
		sb, err := place.Get(ctx, f.sandbox)
		if err != nil {
			return fmt.Errorf("--sandbox: %w", err)
		}
		provider = sb.Provider
	}
	if !remote && provider == host.ProviderName && !f.allowHost {
		return fmt.Errorf("%w: the host provider runs the model's commands on this machine with no isolation; pass --allow-host to mean it", runbox.ErrInvalidSpec)
	}
	return nil
}

// mcpPlace returns where runbox mcp's sandboxes are: the runbox serve of
// RUNBOX_HOST, else this machine's providers; and the provider of the
// default sandboxes ("" for a server's default unless --provider or
// $RUNBOX_PROVIDER names one).
func (a *app) mcpPlace(provider string) (mcpserver.Sandboxes, string, error) {
	srv, err := a.RemoteServer()
	if err != nil {
		return nil, "", err
	}
	if srv != nil {
		if !a.ProviderChosen() {
			provider = ""
		}
		return &mcpserver.Remote{Server: srv, Options: client.SandboxOptions{Labels: map[string]string{"made-by": "mcp"}}}, provider, nil
	}
	if _, err := a.Provider(provider); err != nil {
		return nil, "", err
	}
	return &mcpserver.Providers{Providers: a.AllProviders(), Default: provider}, provider, nil
}

// nopWriteCloser is an io.WriteCloser whose Close does nothing: stdout
// stays open for the process.
type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }
