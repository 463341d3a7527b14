package server_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/client"
	"github.com/runbox/runbox/internal/registry"
	"github.com/runbox/runbox/provider/host"
)

// syncBuffer is a bytes.Buffer safe for a writer and a reader.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// numbered is a command printing n numbered lines, a few per 100 ms.
func numbered(n int) string {
	return fmt.Sprintf("for i in $(seq 1 %d); do echo line $i; sleep 0.02; done; exit 3", n)
}

// checkNumbered checks that out holds lines 1..n, each exactly once.
func checkNumbered(t *testing.T, out string, n int) {
	t.Helper()
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(lines) != n {
		t.Fatalf("%d lines, want %d: %q", len(lines), n, out)
	}
	for i, l := range lines {
		if l != "line "+strconv.Itoa(i+1) {
			t.Fatalf("line %d is %q", i+1, l)
		}
	}
}

// waitFor polls cond until it holds, failing after a generous deadline.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestServerRestartMidExec: the server stops while an exec streams; a new
// one starts on the same address; the same Wait call gets every line
// exactly once and the real exit code, and the audit row is completed.
func TestServerRestartMidExec(t *testing.T) {
	ts := startServer(t)
	ctx := ctxT(t)
	srv := ts.tenant(t, "a")
	sb, err := srv.Create(ctx, runbox.SandboxSpec{})
	if err != nil {
		t.Fatal(err)
	}
	c := srv.Sandbox(sb.ID, client.WithReconnectWindow(30*time.Second))
	defer c.Close()
	var out syncBuffer
	p, err := c.Start(ctx, numbered(150), client.WithStdout(&out))
	if err != nil {
		t.Fatal(err)
	}
	type outcome struct {
		res runbox.Result
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		res, err := p.Wait(ctx)
		done <- outcome{res, err}
	}()
	waitFor(t, "some output", func() bool { return strings.Count(out.String(), "\n") >= 10 })
	ts.stop()
	if strings.Count(out.String(), "\n") >= 150 {
		t.Fatal("the exec ended before the server stopped: make it longer")
	}
	ts.start(t)
	o := <-done
	if o.err != nil || o.res.ExitCode != 3 {
		t.Fatalf("Wait across the restart: %+v, %v", o.res, o.err)
	}
	checkNumbered(t, out.String(), 150)
	waitFor(t, "the audit row to complete", func() bool {
		rows, _ := ts.store.Audit(ctx, registry.AuditFilter{Sandbox: sb.ID})
		for _, r := range rows {
			if r.Kind == registry.KindExec && r.ExecID == p.ID() && !r.Ended.IsZero() {
				if r.ExitCode == nil || *r.ExitCode != 3 || r.StdoutBytes != o.res.StdoutBytes {
					t.Fatalf("audit row %+v", r)
				}
				return true
			}
		}
		return false
	})
}

