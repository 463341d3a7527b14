// Package runbox is the vocabulary of runbox: the nouns an agent author thinks
// in — a [Sandbox], an [ExecSpec] describing one command, the [Result] it ends
// with, the [Provider] that creates sandboxes — and the errors callers must tell
// apart.
//
// runbox runs shell commands inside sandboxes through runboxd, a supervisor
// daemon that lives in each sandbox. Its promise: a command that times out or is
// cancelled dies with every process it spawned, and the sandbox lives on for the
// next command.
//
// This package imports no transport. The wire client is in package
// [github.com/runbox/runbox/client]; providers live under provider/.
package runbox
