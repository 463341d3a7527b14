package egress

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"sync"
	"syscall"
	"time"
)

// RefusalsFile is the name of the file in a sandbox's state directory
// (beside PolicyFile) where the host side appends the refusals it made,
// one JSON Refused a line, for runbox serve to take (TakeRefusals) into
// its audit log. Without a serve, nobody takes it and it stays at most
// RefusalsMaxBytes.
const RefusalsFile = "egress-refusals.jsonl"

// Bounds of the refusal log: what a command refused thousands of times a
// second can make the host side write, and serve record. Whatever the
// command's rate, the file gets at most refusalKeys+2 lines a
// refusalGap, and holds at most RefusalsMaxBytes.
const (
	// refusalGap is the least time between two writes: refusals made
	// meanwhile are coalesced, one line per destination and rule with a
	// count. The first refusal after a quiet gap is written at once.
	refusalGap = time.Second
	// refusalKeys bounds the distinct (host, port, rule) lines of one
	// write; refusals past them are counted on one line without a host.
	refusalKeys = 32
	// RefusalsMaxBytes bounds the file: a line that would grow it past
	// this is not written, and its count goes to a "not logged" line
	// written once there is room (serve took the file).
	RefusalsMaxBytes = 256 << 10
	// refusalField bounds the bytes of a host or rule kept on a line.
	refusalField = 512
)

// Rules of the lines that stand for several refusals.
const (
	// RuleCoalesced is the rule of the line that counts refusals past
	// refusalKeys distinct ones in one write (its Host is empty).
	RuleCoalesced = "more distinct refused destinations than the log keeps per second; counted, not named"
	// RuleNotLogged is the rule of the line that counts refusals dropped
	// while the file was full.
	RuleNotLogged = "not logged: the refusal log was full"
)

// Refused is one line of the refusal log: the refusals of one
// destination by one rule, coalesced.
type Refused struct {
	// Host and Port are what the command asked for.
	Host string `json:"host"`
	Port int    `json:"port"`
	// Via is how it asked: "http", "connect" or "socks5" (the first
	// refusal's).
	Via string `json:"via,omitempty"`
	// Rule is what refused it, as Refusal.Rule.
	Rule string `json:"rule"`
	// Count is how many refusals the line stands for, First and Last when
	// the first and the last was made.
	Count int64     `json:"count"`
	First time.Time `json:"first"`
	Last  time.Time `json:"last"`
}

type refusalKey struct {
	host string
	port int
	rule string
}

// RefusalLog coalesces refusals and appends them to a file; Run writes.
// A nil *RefusalLog records nothing.
type RefusalLog struct {
	path string
	log  *slog.Logger
	gap  time.Duration // refusalGap; tests set their own
	wake chan struct{}

	mu      sync.Mutex
	pending map[refusalKey]*Refused
	order   []refusalKey
	other   *Refused // past refusalKeys
	lost    *Refused // dropped while the file was full
}

// NewRefusalLog returns a log appending to path (created 0600); a nil log
// discards its own errors.
func NewRefusalLog(path string, log *slog.Logger) *RefusalLog {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &RefusalLog{path: path, log: log, gap: refusalGap, wake: make(chan struct{}, 1), pending: map[refusalKey]*Refused{}}
}

func clip(s string) string {
	if len(s) > refusalField {
		return s[:refusalField]
	}
	return s
}

// Record counts one refusal for the next write. It never blocks on the
// file: a storm of refusals costs a map update each.
func (l *RefusalLog) Record(r *Refusal, via string) { l.RecordN(r, via, 1) }

// RecordN counts n refusals of one destination by one rule, as n Records.
func (l *RefusalLog) RecordN(r *Refusal, via string, n int64) {
	if l == nil || r == nil || n <= 0 {
		return
	}
	now := time.Now()
	k := refusalKey{clip(r.Host), r.Port, clip(r.Rule)}
	l.mu.Lock()
	e := l.pending[k]
	switch {
	case e != nil:
	case len(l.pending) < refusalKeys:
		e = &Refused{Host: k.host, Port: k.port, Via: via, Rule: k.rule, First: now}
		l.pending[k] = e
		l.order = append(l.order, k)
	default:
		if l.other == nil {
			l.other = &Refused{Rule: RuleCoalesced, First: now}
		}
		e = l.other
	}
	e.Count += n
	e.Last = now
	l.mu.Unlock()
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

// Run writes recorded refusals until ctx ends, then writes what is left:
// at once after a quiet gap, else at most once a refusalGap.
func (l *RefusalLog) Run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			l.Flush()
			return
		case <-l.wake:
		}
		l.Flush()
		t := time.NewTimer(l.gap)
		select {
		case <-ctx.Done():
			t.Stop()
			l.Flush()
			return
		case <-t.C:
		}
	}
}

