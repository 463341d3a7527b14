package server_test

import (
	"context"
	"errors"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"connectrpc.com/connect"
	moby "github.com/moby/moby/client"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/client"
	"github.com/runbox/runbox/internal/providertest"
	"github.com/runbox/runbox/provider/docker"
	"github.com/runbox/runbox/provider/host"
)

// dockerTestImage is the image scripts/build-test-image.sh builds.
func dockerTestImage() string {
	if v := os.Getenv("RUNBOX_TEST_IMAGE"); v != "" {
		return v
	}
	return "runbox-test:busybox"
}

// onDockerProvider makes the server's provider docker, after checking that
// an engine answers and has the test image: without one the test skips,
// and fails when RUNBOX_REQUIRE_DOCKER=1 (CI).
func onDockerProvider(t *testing.T) serverOpt {
	t.Helper()
	if why := dockerMissing(); why != "" {
		if os.Getenv("RUNBOX_REQUIRE_DOCKER") == "1" {
			t.Fatalf("RUNBOX_REQUIRE_DOCKER=1 but %s", why)
		}
		t.Skipf("%s (RUNBOX_REQUIRE_DOCKER=1 makes this a failure)", why)
	}
	bin, err := providertest.BuildRunboxd()
	if err != nil {
		t.Fatal(err)
	}
	p := &docker.Provider{Runboxd: bin}
	t.Cleanup(func() { p.Close() })
	return func(c *serverConfig) {
		p.Home = c.Providers["host"].(*host.Provider).Home
		c.Providers = map[string]runbox.Provider{"docker": p}
		c.DefaultProvider = "docker"
	}
}

