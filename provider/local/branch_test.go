package local_test

import (
	"context"
	"crypto/rand"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/client"
	"github.com/runbox/runbox/internal/cli"
	"github.com/runbox/runbox/internal/providertest"
	"github.com/runbox/runbox/provider/local"
)

// cliEnv points the CLI at p's home and runboxd.
func cliEnv(t *testing.T, p *local.Provider) {
	t.Setenv("RUNBOX_HOME", p.Home)
	t.Setenv("RUNBOX_RUNBOXD", p.Runboxd)
	t.Setenv("RUNBOX_PROVIDER", "")
	t.Setenv("DOCKER_HOST", "unix://"+p.Home+"/no-docker-engine.sock")
}

// cliOf is runCLI as a providertest.CLI, for the suite's CLI helpers.
func cliOf(t *testing.T) providertest.CLI {
	return func(args ...string) (int, string, string) { return runCLI(t, args...) }
}

// cli runs the whole CLI and returns its exit status, stdout and stderr.
func runCLI(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out, errb lockedBuffer
	code := cli.Main(ctx, cli.ServerCommands{}, args, strings.NewReader(""), &out, &errb)
	return code, out.String(), errb.String()
}

// counter reads the number a counter loop last wrote to path.
func counter(path string) int {
	b, _ := os.ReadFile(path)
	n, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return n
}

// TestPauseResume: runbox pause freezes a counter loop in a local sandbox
// (it stops advancing, sampled twice from the host), its runboxd still
// answers Info saying paused, a new exec is refused with ErrSandboxPaused
// (the CLI exits 125 naming the state), and runbox resume lets the loop go
// on. Pause twice and resume twice are not errors.
func TestPauseResume(t *testing.T) {
	p := newProvider(t)
	cliEnv(t, p)
	ws := t.TempDir()
	sb, c := create(t, p, runbox.SandboxSpec{Workdir: ws})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	proc, err := c.Start(ctx, "i=0; while :; do i=$((i+1)); echo $i > /workspace/counter.tmp; mv /workspace/counter.tmp /workspace/counter; sleep 0.01; done")
	if err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(ws, "counter")
	if !poll(30*time.Second, func() bool { return counter(f) > 0 }) {
		t.Fatal("the counter never started")
	}
	for range 2 {
		if code, _, errs := runCLI(t, "pause", sb.ID); code != 0 {
			t.Fatalf("runbox pause: exit %d: %s", code, errs)
		}
	}
	info, err := c.Info(ctx)
	if err != nil || !info.Paused {
		t.Fatalf("Info of a paused sandbox: %+v, %v; want it to answer paused", info, err)
	}
	v1 := counter(f)
	time.Sleep(500 * time.Millisecond)
	if v2 := counter(f); v2 != v1 {
		t.Errorf("the counter moved while paused: %d then %d", v1, v2)
	}
	if _, err := c.Exec(ctx, "true"); !errors.Is(err, runbox.ErrSandboxPaused) {
		t.Errorf("exec while paused: %v, want ErrSandboxPaused", err)
	}
	code, _, errs := runCLI(t, "exec", sb.ID, "--", "true")
	if code != 125 || !strings.Contains(errs, "paused") {
		t.Errorf("runbox exec while paused: exit %d, stderr %q; want 125 naming the state", code, errs)
	}
	for range 2 {
		if code, _, errs := runCLI(t, "resume", sb.ID); code != 0 {
			t.Fatalf("runbox resume: exit %d: %s", code, errs)
		}
	}
	if !poll(30*time.Second, func() bool { return counter(f) > v1 }) {
		t.Fatal("the counter did not go on after resume")
	}
	if err := c.Cancel(ctx, proc.ID(), runbox.NoGrace); err != nil {
		t.Fatal(err)
	}
}

