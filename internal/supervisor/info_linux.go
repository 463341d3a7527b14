package supervisor

import (
	"os"
	"runtime"

	"github.com/runbox/runbox"
)

// Info describes the daemon.
func (s *Supervisor) Info() runbox.DaemonInfo {
	info := runbox.DaemonInfo{
		Version:    s.cfg.Version,
		Pid:        os.Getpid(),
		CgroupMode: s.mode,
		StartedAt:  s.startedAt,
		Goroutines: runtime.NumGoroutine(),
		OpenFDs:    countOpenFDs(),
	}
	s.mu.Lock()
	info.Paused, info.Holds = s.userPaused, s.holds
	info.Total = s.total
	for _, e := range s.execs {
		if e.finished() {
			info.Retained++
		} else {
			info.Running++
		}
	}
	s.mu.Unlock()
	return info
}

func countOpenFDs() int {
	d, err := os.Open("/proc/self/fd")
	if err != nil {
		return -1
	}
	defer d.Close()
	names, _ := d.Readdirnames(-1)
	return len(names) - 1 // the directory being read
}
