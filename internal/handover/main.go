package handover

import (
	"context"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"

	"github.com/runbox/runbox/internal/fdsweep"
)

// Main is the process around a CLI binary that runbox hands commands to
// (runbox-full, runbox-server): it marks every inherited descriptor beyond
// stdio close-on-exec (security rule 3), unsets DelegatedEnv (set for this
// process only, not the ones it starts), keeps the GC lazy (the CLI holds
// little live heap, docs/performance.md), cancels the context on Ctrl-C or
// SIGTERM (a running exec is cancelled on the daemon, serve shuts down),
// runs run with the program's arguments and exits with its status.
func Main(run func(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int) {
	_ = fdsweep.CloexecFrom(3)
	os.Unsetenv(DelegatedEnv)
	debug.SetGCPercent(400)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
