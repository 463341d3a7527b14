package local_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	osexec "os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/client"
	"github.com/runbox/runbox/internal/providertest"
	"github.com/runbox/runbox/provider/local"
)

// The tests below put a user's pause or resume, a second snapshot or the
// snapshotter's death into a snapshot's copy, at the moment the sandbox is
// frozen for it (local.SetSnapshotCopying), and read the sandbox's state
// from a busy loop's CPU ticks in /proc. Before holds (Snapshot paused the
// sandbox through runboxd's one pause flag and resumed it after), each of
// them failed: the user's pause was undone by the snapshot's resume, the
// user's resume thawed the copy, the first of two snapshots thawed the
// second's copy, and a killed snapshotter left the sandbox paused.

// onCopy makes Snapshot call f when the snapshot name is frozen for its
// copy, until the test ends.
func onCopy(t *testing.T, f func(name string)) {
	local.SetSnapshotCopying(f)
	t.Cleanup(func() { local.SetSnapshotCopying(nil) })
}

// wantDaemon checks what runboxd says of the user's pause and the holds.
func wantDaemon(t *testing.T, c *client.Client, what string, paused bool) {
	t.Helper()
	info, err := c.Info(context.Background())
	if err != nil {
		t.Fatalf("%s: info: %v", what, err)
	}
	if info.Paused != paused || info.Holds != 0 {
		t.Errorf("%s: runboxd says paused %v with %d holds, want paused %v and no hold", what, info.Paused, info.Holds, paused)
	}
}