// TestSnapshotAndFork: a snapshot of a sandbox that changed its root and
// its workspace gives, through runbox fork, sandboxes that have those
// changes; each fork's writes (to its root and its workspace) are its own,
// the parent sees none of them, and the forks keep working once the
// parent and the snapshot are removed. A file the parent deleted stays
// deleted in the forks (the overlay's whiteout travels).
func TestSnapshotAndFork(t *testing.T) {
	p := newProvider(t)
	cliEnv(t, p)
	t.Cleanup(func() { os.RemoveAll(p.Home + "-workspaces") })
	ws := t.TempDir()
	if err := os.WriteFile(filepath.Join(ws, "given"), []byte("from the host\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	sb, c := create(t, p, runbox.SandboxSpec{Workdir: ws})
	run(t, c, "mkdir -p /opt/tool && echo installed > /opt/tool/version && rm /etc/hostname.snaptest 2>/dev/null; echo made > /workspace/made && rm -f /etc/issue.net")
	code, out, errs := runCLI(t, "fork", sb.ID, "--count", "2")
	if code != 0 {
		t.Fatalf("runbox fork: exit %d: %s", code, errs)
	}
	ids := strings.Fields(out)
	if len(ids) != 2 {
		t.Fatalf("runbox fork --count 2 printed %q, want two ids", out)
	}
	forks := make([]*client.Client, len(ids))
	for i, id := range ids {
		fsb, err := p.Get(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		forks[i] = client.New(p.Dialer(fsb), client.WithSandboxName(id))
		t.Cleanup(func() {
			forks[i].Close()
			_ = p.Remove(context.Background(), fsb, true)
		})
		if ws2 := fsb.Detail["workdir"]; ws2 == ws {
			t.Errorf("fork %s shares the parent's workspace %s", id, ws)
		}
	}
	for i, fc := range forks {
		got := run(t, fc, "cat /opt/tool/version /workspace/given /workspace/made; test -e /etc/issue.net && echo whiteout-lost; echo "+ids[i]+" > /opt/tool/who; echo "+ids[i]+" > /workspace/who")
		if got != "installed\nfrom the host\nmade\n" {
			t.Errorf("fork %s sees %q, want the parent's root and workspace", ids[i], got)
		}
	}
	for i, fc := range forks {
		if got := run(t, fc, "cat /opt/tool/who /workspace/who"); got != ids[i]+"\n"+ids[i]+"\n" {
			t.Errorf("fork %s reads back %q, want its own writes", ids[i], got)
		}
	}
	if got := exec(t, c, "cat /opt/tool/who; cat /workspace/who"); got.ExitCode == 0 || len(got.Stdout) != 0 {
		t.Errorf("the parent sees the forks' writes: %q", got.Stdout)
	}
	if _, err := os.Stat(filepath.Join(ws, "who")); err == nil {
		t.Error("a fork wrote into the parent's workspace")
	}
	// The parent and the snapshot go; the forks stand.
	if err := p.Remove(context.Background(), sb, true); err != nil {
		t.Fatal(err)
	}
	snaps, err := p.Snapshots(context.Background())
	if err != nil || len(snaps) != 1 || snaps[0].Sandbox != sb.ID || !snaps[0].Workspace {
		t.Fatalf("snapshots: %+v, %v; want the fork's one, with its workspace", snaps, err)
	}
	if code, _, errs := runCLI(t, "snapshot", "rm", snaps[0].Name); code != 0 {
		t.Fatalf("runbox snapshot rm: exit %d: %s", code, errs)
	}
	for i, fc := range forks {
		if got := run(t, fc, "cat /opt/tool/version /opt/tool/who"); got != "installed\n"+ids[i]+"\n" {
			t.Errorf("fork %s after the parent and the snapshot were removed: %q", ids[i], got)
		}
	}
}

// TestSnapshotOptionsAndErrors: --no-workspace leaves the workspace out
// (up --from then gets the --workdir it is given); a snapshot name in use,
// an unknown snapshot and a provider that cannot snapshot (host) are
// errors with exit 125.
func TestSnapshotOptionsAndErrors(t *testing.T) {
	p := newProvider(t)
	cliEnv(t, p)
	t.Cleanup(func() { os.RemoveAll(p.Home + "-workspaces") })
	sb, c := create(t, p, runbox.SandboxSpec{})
	run(t, c, "echo v1 > /opt/state; echo w > /workspace/w")
	if code, out, errs := runCLI(t, "snapshot", sb.ID, "base", "--no-workspace"); code != 0 || strings.TrimSpace(out) != "base" {
		t.Fatalf("runbox snapshot: exit %d, %q, %s", code, out, errs)
	}
	if code, _, errs := runCLI(t, "snapshot", sb.ID, "base"); code != 125 || !strings.Contains(errs, "exists") {
		t.Errorf("a snapshot name in use: exit %d, %q; want 125", code, errs)
	}
	ws := t.TempDir()
	code, out, errs := runCLI(t, "up", "--from", "base", "--workdir", ws)
	if code != 0 {
		t.Fatalf("up --from: exit %d: %s", code, errs)
	}
	nsb, err := p.Get(context.Background(), strings.TrimSpace(out))
	if err != nil {
		t.Fatal(err)
	}
	nc := client.New(p.Dialer(nsb), client.WithSandboxName(nsb.ID))
	defer nc.Close()
	defer p.Remove(context.Background(), nsb, true)
	if got := run(t, nc, "cat /opt/state; ls /workspace"); got != "v1\n" {
		t.Errorf("up --from a snapshot without workspace, --workdir empty: %q, want v1 and an empty workspace", got)
	}
	if code, _, errs := runCLI(t, "up", "--from", "nosuch"); code != 125 || !strings.Contains(errs, "no snapshot nosuch") {
		t.Errorf("up --from an unknown snapshot: exit %d, %q", code, errs)
	}
	code, out, errs = runCLI(t, "up", "--provider", "host", "--workdir", t.TempDir())
	if code != 0 {
		t.Fatalf("up --provider host: %d %s", code, errs)
	}
	hostID := strings.TrimSpace(out)
	defer runCLI(t, "rm", "-f", hostID)
	if code, _, errs := runCLI(t, "snapshot", hostID); code != 125 || !strings.Contains(errs, "provider host cannot snapshot") {
		t.Errorf("snapshot of a host sandbox: exit %d, %q; want 125 saying host cannot snapshot", code, errs)
	}
}

// TestSnapshotOfASandboxFromASnapshot: three generations, each made from a
// snapshot of the one before. The last sees every generation's changes to
// the root: a file only the first wrote, a file the second overwrote, a
// file the second deleted stays deleted, a directory the second emptied
// stays empty; and it keeps seeing them once every earlier snapshot and
// sandbox is removed. (Before, a snapshot held only its sandbox's own
// changes: the first generation's files were gone from the third.)
func TestSnapshotOfASandboxFromASnapshot(t *testing.T) {
	p := newProvider(t)
	ctx := context.Background()
	t.Cleanup(func() { os.RemoveAll(p.Home + "-workspaces") })
	marker := rand.Text()
	first, c1 := create(t, p, runbox.SandboxSpec{Workdir: t.TempDir()})
	run(t, c1, "mkdir -p /opt/gen/dir && echo one > /opt/gen/first && echo one > /opt/gen/changed && echo one > /opt/gen/deleted && touch /opt/gen/dir/a /opt/gen/dir/b && echo "+marker+" > /usr/local/bin/marker")
	s1, err := p.Snapshot(ctx, first, "", runbox.SnapshotOptions{NoWorkspace: true})
	if err != nil {
		t.Fatal(err)
	}
	second, c2 := create(t, p, runbox.SandboxSpec{FromSnapshot: s1.Name, Workdir: t.TempDir()})
	run(t, c2, "echo two > /opt/gen/changed && rm /opt/gen/deleted && rm -r /opt/gen/dir && mkdir /opt/gen/dir && echo two > /opt/gen/second")
	s2, err := p.Snapshot(ctx, second, "", runbox.SnapshotOptions{NoWorkspace: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, sb := range []runbox.Sandbox{first, second} {
		if err := p.Remove(ctx, sb, true); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.RemoveSnapshot(ctx, s1.Name); err != nil {
		t.Fatal(err)
	}
	third, c3 := create(t, p, runbox.SandboxSpec{FromSnapshot: s2.Name, Workdir: t.TempDir()})
	if err := p.RemoveSnapshot(ctx, s2.Name); err != nil {
		t.Fatal(err)
	}
	want := "one\ntwo\ntwo\n" + marker + "\nno deleted\nempty dir\n"
	got := run(t, c3, "cat /opt/gen/first /opt/gen/changed /opt/gen/second /usr/local/bin/marker; test -e /opt/gen/deleted || echo no deleted; test -z \"$(ls -A /opt/gen/dir)\" && echo empty dir")
	if got != want {
		t.Errorf("the third generation sees %q, want %q", got, want)
	}
	if n := third.Detail["snapshot_layers"]; n != "2" {
		t.Errorf("the third generation stands on %q snapshot layers, want 2", n)
	}
	// Its own writes still go to its own layer.
	if got := run(t, c3, "echo three > /opt/gen/first && cat /opt/gen/first"); got != "three\n" {
		t.Errorf("a write over a lower layer's file reads back %q", got)
	}
}
