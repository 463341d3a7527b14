package docker_test

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

	moby "github.com/moby/moby/client"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/internal/providertest"
	"github.com/runbox/runbox/provider/docker"
)

// The tests below put a user's pause or resume, or a second snapshot,
// into a snapshot's commit (docker.SetSnapshotCommitting), on both
// streams, and read the sandbox's state from a busy loop's CPU ticks in
// /proc. Before (Snapshot paused the container as its user does and
// resumed it after the commit) each failed: the pause was undone, the
// resume thawed the commit, the first of two snapshots thawed the
// second's commit.

// onCommit makes Snapshot call f when the snapshot name is held for its
// commit, until the test ends.
func onCommit(t *testing.T, f func(name string)) {
	docker.SetSnapshotCommitting(f)
	t.Cleanup(func() { docker.SetSnapshotCommitting(nil) })
}

// holdSandbox makes a sandbox running a busy loop and returns it with the
// loop's host pid.
func holdSandbox(t *testing.T, p *docker.Provider, cli *moby.Client, loop string) (runbox.Sandbox, int) {
	t.Helper()
	sb := create(t, p, runbox.SandboxSpec{})
	c := dial(t, p, sb)
	marker := fmt.Sprintf("busy%d", time.Now().UnixNano())
	if _, err := c.Start(context.Background(), "m="+marker[:4]+"; exec sh -c '"+loop+"' \"${m}"+marker[4:]+"\""); err != nil {
		t.Fatal(err)
	}
	return sb, waitPid(t, cli, sb, marker)
}

// snapName is a snapshot name of its own for sb (image names are the
// engine's, shared by every test), removed when the test ends.
func snapName(t *testing.T, p *docker.Provider, sb runbox.Sandbox, what string) string {
	name := "t" + strings.ToLower(sb.ID) + "-" + what
	t.Cleanup(func() { _ = p.RemoveSnapshot(context.Background(), name) })
	return name
}

