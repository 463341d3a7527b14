package recordfile_test

import (
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/runbox/runbox/internal/recordfile"
)

// TestLockSerialises: 20 holders at once each read a counter file, wait,
// and write it back plus one; only a lock that excludes the others
// leaves 20 (each Lock is an open file of its own, as in two processes).
func TestLockSerialises(t *testing.T) {
	dir := t.TempDir()
	lockPath, counter := filepath.Join(dir, ".lock"), filepath.Join(dir, "n")
	if err := os.WriteFile(counter, []byte("0"), 0o600); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for range 20 {
		wg.Go(func() {
			release, err := recordfile.Lock(lockPath)
			if err != nil {
				t.Error(err)
				return
			}
			defer release()
			b, err := os.ReadFile(counter)
			if err != nil {
				t.Error(err)
				return
			}
			n, _ := strconv.Atoi(string(b))
			time.Sleep(time.Millisecond)
			if err := os.WriteFile(counter, []byte(strconv.Itoa(n+1)), 0o600); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if b, _ := os.ReadFile(counter); string(b) != "20" {
		t.Errorf("counter %s after 20 locked increments, want 20", b)
	}
	if st, err := os.Stat(lockPath); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("lock file: %v %v, want mode 0600", st, err)
	}
}

// TestTryLock: TryLock takes a free lock, reports a lock another holder
// has (Lock's or TryLock's, each an open file of its own, as in two
// processes) without waiting, and takes it again once released.
func TestTryLock(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.lock")
	release, held, err := recordfile.TryLock(path)
	if err != nil || held || release == nil {
		t.Fatalf("TryLock of a free lock: %v, held %v", err, held)
	}
	if r, held, err := recordfile.TryLock(path); err != nil || !held || r != nil {
		t.Errorf("TryLock while TryLock holds it: %v, held %v; want held", err, held)
	}
	release()
	release, err = recordfile.LockDir(filepath.Dir(path))
	if err != nil {
		t.Fatal(err)
	}
	if _, held, err := recordfile.TryLock(filepath.Join(filepath.Dir(path), recordfile.LockFile)); err != nil || !held {
		t.Errorf("TryLock while LockDir holds it: %v, held %v; want held", err, held)
	}
	release()
	if r, held, err := recordfile.TryLock(path); err != nil || held {
		t.Errorf("TryLock after release: %v, held %v; want it taken", err, held)
	} else {
		r()
	}
}
