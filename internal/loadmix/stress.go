package loadmix

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/client"
)

// Stress is one run of the stress mix against one runboxd: Start, Run
// (Exec), List, Info, Signal, Cancel racing Start, Attach, observers that
// never read, Output iterators left mid-stream, session execs and
// background processes, from many goroutines at once.
type Stress struct {
	// Client reaches the runboxd under stress.
	Client *client.Client
	// Ops is how many operations the run makes; Workers how many at a
	// time (0 means 8).
	Ops, Workers int
	// Marker is the argument of every `sleep` the run starts (digits),
	// new for each run: it is also part of every exec id the run gives.
	Marker string
}

// Run makes the run's operations and returns what went wrong, each error
// naming its operation. The workers stop taking new operations at the
// first error.
func (s *Stress) Run(ctx context.Context) []error {
	workers := s.Workers
	if workers <= 0 {
		workers = 8
	}
	var next atomic.Int64
	var failed atomic.Bool
	var mu sync.Mutex
	var errs []error
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for !failed.Load() && ctx.Err() == nil {
				i := int(next.Add(1))
				if i > s.Ops {
					return
				}
				if err := stressOp(ctx, s.Client, w, i, s.Marker); err != nil {
					failed.Store(true)
					mu.Lock()
					errs = append(errs, fmt.Errorf("op %d (kind %d): %w", i, i%10, err))
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	if len(errs) == 0 && ctx.Err() != nil {
		errs = append(errs, fmt.Errorf("stress: %w", ctx.Err()))
	}
	return errs
}

// blockedWriter is an observer's output that never drains: every write
// waits until the context ends.
type blockedWriter struct{ ctx context.Context }

func (w blockedWriter) Write(p []byte) (int, error) {
	<-w.ctx.Done()
	return 0, w.ctx.Err()
}

// stressOp runs operation i of worker w.
func stressOp(ctx context.Context, c *client.Client, w, i int, m string) error {
	pause := func() {
		if rand.IntN(2) == 0 {
			time.Sleep(rand.N(3 * time.Millisecond))
		}
	}
	// The run's marker is in every id: an id is an idempotency key, and a
	// second run against the same runboxd (go test -count=2) would attach
	// to the first run's exec of that id (its rings let go by then, or
	// refused as another spec) instead of starting its own.
	id := fmt.Sprintf("s%s-%d-%d", m, w, i)
	switch i % 10 {
	case 0: // a quick command
		res, err := c.Exec(ctx, "echo "+id, client.WithID(id))
		if err != nil || string(res.Stdout) != id+"\n" {
			return fmt.Errorf("exec: %s, %v", Brief(res), err)
		}
	case 1: // a timeout
		res, err := c.Exec(ctx, "sleep "+m, client.WithTimeout(time.Duration(1+rand.IntN(30))*time.Millisecond), client.WithGrace(time.Second))
		if err != nil || !res.TimedOut {
			return fmt.Errorf("timeout: %s, %v", Brief(res), err)
		}
	case 2: // a cancel racing the start
		started := make(chan error, 1)
		go func() {
			p, err := c.Start(ctx, "sleep "+m, client.WithID(id))
			if err == nil {
				var res runbox.Result
				res, err = p.Wait(ctx)
				if err == nil && !res.Cancelled {
					err = fmt.Errorf("not cancelled: %s", Brief(res))
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
			return fmt.Errorf("signalled exec: %s, %v", Brief(res), err)
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
			return fmt.Errorf("attach: %s, %v", Brief(res), err)
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
			return fmt.Errorf("observed exec: %s, %v", Brief(res), err)
		}
	case 7: // session execs
		s := client.WithSession(fmt.Sprintf("sess%d", w))
		if _, err := c.Exec(ctx, "export N"+strconv.Itoa(w)+"="+id, s); err != nil {
			return err
		}
		res, err := c.Exec(ctx, "echo $N"+strconv.Itoa(w), s)
		if err != nil || string(res.Stdout) != id+"\n" {
			return fmt.Errorf("session: %s, %v", Brief(res), err)
		}
	case 8: // a background process left running, then cancelled
		res, err := c.Exec(ctx, "sleep "+m+" >/dev/null 2>&1 & echo up", client.WithID(id))
		if err != nil || res.LeftRunning != 1 {
			return fmt.Errorf("background: %s, %v", Brief(res), err)
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
			return fmt.Errorf("output left mid-stream: %s, %v", Brief(res), err)
		}
	}
	return nil
}

// Brief describes a result without its output.
func Brief(r runbox.Result) string {
	return fmt.Sprintf("exit %d signal %q timed out %v cancelled %v, %d+%d bytes, %d left running",
		r.ExitCode, r.Signal, r.TimedOut, r.Cancelled, r.StdoutBytes, r.StderrBytes, r.LeftRunning)
}
