package local_test

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/runbox/runbox/internal/cli"
)

// TestCLIDefaultsToLocal: `runbox run` without --provider (and without
// $RUNBOX_PROVIDER) runs in a local sandbox, with limits from its flags,
// and removes it.
func TestCLIDefaultsToLocal(t *testing.T) {
	p := newProvider(t)
	t.Setenv("RUNBOX_HOME", p.Home)
	t.Setenv("RUNBOX_RUNBOXD", p.Runboxd)
	t.Setenv("RUNBOX_PROVIDER", "")
	t.Setenv("DOCKER_HOST", "unix://"+p.Home+"/no-docker-engine.sock")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out, errb bytes.Buffer
	code := cli.Main(ctx, []string{"run", "--pids", "64", "--workdir", t.TempDir(), "--",
		"tr '\\0' ' ' </proc/1/cmdline; echo; pwd; cat /sys/fs/cgroup/pids/pids.max 2>/dev/null || true"},
		strings.NewReader(""), &out, &errb)
	if code != 0 || !strings.Contains(out.String(), "runboxd jail") || !strings.Contains(out.String(), "/workspace") {
		t.Fatalf("runbox run: status %d\nstdout %s\nstderr %s\nwant PID 1 runboxd jail in /workspace", code, out.String(), errb.String())
	}
	if ents, _ := os.ReadDir(p.Home + "/sandboxes"); len(ents) > 1 { // the lock file
		t.Errorf("runbox run left sandbox state behind: %v", ents)
	}
}
