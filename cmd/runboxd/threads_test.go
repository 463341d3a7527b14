package main

import (
	"runtime"
	"testing"
	"time"
)

// TestKeepThreads: the threads keepThreads makes exist at once and are still
// there later, idle, after garbage collections.
func TestKeepThreads(t *testing.T) {
	want := threadCount() + 12
	keepThreads(want)
	if got := threadCount(); got < want {
		t.Fatalf("after keepThreads(%d): %d threads", want, got)
	}
	for range 3 {
		runtime.GC()
		time.Sleep(50 * time.Millisecond)
	}
	if got := threadCount(); got < want {
		t.Errorf("the runtime let threads go: %d left of %d", got, want)
	}
	keepThreads(want) // already there: makes none
	if got := threadCount(); got > want+2 {
		t.Errorf("keepThreads(%d) again grew the process to %d threads", want, got)
	}
}
