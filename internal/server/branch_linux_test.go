package server_test

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/client"
	"github.com/runbox/runbox/internal/server"
)

// hostPidOf is the host pid of the one process whose command line holds
// marker, waited for.
func hostPidOf(t *testing.T, marker string) int {
	t.Helper()
	pid := 0
	waitFor(t, "the process "+marker, func() bool {
		ents, _ := os.ReadDir("/proc")
		for _, e := range ents {
			n, err := strconv.Atoi(e.Name())
			if err != nil {
				continue
			}
			b, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
			if strings.Contains(string(b), marker) && strings.Contains(string(b), "while") {
				pid = n
				return true
			}
		}
		return false
	})
	return pid
}

// cpuTicks is the user+system CPU time of pid, in clock ticks, from
// /proc/PID/stat.
func cpuTicks(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
	u, _ := strconv.ParseInt(f[11], 10, 64)
	s, _ := strconv.ParseInt(f[12], 10, 64)
	return u + s
}

func run(t *testing.T, cl *client.Client, cmd string) string {
	t.Helper()
	res, err := cl.Exec(ctxT(t), cmd)
	if err != nil {
		t.Fatalf("%s: %v", cmd, err)
	}
	if res.ExitCode != 0 {
		t.Fatalf("%s: exit %d: %s%s", cmd, res.ExitCode, res.Stdout, res.Stderr)
	}
	return string(res.Stdout)
}

// TestServePauseLocal: through serve, pausing a local sandbox stops a busy
// loop (its CPU time in /proc does not move), an exec on it is
// ErrSandboxPaused at once, Get says paused, the idle reaper leaves it
// alone however long it stays paused, a snapshot and a fork of it leave it
// paused (the loop still uses no CPU), and resume lets the loop run on.
// Another tenant cannot pause it.
func TestServePauseLocal(t *testing.T) {
	ts := startServer(t, onLocalProvider(t))
	ctx := ctxT(t)
	a, b := ts.tenant(t, "a"), ts.tenant(t, "b")
	sb, err := a.Create(ctx, runbox.SandboxSpec{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Remove(ctx, sb, true) })
	// An idle sandbox with an idle TTL, paused at once: the reaper
	// (every 100 ms) would remove it after 2 s idle.
	idle, err := a.CreateSandbox(ctx, runbox.SandboxSpec{}, client.SandboxOptions{IdleTTL: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Remove(ctx, idle, true) })
	if err := a.Pause(ctx, idle); err != nil {
		t.Fatal(err)
	}
	defer a.Resume(ctx, idle)
	cl := a.Sandbox(sb.ID)
	defer cl.Close()
	marker := "busy-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	p, err := cl.Start(ctx, "exec sh -c 'while :; do :; done' "+marker)
	if err != nil {
		t.Fatal(err)
	}
	pid := hostPidOf(t, marker)
	if err := b.Pause(ctx, sb); !errors.Is(err, runbox.ErrSandboxNotFound) {
		t.Fatalf("tenant b pausing a's sandbox: %v, want ErrSandboxNotFound", err)
	}
	if err := a.Pause(ctx, sb); err != nil {
		t.Fatal(err)
	}
	if err := a.Pause(ctx, sb); err != nil {
		t.Fatalf("pause again: %v", err)
	}
	if got, _ := a.Get(ctx, sb.ID); got.Detail["paused"] != "true" {
		t.Errorf("Get of a paused sandbox: %v, want paused", got.Detail)
	}
	c0 := cpuTicks(t, pid)
	if _, err := cl.Exec(ctx, "true"); !errors.Is(err, runbox.ErrSandboxPaused) {
		t.Fatalf("exec on a paused sandbox: %v, want ErrSandboxPaused", err)
	}
	// A snapshot and a fork of the paused sandbox leave it paused (serve
	// pauses nothing again: the provider resumes only what it paused).
	if _, err := a.Snapshot(ctx, sb, "whilepaused", runbox.SnapshotOptions{NoWorkspace: true}); err != nil {
		t.Fatal(err)
	}
	forks, _, err := a.Fork(ctx, sb.ID, 1, runbox.SnapshotOptions{NoWorkspace: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Remove(ctx, forks[0], true) })
	if got, _ := a.Get(ctx, sb.ID); got.Detail["paused"] != "true" {
		t.Errorf("Get after a snapshot and a fork of the paused sandbox: %v, want paused", got.Detail)
	}
	if _, err := cl.Exec(ctx, "true"); !errors.Is(err, runbox.ErrSandboxPaused) {
		t.Errorf("exec after a snapshot and a fork of the paused sandbox: %v, want ErrSandboxPaused", err)
	}
	// Past the idle TTL: still there; the loop still frozen.
	time.Sleep(3 * time.Second)
	if c1 := cpuTicks(t, pid); c1 != c0 {
		t.Errorf("the busy loop used %d ticks while paused", c1-c0)
	}
	if _, err := a.Get(ctx, idle.ID); err != nil {
		t.Fatalf("the reaper removed a paused sandbox: %v", err)
	}
	// What is left of its idle TTL after the resume:
	// TestServeIdleClockStopsWhilePaused.
	if err := a.Resume(ctx, sb); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the loop to run again", func() bool { return cpuTicks(t, pid) > c0 })
	if got, _ := a.Get(ctx, sb.ID); got.Detail["paused"] != "" {
		t.Errorf("Get after resume: %v, want not paused", got.Detail)
	}
	if err := cl.Cancel(ctx, p.ID(), 0); err != nil {
		t.Fatal(err)
	}
	p.Wait(ctx)
}

