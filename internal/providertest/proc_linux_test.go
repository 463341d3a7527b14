package providertest

import (
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestProcCountLiveNotZombie(t *testing.T) {
	m := newMarker()
	cmd := exec.Command("sleep", strings.TrimPrefix(m, "sleep "))
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	reaped := false
	t.Cleanup(func() {
		if !reaped {
			cmd.Process.Kill()
			cmd.Wait()
		}
	})
	if n := mustCount(t, m); n != 1 {
		t.Fatalf("ProcCount(%q) = %d with one sleep running, want 1", m, n)
	}
	if n := mustCount(t, m+"0"); n != 0 {
		t.Fatalf("ProcCount(%q) = %d, want 0: matched a longer marker", m+"0", n)
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	// Unreaped, the sleep is a zombie: not a live process.
	if !poll(10*time.Second, func() bool { st, err := readStat(cmd.Process.Pid); return err == nil && st.state == 'Z' }) {
		t.Fatal("killed child never became a zombie")
	}
	if n := mustCount(t, m); n != 0 {
		t.Errorf("ProcCount(%q) = %d for a zombie, want 0", m, n)
	}
	cmd.Wait()
	reaped = true
	if n := mustCount(t, m); n != 0 {
		t.Errorf("ProcCount(%q) = %d after the sleep was reaped, want 0", m, n)
	}
}

func TestProcZombiesCountsDescendants(t *testing.T) {
	// sh forks a child that exits at once, then becomes a sleep that never
	// reaps it: one zombie whose parent is the sleep.
	cmd := exec.Command("sh", "-c", "true & exec sleep 60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	root := cmd.Process.Pid
	var n int
	if !poll(10*time.Second, func() bool {
		var err error
		if n, err = ProcZombies(root); err != nil {
			t.Fatal(err)
		}
		return n == 1
	}) {
		t.Fatalf("ProcZombies(%d) = %d, want 1", root, n)
	}
	// The zombie also descends from this test process, through the sleep.
	if n, err := ProcZombies(os.Getpid()); err != nil || n < 1 {
		t.Errorf("ProcZombies(self) = %d, %v; want at least 1", n, err)
	}
	if n, err := ProcZombies(1 << 30); err != nil || n != 0 {
		t.Errorf("ProcZombies(no such pid) = %d, %v; want 0", n, err)
	}
}

func TestProcRSS(t *testing.T) {
	n, err := ProcRSS(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if n < 1<<20 {
		t.Errorf("ProcRSS(self) = %d bytes, want at least 1 MiB for a Go test binary", n)
	}
	if _, err := ProcRSS(1 << 30); err == nil {
		t.Error("ProcRSS(no such pid) succeeded")
	}
}

func TestMarkersAreUniqueAndPrefixFree(t *testing.T) {
	seen := map[string]bool{}
	for range 1000 {
		m := newMarker()
		if len(m) != len("sleep 3134")+6 || strings.HasPrefix(m, "sleep 31337") {
			t.Fatalf("marker %q: wrong shape", m)
		}
		seen[m] = true
	}
	if len(seen) < 990 {
		t.Errorf("only %d distinct markers in 1000", len(seen))
	}
}

func mustCount(t *testing.T, marker string) int {
	t.Helper()
	n, err := ProcCount(marker)
	if err != nil {
		t.Fatal(err)
	}
	return n
}