// userPaused says whether the provider says sb is paused.
func userPaused(t *testing.T, p *docker.Provider, sb runbox.Sandbox) bool {
	t.Helper()
	got, err := p.Get(context.Background(), sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	return got.Detail["paused"] == "true"
}

// TestSnapshotHoldsAgainstPauseAndResume: on both streams, a pause during
// a snapshot's commit stands after it; a resume during it (of a running
// sandbox, or one paused before) does not thaw the commit and takes effect
// after it; and the second of two snapshots at once is not thawed by the
// first's end.
func TestSnapshotHoldsAgainstPauseAndResume(t *testing.T) {
	needEngine(t)
	cli := engine(t)
	for _, s := range streams {
		t.Run(s.name, func(t *testing.T) {
			p := newProvider(t, s.force)
			ctx := context.Background()
			sb, pid := holdSandbox(t, p, cli, "while :; do :; done")

			onCommit(t, func(string) {
				if err := p.Pause(ctx, sb); err != nil {
					t.Errorf("pause during the commit: %v", err)
				}
			})
			if _, err := p.Snapshot(ctx, sb, snapName(t, p, sb, "pause"), runbox.SnapshotOptions{}); err != nil {
				t.Fatal(err)
			}
			if !userPaused(t, p, sb) || !providertest.Frozen(t, pid) {
				t.Error("a pause during the commit did not stand after it")
			}
			if err := p.Resume(ctx, sb); err != nil {
				t.Fatal(err)
			}
			if !providertest.Runs(t, pid) {
				t.Fatal("the sandbox does not run after resume")
			}

			for _, pausedBefore := range []bool{false, true} {
				what := fmt.Sprintf("paused before: %v", pausedBefore)
				if pausedBefore {
					if err := p.Pause(ctx, sb); err != nil {
						t.Fatal(err)
					}
				}
				thawed := false
				resumed := make(chan error, 1)
				onCommit(t, func(string) {
					// A resume of a container frozen before the commit
					// waits for the commit: it is not waited for here.
					go func() { resumed <- p.Resume(ctx, sb) }()
					if !pausedBefore {
						if err := <-resumed; err != nil {
							t.Errorf("%s: resume during the commit: %v", what, err)
						}
					}
					thawed = !providertest.Frozen(t, pid)
				})
				if _, err := p.Snapshot(ctx, sb, snapName(t, p, sb, "resume-"+strconv.FormatBool(pausedBefore)), runbox.SnapshotOptions{}); err != nil {
					t.Fatal(err)
				}
				if pausedBefore {
					if err := <-resumed; err != nil {
						t.Errorf("%s: resume during the commit: %v", what, err)
					}
				}
				if thawed {
					t.Errorf("%s: a resume during the commit thawed the sandbox", what)
				}
				if userPaused(t, p, sb) || !providertest.Runs(t, pid) {
					t.Errorf("%s: the resume during the commit did not take effect after it", what)
				}
			}

			first, second := snapName(t, p, sb, "first"), snapName(t, p, sb, "second")
			secondCommitting, firstDone := make(chan struct{}), make(chan struct{})
			secondDone := make(chan error, 1)
			thawed := false
			onCommit(t, func(name string) {
				switch name {
				case first:
					go func() {
						_, err := p.Snapshot(ctx, sb, second, runbox.SnapshotOptions{})
						secondDone <- err
					}()
					<-secondCommitting
				case second:
					close(secondCommitting)
					<-firstDone
					thawed = !providertest.Frozen(t, pid)
				}
			})
			_, err := p.Snapshot(ctx, sb, first, runbox.SnapshotOptions{})
			close(firstDone)
			if err != nil {
				t.Fatal(err)
			}
			if err := <-secondDone; err != nil {
				t.Fatal(err)
			}
			if thawed {
				t.Error("the first snapshot's end thawed the sandbox while the second one committed it")
			}
			if !providertest.Runs(t, pid) {
				t.Error("the sandbox does not run after both snapshots")
			}
		})
	}
}

// TestSnapshotsUnderPauseAndResumeDocker: as local's
// TestSnapshotsUnderPauseAndResume, on the socket stream, fewer rounds (a
// commit takes the engine hundreds of milliseconds): four files in the
// root layer rewritten with one counter, one or two snapshots per round
// and a user pausing and resuming at random moments; every committed
// layer holds one freeze's counters and the sandbox ends each round as
// the user's last word left it.
func TestSnapshotsUnderPauseAndResumeDocker(t *testing.T) {
	needEngine(t)
	cli := engine(t)
	p := newProvider(t, false)
	ctx := context.Background()
	sb, pid := holdSandbox(t, p, cli, "mkdir -p /opt/rbc; i=0; while :; do i=$((i+1)); for f in a b c d; do echo $i > /opt/rbc/$f; done; done")
	rounds := 20
	if n, err := strconv.Atoi(os.Getenv("RUNBOX_TEST_SNAPSHOT_ROUNDS")); err == nil && n > 0 {
		rounds = n
	}
	paused := false
	for round := range rounds {
		var wg sync.WaitGroup
		n := 1 + rand.IntN(2)
		names := make([]string, n)
		errs := make([]error, n)
		for i := range n {
			names[i] = snapName(t, p, sb, fmt.Sprintf("r%d-%d", round, i))
			wg.Go(func() {
				time.Sleep(time.Duration(rand.IntN(50_000)) * time.Microsecond)
				_, errs[i] = p.Snapshot(ctx, sb, names[i], runbox.SnapshotOptions{})
			})
		}
		ops := rand.IntN(4)
		var opErr error
		wg.Go(func() {
			for range ops {
				time.Sleep(time.Duration(rand.IntN(100_000)) * time.Microsecond)
				pause := rand.IntN(2) == 0
				if pause {
					opErr = p.Pause(ctx, sb)
				} else {
					opErr = p.Resume(ctx, sb)
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
			img, err := cli.ImageInspect(ctx, docker.SnapshotRepo+"/"+names[i])
			if err != nil {
				t.Fatal(err)
			}
			upper := img.GraphDriver.Data["UpperDir"]
			var vals []string
			for _, f := range []string{"a", "b", "c", "d"} {
				b, err := os.ReadFile(filepath.Join(upper, "opt/rbc", f))
				if err != nil {
					t.Fatalf("round %d: snapshot %s: %v", round, names[i], err)
				}
				vals = append(vals, strings.TrimSpace(string(b)))
			}
			if err := consistentCounters(vals); err != nil {
				t.Errorf("round %d (%d snapshots, %d user ops): snapshot %s is torn: %v", round, n, ops, names[i], err)
			}
			_ = p.RemoveSnapshot(ctx, names[i])
		}
		if userPaused(t, p, sb) != paused {
			t.Errorf("round %d: the provider says paused %v, the user's last word was paused %v", round, !paused, paused)
		}
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
	if paused {
		_ = p.Resume(ctx, sb)
	}
}

// consistentCounters checks counters written in order by one writer: a
// freeze shows round i in a prefix and round i-1 in the rest, with at
// most one file empty (truncated, not yet written).
func consistentCounters(vals []string) error {
	empty, prev, first := 0, -1, -1
	for _, v := range vals {
		if v == "" {
			empty++
			continue
		}
		n, err := strconv.Atoi(v)
		if err != nil {
			return fmt.Errorf("a file holds %q", v)
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

// snapshotterEnv makes the test binary a process that snapshots a docker
// sandbox (snapshotterMain) and is killed during the commit.
const snapshotterEnv = "RUNBOX_TEST_DOCKER_SNAPSHOTTER"

// snapshotter is what snapshotterEnv carries.
type snapshotter struct {
	Home, Runboxd, Sandbox, Name string
	ForceExec                    bool
}

// snapshotterMain, in a process started with snapshotterEnv, snapshots
// the sandbox it names, says "committing" on stdout once the sandbox is
// held for the commit, and waits there to be killed. It reports whether
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
	p := &docker.Provider{Home: s.Home, Runboxd: s.Runboxd, ForceExecStream: s.ForceExec}
	sb, err := p.Get(context.Background(), s.Sandbox)
	if err != nil {
		fmt.Println(err)
		os.Exit(1)
	}
	docker.SetSnapshotCommitting(func(string) {
		fmt.Println("committing")
		select {}
	})
	_, err = p.Snapshot(context.Background(), sb, s.Name, runbox.SnapshotOptions{})
	fmt.Println("snapshot returned:", err)
	os.Exit(1)
	return true
}

// TestSnapshotterKilledDuringTheCommit: on both streams, a process
// snapshotting a running docker sandbox is SIGKILLed during the commit;
// the sandbox runs again on its own (its hold on runboxd ended with the
// process's connection). Before, Snapshot had frozen the container as a
// user's pause does, and it stayed frozen with no one to resume it.
func TestSnapshotterKilledDuringTheCommit(t *testing.T) {
	needEngine(t)
	cli := engine(t)
	for _, s := range streams {
		t.Run(s.name, func(t *testing.T) {
			p := newProvider(t, s.force)
			sb, pid := holdSandbox(t, p, cli, "while :; do :; done")
			v, _ := json.Marshal(snapshotter{Home: p.Home, Runboxd: p.Runboxd, Sandbox: sb.ID, Name: snapName(t, p, sb, "killed"), ForceExec: s.force})
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
			if line != "committing\n" {
				cmd.Process.Kill()
				cmd.Wait()
				t.Fatalf("the snapshotter said %q, %v", line, err)
			}
			if !providertest.Frozen(t, pid) {
				t.Error("the sandbox runs during the commit")
			}
			if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			_ = cmd.Wait()
			if !providertest.Runs(t, pid) {
				t.Fatal("the sandbox stays frozen after its snapshotter was killed")
			}
			if userPaused(t, p, sb) {
				t.Error("the provider says paused after the killed snapshotter")
			}
		})
	}
}
