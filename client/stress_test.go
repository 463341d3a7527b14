package client_test

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/runbox/runbox/internal/loadmix"
)

// stressOps is how many operations TestStress runs: RUNBOX_STRESS_OPS, or
// a bounded default (smaller with -short) that CI's go test -race runs.
func stressOps(t *testing.T) int {
	if v := os.Getenv("RUNBOX_STRESS_OPS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			t.Fatalf("RUNBOX_STRESS_OPS=%q: want a positive count", v)
		}
		return n
	}
	if testing.Short() {
		return 120
	}
	return 480
}

// TestStress runs Start, Run (Exec), List, Info, Signal, Cancel racing
// Start, Attach, observers that never read, session execs and background
// processes against one runboxd from many goroutines, then checks what
// is left: no process of the run alive, no zombie, and runboxd's
// goroutines and open descriptors back to where they were. A call that
// does not return is caught by the test's deadline. Under -race it caught
// the exec's containment written after the exec was published (List and
// Signal read it), and an observer that never reads stalled its command.
func TestStress(t *testing.T) {
	c := newClient(t)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	if _, err := c.Exec(ctx, "true"); err != nil { // the connection and the daemon's first goroutines
		t.Fatal(err)
	}
	baseG, baseFD := runtime.NumGoroutine(), openFDs()
	m := strconv.Itoa(40000000 + rand.IntN(9000000)) // `sleep m` marks this run's processes
	ops := stressOps(t)
	for _, err := range (&loadmix.Stress{Client: c, Ops: ops, Marker: m}).Run(ctx) {
		t.Error(err)
	}
	if t.Failed() {
		return
	}
	// Every stop has been waited for (Cancel answers once it is done).
	if n := countSleeps(m); n != 0 {
		t.Errorf("%d processes of the run survived", n)
	}
	settled := func(what string, ok func() bool) {
		t.Helper()
		for deadline := time.Now().Add(30 * time.Second); !ok(); time.Sleep(50 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Errorf("%s did not settle", what)
				return
			}
		}
	}
	settled("zombies", func() bool { return zombieChildren() == 0 })
	// Some slack for pooled connections and the runtime's own goroutines.
	settled(fmt.Sprintf("goroutines (%d before)", baseG), func() bool { return runtime.NumGoroutine() <= baseG+8 })
	settled(fmt.Sprintf("open descriptors (%d before)", baseFD), func() bool { return openFDs() <= baseFD+8 })
	info, err := c.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.Running != 0 {
		t.Errorf("daemon runs %d execs after the run", info.Running)
	}
}

// countSleeps counts live processes running `sleep m`.
func countSleeps(m string) int {
	n := 0
	forEachProc(func(pid string, stat []string, cmdline []byte) {
		if stat[2] != "Z" && bytes.Contains(cmdline, []byte("sleep\x00"+m)) {
			n++
		}
	})
	return n
}

// zombieChildren counts this process's children that are zombies.
func zombieChildren() int {
	self := strconv.Itoa(os.Getpid())
	n := 0
	forEachProc(func(pid string, stat []string, _ []byte) {
		if stat[2] == "Z" && stat[3] == self {
			n++
		}
	})
	return n
}

// forEachProc calls fn with each process's pid, the fields of its stat
// after the command name (fields[2] is the state, fields[3] the parent),
// and its command line.
func forEachProc(fn func(pid string, fields []string, cmdline []byte)) {
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		stat, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		s := string(stat)
		rp := strings.LastIndexByte(s, ')')
		if rp < 0 {
			continue
		}
		fields := append([]string{e.Name(), s[:rp+1]}, strings.Fields(s[rp+1:])...)
		cmd, _ := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		fn(e.Name(), fields, cmd)
	}
}

// openFDs counts this process's open descriptors.
func openFDs() int {
	ents, _ := os.ReadDir("/proc/self/fd")
	return len(ents)
}
