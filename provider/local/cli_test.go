package local_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/runbox/runbox/internal/cli"
)

// TestCLIDefaultsToLocal: `runbox run` without --provider (and without
// $RUNBOX_PROVIDER) runs in a local sandbox, with limits from its flags
// (the host's view of the commands' pids cgroup says 65 while the command
// runs: the 64 commands and the one runboxd thread that forks them), and
// removes it.
func TestCLIDefaultsToLocal(t *testing.T) {
	p := newProvider(t)
	if os.Geteuid() != 0 {
		t.Skip("limits need root (only root can make the cgroups they use): run the tests as root")
	}
	t.Setenv("RUNBOX_HOME", p.Home)
	t.Setenv("RUNBOX_RUNBOXD", p.Runboxd)
	t.Setenv("RUNBOX_PROVIDER", "")
	t.Setenv("DOCKER_HOST", "unix://"+p.Home+"/no-docker-engine.sock")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// The workspace is a host directory: the command waits there for a
	// gate file, so the test can look at its cgroup while it runs.
	ws := t.TempDir()
	out, errb := &lockedBuffer{}, &lockedBuffer{}
	code := make(chan int, 1)
	go func() {
		code <- cli.Main(ctx, cli.ServerCommands{}, []string{"run", "--pids", "64", "--workdir", ws, "--",
			"tr '\\0' ' ' </proc/1/cmdline; echo; pwd; grep ':pids:' /proc/self/cgroup; while [ ! -e gate ]; do sleep 0.02; done"},
			strings.NewReader(""), out, errb)
	}()
	var pidsCgroup string
	for deadline := time.Now().Add(time.Minute); pidsCgroup == ""; time.Sleep(20 * time.Millisecond) {
		for line := range strings.Lines(out.String()) {
			if _, path, ok := strings.Cut(strings.TrimSpace(line), ":pids:"); ok {
				pidsCgroup = path
			}
		}
		if time.Now().After(deadline) {
			os.WriteFile(filepath.Join(ws, "gate"), nil, 0o644)
			t.Fatalf("no pids cgroup line within a minute: stdout %q, stderr %q", out.String(), errb.String())
		}
	}
	limit, err := os.ReadFile(filepath.Join("/sys/fs/cgroup/pids", pidsCgroup, "pids.max"))
	if werr := os.WriteFile(filepath.Join(ws, "gate"), nil, 0o644); werr != nil {
		t.Fatal(werr)
	}
	if err != nil || strings.TrimSpace(string(limit)) != "65" {
		t.Errorf("pids.max of the command's cgroup %s, seen from the host: %q, %v; want 65 from --pids 64 (64 and runboxd's spawn thread)", pidsCgroup, limit, err)
	}
	if c := <-code; c != 0 || !strings.Contains(out.String(), "runboxd jail") || !strings.Contains(out.String(), "/workspace") {
		t.Fatalf("runbox run: status %d\nstdout %s\nstderr %s\nwant PID 1 runboxd jail in /workspace", c, out.String(), errb.String())
	}
	if ents, _ := os.ReadDir(p.Home + "/sandboxes"); len(ents) > 1 { // the lock file
		t.Errorf("runbox run left sandbox state behind: %v", ents)
	}
}

// lockedBuffer is a bytes.Buffer safe for concurrent use.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