// testClock is a server's clock (Config.Now) that moves only when told.
type testClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *testClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *testClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// TestServeIdleClockStopsWhilePaused: a local sandbox with a 10 minute
// idle TTL, paused after 9 idle minutes and kept paused for an hour (and
// paused again in it, which does not restart the paused time), has 1
// idle minute left once resumed: the reaper leaves it after 50 s more and
// removes it after 70 s. The pause and the resume are not uses. (Before,
// the resume restarted the idle clock: it stood 10 more minutes.) The
// server's clock is moved by the test, and the reaper run by it.
func TestServeIdleClockStopsWhilePaused(t *testing.T) {
	clock := &testClock{now: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)}
	ts := startServer(t, onLocalProvider(t), func(c *serverConfig) {
		c.Now = clock.Now
		c.ReapInterval = time.Hour // the test reaps (server.ReapNow)
	})
	ctx := ctxT(t)
	a := ts.tenant(t, "a")
	sb, err := a.CreateSandbox(ctx, runbox.SandboxSpec{}, client.SandboxOptions{IdleTTL: 10 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Remove(ctx, sb, true) })
	there := func(when string) bool {
		t.Helper()
		server.ReapNow(ts.srv)
		_, err := a.Get(ctx, sb.ID)
		if err != nil && !errors.Is(err, runbox.ErrSandboxNotFound) {
			t.Fatalf("%s: %v", when, err)
		}
		return err == nil
	}
	clock.Advance(9 * time.Minute)
	if !there("idle 9 of 10 minutes") {
		t.Fatal("reaped after 9 of its 10 idle minutes")
	}
	if err := a.Pause(ctx, sb); err != nil {
		t.Fatal(err)
	}
	clock.Advance(time.Hour)
	if err := a.Pause(ctx, sb); err != nil {
		t.Fatalf("pause again: %v", err)
	}
	clock.Advance(5 * time.Minute)
	if !there("paused for 65 minutes") {
		t.Fatal("reaped while paused")
	}
	if err := a.Resume(ctx, sb); err != nil {
		t.Fatal(err)
	}
	if !there("just resumed") {
		t.Fatal("reaped at its resume: the paused hour counted as idle")
	}
	clock.Advance(50 * time.Second)
	if !there("resumed, 50 s idle") {
		t.Fatal("reaped 50 s after its resume with 1 idle minute left")
	}
	clock.Advance(20 * time.Second)
	if there("resumed, 70 s idle") {
		t.Error("still there 70 s after its resume with 1 idle minute left: the resume restarted its idle clock")
	}
}

