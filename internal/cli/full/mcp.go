package full

import (
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/spf13/cobra"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/client"
	"github.com/runbox/runbox/internal/buildinfo"
	"github.com/runbox/runbox/internal/mcpserver"
)

func (a *app) mcpCmd() *cobra.Command {
	var (
		provider, image, workdir, sandbox string
		keep                              bool
		timeout, maxTimeout, grace        time.Duration
	)
	c := &cobra.Command{
		Use:   "mcp [--provider P] [--image I] [--workdir DIR] [--sandbox SANDBOX] [--keep]",
		Short: "Serve runbox as MCP tools on stdin/stdout (for AI agents)",
		Long: `Serve the Model Context Protocol on stdin and stdout, so an MCP agent (Claude
Code, Cursor, VS Code, Goose, ...) runs its shell commands and file edits in a
runbox sandbox: claude mcp add runbox -- runbox mcp

Tools: exec (a persistent shell session per MCP session; timeout, background),
exec_output, exec_cancel, exec_list, file_read, file_write, file_edit,
file_list, file_delete, sandbox_create, sandbox_list, sandbox_remove.

Each MCP session gets a default sandbox on first use (--provider, --image,
--workdir; the local provider's workspace defaults to the current directory),
removed when the session ends unless --keep; --sandbox uses an existing one
instead. With RUNBOX_HOST and RUNBOX_TOKEN (or --host and --token) set,
sandboxes, execs and files go through that runbox serve (its provider,
workspaces, quotas and audit log) instead of this machine's providers. A command that outlives its timeout (default 2m, at most
--max-timeout) returns at the timeout with its output so far, and nothing it
started keeps running. Diagnostics go to stderr. See docs/mcp.md.`,
		Args: exactArgs(0, "no arguments"),
		RunE: func(c *cobra.Command, _ []string) error {
			place, provider, err := a.mcpPlace(provider)
			if err != nil {
				return fmt.Errorf("mcp: %w", err)
			}
			mcpserver.Version = buildinfo.Current()
			srv := mcpserver.New(place, mcpserver.Config{
				Provider: provider, Spec: runbox.SandboxSpec{Image: image, Workdir: workdir},
				Sandbox: sandbox, Keep: keep, Timeout: timeout, MaxTimeout: maxTimeout, Grace: grace,
				Logger: slog.New(slog.NewTextHandler(a.stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
			})
			return srv.RunIO(c.Context(), io.NopCloser(a.stdin), nopWriteCloser{a.stdout})
		},
	}
	fs := c.Flags()
	fs.StringVar(&provider, "provider", a.env.Provider, "provider of the sessions' default sandboxes ($RUNBOX_PROVIDER sets the default)")
	fs.StringVar(&image, "image", "", "image of the default sandboxes (providers that use images)")
	fs.StringVar(&workdir, "workdir", "", "workspace of the default sandboxes (default: the current directory; local: mounted at /workspace)")
	fs.StringVar(&sandbox, "sandbox", "", "use this existing sandbox as every session's default (never removed by runbox mcp)")
	fs.BoolVar(&keep, "keep", false, "keep the default sandboxes when their sessions end")
	fs.DurationVar(&timeout, "timeout", mcpserver.DefaultTimeout, "timeout of an exec that names none")
	fs.DurationVar(&maxTimeout, "max-timeout", mcpserver.DefaultMaxTimeout, "the longest timeout an exec may ask for (and a background exec's default)")
	fs.DurationVar(&grace, "grace", 0, "time between SIGTERM and SIGKILL when a command is stopped (default 5s)")
	return c
}

// mcpPlace returns where runbox mcp's sandboxes are: the runbox serve of
// RUNBOX_HOST, else this machine's providers; and the provider of the
// default sandboxes ("" for a server's default unless --provider or
// $RUNBOX_PROVIDER names one).
func (a *app) mcpPlace(provider string) (mcpserver.Sandboxes, string, error) {
	srv, err := a.remoteServer()
	if err != nil {
		return nil, "", err
	}
	if srv != nil {
		if !a.x.ProviderChosen() {
			provider = ""
		}
		return &mcpserver.Remote{Server: srv, Options: client.SandboxOptions{Labels: map[string]string{"made-by": "mcp"}}}, provider, nil
	}
	if _, err := a.provider(provider); err != nil {
		return nil, "", err
	}
	return &mcpserver.Providers{Providers: a.allProviders(), Default: provider}, provider, nil
}

// nopWriteCloser is an io.WriteCloser whose Close does nothing: stdout
// stays open for the process.
type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }
