// Command runbox is the runbox command line that agents and people call:
// the light binary, with the providers whose sandboxes are records on this
// machine (host, local, ssh). Anything else it hands, with the same
// arguments, to runbox-full beside it; see internal/cli.
package main

import (
	"context"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"

	"github.com/runbox/runbox/internal/cli"
)

func main() {
	// The CLI lives for one command and keeps little: a streamed exec's
	// live heap is a few output chunks. At Go's default (100) it would
	// collect every few MiB of output, half of its CPU on a fast stream;
	// at 400 the heap stays within five times that live set
	// (docs/performance.md).
	debug.SetGCPercent(400)
	// Ctrl-C or SIGTERM cancels the context: a running exec is cancelled on
	// the daemon (stop protocol) and runbox exits with its status.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cli.Main(ctx, cli.Light(cli.ExecFull), os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
