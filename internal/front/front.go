// Package front is the runbox binary that agents and people call
// (cmd/runbox): a small program that runs the hot path itself and hands
// everything else, with the same arguments, to runbox-full (package cli)
// or, for the server commands, runbox-server (package servercli), by
// replacing itself with it (package handover).
//
// Go runs every linked package's init before main, and start-up grows
// with the binary, so the front links no command-line framework, no HTTP
// stack, no protobuf runtime and no provider: it runs `runbox version` and
// `runbox exec [flags] SANDBOX -- COMMAND...` on a host, local or docker
// sandbox whose runboxd listens on a socket on this machine, or an ssh or kubernetes
// sandbox through its persistent endpoint (package endpoint), named by its
// exact id or by a name the home's name index gives (package
// sandboxnames; see resolve), with the flags package execrules marks as the front's,
// speaking runboxd's Run, Attach, Cancel and Info calls itself (package frontrpc). It
// follows the same rules as runbox-full (package execrules), so its output,
// messages and exit status are runbox-full's.
//
// Handover: the commands of the control plane (serve, mcp, token, audit,
// man: handover.ServerCommands) go to runbox-server untouched, anything
// else to runbox-full (package handover finds them). The front hands an
// exec over only at dispatch, before it sends the Run call: flags it does
// not take, a sandbox it cannot reach. Once the Run is sent the exec is
// the front's to the end: when its stream breaks it dials runboxd again
// and re-attaches by itself, as the Go client does (see follow), showing
// every byte once, and reports a sandbox that is really gone (exit 125)
// in runbox-full's words.
package front

import (
	"fmt"
	"os"

	"github.com/runbox/runbox/internal/buildinfo"
	"github.com/runbox/runbox/internal/execrules"
	"github.com/runbox/runbox/internal/handover"
)

// Main runs the invocation (args without the program name) and returns
// its exit status, or replaces this process with runbox-full.
func Main(args []string) int {
	switch {
	case len(args) == 1 && (args[0] == "version" || args[0] == "--version"):
		fmt.Println(buildinfo.Current())
		return 0
	case len(args) > 0 && args[0] == "exec" && os.Getenv("RUNBOX_HOST") == "":
		if x, ok := parseExec(args[1:]); ok {
			return x.run(args)
		}
	case len(args) > 0 && handover.IsServerCommand(args[0]):
		// runbox-full would hand it on (its stand-in for the command):
		// one exec less.
		return execrules.ReportFailure(os.Stderr, handover.Server.Exec(args, "runbox "+args[0]))
	}
	return handOver(args)
}

// handOver replaces this process with runbox-full run with args. It
// returns only when runbox-full cannot be run, with exit status 125 after
// saying why.
func handOver(args []string) int {
	why := "runbox"
	if len(args) > 0 {
		why += " " + args[0]
	}
	return execrules.ReportFailure(os.Stderr, ExecFull(args, why))
}
