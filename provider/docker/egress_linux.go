package docker

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"github.com/runbox/runbox/internal/procbox"
)

// startEgressHost starts the host side of a private sandbox's egress
// (runboxd egress, from the host's runboxd binary), detached, on the
// host's network. It lives as long as the container's runboxd (pid, its
// host pid, watched through a pidfd): a stopped container's host side is
// gone, and a restarted one gets none.
func startEgressHost(runboxd, stateDir, socket string, pid int) (int, error) {
	log, err := os.OpenFile(filepath.Join(stateDir, egressLogFile), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return 0, fmt.Errorf("start the egress host side: %w", err)
	}
	defer log.Close()
	d, err := procbox.SpawnDetached(runboxd, []string{"egress", "--state-dir", stateDir, "--socket", socket, "--pid", strconv.Itoa(pid)}, "/", log)
	if err != nil {
		return 0, fmt.Errorf("start the egress host side: %w", err)
	}
	return d.Pid, nil
}
