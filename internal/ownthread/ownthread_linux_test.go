package ownthread

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// mainThreadEnv makes the test binary, run again by
// TestNeverOnTheMainThread, start goroutines the way that lands them on
// the main thread and report where f ran.
const mainThreadEnv = "RUNBOX_OWNTHREAD_MAIN"

func TestMain(m *testing.M) {
	if n, err := strconv.Atoi(os.Getenv(mainThreadEnv)); err == nil {
		os.Exit(fromMainThread(n))
	}
	os.Exit(m.Run())
}

// fromMainThread runs Go n times from the main goroutine, still on the
// main thread, with one P and the main goroutine blocked at once, so the
// scheduler gives each new goroutine the main thread first. It prints how
// many of the n ran f on the main thread and how many threads the process
// has at the end.
func fromMainThread(n int) int {
	runtime.GOMAXPROCS(1)
	onMain := 0
	for range n {
		tid := make(chan int)
		Go(func() { tid <- unix.Gettid() })
		if <-tid == unix.Getpid() {
			onMain++
		}
	}
	fmt.Println(onMain)
	return 0
}

// TestNeverOnTheMainThread: f never runs on the main thread, even when
// the scheduler offers that thread first (a goroutine that locks it there
// and exits leaves it parked with f's state for good).
func TestNeverOnTheMainThread(t *testing.T) {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), mainThreadEnv+"=200")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if got := strings.TrimSpace(string(out)); got != "0" {
		t.Errorf("f ran on the main thread %s times out of 200", got)
	}
}

// TestThreadEndsWithF: the thread f ran on is gone once f returned, with
// the state f gave it (here: a mount namespace of its own).
func TestThreadEndsWithF(t *testing.T) {
	for range 50 {
		tid := make(chan int)
		Go(func() {
			if os.Geteuid() == 0 {
				unix.Unshare(unix.CLONE_NEWNS)
			}
			tid <- unix.Gettid()
		})
		task := fmt.Sprintf("/proc/self/task/%d", <-tid)
		for i := 0; ; i++ {
			if _, err := os.Stat(task); os.IsNotExist(err) {
				break
			}
			if i == 10000 {
				t.Fatalf("%s is still there: the thread did not end with f", task)
			}
			runtime.Gosched()
		}
	}
}
