package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/runbox/runbox/internal/supervisor"
)

// daemonFile is what serve --daemon-file writes: where this daemon's
// commands live, for the side that started it to find and kill them should
// the daemon die without stopping them (procbox reads it into the
// sandbox's record; its json names are procbox's too).
type daemonFile struct {
	Pid        int    `json:"pid"`
	DaemonMark string `json:"daemon_mark"`
	Cgroup     string `json:"cgroup,omitempty"`
}

// writeDaemonFile writes path (0600) all at once: it is written before
// the daemon serves, so before any command runs.
func writeDaemonFile(path string, sup *supervisor.Supervisor) error {
	b, err := json.Marshal(daemonFile{Pid: os.Getpid(), DaemonMark: sup.DaemonMark(), Cgroup: sup.CgroupDir()})
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".daemon-*")
	if err != nil {
		return fmt.Errorf("daemon file: %w", err)
	}
	_, err = tmp.Write(b)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("daemon file: %w", err)
	}
	return nil
}