// Flush appends the refusals recorded since the last write, within
// RefusalsMaxBytes; the ones that do not fit are counted on a "not
// logged" line for a later write.
func (l *RefusalLog) Flush() {
	l.mu.Lock()
	var batch []*Refused
	if l.lost != nil {
		batch = append(batch, l.lost)
		l.lost = nil
	}
	for _, k := range l.order {
		batch = append(batch, l.pending[k])
	}
	if l.other != nil {
		batch = append(batch, l.other)
	}
	l.pending, l.order, l.other = map[refusalKey]*Refused{}, nil, nil
	l.mu.Unlock()
	if len(batch) == 0 {
		return
	}
	dropped, err := appendRefusals(l.path, batch)
	if err != nil {
		l.log.Warn("egress: refusal log", "err", err)
	}
	if dropped == nil {
		return
	}
	l.mu.Lock()
	if l.lost == nil {
		l.lost = dropped
	} else {
		l.lost.Count += dropped.Count
		l.lost.Last = dropped.Last
	}
	l.mu.Unlock()
}

// appendRefusals appends batch to the file at path under an exclusive
// lock (TakeRefusals takes the same), and returns what did not fit as one
// RuleNotLogged line, or nil.
func appendRefusals(path string, batch []*Refused) (*Refused, error) {
	var dropped *Refused
	drop := func(e *Refused) {
		if dropped == nil {
			dropped = &Refused{Rule: RuleNotLogged, First: e.First}
		}
		dropped.Count += e.Count
		dropped.Last = e.Last
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0o600)
	if err != nil {
		for _, e := range batch {
			drop(e)
		}
		return dropped, fmt.Errorf("append to %s: %w", path, err)
	}
	defer f.Close()
	if err := flock(f); err != nil {
		for _, e := range batch {
			drop(e)
		}
		return dropped, fmt.Errorf("lock %s: %w", path, err)
	}
	fi, err := f.Stat()
	if err != nil {
		for _, e := range batch {
			drop(e)
		}
		return dropped, fmt.Errorf("stat %s: %w", path, err)
	}
	var buf bytes.Buffer
	for _, e := range batch {
		line, err := json.Marshal(e)
		if err != nil || fi.Size()+int64(buf.Len()+len(line)+1) > RefusalsMaxBytes {
			drop(e)
			continue
		}
		buf.Write(line)
		buf.WriteByte('\n')
	}
	if buf.Len() > 0 {
		if _, err := f.Write(buf.Bytes()); err != nil {
			return dropped, fmt.Errorf("append to %s: %w", path, err)
		}
	}
	return dropped, nil
}

// flock takes f's exclusive lock, retried on EINTR; closing f releases it.
func flock(f *os.File) error {
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX)
		if !errors.Is(err, syscall.EINTR) {
			return err
		}
	}
}

// TakeRefusals reads every line of the refusal log at path and empties it,
// under the lock the host side appends under, so each refusal is taken
// once. A missing file has none. A line that does not parse is skipped.
func TakeRefusals(path string) ([]Refused, error) {
	f, err := os.OpenFile(path, os.O_RDWR|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("egress refusals: %w", err)
	}
	defer f.Close()
	if err := flock(f); err != nil {
		return nil, fmt.Errorf("egress refusals: lock %s: %w", path, err)
	}
	b, err := io.ReadAll(io.LimitReader(f, RefusalsMaxBytes+1))
	if err != nil {
		return nil, fmt.Errorf("egress refusals: read %s: %w", path, err)
	}
	if err := f.Truncate(0); err != nil {
		return nil, fmt.Errorf("egress refusals: empty %s: %w", path, err)
	}
	var out []Refused
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, RefusalsMaxBytes+1)
	for sc.Scan() {
		var r Refused
		if json.Unmarshal(sc.Bytes(), &r) == nil && r.Count > 0 {
			out = append(out, r)
		}
	}
	return out, nil
}
