package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/runbox/runbox/client"
)

// StopLatency is the time from a stop request to the last process of a
// tree gone, through runbox (Cancel returns once runboxd has confirmed that
// nothing survives) and bare (this process kills the tree's process group
// and polls it every millisecond).
type StopLatency struct {
	Procs int `json:"procs"`
	// IgnoreTerm: every process ignores SIGTERM, so the stop waits out the
	// grace and SIGKILLs; the figures are then net of the grace.
	IgnoreTerm bool    `json:"ignore_term"`
	GraceMs    float64 `json:"grace_ms"`
	Runbox     Stat    `json:"runbox_ms"`
	Bare       Stat    `json:"bare_ms"`
	Ratio      Stat    `json:"ratio"`
	// Killed is what runbox's result said it signalled; Survivors what
	// was found alive afterwards (always counted, never assumed).
	Killed    int `json:"killed"`
	Survivors int `json:"survivors"`
	// Goal is the goal in ms, where it set one.
	GoalMs float64 `json:"goal_ms,omitempty"`
}

func benchStop(ctx context.Context, cfg *config, env *sandboxes) ([]StopLatency, error) {
	c, err := env.hostClient(ctx)
	if err != nil {
		return nil, err
	}
	cases := []struct {
		procs  int
		ignore bool
	}{{1, false}, {10, false}, {100, false}, {1000, false}, {100, true}}
	rounds := 5
	if cfg.quick {
		rounds = 2
	}
	const grace = 300 * time.Millisecond
	var out []StopLatency
	for i, tc := range cases {
		s := StopLatency{Procs: tc.procs, IgnoreTerm: tc.ignore}
		if tc.ignore {
			s.GraceMs = ms(grace)
		}
		if tc.procs == 100 && !tc.ignore {
			s.GoalMs = 50
		}
		var rb, bare, ratios []float64
		for r := range rounds {
			marker := fmt.Sprintf("%d", 31337000+i*100+r)
			script := treeScript(tc.procs, tc.ignore, marker)
			d, killed, err := stopThroughRunbox(ctx, c, script, grace)
			if err != nil {
				return nil, fmt.Errorf("%d procs: %w", tc.procs, err)
			}
			s.Killed = killed
			s.Survivors += countMarker(marker)
			b, err := stopBare(script, grace, tc.ignore)
			if err != nil {
				return nil, fmt.Errorf("%d procs, bare: %w", tc.procs, err)
			}
			s.Survivors += countMarker(marker)
			if tc.ignore {
				d -= grace
				b -= grace
			}
			rb = append(rb, ms(d))
			bare = append(bare, ms(b))
			ratios = append(ratios, ms(d)/ms(b))
		}
		s.Runbox, s.Bare, s.Ratio = stat(rb), stat(bare), stat(ratios)
		out = append(out, s)
	}
	return out, nil
}

// treeScript starts procs sleeps (marked by their argument) in the
// background, says "ready" and waits.
func treeScript(procs int, ignoreTerm bool, marker string) string {
	trap := ""
	if ignoreTerm {
		trap = "trap '' TERM; " // inherited by every child as ignored
	}
	return fmt.Sprintf("%sfor i in $(seq %d); do sleep %s & done; echo ready; wait", trap, procs, marker)
}

// readyWriter closes ready when "ready" has been written to it.
type readyWriter struct {
	mu    sync.Mutex
	buf   bytes.Buffer
	once  sync.Once
	ready chan struct{}
}

func (w *readyWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	if strings.Contains(w.buf.String(), "ready") {
		w.once.Do(func() { close(w.ready) })
	}
	return len(p), nil
}

func stopThroughRunbox(ctx context.Context, c *client.Client, script string, grace time.Duration) (time.Duration, int, error) {
	w := &readyWriter{ready: make(chan struct{})}
	p, err := c.Start(ctx, script, client.WithStdout(w), client.WithGrace(grace))
	if err != nil {
		return 0, 0, err
	}
	done := make(chan error, 1)
	var killed int
	go func() {
		res, err := p.Wait(ctx)
		killed = res.Killed
		done <- err
	}()
	select {
	case <-w.ready:
	case err := <-done:
		return 0, 0, fmt.Errorf("exec ended before it was ready: %v", err)
	case <-time.After(2 * time.Minute):
		return 0, 0, errors.New("tree not ready within 2 minutes")
	}
	start := time.Now()
	if err := p.Cancel(ctx); err != nil {
		return 0, 0, err
	}
	d := time.Since(start)
	if err := <-done; err != nil {
		return 0, 0, err
	}
	return d, killed, nil
}

// stopBare starts the tree itself and stops it as a bare supervisor would:
// SIGTERM to the process group, poll it every millisecond (SIGKILL after
// the grace when it ignores TERM) until no process is left. This process
// is the tree's child subreaper while it does, and reaps every exit
// itself, so orphans do not wait for the machine's init to be reaped.
func stopBare(script string, grace time.Duration, ignore bool) (time.Duration, error) {
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		return 0, err
	}
	defer unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0)
	cmd := exec.Command("bash", "-c", script)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	w := &readyWriter{ready: make(chan struct{})}
	r, wp, err := os.Pipe()
	if err != nil {
		return 0, err
	}
	cmd.Stdout = wp
	if err := cmd.Start(); err != nil {
		return 0, err
	}
	wp.Close()
	go func() { io.Copy(w, r); r.Close() }()
	pg := -cmd.Process.Pid
	select {
	case <-w.ready:
	case <-time.After(2 * time.Minute):
		syscall.Kill(pg, syscall.SIGKILL)
		return 0, errors.New("tree not ready within 2 minutes")
	}
	start := time.Now()
	syscall.Kill(pg, syscall.SIGTERM)
	deadline := start.Add(grace)
	for {
		for { // reap whatever has exited: the leader and orphans alike
			var ws unix.WaitStatus
			if pid, _ := unix.Wait4(-1, &ws, unix.WNOHANG, nil); pid <= 0 {
				break
			}
		}
		if err := syscall.Kill(pg, 0); errors.Is(err, syscall.ESRCH) {
			break
		}
		if ignore && time.Now().After(deadline) {
			syscall.Kill(pg, syscall.SIGKILL)
			deadline = time.Now().Add(time.Hour)
		}
		time.Sleep(time.Millisecond)
	}
	return time.Since(start), nil
}

// countMarker counts live processes whose command line is "sleep marker".
func countMarker(marker string) int {
	ents, _ := os.ReadDir("/proc")
	n := 0
	for _, e := range ents {
		b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err == nil && string(b) == "sleep\x00"+marker+"\x00" {
			if st, err := os.ReadFile("/proc/" + e.Name() + "/stat"); err == nil && !bytes.Contains(st, []byte(") Z ")) {
				n++
			}
		}
	}
	return n
}
