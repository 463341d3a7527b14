package main

import (
	"os"
	"os/signal"
	"syscall"
)

// droppedAsPID1 are the signals runboxd catches and drops when it is the
// PID 1 of a sandbox (a local jail, a container), where its commands can
// send it signals: `kill 1`, `pkill runboxd`. The kernel already keeps a pid
// namespace's init from signals sent inside it that it does not handle, but
// the Go runtime handles most of them (and would exit on SIGTERM, say).
// Catching them keeps the sandbox alive whatever its commands send. They
// are caught, not ignored: an ignored signal stays ignored in every command
// runboxd starts, and a command that ignores SIGTERM could not be stopped
// gracefully.
var droppedAsPID1 = []os.Signal{
	syscall.SIGHUP, syscall.SIGINT, syscall.SIGQUIT, syscall.SIGTERM, syscall.SIGUSR1,
	syscall.SIGUSR2, syscall.SIGALRM, syscall.SIGVTALRM, syscall.SIGPROF, syscall.SIGXCPU,
	syscall.SIGXFSZ, syscall.SIGIO, syscall.SIGPWR, syscall.SIGSTKFLT, syscall.SIGTRAP,
	syscall.SIGABRT, syscall.SIGSYS, syscall.SIGPIPE, syscall.SIGTSTP, syscall.SIGTTIN, syscall.SIGTTOU,
	// Sent by kill(2) these are not faults: caught, they are dropped, while
	// a real fault still crashes as it should.
	syscall.SIGSEGV, syscall.SIGBUS, syscall.SIGFPE, syscall.SIGILL,
}

// stopSignalAsPID1 is the signal that stops a runboxd serving as a
// container's PID 1 with the stop protocol, where SIGTERM is dropped:
// SIGRTMIN+3 as docker and systemd name it (glibc's SIGRTMIN is 34), the
// stop signal of containers that run systemd. The docker provider makes it
// the container's stop signal, so `docker stop` still stops every exec
// gracefully. A command can still send it on purpose; none sends it by
// accident, as `kill 1` or `pkill runboxd` send SIGTERM.
const stopSignalAsPID1 = syscall.Signal(34 + 3)

// dropSignalsFromInside catches droppedAsPID1 and drops them, for the life
// of the process.
func dropSignalsFromInside() {
	dropped := make(chan os.Signal, 16)
	signal.Notify(dropped, droppedAsPID1...)
	go func() {
		for range dropped {
		}
	}()
}
