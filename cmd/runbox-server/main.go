// Command runbox-server is the runbox command line with the commands of
// the control plane and its tools (serve, mcp, token, audit, man) besides
// every provider and command of runbox-full: runbox and runbox-full hand
// those commands to it (package handover), so that they alone pay the
// package inits of a server, Prometheus, SQLite, the MCP SDK and a man page
// generator. It can also be called directly. See internal/cli/servercli.
package main

import (
	"context"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"

	"github.com/runbox/runbox/internal/cli/servercli"
	"github.com/runbox/runbox/internal/fdsweep"
	"github.com/runbox/runbox/internal/handover"
)

func main() {
	// Nothing inherited beyond stdio goes on to runboxd, a server's
	// sandboxes or any other helper (security rule 3).
	_ = fdsweep.CloexecFrom(3)
	// Set by the runbox that handed this invocation over; not for the
	// processes this one starts (runbox serve's sandboxes).
	os.Unsetenv(handover.DelegatedEnv)
	// As in cmd/runbox-full: the CLI keeps little live heap.
	debug.SetGCPercent(400)
	// Ctrl-C or SIGTERM cancels the context: runbox serve shuts down, a
	// running exec is cancelled on the daemon.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := servercli.Main(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
