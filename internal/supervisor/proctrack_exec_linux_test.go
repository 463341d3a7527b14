package supervisor

import (
	"testing"
	"time"

	"github.com/runbox/runbox"
)

// TestBackgroundCountedWhileItExecs: in proc mode (no cgroup: docker, ssh,
// kubernetes) a background command that is in the middle of execve when
// the exec ends is still counted as left running, so a later Cancel stops
// it. Its environment reads empty during the exec; before the re-read the
// exec reported 0 left running, released its containment, and the `sleep`
// survived the Cancel (2 in 300 here, 6 in 190 in the docker soak case).
func TestBackgroundCountedWhileItExecs(t *testing.T) {
	s, err := New(Config{CgroupMode: "off", Retention: time.Minute, Version: "test"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { shutdown(t, s) })
	m := marker()
	for i := range 300 {
		e, _, err := s.Start(runbox.ExecSpec{Command: "sleep " + m + " >/dev/null 2>&1 & echo up"})
		if err != nil {
			t.Fatal(err)
		}
		if r := waitResult(t, e); r.LeftRunning != 1 {
			t.Errorf("run %d: %d left running, want 1 (%d alive)", i, r.LeftRunning, countAlive(m))
		}
		c, known := s.Cancel(e.id, 0)
		if !known {
			t.Fatalf("run %d: the exec was forgotten", i)
		}
		if err := c.WaitStopped(t.Context()); err != nil {
			t.Fatal(err)
		}
		if n := countAlive(m); n != 0 {
			t.Fatalf("run %d: %d background processes survive the Cancel", i, n)
		}
	}
}
