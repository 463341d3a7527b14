package local

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
)

// engineStateDirs are where container engines and Kubernetes keep their
// state by default: other sandboxes' and containers' files, sockets and
// secrets. A sandbox on the host's root does not see them.
var engineStateDirs = []string{
	"/var/lib/docker", "/var/lib/containerd", "/var/lib/containers",
	"/var/lib/kubelet", "/etc/kubernetes",
}

// engineDaemons are the engines whose running processes are asked where
// they keep their state (a data root given on the command line).
var engineDaemons = map[string][]string{
	"dockerd":    {"--data-root", "-g", "--exec-root"},
	"containerd": {"--root", "--state"},
	"podman":     {"--root", "--runroot"},
}

// engineDirs returns engineStateDirs and the state directories the
// engines running now, or Docker's configuration, name.
func engineDirs() []string {
	dirs := append([]string(nil), engineStateDirs...)
	if b, err := os.ReadFile("/etc/docker/daemon.json"); err == nil {
		var cfg struct {
			DataRoot string `json:"data-root"`
			ExecRoot string `json:"exec-root"`
		}
		if json.Unmarshal(b, &cfg) == nil {
			dirs = append(dirs, cfg.DataRoot, cfg.ExecRoot)
		}
	}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		if e.Name()[0] < '0' || e.Name()[0] > '9' {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || len(b) == 0 {
			continue
		}
		args := strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
		flags, ok := engineDaemons[filepath.Base(args[0])]
		if !ok {
			continue
		}
		for i, a := range args {
			for _, f := range flags {
				if v, ok := strings.CutPrefix(a, f+"="); ok {
					dirs = append(dirs, v)
				} else if a == f && i+1 < len(args) {
					dirs = append(dirs, args[i+1])
				}
			}
		}
	}
	out := dirs[:0]
	for _, d := range dirs {
		if filepath.IsAbs(d) {
			out = append(out, filepath.Clean(d))
		}
	}
	return out
}
