// Command runbox-full is the runbox command line with every provider:
// runbox hands it every invocation but the execs it runs itself
// (internal/front) and the server commands (serve, mcp, token, audit,
// man), which live in runbox-server and which runbox-full, given one,
// hands on to it (package handover). It can also be called directly. See
// internal/cli.
package main

import (
	"context"
	"io"

	"github.com/runbox/runbox/internal/cli"
	"github.com/runbox/runbox/internal/handover"
)

func main() {
	handover.Main(func(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
		return cli.Main(ctx, cli.ServerCommands{HandOver: handover.Server.Exec}, args, stdin, stdout, stderr)
	})
}