// TestSnapshotKeepsAPauseMadeDuringIt: the user pauses the sandbox while a
// snapshot copies it; after the snapshot it is still paused (before, the
// snapshot's resume undid the pause).
func TestSnapshotKeepsAPauseMadeDuringIt(t *testing.T) {
	needRootHost(t)
	p := newProvider(t)
	sb, c := create(t, p, runbox.SandboxSpec{})
	pid, execID := busyPid(t, c)
	defer c.Cancel(context.Background(), execID, runbox.NoGrace)
	onCopy(t, func(string) {
		if err := c.Pause(context.Background()); err != nil {
			t.Errorf("pause during the copy: %v", err)
		}
	})
	if _, err := p.Snapshot(context.Background(), sb, "", runbox.SnapshotOptions{}); err != nil {
		t.Fatal(err)
	}
	wantDaemon(t, c, "after the snapshot", true)
	if !providertest.Frozen(t, pid) {
		t.Error("the sandbox paused during the snapshot runs after it: the snapshot undid the user's pause")
	}
	if err := c.Resume(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !providertest.Runs(t, pid) {
		t.Error("the sandbox does not run after resume")
	}
}

// TestSnapshotNotThawedByAResumeDuringIt: the user resumes the sandbox
// while a snapshot copies it, running or paused before; the commands stay
// frozen until the copy ends (before, the resume thawed them mid-copy),
// and run after it, as the user asked.
func TestSnapshotNotThawedByAResumeDuringIt(t *testing.T) {
	needRootHost(t)
	p := newProvider(t)
	sb, c := create(t, p, runbox.SandboxSpec{})
	pid, execID := busyPid(t, c)
	defer c.Cancel(context.Background(), execID, runbox.NoGrace)
	for _, pausedBefore := range []bool{false, true} {
		what := fmt.Sprintf("paused before: %v", pausedBefore)
		if pausedBefore {
			if err := c.Pause(context.Background()); err != nil {
				t.Fatal(err)
			}
		}
		thawed := false
		onCopy(t, func(string) {
			if err := c.Resume(context.Background()); err != nil {
				t.Errorf("resume during the copy: %v", err)
			}
			thawed = !providertest.Frozen(t, pid)
		})
		if _, err := p.Snapshot(context.Background(), sb, "", runbox.SnapshotOptions{}); err != nil {
			t.Fatal(err)
		}
		if thawed {
			t.Errorf("%s: a resume during the copy thawed the sandbox mid-copy", what)
		}
		wantDaemon(t, c, what+", after the snapshot", false)
		if !providertest.Runs(t, pid) {
			t.Errorf("%s: the sandbox resumed during the snapshot does not run after it", what)
		}
	}
}

// TestTwoSnapshotsAtOnce: a second snapshot starts while the first copies;
// the first one ending leaves the sandbox frozen for the second's copy
// (before, the second saw it paused, neither paused nor resumed it, and
// the first resumed it while the second still copied), and the sandbox
// runs once both are done.
func TestTwoSnapshotsAtOnce(t *testing.T) {
	needRootHost(t)
	p := newProvider(t)
	sb, c := create(t, p, runbox.SandboxSpec{})
	pid, execID := busyPid(t, c)
	defer c.Cancel(context.Background(), execID, runbox.NoGrace)
	secondCopying, firstDone := make(chan struct{}), make(chan struct{})
	secondDone := make(chan error, 1)
	thawed := false
	onCopy(t, func(name string) {
		switch name {
		case "first":
			go func() {
				_, err := p.Snapshot(context.Background(), sb, "second", runbox.SnapshotOptions{})
				secondDone <- err
			}()
			<-secondCopying
		case "second":
			close(secondCopying)
			<-firstDone
			thawed = !providertest.Frozen(t, pid)
		}
	})
	_, err := p.Snapshot(context.Background(), sb, "first", runbox.SnapshotOptions{})
	close(firstDone)
	if err != nil {
		t.Fatal(err)
	}
	if err := <-secondDone; err != nil {
		t.Fatal(err)
	}
	if thawed {
		t.Error("the first snapshot's end thawed the sandbox while the second one copied it")
	}
	wantDaemon(t, c, "after both snapshots", false)
	if !providertest.Runs(t, pid) {
		t.Error("the sandbox does not run after both snapshots")
	}
}

// snapshotterEnv makes the test binary a process that snapshots a sandbox
// (snapshotterMain) and is killed during the copy.
const snapshotterEnv = "RUNBOX_TEST_SNAPSHOTTER"

// snapshotter is what snapshotterEnv carries.
type snapshotter struct{ Home, Runboxd, Sandbox, Name string }

// snapshotterMain, in a process started with snapshotterEnv, snapshots
// the sandbox it names, says "copying" on stdout once the sandbox is
// frozen for the copy, and waits there to be killed. It reports whether
// it ran.
func snapshotterMain() bool {
	v := os.Getenv(snapshotterEnv)
	if v == "" {
		return false
	}
	var s snapshotter
	if err := json.Unmarshal([]byte(v), &s); err != nil {
		fmt.Println(err)
		os.Exit(1)
	}
	p := &local.Provider{Home: s.Home, Runboxd: s.Runboxd}
	sb, err := p.Get(context.Background(), s.Sandbox)
	if err != nil {
		fmt.Println(err)
		os.Exit(1)
	}
	local.SetSnapshotCopying(func(string) {
		fmt.Println("copying")
		select {}
	})
	_, err = p.Snapshot(context.Background(), sb, s.Name, runbox.SnapshotOptions{})
	fmt.Println("snapshot returned:", err)
	os.Exit(1)
	return true
}

// TestSnapshotterKilledDuringTheCopy: a process snapshotting a running
// sandbox is SIGKILLed during the copy; the sandbox runs again on its own
// (its hold ended with the process's connection), where before it stayed
// paused with no one to resume it. One killed while the user's pause
// stands leaves the sandbox paused.
func TestSnapshotterKilledDuringTheCopy(t *testing.T) {
	needRootHost(t)
	p := newProvider(t)
	sb, c := create(t, p, runbox.SandboxSpec{})
	pid, execID := busyPid(t, c)
	defer c.Cancel(context.Background(), execID, runbox.NoGrace)
	for _, pausedBefore := range []bool{false, true} {
		what := fmt.Sprintf("paused before: %v", pausedBefore)
		if pausedBefore {
			if err := c.Pause(context.Background()); err != nil {
				t.Fatal(err)
			}
		}
		v, _ := json.Marshal(snapshotter{Home: p.Home, Runboxd: p.Runboxd, Sandbox: sb.ID, Name: "killed-" + strconv.FormatBool(pausedBefore)})
		cmd := osexec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), snapshotterEnv+"="+string(v))
		cmd.Stderr = os.Stderr
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		line, err := bufio.NewReader(out).ReadString('\n')
		if line != "copying\n" {
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatalf("%s: the snapshotter said %q, %v", what, line, err)
		}
		if !providertest.Frozen(t, pid) {
			t.Errorf("%s: the sandbox runs during the copy", what)
		}
		if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		_ = cmd.Wait()
		if pausedBefore {
			// runboxd learns of the death when it reads its socket's end.
			if !poll(20*time.Second, func() bool { info, err := c.Info(context.Background()); return err == nil && info.Holds == 0 }) {
				t.Fatalf("%s: the killed snapshotter's hold stands", what)
			}
			wantDaemon(t, c, what+", snapshotter killed", true)
			if !providertest.Frozen(t, pid) {
				t.Errorf("%s: the user's pause did not outlast the killed snapshotter", what)
			}
			if err := c.Resume(context.Background()); err != nil {
				t.Fatal(err)
			}
		}
		if !providertest.Runs(t, pid) {
			t.Fatalf("%s: the sandbox stays frozen after its snapshotter was killed", what)
		}
		wantDaemon(t, c, what+", after", false)
	}
}