// TestReaperSparesRunningExec: a sandbox with a 3 s idle TTL lives as long
// as its 10 s command runs (no client attached), and is removed once idle.
func TestReaperSparesRunningExec(t *testing.T) {
	ts := startServer(t)
	ctx := ctxT(t)
	srv := ts.tenant(t, "a")
	sb, err := srv.CreateSandbox(ctx, runbox.SandboxSpec{}, client.SandboxOptions{IdleTTL: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	c := srv.Sandbox(sb.ID)
	p, err := c.Start(ctx, "sleep 10")
	if err != nil {
		t.Fatal(err)
	}
	id := p.ID()
	c.Close() // no client attached from here on
	started := time.Now()
	for {
		got, err := srv.Get(ctx, sb.ID)
		if err != nil {
			t.Fatalf("%v into a 10 s exec with a 3 s TTL: %v", time.Since(started), err)
		}
		if got.Detail["running_execs"] == "0" {
			break // the exec has ended
		}
		time.Sleep(200 * time.Millisecond)
	}
	if time.Since(started) < 5*time.Second {
		t.Fatalf("the exec ended after %v", time.Since(started))
	}
	waitFor(t, "the reaper", func() bool {
		_, err := srv.Get(ctx, sb.ID)
		return errors.Is(err, runbox.ErrSandboxNotFound)
	})
	rows, _ := ts.store.Audit(ctx, registry.AuditFilter{Sandbox: sb.ID})
	var reaped, exec bool
	for _, r := range rows {
		reaped = reaped || r.Kind == registry.KindReap && strings.Contains(r.Detail, "idle")
		exec = exec || r.Kind == registry.KindExec && r.ExecID == id && r.ExitCode != nil && *r.ExitCode == 0
	}
	if !reaped || !exec {
		t.Fatalf("audit: %+v", rows)
	}
	// The sandbox's runboxd is gone from the machine.
	if sbs, _ := (&host.Provider{Home: ts.home}).List(ctx); len(sbs) != 0 {
		t.Fatalf("host sandboxes left: %+v", sbs)
	}
}

// TestMaxLifetime: a sandbox past its max lifetime is removed, stopping
// its running exec.
func TestMaxLifetime(t *testing.T) {
	ts := startServer(t)
	ctx := ctxT(t)
	srv := ts.tenant(t, "a")
	sb, err := srv.CreateSandbox(ctx, runbox.SandboxSpec{}, client.SandboxOptions{MaxLifetime: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	c := srv.Sandbox(sb.ID)
	defer c.Close()
	res, err := c.Exec(ctx, "sleep 60")
	if err == nil && !res.Cancelled && res.Signal == "" {
		t.Fatalf("exec outlived its sandbox's lifetime: %+v", res)
	}
	waitFor(t, "the reaper", func() bool {
		_, err := srv.Get(ctx, sb.ID)
		return errors.Is(err, runbox.ErrSandboxNotFound)
	})
}

// TestLostAndRecreate: a sandbox whose runboxd dies is marked lost; with
// recreate it is replaced on next use, and the answer says so.
func TestLostAndRecreate(t *testing.T) {
	ts := startServer(t)
	ctx := ctxT(t)
	srv := ts.tenant(t, "a")
	hp := &host.Provider{Home: ts.home}
	kill := func(sb runbox.Sandbox) {
		t.Helper()
		got, err := srv.Get(ctx, sb.ID)
		if err != nil {
			t.Fatal(err)
		}
		hsb, err := hp.Get(ctx, got.Detail["provider_id"])
		if err != nil {
			t.Fatal(err)
		}
		pid, _ := strconv.Atoi(hsb.Detail["pid"])
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
	}
	plain, err := srv.Create(ctx, runbox.SandboxSpec{})
	if err != nil {
		t.Fatal(err)
	}
	again, err := srv.CreateSandbox(ctx, runbox.SandboxSpec{}, client.SandboxOptions{Recreate: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, sb := range []runbox.Sandbox{plain, again} {
		if _, _, err := srv.Run(ctx, sb.ID, runbox.ExecSpec{Command: "true"}); err != nil {
			t.Fatal(err)
		}
		kill(sb)
	}
	_, _, err = srv.Run(ctx, plain.ID, runbox.ExecSpec{Command: "true"})
	if !errors.Is(err, runbox.ErrSandboxLost) {
		t.Fatalf("run in a lost sandbox: %v, want ErrSandboxLost", err)
	}
	waitFor(t, "lost state", func() bool {
		got, err := srv.Get(ctx, plain.ID)
		return err == nil && !got.Alive && got.Detail["state"] == "lost" && got.Detail["lost"] != ""
	})
	res, recreated, err := srv.Run(ctx, again.ID, runbox.ExecSpec{Command: "echo fresh"})
	if err != nil || !recreated || string(res.Stdout) != "fresh\n" {
		t.Fatalf("run in a lost sandbox with recreate: %+v, recreated %v, %v", res, recreated, err)
	}
	got, _ := srv.Get(ctx, again.ID)
	if got.Detail["recreated"] != "1" || !got.Alive {
		t.Fatalf("after recreate: %+v", got)
	}
	// A lost sandbox needs force to go.
	if err := srv.Remove(ctx, plain, false); err == nil {
		t.Fatal("a lost sandbox was removed without force")
	}
	if err := srv.Remove(ctx, plain, true); err != nil {
		t.Fatal(err)
	}
	rows, _ := ts.store.Audit(context.Background(), registry.AuditFilter{Sandbox: again.ID})
	kinds := ""
	for _, r := range rows {
		kinds += r.Kind + " "
	}
	if !strings.Contains(kinds, "lost") || !strings.Contains(kinds, "recreate") {
		t.Fatalf("audit kinds: %s", kinds)
	}
}
