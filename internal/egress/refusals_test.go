package egress

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

func sumRefused(rs []Refused, rule string) (n int64) {
	for _, r := range rs {
		if rule == "" || r.Rule == rule {
			n += r.Count
		}
	}
	return n
}

// TestRefusalLogCoalesces: a storm of refusals (10,000 of one destination
// and 100 distinct others) is one write of refusalKeys named lines and
// one counting the rest, every refusal counted once; the file is 0600 and
// taking it empties it.
func TestRefusalLogCoalesces(t *testing.T) {
	path := filepath.Join(t.TempDir(), RefusalsFile)
	l := NewRefusalLog(path, nil)
	for range 10000 {
		l.Record(&Refusal{Host: "storm.test", Port: 443, Rule: "storm.test is not in the --allow list"}, "connect")
	}
	for i := range 100 {
		l.Record(&Refusal{Host: fmt.Sprintf("n%d.test", i), Port: 80, Rule: "not allowed"}, "http")
	}
	l.Flush()
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("the log: %v %v, want mode 0600", fi, err)
	}
	got, err := TakeRefusals(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != refusalKeys+1 {
		t.Errorf("%d lines, want %d", len(got), refusalKeys+1)
	}
	if got[0].Host != "storm.test" || got[0].Port != 443 || got[0].Count != 10000 || got[0].Via != "connect" {
		t.Errorf("first line: %+v", got[0])
	}
	if n := sumRefused(got, RuleCoalesced); n != 100-(refusalKeys-1) {
		t.Errorf("coalesced past the named lines: %d, want %d", n, 100-(refusalKeys-1))
	}
	if n := sumRefused(got, ""); n != 10100 {
		t.Errorf("counted %d refusals, want 10100", n)
	}
	if again, err := TakeRefusals(path); err != nil || len(again) != 0 {
		t.Errorf("taken twice: %v %v", again, err)
	}
}

// TestRefusalLogBounded: with nobody taking it, the file stops at
// RefusalsMaxBytes; what did not fit is counted and written once serve
// has taken the file, so no refusal is lost or counted twice.
func TestRefusalLogBounded(t *testing.T) {
	path := filepath.Join(t.TempDir(), RefusalsFile)
	l := NewRefusalLog(path, nil)
	total := int64(0)
	for w := range 300 {
		for i := range refusalKeys {
			l.Record(&Refusal{Host: fmt.Sprintf("w%d-n%d.test", w, i), Port: 443, Rule: "not in the --allow list"}, "connect")
			total++
		}
		l.Flush()
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Size() > RefusalsMaxBytes {
		t.Fatalf("the log grew to %v (%v), bound %d", fi.Size(), err, RefusalsMaxBytes)
	}
	first, err := TakeRefusals(path)
	if err != nil {
		t.Fatal(err)
	}
	l.Flush() // room again: the count of what was dropped
	rest, err := TakeRefusals(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(rest) != 1 || rest[0].Rule != RuleNotLogged {
		t.Errorf("after taking: %+v, want one %q line", rest, RuleNotLogged)
	}
	if n := sumRefused(first, "") + sumRefused(rest, ""); n != total {
		t.Errorf("counted %d refusals, want %d", n, total)
	}
}

// TestRefusalLogRunWritesAtEnd: what is recorded when Run's context ends
// is written before Run returns (the host side ends with its sandbox).
func TestRefusalLogRunWritesAtEnd(t *testing.T) {
	path := filepath.Join(t.TempDir(), RefusalsFile)
	l := NewRefusalLog(path, nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); l.Run(ctx) }()
	l.Record(&Refusal{Host: "a.test", Port: 80, Rule: "r"}, "http")
	l.Record(&Refusal{Host: "a.test", Port: 80, Rule: "r"}, "http")
	cancel()
	<-done
	got, err := TakeRefusals(path)
	if err != nil {
		t.Fatal(err)
	}
	if n := sumRefused(got, ""); n != 2 {
		t.Errorf("after Run ended: %+v, want 2 refusals", got)
	}
}

// TestRefusalLogConcurrent: connections are refused on goroutines of
// their own while Run writes and serve takes the file (under -race): every
// refusal is counted exactly once, whatever the interleaving.
func TestRefusalLogConcurrent(t *testing.T) {
	path := filepath.Join(t.TempDir(), RefusalsFile)
	l := NewRefusalLog(path, nil)
	l.gap = time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); l.Run(ctx) }()
	const workers, each = 8, 2000
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				l.Record(&Refusal{Host: fmt.Sprintf("w%d-%d.test", w, i%50), Port: 443, Rule: "not allowed"}, "connect")
			}
		}()
	}
	var taken int64
	takerDone := make(chan struct{})
	go func() {
		defer close(takerDone)
		for {
			rs, err := TakeRefusals(path)
			if err != nil {
				t.Error(err)
				return
			}
			taken += sumRefused(rs, "")
			select {
			case <-done:
				return
			default:
			}
		}
	}()
	wg.Wait()
	cancel()
	<-done
	<-takerDone
	rs, err := TakeRefusals(path)
	if err != nil {
		t.Fatal(err)
	}
	if taken += sumRefused(rs, ""); taken != workers*each {
		t.Errorf("counted %d refusals, want %d", taken, workers*each)
	}
}
