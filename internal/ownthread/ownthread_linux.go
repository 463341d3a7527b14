// Package ownthread runs code that changes its OS thread's state
// (namespaces, root, credentials, cgroups, seccomp filters) on a thread of
// its own, which ends with it.
//
// Go ends a thread whose goroutine exits while locked to it, so state
// given to that thread goes with it: except the process's main thread,
// which the runtime never ends. A goroutine that locked the main thread
// and exits leaves it parked for good with whatever the goroutine gave it:
// a mount namespace pinning the trees attached in it, a cgroup it joined,
// a seccomp filter whose listener then never hears that its last user is
// gone. Which thread a goroutine locks is the scheduler's choice, so every
// such goroutine must avoid the main thread by construction: Go does.
package ownthread

import (
	"runtime"

	"golang.org/x/sys/unix"
)

// Go runs f in a new goroutine locked to an OS thread that is not the
// process's main thread, and ends that thread when f returns (the
// goroutine exits still locked). f may change its thread's state freely:
// no other goroutine ever runs there.
func Go(f func()) {
	go func() {
		runtime.LockOSThread()
		if unix.Gettid() != unix.Getpid() {
			f()
			return // still locked: the thread ends with the goroutine
		}
		// The main thread: hold it while another goroutine locks a thread,
		// which therefore cannot be this one; then give it back.
		locked := make(chan struct{})
		go func() {
			runtime.LockOSThread()
			close(locked)
			f()
		}()
		<-locked
		runtime.UnlockOSThread()
	}()
}