// TestServeBranchDocker: through serve, on docker (the engine pauses the
// whole container, runboxd with it, and a snapshot is a committed image):
// pause twice is fine, Get says paused, an exec is ErrSandboxPaused at once
// (never a hang), an exec started before the pause finishes after the
// resume with its output and is not timed out by the pause; a snapshot
// gives a sandbox with the parent's files; two forks write the same path
// and each reads back its own, the parent unchanged; the forks' snapshot
// cannot be deleted while they stand on it (failed_precondition, and it
// stays listed); deleting the parent keeps the forks working; after a
// restart of serve (a new provider on the same registry) the snapshot is
// listed and a sandbox is made from it; it can be deleted once its
// sandboxes are gone. A snapshot and a fork of the paused sandbox leave
// it paused (an exec is still ErrSandboxPaused) until resumed.
func TestServeBranchDocker(t *testing.T) {
	ts := startServer(t, onDockerProvider(t))
	restarted := onDockerProvider(t) // a new provider, for the restart below
	ctx := ctxT(t)
	a := ts.tenant(t, "a")
	t.Cleanup(func() {
		sbs, _ := a.List(ctx)
		for _, sb := range sbs {
			a.Remove(ctx, sb, true)
		}
		ss, _ := a.Snapshots(ctx)
		for _, s := range ss {
			a.RemoveSnapshot(ctx, s.Name)
		}
	})
	parent, err := a.Create(ctx, runbox.SandboxSpec{Image: dockerTestImage()})
	if err != nil {
		t.Fatal(err)
	}
	pc := a.Sandbox(parent.ID)
	defer pc.Close()
	run(t, pc, "echo parent > /etc/rbstate")
	proc, err := pc.Start(ctx, "sleep 1; echo survived", client.WithTimeout(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := a.Pause(ctx, parent); err != nil {
			t.Fatal(err)
		}
	}
	if got, err := a.Get(ctx, parent.ID); err != nil || got.Detail["paused"] != "true" {
		t.Errorf("Get of a paused sandbox: %+v, %v; want paused", got, err)
	}
	ectx, ecancel := context.WithTimeout(ctx, 30*time.Second)
	_, err = pc.Exec(ectx, "true")
	ecancel()
	if !errors.Is(err, runbox.ErrSandboxPaused) {
		t.Errorf("exec on a paused docker sandbox: %v, want ErrSandboxPaused", err)
	}
	// A snapshot and a fork of the paused sandbox leave it paused.
	if _, err := a.Snapshot(ctx, parent, "whilepaused", runbox.SnapshotOptions{}); err != nil {
		t.Fatal(err)
	}
	pforks, _, err := a.Fork(ctx, parent.ID, 1, runbox.SnapshotOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Remove(ctx, pforks[0], true); err != nil {
		t.Fatal(err)
	}
	if got, err := a.Get(ctx, parent.ID); err != nil || got.Detail["paused"] != "true" {
		t.Errorf("Get after a snapshot and a fork of the paused sandbox: %+v, %v; want paused", got, err)
	}
	ectx, ecancel = context.WithTimeout(ctx, 30*time.Second)
	_, err = pc.Exec(ectx, "true")
	ecancel()
	if !errors.Is(err, runbox.ErrSandboxPaused) {
		t.Errorf("exec after a snapshot and a fork of the paused sandbox: %v, want ErrSandboxPaused", err)
	}
	// Past the running exec's 2 s timeout on the wall clock; it has
	// spent about none of it running.
	time.Sleep(3 * time.Second)
	if err := a.Resume(ctx, parent); err != nil {
		t.Fatal(err)
	}
	res, err := proc.Wait(ctx)
	if err != nil || res.TimedOut || string(res.Stdout) != "survived\n" {
		t.Errorf("exec across the pause: %+v (stdout %q), %v; want it to finish with its output", res, res.Stdout, err)
	}

	if _, err := a.Snapshot(ctx, parent, "base", runbox.SnapshotOptions{}); err != nil {
		t.Fatal(err)
	}
	nsb, err := a.CreateSandbox(ctx, runbox.SandboxSpec{FromSnapshot: "base"}, client.SandboxOptions{})
	if err != nil {
		t.Fatal(err)
	}
	nc := a.Sandbox(nsb.ID)
	defer nc.Close()
	if got := run(t, nc, "cat /etc/rbstate"); got != "parent\n" {
		t.Errorf("a sandbox from the snapshot reads %q, want the parent's file", got)
	}
	if err := a.Remove(ctx, nsb, true); err != nil {
		t.Fatal(err)
	}
	if err := a.RemoveSnapshot(ctx, "base"); err != nil {
		t.Errorf("delete an unused snapshot: %v", err)
	}

	forks, fsn, err := a.Fork(ctx, parent.ID, 2, runbox.SnapshotOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(forks) != 2 {
		t.Fatalf("fork of 2 made %d", len(forks))
	}
	fcs := make([]*client.Client, len(forks))
	for i, f := range forks {
		fcs[i] = a.Sandbox(f.ID)
		defer fcs[i].Close()
		run(t, fcs[i], "echo "+strconv.Itoa(i)+" > /etc/rbfork")
	}
	for i, fc := range fcs {
		if got := run(t, fc, "cat /etc/rbfork /etc/rbstate"); got != strconv.Itoa(i)+"\nparent\n" {
			t.Errorf("fork %d reads %q", i, got)
		}
	}
	if got := run(t, pc, "test -e /etc/rbfork && echo fork-file-seen; cat /etc/rbstate"); got != "parent\n" {
		t.Errorf("the parent reads %q", got)
	}
	if err := a.RemoveSnapshot(ctx, fsn.Name); connect.CodeOf(err) != connect.CodeFailedPrecondition {
		t.Errorf("delete of a snapshot its forks stand on: %v, want a refusal (failed_precondition)", err)
	}
	ss, err := a.Snapshots(ctx)
	if err != nil || !slices.ContainsFunc(ss, func(s runbox.Snapshot) bool { return s.Name == fsn.Name }) {
		t.Errorf("after the refused delete the snapshots are %+v, %v; want %s still listed", ss, err, fsn.Name)
	}
	// Deleting the parent keeps its forks working, each with its own.
	if err := a.Remove(ctx, parent, false); err != nil {
		t.Fatal(err)
	}
	for i, fc := range fcs {
		if got := run(t, fc, "cat /etc/rbfork /etc/rbstate"); got != strconv.Itoa(i)+"\nparent\n" {
			t.Errorf("fork %d after its parent was removed reads %q", i, got)
		}
	}
	// A restart of serve (a new server and provider on the same registry)
	// keeps the snapshot: listed, and a sandbox made from it has the
	// parent's file.
	ts.stop()
	ts.start(t, restarted)
	ss, err = a.Snapshots(ctx)
	if err != nil || !slices.ContainsFunc(ss, func(s runbox.Snapshot) bool { return s.Name == fsn.Name }) {
		t.Fatalf("after a restart of serve the snapshots are %+v, %v; want %s listed", ss, err, fsn.Name)
	}
	rsb, err := a.CreateSandbox(ctx, runbox.SandboxSpec{FromSnapshot: fsn.Name}, client.SandboxOptions{})
	if err != nil {
		t.Fatalf("a sandbox from the snapshot after a restart: %v", err)
	}
	rc := a.Sandbox(rsb.ID)
	defer rc.Close()
	if got := run(t, rc, "cat /etc/rbstate; test -e /etc/rbfork || echo no-fork-file"); got != "parent\nno-fork-file\n" {
		t.Errorf("a sandbox from the snapshot after a restart reads %q", got)
	}
	for _, f := range append(forks, rsb) {
		if err := a.Remove(ctx, f, true); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.RemoveSnapshot(ctx, fsn.Name); err != nil {
		t.Errorf("delete of the forks' snapshot once they are gone: %v", err)
	}
}

// dockerMissing says why no docker sandbox can be made here, or "".
func dockerMissing() string {
	cli, err := docker.NewEngineClient()
	if err != nil {
		return "no Docker client: " + err.Error()
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := cli.Ping(ctx, moby.PingOptions{NegotiateAPIVersion: true}); err != nil {
		return "no Docker engine answers at " + cli.DaemonHost() + ": " + err.Error()
	}
	if _, err := cli.ImageInspect(ctx, dockerTestImage()); err != nil {
		return "test image " + dockerTestImage() + " is missing (scripts/build-test-image.sh): " + err.Error()
	}
	return ""
}
