package client_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/client"
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

// blockedWriter is an observer's output that never drains: every write
// waits until the context ends.
type blockedWriter struct{ ctx context.Context }

func (w blockedWriter) Write(p []byte) (int, error) {
	<-w.ctx.Done()
	return 0, w.ctx.Err()
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
	var next atomic.Int64
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for {
				i := int(next.Add(1))
				if i > ops || t.Failed() {
					return
				}
				if err := stressOp(ctx, c, w, i, m); err != nil {
					t.Errorf("op %d (kind %d): %v", i, i%10, err)
				}
			}
		})
	}
	wg.Wait()
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

// stressOp runs operation i of worker w.
func stressOp(ctx context.Context, c *client.Client, w, i int, m string) error {
	pause := func() {
		if rand.IntN(2) == 0 {
			time.Sleep(rand.N(3 * time.Millisecond))
		}
	}
	id := fmt.Sprintf("s%d-%d", w, i)
	switch i % 10 {
	case 0: // a quick command
		res, err := c.Exec(ctx, "echo "+id, client.WithID(id))
		if err != nil || string(res.Stdout) != id+"\n" {
			return fmt.Errorf("exec: %s, %v", brief(res), err)
		}
	case 1: // a timeout
		res, err := c.Exec(ctx, "sleep "+m, client.WithTimeout(time.Duration(1+rand.IntN(30))*time.Millisecond), client.WithGrace(time.Second))
		if err != nil || !res.TimedOut {
			return fmt.Errorf("timeout: %s, %v", brief(res), err)
		}
	case 2: // a cancel racing the start
		started := make(chan error, 1)
		go func() {
			p, err := c.Start(ctx, "sleep "+m, client.WithID(id))
			if err == nil {
				var res runbox.Result
				res, err = p.Wait(ctx)
				if err == nil && !res.Cancelled {
					err = fmt.Errorf("not cancelled: %s", brief(res))
				}
			} else if errors.Is(err, runbox.ErrCancelled) {
				err = nil
			}
			started <- err
		}()
		pause()
		if err := c.Cancel(ctx, id, 0); err != nil {
			return fmt.Errorf("cancel: %w", err)
		}
		return <-started
	case 3: // List and Info
		if _, err := c.List(ctx); err != nil {
			return fmt.Errorf("list: %w", err)
		}
		if _, err := c.Info(ctx); err != nil {
			return fmt.Errorf("info: %w", err)
		}
	case 4: // a signal to a running exec
		p, err := c.Start(ctx, "trap 'exit 9' USR1; while :; do sleep 0.01; done", client.WithID(id))
		if err != nil {
			return err
		}
		// The trap may not be set yet: USR1 then ends the shell with 138.
		if _, err := c.Signal(ctx, id, syscall.SIGUSR1); err != nil {
			return fmt.Errorf("signal: %w", err)
		}
		res, err := p.Wait(ctx)
		if err != nil || (res.ExitCode != 9 && res.ExitCode != 138) {
			return fmt.Errorf("signalled exec: %s, %v", brief(res), err)
		}
	case 5: // an attach that reads everything
		p, err := c.Start(ctx, "seq 1 3000", client.WithID(id))
		if err != nil {
			return err
		}
		pause()
		var out bytes.Buffer
		res, err := c.Attach(ctx, p.ID(), client.WithStdout(&out))
		if err != nil || res.ExitCode != 0 || res.StdoutBytes != 13893 {
			return fmt.Errorf("attach: %s, %v", brief(res), err)
		}
	case 6: // an observer that never reads: the command must not wait for it
		p, err := c.Start(ctx, "head -c 12000000 /dev/zero", client.WithID(id))
		if err != nil {
			return err
		}
		octx, stop := context.WithCancel(ctx)
		observed := make(chan struct{})
		go func() {
			defer close(observed)
			_, _ = c.Attach(octx, p.ID(), client.WithStdout(blockedWriter{octx}))
		}()
		res, err := p.Wait(ctx)
		stop()
		<-observed
		if err != nil || res.StdoutBytes != 12000000 {
			return fmt.Errorf("observed exec: %s, %v", brief(res), err)
		}
	case 7: // session execs
		s := client.WithSession(fmt.Sprintf("sess%d", w))
		if _, err := c.Exec(ctx, "export N"+strconv.Itoa(w)+"="+id, s); err != nil {
			return err
		}
		res, err := c.Exec(ctx, "echo $N"+strconv.Itoa(w), s)
		if err != nil || string(res.Stdout) != id+"\n" {
			return fmt.Errorf("session: %s, %v", brief(res), err)
		}
	case 8: // a background process left running, then cancelled
		res, err := c.Exec(ctx, "sleep "+m+" >/dev/null 2>&1 & echo up", client.WithID(id))
		if err != nil || res.LeftRunning != 1 {
			return fmt.Errorf("background: %s, %v", brief(res), err)
		}
		pause()
		if err := c.Cancel(ctx, id, 0); err != nil {
			return fmt.Errorf("cancel background: %w", err)
		}
	case 9: // Output() of a streamed exec, left mid-stream
		p, err := c.Start(ctx, "seq 1 100000", client.WithID(id))
		if err != nil {
			return err
		}
		for _, err := range p.Output(ctx, 0) {
			if err != nil {
				return err
			}
			break
		}
		if res, err := p.Wait(ctx); err != nil || res.ExitCode != 0 {
			return fmt.Errorf("output left mid-stream: %s, %v", brief(res), err)
		}
	}
	return nil
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

// brief describes a result without its output.
func brief(r runbox.Result) string {
	return fmt.Sprintf("exit %d signal %q timed out %v cancelled %v, %d+%d bytes, %d left running",
		r.ExitCode, r.Signal, r.TimedOut, r.Cancelled, r.StdoutBytes, r.StderrBytes, r.LeftRunning)
}