// snapshotRounds is how many rounds TestSnapshotsUnderPauseAndResume
// runs: RUNBOX_TEST_SNAPSHOT_ROUNDS, or 200.
func snapshotRounds() int {
	if n, err := strconv.Atoi(os.Getenv("RUNBOX_TEST_SNAPSHOT_ROUNDS")); err == nil && n > 0 {
		return n
	}
	return 200
}

// writerFiles are the files the writer rewrites, in its order: four in the
// workspace, four in the root layer (the snapshot's two copies).
var writerFiles = []string{"workspace/a", "workspace/b", "workspace/c", "workspace/d", "layer/opt/rbc/a", "layer/opt/rbc/b", "layer/opt/rbc/c", "layer/opt/rbc/d"}

// consistent checks the counters a snapshot holds of writerFiles: a
// freeze can land between two of the writer's writes, or inside one
// (after its truncation), so what a frozen sandbox shows is round i in a
// prefix of the files and round i-1 in the rest, with at most one file
// empty (the one being written). A copy made while the writer runs mixes
// rounds out of that order or further apart.
func consistent(vals []string) error {
	empty, prev, first := 0, -1, -1
	for i, v := range vals {
		if v == "" {
			empty++
			continue
		}
		n, err := strconv.Atoi(v)
		if err != nil {
			return fmt.Errorf("%s holds %q", writerFiles[i], v)
		}
		if first < 0 {
			first = n
		}
		if (prev >= 0 && n > prev) || first-n > 1 {
			return fmt.Errorf("the counters %q are not one freeze's", vals)
		}
		prev = n
	}
	if empty > 1 {
		return fmt.Errorf("the counters %q have %d half-written files", vals, empty)
	}
	return nil
}

// TestSnapshotsUnderPauseAndResume: a command rewrites eight files with
// one counter, without end, while, round after round, one or two
// snapshots are taken at random moments and another goroutine pauses and
// resumes the sandbox as its user would (through runboxd), at random
// moments too. Every snapshot must hold one freeze's counters (see
// consistent), and after each round the sandbox must be as the user's
// last pause or resume left it (runboxd's word and the writer's CPU
// ticks), with no hold left. Before holds, a resume during a copy tore
// the snapshot, a pause during one was undone, and two snapshots thawed
// each other's copies.
func TestSnapshotsUnderPauseAndResume(t *testing.T) {
	needRootHost(t)
	p := newProvider(t)
	sb, c := create(t, p, runbox.SandboxSpec{})
	marker := "writer-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	proc, err := c.Start(context.Background(), `exec sh -c 'mkdir -p /opt/rbc; i=0; while :; do i=$((i+1)); for f in a b c d; do echo $i > /workspace/$f; done; for f in a b c d; do echo $i > /opt/rbc/$f; done; done' `+marker)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Cancel(context.Background(), proc.ID(), runbox.NoGrace)
	var pid int
	if !poll(30*time.Second, func() bool { pid = findMarker(marker); return pid != 0 }) {
		t.Fatal("no writer on the host")
	}
	ws := sb.Detail["workdir"]
	if !poll(30*time.Second, func() bool { b, _ := os.ReadFile(filepath.Join(ws, "d")); return len(b) > 0 }) {
		t.Fatal("the writer does not write")
	}
	paused := false
	rounds := snapshotRounds()
	for round := range rounds {
		var wg sync.WaitGroup
		n := 1 + rand.IntN(2)
		snaps := make([]runbox.Snapshot, n)
		errs := make([]error, n)
		for i := range n {
			wg.Go(func() {
				time.Sleep(time.Duration(rand.IntN(20_000)) * time.Microsecond)
				snaps[i], errs[i] = p.Snapshot(context.Background(), sb, fmt.Sprintf("r%d-%d", round, i), runbox.SnapshotOptions{})
			})
		}
		ops := rand.IntN(4)
		var opErr error
		wg.Go(func() {
			for range ops {
				time.Sleep(time.Duration(rand.IntN(30_000)) * time.Microsecond)
				pause := rand.IntN(2) == 0
				if pause {
					opErr = c.Pause(context.Background())
				} else {
					opErr = c.Resume(context.Background())
				}
				if opErr != nil {
					return
				}
				paused = pause
			}
		})
		wg.Wait()
		if opErr != nil {
			t.Fatalf("round %d: %v", round, opErr)
		}
		for i := range n {
			if errs[i] != nil {
				t.Fatalf("round %d: snapshot %d: %v", round, i, errs[i])
			}
			dir := snaps[i].Detail["dir"]
			vals := make([]string, len(writerFiles))
			for j, f := range writerFiles {
				b, err := os.ReadFile(filepath.Join(dir, f))
				if err != nil {
					t.Fatalf("round %d: snapshot %s: %v", round, snaps[i].Name, err)
				}
				vals[j] = strings.TrimSpace(string(b))
			}
			if err := consistent(vals); err != nil {
				t.Errorf("round %d (%d snapshots, %d user ops): snapshot %s is torn: %v", round, n, ops, snaps[i].Name, err)
			}
			if err := p.RemoveSnapshot(context.Background(), snaps[i].Name); err != nil {
				t.Fatal(err)
			}
		}
		wantDaemon(t, c, fmt.Sprintf("round %d", round), paused)
		if paused && !providertest.Frozen(t, pid) {
			t.Errorf("round %d: the user's last word was pause, and the sandbox runs", round)
		}
		if !paused && !providertest.Runs(t, pid) {
			t.Errorf("round %d: the user's last word was resume (or none), and the sandbox is frozen", round)
		}
		if t.Failed() {
			t.Fatalf("stopped at round %d of %d", round, rounds)
		}
	}
}

