// Command runbox-full is the runbox command line with every provider:
// runbox hands it every invocation but the execs it runs itself
// (internal/front) and the server commands (serve, mcp, token, audit,
// man), which live in runbox-server and which runbox-full, given one,
// hands on to it (package handover). It can also be called directly. See
// internal/cli/full.
package main

import (
	"context"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"

	"github.com/runbox/runbox/internal/cli"
	"github.com/runbox/runbox/internal/cli/full"
	"github.com/runbox/runbox/internal/fdsweep"
	"github.com/runbox/runbox/internal/handover"
)

func main() {
	// Nothing inherited beyond stdio goes on to runboxd, a server's
	// sandboxes or any other helper (security rule 3).
	_ = fdsweep.CloexecFrom(3)
	// Set by the runbox that handed this invocation over; not for the
	// processes this one starts.
	os.Unsetenv(handover.DelegatedEnv)
	// As in cmd/runbox: the CLI keeps little live heap (docs/performance.md).
	debug.SetGCPercent(400)
	// Ctrl-C or SIGTERM cancels the context: a running exec is cancelled on
	// the daemon (stop protocol) and runbox exits with its status.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	f := full.Features()
	f.HandOver = handover.Server.Exec
	code := cli.Main(ctx, f, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
