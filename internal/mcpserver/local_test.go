package mcpserver_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/runbox/runbox/provider/local"
)

// The default provider, local: commands run in the jail with the
// workspace at /workspace, the file tools work beneath it (paths as the
// sandbox sees them), a timeout leaves nothing on the host, and the
// session's sandbox is gone when the session ends.
func TestLocalProvider(t *testing.T) {
	home, workdir := testHome(t)
	t.Cleanup(func() {
		p := &local.Provider{Home: home}
		sbs, _ := p.List(context.Background())
		for _, sb := range sbs {
			t.Errorf("local sandbox %s left behind", sb.ID)
			_ = p.Remove(context.Background(), sb, true)
		}
	})
	s := startStdioHome(t, home, workdir, "--provider", "local")
	res := s.call(t, "exec", map[string]any{"command": "pwd"})
	if res.IsError {
		missing := textOf(res)
		if os.Getenv("RUNBOX_REQUIRE_LOCAL") == "1" {
			t.Fatalf("RUNBOX_REQUIRE_LOCAL=1 but: %s", missing)
		}
		t.Skipf("no local sandbox here: %s (set RUNBOX_REQUIRE_LOCAL=1 to make this a failure)", missing)
	}
	if r := decode[execResult](t, res); r.Stdout != "/workspace\n" {
		t.Fatalf("pwd in a local sandbox: %+v", r)
	}
	ok[struct{}](t, s.cs, "file_write", map[string]any{"path": "/workspace/made.txt", "content": "from mcp\n"})
	if b, err := os.ReadFile(filepath.Join(workdir, "made.txt")); err != nil || string(b) != "from mcp\n" {
		t.Errorf("made.txt on the host: %q, %v", b, err)
	}
	if r := ok[fileRead](t, s.cs, "file_read", map[string]any{"path": "made.txt"}); r.Path != "/workspace/made.txt" || r.Content != "from mcp\n" {
		t.Errorf("file_read: %+v", r)
	}
	if msg := failing(t, s.cs, "file_read", map[string]any{"path": "/etc/hostname"}); !strings.Contains(msg, "escapes") {
		t.Errorf("a path outside /workspace: %q", msg)
	}
	m := marker()
	r := ok[execResult](t, s.cs, "exec", map[string]any{"command": fmt.Sprintf("sleep %s & sleep %s", m, m), "timeout_seconds": 1})
	if !r.TimedOut {
		t.Errorf("timed-out exec: %+v", r)
	}
	if n := procs(t, m); n != 0 {
		t.Errorf("%d processes of the timed-out exec survive on the host", n)
	}
	s.close(t)
	if sbs, err := (&local.Provider{Home: home}).List(context.Background()); err != nil || len(sbs) != 0 {
		t.Errorf("after the session: %v, %v", sbs, err)
	}
}