// TestLsAndInspectSayHeld: a sandbox held frozen (as a snapshot's copy
// holds it) and not paused is "held" in runbox ls, with inspect's
// detail.held and daemon.holds saying how many holds; paused as well it
// is "paused" (the user's word) and still shows the hold; released and
// resumed it is "up" with neither.
func TestLsAndInspectSayHeld(t *testing.T) {
	needRootHost(t)
	p := newProvider(t)
	cliEnv(t, p)
	sb, c := create(t, p, runbox.SandboxSpec{})
	h, err := c.Hold(context.Background(), "test")
	if err != nil {
		t.Fatal(err)
	}
	defer h.Release()
	if st := providertest.LSStatus(t, cliOf(t), sb.ID); st != "held" {
		t.Errorf("ls of a held sandbox says %q, want held", st)
	}
	if detail, daemon := providertest.InspectHolds(t, cliOf(t), sb.ID); detail != "1" || daemon != 1 {
		t.Errorf("inspect of a held sandbox: detail.held %q, daemon.holds %d; want 1 and 1", detail, daemon)
	}
	if detail, daemon := providertest.InspectPaused(t, cliOf(t), sb.ID); detail != "" || daemon {
		t.Errorf("inspect of a held sandbox its user did not pause: detail.paused %q, daemon.paused %v; want neither", detail, daemon)
	}
	if code, _, errs := runCLI(t, "pause", sb.ID); code != 0 {
		t.Fatalf("runbox pause: exit %d: %s", code, errs)
	}
	if st := providertest.LSStatus(t, cliOf(t), sb.ID); st != "paused" {
		t.Errorf("ls of a held and paused sandbox says %q, want paused", st)
	}
	if detail, daemon := providertest.InspectHolds(t, cliOf(t), sb.ID); detail != "1" || daemon != 1 {
		t.Errorf("inspect of a held and paused sandbox: detail.held %q, daemon.holds %d; want 1 and 1", detail, daemon)
	}
	if code, _, errs := runCLI(t, "resume", sb.ID); code != 0 {
		t.Fatalf("runbox resume: exit %d: %s", code, errs)
	}
	if st := providertest.LSStatus(t, cliOf(t), sb.ID); st != "held" {
		t.Errorf("ls of a held sandbox resumed by its user says %q, want held", st)
	}
	if code, _, errs := runCLI(t, "exec", sb.ID, "--", "true"); code != 125 || !strings.Contains(errs, "retry") {
		t.Errorf("exec on a held sandbox: exit %d, stderr %q; want 125 saying to retry", code, errs)
	}
	if err := h.Release(); err != nil {
		t.Fatal(err)
	}
	if st := providertest.LSStatus(t, cliOf(t), sb.ID); st != "up" {
		t.Errorf("ls after the release says %q, want up", st)
	}
	if detail, daemon := providertest.InspectHolds(t, cliOf(t), sb.ID); detail != "" || daemon != 0 {
		t.Errorf("inspect after the release: detail.held %q, daemon.holds %d; want neither", detail, daemon)
	}
}
