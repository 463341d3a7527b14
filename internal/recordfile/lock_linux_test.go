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
