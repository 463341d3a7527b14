package cli

import (
	"fmt"
	"io"
	"strings"
	"sync"
	"time"
	"unicode/utf8"
)

// progressEvery is how often the progress line is redrawn: often enough to
// look live, rarely enough to cost nothing next to the transfer.
const progressEvery = 200 * time.Millisecond

// progress draws a one-line transfer progress bar (bytes, total,
// percentage, rate, ETA) on a terminal, redrawing it in place and fitting
// it to the terminal's width as it is at each redraw, so it never wraps. A
// nil *progress draws nothing, so callers need not check whether they are
// on a terminal.
type progress struct {
	w     io.Writer
	width func() int // the terminal's width in columns
	label string
	start time.Time

	mu          sync.Mutex
	done, total int64
	last        time.Time
	drawn       bool
}

// newProgress returns a progress bar on w when show is set, else nil.
// width reports the terminal's current width.
func newProgress(w io.Writer, show bool, width func() int, label string) *progress {
	if !show {
		return nil
	}
	return &progress{w: w, width: width, label: label, start: time.Now()}
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
	// Carriage return and erase-line: the line is redrawn in place.
	fmt.Fprint(p.w, "\r\x1b[K"+progressLine(p.label, p.done, p.total, now.Sub(p.start), p.width()))
}

// progressLine formats, in at most width-1 columns (a line that fills the
// last column wraps on some terminals),
//
//	"label  12.0 MiB / 1.0 GiB   1%  [=      ]  30.1 MiB/s  ETA 25s"
//
// dropping the bar, then the ETA, then the rate, then the total when the
// terminal is too narrow for them, and cutting what is left.
func progressLine(label string, done, total int64, elapsed time.Duration, width int) string {
	rate := 0.0
	if elapsed > 0 {
		rate = float64(done) / elapsed.Seconds()
	}
	amount := humanBytes(done)
	pct, eta := "", ""
	if total > 0 {
		frac := min(float64(done)/float64(total), 1)
		amount += " / " + humanBytes(total)
		pct = fmt.Sprintf("%3.0f%%", frac*100)
		if rate > 0 && done < total {
			eta = "ETA " + time.Duration(float64(total-done)/rate*float64(time.Second)).Round(time.Second).String()
		}
	}
	speed := humanBytes(int64(rate)) + "/s"
	join := func(parts ...string) string {
		var kept []string
		for _, s := range parts {
			if s != "" {
				kept = append(kept, s)
			}
		}
		return strings.Join(kept, "  ")
	}
	limit := width - 1
	if width <= 0 {
		limit = 79
	}
	without := join(label, amount, pct, speed, eta)
	if room := limit - utf8.RuneCountInString(without) - 4; total > 0 && room >= 10 {
		// The bar takes the room the rest leaves, up to 30 cells.
		n := min(room, 30)
		frac := min(float64(done)/float64(total), 1)
		fill := int(frac * float64(n))
		return join(label, amount, pct, "["+strings.Repeat("=", fill)+strings.Repeat(" ", n-fill)+"]", speed, eta)
	}
	for _, s := range []string{
		without,
		join(label, amount, pct, speed),
		join(label, amount, pct),
		join(label, humanBytes(done), pct),
	} {
		if utf8.RuneCountInString(s) <= limit {
			return s
		}
	}
	r := []rune(without)
	return string(r[:max(limit, 0)])
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
