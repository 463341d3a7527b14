// Command runbox is the runbox command line; see internal/cli.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/runbox/runbox/internal/cli"
)

func main() {
	// Ctrl-C or SIGTERM cancels the context: a running exec is cancelled on
	// the daemon (stop protocol) and runbox exits with its status.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cli.Main(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
