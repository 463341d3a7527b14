// Command runbox-full is the runbox command line with every provider and
// command (docker, kubernetes, serve, token, audit, mcp, man). runbox hands it
// every invocation but the execs it runs itself (internal/front); it can
// also be called directly. See
// internal/cli/full.
package main

import (
	"context"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"

	"github.com/runbox/runbox/internal/cli/full"
	"github.com/runbox/runbox/internal/fdsweep"
	"github.com/runbox/runbox/internal/front"
)

func main() {
	// Nothing inherited beyond stdio goes on to runboxd, a server's
	// sandboxes or any other helper (security rule 3).
	_ = fdsweep.CloexecFrom(3)
	// Set by the runbox that handed this invocation over; not for the
	// processes this one starts (runbox serve's sandboxes).
	os.Unsetenv(front.DelegatedEnv)
	// As in cmd/runbox: the CLI keeps little live heap (docs/performance.md).
	debug.SetGCPercent(400)
	// Ctrl-C or SIGTERM cancels the context: a running exec is cancelled on
	// the daemon (stop protocol) and runbox exits with its status.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := full.Main(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
