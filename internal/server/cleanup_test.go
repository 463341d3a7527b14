package server_test

import (
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/client"
)

// metricsOf returns the server's /metrics page.
func metricsOf(t *testing.T, ts *testServer, tok string) string {
	t.Helper()
	req, _ := http.NewRequest("GET", ts.url+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer "+tok)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return string(body)
}

// TestFailedCleanupIsCountedAndRetried: a workspace that cannot be removed
// (a mount inside it) is logged, counted in runbox_cleanup_failures_total,
// kept in runbox_cleanups_pending, and removed by the reaper once it can
// be. On the code before the fix the error was dropped: no count, and the
// workspace leaked for good.
func TestFailedCleanupIsCountedAndRetried(t *testing.T) {
	ts := startServer(t, func(c *serverConfig) { c.OperatorTenant = "a" }) // a's /metrics is server-wide
	ctx := ctxT(t)
	tok := ts.token(t, "a")
	srv, _ := client.NewServer(ts.url, tok)
	defer srv.Close()
	sb, err := srv.Create(ctx, runbox.SandboxSpec{})
	if err != nil {
		t.Fatal(err)
	}
	rec, err := ts.store.GetSandbox(ctx, "a", sb.ID)
	if err != nil || rec.Workspace == "" {
		t.Fatalf("sandbox record %+v, %v: want a workspace", rec, err)
	}
	pin := filepath.Join(rec.Workspace, "pinned")
	if err := os.Mkdir(pin, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount("tmpfs", pin, "tmpfs", 0, "size=64k"); err != nil {
		if os.Getenv("RUNBOX_REQUIRE_ROOT") == "1" {
			t.Fatalf("mount a tmpfs in the workspace: %v", err)
		}
		t.Skipf("cannot mount a tmpfs in the workspace (needs root; RUNBOX_REQUIRE_ROOT=1 makes it required): %v", err)
	}
	unmounted := false
	defer func() {
		if !unmounted {
			syscall.Unmount(pin, syscall.MNT_DETACH)
		}
	}()
	if err := srv.Remove(ctx, sb, false); err != nil {
		t.Fatal(err)
	}
	body := metricsOf(t, ts, tok)
	if !strings.Contains(body, `runbox_cleanup_failures_total{what="workspace"}`) || !strings.Contains(body, "runbox_cleanups_pending 1") {
		t.Fatalf("/metrics does not count the failed workspace removal:\n%s", grepLines(body, "cleanup"))
	}
	if _, err := os.Stat(rec.Workspace); err != nil {
		t.Fatalf("workspace: %v; want it still there (its removal failed)", err)
	}
	if err := syscall.Unmount(pin, 0); err != nil {
		t.Fatal(err)
	}
	unmounted = true
	// The reaper (every 100 ms here) retries it.
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(50 * time.Millisecond) {
		_, err := os.Stat(rec.Workspace)
		if os.IsNotExist(err) && strings.Contains(metricsOf(t, ts, tok), "runbox_cleanups_pending 0") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the reaper did not remove the workspace (%v)", err)
		}
	}
}

func grepLines(s, word string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, word) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
