package cli

import (
	"errors"
	"fmt"
	"slices"

	"github.com/spf13/cobra"

	"github.com/runbox/runbox/internal/handover"
)

// The commands of the control plane and its tools (handover.ServerCommands:
// serve, mcp, token, audit, man) live in runbox-server, which links what
// they need (a server, Prometheus, SQLite, the MCP SDK, a man page
// generator) and whose package inits no other command should pay. A binary
// without them (runbox-full) has a stand-in for each, so that --help lists
// every command: it hands the whole invocation to runbox-server
// (ServerCommands.HandOver), --help and `help COMMAND` included.

// serverCommandShort is each server command's one-line summary, as the
// command itself has it in runbox-server (a test compares the two --help
// listings).
var serverCommandShort = map[string]string{
	"serve": "Serve the control plane: sandboxes for many tenants over HTTP (Connect, gRPC, JSON)",
	"mcp":   "Serve runbox as MCP tools on stdin/stdout (for AI agents)",
	"token": "Create, list and revoke runbox serve's bearer tokens",
	"audit": "Print runbox serve's audit log: every exec and lifecycle call, and refused egress",
	"man":   "Write the man pages of runbox and every subcommand into DIR",
}

// errNotLinked is the failure of a stand-in run where nothing can take the
// invocation over (the CLI run in-process, as tests do).
var errNotLinked = errors.New("not linked into this binary")

// addHanded adds a stand-in to root for each server command the binary's
// ServerCommands do not make.
func (a *app) addHanded(root *cobra.Command) {
	for _, name := range handover.ServerCommands {
		if slices.ContainsFunc(root.Commands(), func(c *cobra.Command) bool { return c.Name() == name }) {
			continue
		}
		c := &cobra.Command{
			Use:                name,
			Short:              serverCommandShort[name],
			Long:               serverCommandShort[name] + " (runbox-server's command: see runbox " + name + " --help)",
			DisableFlagParsing: true, // every argument is runbox-server's
			RunE: func(*cobra.Command, []string) error {
				return a.handOver(name)
			},
		}
		c.SetHelpFunc(func(*cobra.Command, []string) {
			// runbox help NAME: runbox-server prints the command's help.
			a.handErr = a.handOver(name)
		})
		root.AddCommand(c)
	}
}

// handOver hands this invocation, every argument as given, to
// runbox-server, which runs the server command name. It returns only when
// that cannot be done.
func (a *app) handOver(name string) error {
	if a.server.HandOver == nil {
		return fmt.Errorf("%s: runbox-server's command, %w", name, errNotLinked)
	}
	return a.server.HandOver(a.args, "runbox "+name)
}

// handedCompletion reports whether args ask cobra's hidden completion
// command to complete a server command's arguments, which only
// runbox-server knows.
func handedCompletion(args []string) bool {
	return len(args) > 1 && (args[0] == cobra.ShellCompRequestCmd || args[0] == cobra.ShellCompNoDescRequestCmd) &&
		handover.IsServerCommand(args[1])
}
