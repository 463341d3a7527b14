package main

import (
	"os"
	"runtime"
	"sync"
)

// keepThreads makes the Go runtime hold at least n OS threads in all from
// now on, idle until it needs them. The runtime keeps the threads it has
// made and aborts the whole process when it cannot make another; in a
// container whose pids limit the commands can fill (a fork bomb), the
// daemon must never need a new thread, so it makes its threads while it
// still can.
//
// Goroutines that lock threads of their own, and hold them until all are
// released together, force the threads into being; afterwards the threads
// go back to the runtime's idle list.
func keepThreads(n int) {
	release := make(chan struct{})
	defer close(release)
	for have := threadCount(); have < n; have = threadCount() {
		var locked sync.WaitGroup
		for range n - max(have, 0) {
			locked.Add(1)
			go func() {
				runtime.LockOSThread()
				locked.Done()
				<-release
				runtime.UnlockOSThread()
			}()
		}
		locked.Wait()
		if have < 0 {
			return // cannot count: n more is enough
		}
	}
}

// threadCount is how many threads the process has, or -1 if /proc cannot
// say.
func threadCount() int {
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return -1
	}
	return len(tasks)
}
