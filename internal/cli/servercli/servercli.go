// Package servercli is the CLI of runbox-server (cmd/runbox-server): every
// provider and command of package cli plus the commands of the control
// plane and its tools, built on a server, Prometheus, a database, the MCP
// SDK or cobra's man page generator (serve, mcp, token, audit, man:
// handover.ServerCommands). They live in a binary of their own so that
// runbox-full, which every command the front hands over runs, pays none of
// their package inits; the front and runbox-full hand them here.
package servercli

import (
	"context"
	"io"

	"github.com/spf13/cobra"

	"github.com/runbox/runbox/internal/cli"
)

// Commands makes the server commands for one invocation: with the CLI's
// own (package cli), the whole command tree (runbox man documents it all).
func Commands(x cli.Invocation) []*cobra.Command {
	a := &app{Invocation: x, env: x.Env(), stdin: x.Stdin(), stdout: x.Stdout(), stderr: x.Stderr()}
	return []*cobra.Command{a.mcpCmd(), a.serveCmd(), a.tokenCmd(), a.auditCmd(), a.manCmd()}
}

// Main runs runbox-server's CLI with args (without the program name) and
// returns the exit status (cli.Main).
func Main(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	return cli.Main(ctx, cli.ServerCommands{Make: Commands}, args, stdin, stdout, stderr)
}

// app is one invocation as this package's commands use it: its providers
// through cli.Invocation, its environment and streams as fields.
type app struct {
	cli.Invocation
	env    cli.Env
	stdin  io.Reader
	stdout io.Writer
	stderr io.Writer
}

var (
	exactArgs = cli.ExactArgs
	writeJSON = cli.WriteJSON
	oneLine   = cli.OneLine
)
