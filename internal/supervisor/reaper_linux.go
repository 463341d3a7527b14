package supervisor

import (
	"os"
	"os/signal"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// reapLoop reaps every child of the daemon — exec leaders and orphans
// re-parented to it — whenever SIGCHLD arrives, and once a second in case a
// signal was coalesced away.
func (s *Supervisor) reapLoop() {
	defer s.loopDone.Done()
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGCHLD)
	defer signal.Stop(sigs)
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		s.reapAll()
		select {
		case <-s.quit:
			return
		case <-sigs:
		case <-tick.C:
		}
	}
}

func (s *Supervisor) reapAll() {
	for {
		var ws unix.WaitStatus
		pid, err := unix.Wait4(-1, &ws, unix.WNOHANG, nil)
		if err == unix.EINTR {
			continue
		}
		if err != nil || pid <= 0 {
			return
		}
		// Cross the barrier: any spawn that forked pid has registered it.
		s.spawnMu.Lock()
		s.spawnMu.Unlock() //nolint:staticcheck // an intentional barrier
		s.leadersMu.Lock()
		e := s.leaders[pid]
		delete(s.leaders, pid)
		s.leadersMu.Unlock()
		if e != nil {
			e.leaderExited(ws)
		}
	}
}