// TestServeSnapshotForkLocal: through serve, a snapshot of a local
// sandbox holds its workspace and a tool it installed, and a new sandbox
// with no network made from it has both; three forks write the same path
// and each reads back its own, the parent unchanged; deleting the parent
// and the snapshot keeps them working; snapshots are the tenant's alone,
// bounded by max_snapshots, and survive a restart of the server.
func TestServeSnapshotForkLocal(t *testing.T) {
	local := onLocalProvider(t)
	quota := func(c *serverConfig) { c.Quotas.MaxSnapshots = 3 }
	ts := startServer(t, local, quota)
	ctx := ctxT(t)
	a, b := ts.tenant(t, "a"), ts.tenant(t, "b")
	t.Cleanup(func() {
		sbs, _ := a.List(ctx)
		for _, sb := range sbs {
			a.Remove(ctx, sb, true)
		}
		os.RemoveAll(ts.home + "-workspaces")
	})
	parent, err := a.Create(ctx, runbox.SandboxSpec{})
	if err != nil {
		t.Fatal(err)
	}
	pc := a.Sandbox(parent.ID)
	defer pc.Close()
	run(t, pc, `echo hello > ws.txt && printf '#!/bin/sh\necho tool-ok\n' > /usr/local/bin/rbtool && chmod +x /usr/local/bin/rbtool`)
	sn, err := a.Snapshot(ctx, parent, "base", runbox.SnapshotOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if sn.Name != "base" || sn.Sandbox != parent.ID || !sn.Workspace || sn.Bytes <= 0 {
		t.Errorf("snapshot %+v", sn)
	}
	if _, err := a.Snapshot(ctx, parent, "base", runbox.SnapshotOptions{}); !errors.Is(err, runbox.ErrNameInUse) {
		t.Errorf("a second snapshot named base: %v, want ErrNameInUse", err)
	}

	// Tenant b sees none of it.
	if ss, err := b.Snapshots(ctx); err != nil || len(ss) != 0 {
		t.Errorf("tenant b's snapshots: %v, %v", ss, err)
	}
	if _, err := b.CreateSandbox(ctx, runbox.SandboxSpec{FromSnapshot: "base"}, client.SandboxOptions{}); !errors.Is(err, runbox.ErrInvalidSpec) {
		t.Errorf("tenant b using a's snapshot: %v, want ErrInvalidSpec", err)
	}
	if err := b.RemoveSnapshot(ctx, "base"); !errors.Is(err, runbox.ErrInvalidSpec) {
		t.Errorf("tenant b deleting a's snapshot: %v, want ErrInvalidSpec", err)
	}
	if _, _, err := b.Fork(ctx, parent.ID, 1, runbox.SnapshotOptions{}); !errors.Is(err, runbox.ErrSandboxNotFound) {
		t.Errorf("tenant b forking a's sandbox: %v, want ErrSandboxNotFound", err)
	}

	// From the snapshot, without network.
	nsb, err := a.CreateSandbox(ctx, runbox.SandboxSpec{FromSnapshot: "base", Network: "none"}, client.SandboxOptions{})
	if err != nil {
		t.Fatal(err)
	}
	nc := a.Sandbox(nsb.ID)
	defer nc.Close()
	if got := run(t, nc, "cat ws.txt && rbtool"); got != "hello\ntool-ok\n" {
		t.Errorf("from the snapshot: %q", got)
	}

	// Three forks.
	forks, fsn, err := a.Fork(ctx, parent.ID, 3, runbox.SnapshotOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(forks) != 3 || !strings.HasPrefix(fsn.Name, "fork-") {
		t.Fatalf("fork: %d sandboxes, snapshot %q", len(forks), fsn.Name)
	}
	fcs := make([]*client.Client, len(forks))
	for i, f := range forks {
		fcs[i] = a.Sandbox(f.ID)
		defer fcs[i].Close()
		run(t, fcs[i], "echo "+strconv.Itoa(i)+" > ws.txt && echo "+strconv.Itoa(i)+" > /etc/rbfork")
	}
	for i, fc := range fcs {
		if got := run(t, fc, "cat ws.txt /etc/rbfork && rbtool"); got != strconv.Itoa(i)+"\n"+strconv.Itoa(i)+"\ntool-ok\n" {
			t.Errorf("fork %d reads %q", i, got)
		}
	}
	if got := run(t, pc, "cat ws.txt; test -e /etc/rbfork || echo no-fork-file"); got != "hello\nno-fork-file\n" {
		t.Errorf("the parent reads %q", got)
	}
	if err := a.Remove(ctx, parent, false); err != nil {
		t.Fatal(err)
	}
	if err := a.RemoveSnapshot(ctx, fsn.Name); err != nil {
		t.Fatal(err)
	}
	for i, fc := range fcs {
		if got := run(t, fc, "cat ws.txt && rbtool"); got != strconv.Itoa(i)+"\ntool-ok\n" {
			t.Errorf("fork %d after its parent and snapshot went: %q", i, got)
		}
	}

	// The quota: base, two more, then the fourth is refused.
	for _, name := range []string{"s2", "s3"} {
		if _, err := a.Snapshot(ctx, forks[0], name, runbox.SnapshotOptions{NoWorkspace: true}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := a.Snapshot(ctx, forks[0], "s4", runbox.SnapshotOptions{}); !errors.Is(err, runbox.ErrQuotaExceeded) {
		t.Fatalf("a fourth snapshot: %v, want ErrQuotaExceeded", err)
	}
	if _, _, err := a.Fork(ctx, forks[0].ID, 1, runbox.SnapshotOptions{}); !errors.Is(err, runbox.ErrQuotaExceeded) {
		t.Fatalf("a fork over the snapshot quota: %v, want ErrQuotaExceeded", err)
	}

	// A restart keeps them.
	ts.stop()
	ts.start(t, local, quota)
	ss, err := a.Snapshots(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range ss {
		names = append(names, s.Name)
	}
	if strings.Join(names, ",") != "base,s2,s3" {
		t.Fatalf("after a restart: %v", names)
	}
	rsb, err := a.CreateSandbox(ctx, runbox.SandboxSpec{FromSnapshot: "base"}, client.SandboxOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rc := a.Sandbox(rsb.ID)
	defer rc.Close()
	if got := run(t, rc, "cat ws.txt && rbtool"); got != "hello\ntool-ok\n" {
		t.Errorf("from the snapshot after a restart: %q", got)
	}
	// local: deleting a snapshot leaves the sandboxes on it working.
	if err := a.RemoveSnapshot(ctx, "base"); err != nil {
		t.Fatal(err)
	}
	if got := run(t, rc, "rbtool"); got != "tool-ok\n" {
		t.Errorf("after its snapshot went: %q", got)
	}
	if _, err := a.CreateSandbox(ctx, runbox.SandboxSpec{FromSnapshot: "base"}, client.SandboxOptions{}); !errors.Is(err, runbox.ErrInvalidSpec) {
		t.Errorf("from a deleted snapshot: %v, want ErrInvalidSpec", err)
	}
}

// TestMCPBranchLocal: over /mcp on local sandboxes, a model pauses and
// resumes its sandbox (a command on it fails while paused), snapshots it,
// makes a sandbox from the snapshot and forks it; the new sandboxes are
// the session's own, each with its own files; another session cannot start
// from that snapshot.
func TestMCPBranchLocal(t *testing.T) {
	ts := startServer(t, onLocalProvider(t), withMCP(server.MCPConfig{}))
	cs := ts.mustMCP(t, ts.token(t, "a"))
	t.Cleanup(func() { os.RemoveAll(ts.home + "-workspaces") })
	toolOK(t, cs, "exec", map[string]any{"command": "echo base > f.txt"})
	toolOK(t, cs, "sandbox_pause", nil)
	if msg := toolFails(t, cs, "exec", map[string]any{"command": "true"}); !strings.Contains(msg, "paused") {
		t.Errorf("exec on a paused sandbox: %q", msg)
	}
	toolOK(t, cs, "sandbox_resume", nil)
	sn := toolOK(t, cs, "sandbox_snapshot", map[string]any{"name": "s1"})
	if sn["name"] != "s1" || sn["workspace"] != true {
		t.Fatalf("sandbox_snapshot: %v", sn)
	}
	made := toolOK(t, cs, "sandbox_create", map[string]any{"from_snapshot": "s1"})
	id, _ := made["id"].(string)
	if out := toolOK(t, cs, "exec", map[string]any{"command": "cat f.txt", "sandbox": id}); out["stdout"] != "base\n" {
		t.Errorf("from the snapshot: %v", out)
	}
	fork := toolOK(t, cs, "sandbox_fork", map[string]any{"sandbox": id, "count": 2})
	sbs, _ := fork["sandboxes"].([]any)
	if len(sbs) != 2 {
		t.Fatalf("sandbox_fork: %v", fork)
	}
	for i, x := range sbs {
		fid, _ := x.(map[string]any)["id"].(string)
		toolOK(t, cs, "exec", map[string]any{"command": "echo " + strconv.Itoa(i) + " > f.txt", "sandbox": fid})
	}
	for i, x := range sbs {
		fid, _ := x.(map[string]any)["id"].(string)
		if out := toolOK(t, cs, "exec", map[string]any{"command": "cat f.txt", "sandbox": fid}); out["stdout"] != strconv.Itoa(i)+"\n" {
			t.Errorf("fork %d: %v", i, out)
		}
	}
	if out := toolOK(t, cs, "exec", map[string]any{"command": "cat f.txt", "sandbox": id}); out["stdout"] != "base\n" {
		t.Errorf("the forked sandbox after its forks wrote: %v", out)
	}
	if l := toolOK(t, cs, "sandbox_list", nil); len(l["sandboxes"].([]any)) != 4 {
		t.Errorf("the session lists %v, want its 4 sandboxes", l)
	}
	// Another session of the same tenant cannot start from s1: a model
	// reaches only the snapshots its own session took, as with sandboxes.
	other := ts.mustMCP(t, ts.token(t, "a"))
	if msg := toolFails(t, other, "sandbox_create", map[string]any{"from_snapshot": "s1"}); !strings.Contains(msg, "no snapshot") {
		t.Errorf("another session's snapshot: %q, want it refused as unknown", msg)
	}
}

// TestServePauseAndHoldThroughServe: a hold taken through serve (its
// exec service forwards Hold and ReleaseHold to the sandbox's runboxd)
// freezes a local sandbox's busy loop until released; the user's pause
// and resume through serve meanwhile leave it frozen, and the pause
// stands after the release; a hold whose client goes away without a
// release ends with it.
func TestServePauseAndHoldThroughServe(t *testing.T) {
	ts := startServer(t, onLocalProvider(t))
	ctx := ctxT(t)
	a := ts.tenant(t, "a")
	sb, err := a.Create(ctx, runbox.SandboxSpec{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Remove(ctx, sb, true) })
	cl := a.Sandbox(sb.ID)
	defer cl.Close()
	marker := "busy-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	p, err := cl.Start(ctx, "exec sh -c 'while :; do :; done' "+marker)
	if err != nil {
		t.Fatal(err)
	}
	pid := hostPidOf(t, marker)
	frozen := func() bool {
		c0 := cpuTicks(t, pid)
		time.Sleep(300 * time.Millisecond)
		return cpuTicks(t, pid) == c0
	}
	runs := func(what string) {
		c0 := cpuTicks(t, pid)
		waitFor(t, what, func() bool { return cpuTicks(t, pid) > c0 })
	}
	runs("the loop to run")

	h, err := cl.Hold(ctx, "test")
	if err != nil {
		t.Fatal(err)
	}
	if !frozen() {
		t.Error("the loop runs while held through serve")
	}
	if err := a.Pause(ctx, sb); err != nil {
		t.Fatal(err)
	}
	if err := a.Resume(ctx, sb); err != nil {
		t.Fatal(err)
	}
	if !frozen() {
		t.Error("a resume through serve thawed a held sandbox")
	}
	if err := a.Pause(ctx, sb); err != nil {
		t.Fatal(err)
	}
	if err := h.Release(); err != nil {
		t.Fatalf("release through serve: %v", err)
	}
	if !frozen() {
		t.Error("the user's pause did not stand after the release")
	}
	if err := a.Resume(ctx, sb); err != nil {
		t.Fatal(err)
	}
	runs("the loop to run after resume")

	other := a.Sandbox(sb.ID)
	if _, err := other.Hold(ctx, "closed"); err != nil {
		t.Fatal(err)
	}
	if !frozen() {
		t.Error("the loop runs while held by the other client")
	}
	other.Close()
	runs("the loop to run once the holder's client is closed")

	if err := cl.Cancel(ctx, p.ID(), 0); err != nil {
		t.Fatal(err)
	}
	p.Wait(ctx)
}
