package cli

import (
	"fmt"
	"io"
	"sync"
	"time"
)

// progressEvery is how often the progress line is redrawn: often enough to
// look live, rarely enough to cost nothing next to the transfer.
const progressEvery = 200 * time.Millisecond

// progress draws a one-line transfer progress bar (bytes, rate, ETA) on a
// terminal, redrawing it in place. A nil *progress draws nothing, so callers
// need not check whether they are on a terminal.
type progress struct {
	w     io.Writer
	label string
	start time.Time

	mu          sync.Mutex
	done, total int64
	last        time.Time
	drawn       bool
}

// newProgress returns a progress bar on w when show is set, else nil.
func newProgress(w io.Writer, show bool, label string) *progress {
	if !show {
		return nil
	}
	return &progress{w: w, label: label, start: time.Now()}
}

// add records n more bytes transferred.
func (p *progress) add(n int64) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.done += n
	p.drawLocked(false)
}

// set records the bytes transferred so far and the total expected.
func (p *progress) set(done, total int64) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.done, p.total = done, total
	p.drawLocked(false)
}

// setTotal records the total expected.
func (p *progress) setTotal(total int64) {
	if p == nil {
		return
	}
	p.mu.Lock()
	p.total = total
	p.mu.Unlock()
}

// finish draws the final state and ends the line.
func (p *progress) finish() {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.done == 0 && !p.drawn {
		return
	}
	p.drawLocked(true)
	fmt.Fprintln(p.w)
}

func (p *progress) drawLocked(force bool) {
	now := time.Now()
	if !force && now.Sub(p.last) < progressEvery {
		return
	}
	p.last, p.drawn = now, true
	fmt.Fprint(p.w, "\r\x1b[K"+progressLine(p.label, p.done, p.total, now.Sub(p.start)))
}

// progressLine formats "label  12.0 MiB / 1.0 GiB  45%  [=====     ]  30.1 MiB/s  ETA 25s".
func progressLine(label string, done, total int64, elapsed time.Duration) string {
	rate := 0.0
	if elapsed > 0 {
		rate = float64(done) / elapsed.Seconds()
	}
	s := label + "  " + humanBytes(done)
	if total > 0 {
		frac := min(float64(done)/float64(total), 1)
		const width = 20
		bar := make([]byte, width)
		for i := range bar {
			bar[i] = ' '
			if float64(i) < frac*width {
				bar[i] = '='
			}
		}
		s += fmt.Sprintf(" / %s  %3.0f%%  [%s]", humanBytes(total), frac*100, bar)
	}
	s += "  " + humanBytes(int64(rate)) + "/s"
	if total > 0 && rate > 0 && done < total {
		eta := time.Duration(float64(total-done) / rate * float64(time.Second))
		s += "  ETA " + eta.Round(time.Second).String()
	}
	return s
}

// humanBytes formats n with a binary unit.
func humanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
