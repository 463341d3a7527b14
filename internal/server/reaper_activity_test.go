package server_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/client"
	"github.com/runbox/runbox/internal/server"
)

// TestReaperSparesBackgroundProcesses: a sandbox whose exec ended but left
// a server running in the background is in use: the idle reaper leaves it
// for many TTLs, and removes it once the background process is stopped.
// With IdleIgnoresBackground the operator says otherwise, and it goes
// while the process still runs. On the code before the fix the reaper
// looked at running execs only and removed the first sandbox within a TTL
// or so.
func TestReaperSparesBackgroundProcesses(t *testing.T) {
	for _, ignore := range []bool{false, true} {
		t.Run(map[bool]string{false: "default", true: "ignores-background"}[ignore], func(t *testing.T) {
			ts := startServer(t, func(c *server.Config) { c.IdleIgnoresBackground = ignore })
			ctx := ctxT(t)
			srv := ts.tenant(t, "a")
			const ttl = time.Second
			sb, err := srv.CreateSandbox(ctx, runbox.SandboxSpec{}, client.SandboxOptions{IdleTTL: ttl})
			if err != nil {
				t.Fatal(err)
			}
			c := srv.Sandbox(sb.ID)
			defer c.Close()
			res, err := c.Exec(ctx, "sleep 600 >/dev/null 2>&1 & echo serving", client.WithID("bg"))
			if err != nil || strings.TrimSpace(string(res.Stdout)) != "serving" {
				t.Fatalf("exec: %+v, %v", res, err)
			}
			gone := func() bool {
				_, err := srv.Get(ctx, sb.ID)
				return errors.Is(err, runbox.ErrSandboxNotFound)
			}
			if ignore {
				waitFor(t, "the reaper", gone)
				return
			}
			// Several TTLs, at a reaper pass every 100 ms: the sandbox
			// stays while its background process runs.
			time.Sleep(4 * ttl)
			if gone() {
				t.Fatal("the idle reaper removed a sandbox whose background process still runs")
			}
			if err := c.Cancel(ctx, "bg", 0); err != nil {
				t.Fatal(err)
			}
			waitFor(t, "the reaper, once the background process is stopped", gone)
		})
	}
}
