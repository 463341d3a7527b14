// Package servercli is the CLI of runbox-server (cmd/runbox-server): every
// provider and command of package full plus the commands of the control
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

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/client"
	"github.com/runbox/runbox/internal/cli"
	"github.com/runbox/runbox/internal/cli/full"
)

// Features is package full's providers and commands plus the server
// commands: the whole command tree (runbox man documents it all).
func Features() cli.Features {
	f := full.Features()
	f.Commands = append(f.Commands,
		func(x cli.App) *cobra.Command { return newApp(x).mcpCmd() },
		func(x cli.App) *cobra.Command { return newApp(x).serveCmd() },
		func(x cli.App) *cobra.Command { return newApp(x).tokenCmd() },
		func(x cli.App) *cobra.Command { return newApp(x).auditCmd() },
		func(x cli.App) *cobra.Command { return newApp(x).manCmd() },
	)
	return f
}

// Main runs runbox-server's CLI with args (without the program name) and
// returns the exit status (cli.Main).
func Main(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	return cli.Main(ctx, Features(), args, stdin, stdout, stderr)
}

// app is one invocation as this package's commands use it: the names they
// had inside package cli, over cli.App.
type app struct {
	x      cli.App
	env    cli.Env
	stdin  io.Reader
	stdout io.Writer
	stderr io.Writer
}

func newApp(x cli.App) *app {
	return &app{x: x, env: x.Env(), stdin: x.Stdin(), stdout: x.Stdout(), stderr: x.Stderr()}
}

func (a *app) provider(name string) (runbox.Provider, error)      { return a.x.Provider(name) }
func (a *app) localProvider(name string) (runbox.Provider, error) { return a.x.LocalProvider(name) }
func (a *app) allProviders() []runbox.Provider                    { return a.x.AllProviders() }
func (a *app) remoteServer() (*client.Server, error)              { return a.x.RemoteServer() }

var (
	exactArgs = cli.ExactArgs
	writeJSON = cli.WriteJSON
	oneLine   = cli.OneLine
)
