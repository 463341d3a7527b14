package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// The snapshot section (issue 32) measures branching on the local provider
// (as root) and docker: pause and resume beside `exec true`; the time and
// disk of a snapshot against the size of the sandbox's changes; fork to
// first exec beside `runbox up` to first exec and a full rebuild (up, then
// writing the same changes again). Each comparison is interleaved round by
// round with its baseline, reported as medians and the median of the
// per-round ratios. It writes snapshot.json in -out.

// Issue 32's goals.
const (
	goalPauseMs     = 10  // pause and resume each, through the Go API
	goalForkRatio   = 1.5 // fork to first exec against a plain up to first exec
	goalDiskPerData = 1.1 // a snapshot's disk against its changes (plus goalDiskSlack)
	goalDiskSlack   = 2 << 20
	forkChangeBytes = 100 << 20 // the prepared environment forks are made from
)

// SnapshotReport is the section's result, written to snapshot.json.
type SnapshotReport struct {
	Date    string  `json:"date"`
	Command string  `json:"command"`
	Machine Machine `json:"machine"`
	Full    bool    `json:"full"`
	// RootUsedBytes is what the host's root filesystem holds (statfs),
	// what a full copy of the root would cost.
	RootUsedBytes int64              `json:"root_used_bytes"`
	Providers     []SnapshotProvider `json:"providers"`
}

// SnapshotProvider is one provider's figures.
type SnapshotProvider struct {
	Provider string `json:"provider"`
	// BaseBytes is the base a full copy would cost: the host's root
	// (local) or the sandbox's image (docker).
	BaseBytes int64          `json:"base_bytes"`
	Pause     *LatencyReport `json:"pause"`
	Sizes     []SnapshotSize `json:"sizes"`
	Forks     []ForkRow      `json:"forks"`
	Goals     []Goal         `json:"goals"`
}

// SnapshotSize is the snapshot of a sandbox that wrote Changes bytes.
type SnapshotSize struct {
	Changes int64 `json:"changes_bytes"`
	Rounds  int   `json:"rounds"`
	// Snapshot is `runbox snapshot SB NAME`'s wall time (ms); Copy, its
	// baseline, is `cp` of a file of the same size on the host.
	Snapshot Stat `json:"snapshot_ms"`
	Copy     Stat `json:"host_cp_ms"`
	Ratio    Stat `json:"ratio_to_cp"`
	// Disk is what the snapshot takes on disk (du: blocks, hard-linked
	// data counted once), median over the rounds.
	Disk int64 `json:"disk_bytes"`
}

// ForkRow is fork to first exec of N sandboxes against N plain ups and N
// full rebuilds, started at once, to each sandbox's first exec (ms).
type ForkRow struct {
	N       int  `json:"n"`
	Rounds  int  `json:"rounds"`
	Fork    Stat `json:"fork_ms"`
	Up      Stat `json:"up_ms"`
	Rebuild Stat `json:"rebuild_ms"`
	// RatioUp and RatioRebuild: the median of the per-round ratios.
	RatioUp      Stat `json:"ratio_to_up"`
	RatioRebuild Stat `json:"ratio_to_rebuild"`
	// ForkDisk and UpDisk: the disk one new sandbox adds (du of its
	// state directory less the snapshot's files it links to, local; its
	// writable layer, docker), median.
	ForkDisk int64 `json:"fork_disk_bytes"`
	UpDisk   int64 `json:"up_disk_bytes"`
}

// Goal is one of the goals and whether this run met it.
type Goal struct {
	Goal string `json:"goal"`
	Got  string `json:"got"`
	Met  bool   `json:"met"`
}

// branchEnv runs the section's commands against one provider.
type branchEnv struct {
	cfg      *config
	provider string
	runbox   func(args ...string) (string, error)
	workdirs string // where each local sandbox gets an empty workspace
}

// upArgs are `runbox up`'s arguments for a fresh sandbox.
func (b *branchEnv) upArgs() ([]string, error) {
	args := []string{"up", "--provider", b.provider}
	if b.provider == "docker" {
		return append(args, "--image", "runbox-test:busybox", "--network", "none"), nil
	}
	wd, err := os.MkdirTemp(b.workdirs, "w.")
	if err != nil {
		return nil, err
	}
	return append(args, "--workdir", wd), nil
}

func (b *branchEnv) up() (string, error) {
	args, err := b.upArgs()
	if err != nil {
		return "", err
	}
	return b.runbox(args...)
}

// write makes the sandbox's changes: n bytes of random data in a new file.
func (b *branchEnv) write(id string, n int64) error {
	_, err := b.runbox("exec", id, "--", "sh", "-c",
		fmt.Sprintf("mkdir -p /opt/rbbench && head -c %d /dev/urandom > /opt/rbbench/changes.$$", n))
	return err
}

func (b *branchEnv) rm(ids ...string) {
	if len(ids) == 0 {
		return
	}
	if _, err := b.runbox(append([]string{"rm", "-f"}, ids...)...); err != nil {
		log.Printf("snapshot: cleanup: %v", err)
	}
}

// benchSnapshot runs the section and writes snapshot.json in cfg.out.
func benchSnapshot(ctx context.Context, cfg *config, env *sandboxes, full bool) (*SnapshotReport, error) {
	rep := &SnapshotReport{
		Date:          time.Now().UTC().Format(time.RFC3339),
		Command:       "go run ./bench " + strings.Join(os.Args[1:], " "),
		Machine:       machine(),
		Full:          full,
		RootUsedBytes: rootUsed(),
	}
	workdirs := filepath.Join(filepath.Dir(cfg.home), "sw")
	if err := os.MkdirAll(workdirs, 0o755); err != nil {
		return nil, err
	}
	for _, p := range cfg.snapProviders {
		b := &branchEnv{cfg: cfg, provider: p, runbox: env.runbox, workdirs: workdirs}
		probe, err := b.up()
		if err != nil {
			log.Printf("snapshot: no %s sandbox, its rows are left out: %v", p, err)
			continue
		}
		b.rm(probe)
		log.Printf("snapshot: %s", p)
		sp, err := b.run(ctx, full)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
		rep.Providers = append(rep.Providers, *sp)
	}
	rep.Machine.LoadAfter = loadavg()
	if err := writeJSON(cfg.out, "snapshot.json", rep); err != nil {
		return nil, err
	}
	return rep, nil
}

func (b *branchEnv) run(ctx context.Context, full bool) (*SnapshotProvider, error) {
	sp := &SnapshotProvider{Provider: b.provider, BaseBytes: b.baseBytes()}
	var err error
	log.Printf("snapshot: %s: pause and resume", b.provider)
	if sp.Pause, err = b.benchPause(ctx); err != nil {
		return nil, fmt.Errorf("pause: %w", err)
	}
	sizes := []int64{10 << 20, 100 << 20}
	if full {
		sizes = append(sizes, 1<<30)
	}
	for _, n := range sizes {
		log.Printf("snapshot: %s: snapshot of %d MiB of changes", b.provider, n>>20)
		row, err := b.benchSnapshotSize(n)
		if err != nil {
			return nil, fmt.Errorf("snapshot of %d MiB: %w", n>>20, err)
		}
		sp.Sizes = append(sp.Sizes, *row)
	}
	counts := []int{1, 10}
	if full {
		counts = append(counts, 50)
	}
	for _, n := range counts {
		log.Printf("snapshot: %s: fork of %d", b.provider, n)
		row, err := b.benchFork(n)
		if err != nil {
			return nil, fmt.Errorf("fork of %d: %w", n, err)
		}
		sp.Forks = append(sp.Forks, *row)
	}
	sp.Goals = goalsOf(sp)
	return sp, nil
}

// snapRounds is how many rounds a snapshot of n bytes, or a fork of n
// sandboxes, gets: the large ones take long.
func (b *branchEnv) snapRounds(large bool) int {
	switch {
	case b.cfg.quick || large:
		return 1
	default:
		return 3
	}
}

// benchSnapshotSize takes snapshots of fresh sandboxes that wrote n bytes,
// beside a host cp of as many bytes.
func (b *branchEnv) benchSnapshotSize(n int64) (*SnapshotSize, error) {
	blob := filepath.Join(b.workdirs, "blob")
	if err := exec.Command("sh", "-c", fmt.Sprintf("head -c %d /dev/urandom > %s", n, blob)).Run(); err != nil {
		return nil, fmt.Errorf("host blob: %w", err)
	}
	defer os.Remove(blob)
	rounds := b.snapRounds(n >= 1<<30)
	var snaps, cps, ratios, disks []float64
	for r := range rounds {
		id, err := b.up()
		if err != nil {
			return nil, err
		}
		if err := b.write(id, n); err != nil {
			b.rm(id)
			return nil, err
		}
		dst := blob + ".cp"
		cp, err := timeCmd([]string{"cp", "--reflink=never", blob, dst})
		os.Remove(dst)
		if err != nil {
			b.rm(id)
			return nil, err
		}
		name := fmt.Sprintf("rbb-%d-%d", n>>20, r)
		start := time.Now()
		_, err = b.runbox("snapshot", id, name)
		d := time.Since(start)
		b.rm(id)
		if err != nil {
			return nil, err
		}
		disk, err := b.snapshotDisk(name)
		if _, rerr := b.runbox("snapshot", "rm", name); rerr != nil {
			log.Printf("snapshot: cleanup: %v", rerr)
		}
		if err != nil {
			return nil, err
		}
		snaps, cps = append(snaps, ms(d)), append(cps, ms(cp))
		ratios = append(ratios, ms(d)/ms(cp))
		disks = append(disks, float64(disk))
		log.Printf("snapshot: %s: %d MiB round %d: snapshot %.0f ms (cp %.0f ms), disk %.1f MiB", b.provider, n>>20, r+1, ms(d), ms(cp), float64(disk)/(1<<20))
	}
	return &SnapshotSize{Changes: n, Rounds: rounds, Snapshot: stat(snaps), Copy: stat(cps), Ratio: stat(ratios), Disk: int64(stat(disks).Median)}, nil
}

// benchFork forks n sandboxes from a parent that wrote forkChangeBytes, to
// each one's first exec, beside n plain ups and n full rebuilds (up and
// writing the same bytes), all started at once, interleaved round by round.
func (b *branchEnv) benchFork(n int) (*ForkRow, error) {
	parent, err := b.up()
	if err != nil {
		return nil, err
	}
	defer b.rm(parent)
	if err := b.write(parent, forkChangeBytes); err != nil {
		return nil, err
	}
	rounds := b.snapRounds(n >= 50)
	var forks, ups, rebuilds, rUp, rRebuild, forkDisk, upDisk []float64
	for r := range rounds {
		f, fd, err := b.forkOnce(parent, n)
		if err != nil {
			return nil, fmt.Errorf("fork: %w", err)
		}
		u, ud, err := b.upOnce(n, false)
		if err != nil {
			return nil, fmt.Errorf("up: %w", err)
		}
		rb, _, err := b.upOnce(n, true)
		if err != nil {
			return nil, fmt.Errorf("rebuild: %w", err)
		}
		forks, ups, rebuilds = append(forks, ms(f)), append(ups, ms(u)), append(rebuilds, ms(rb))
		rUp, rRebuild = append(rUp, ms(f)/ms(u)), append(rRebuild, ms(f)/ms(rb))
		forkDisk, upDisk = append(forkDisk, float64(fd)), append(upDisk, float64(ud))
		log.Printf("snapshot: %s: fork of %d round %d: fork %.0f ms, up %.0f ms, rebuild %.0f ms; disk per fork %.1f MiB, per up %.1f MiB",
			b.provider, n, r+1, ms(f), ms(u), ms(rb), fd/(1<<20), ud/(1<<20))
	}
	return &ForkRow{N: n, Rounds: rounds, Fork: stat(forks), Up: stat(ups), Rebuild: stat(rebuilds),
		RatioUp: stat(rUp), RatioRebuild: stat(rRebuild),
		ForkDisk: int64(stat(forkDisk).Median), UpDisk: int64(stat(upDisk).Median)}, nil
}

// forkOnce times `runbox fork PARENT --count n` and a first exec on each
// fork (all at once), and returns the disk of one fork; it removes the
// forks and their snapshot.
func (b *branchEnv) forkOnce(parent string, n int) (time.Duration, float64, error) {
	start := time.Now()
	out, err := b.runbox("fork", parent, "--count", strconv.Itoa(n))
	ids := strings.Fields(out)
	defer func() {
		b.rm(ids...)
		b.rmForkSnapshots(parent)
	}()
	if err != nil {
		return 0, 0, err
	}
	if len(ids) != n {
		return 0, 0, fmt.Errorf("fork printed %d ids, want %d", len(ids), n)
	}
	if err := parallel(n, func(i int) error {
		_, err := b.runbox("exec", ids[i], "--", "true")
		return err
	}); err != nil {
		return 0, 0, err
	}
	d := time.Since(start)
	disk, err := b.sandboxDisk(ids[0])
	return d, float64(disk), err
}

// upOnce times n `runbox up` at once to each one's first exec, with the
// changes written again between the two when rebuild.
func (b *branchEnv) upOnce(n int, rebuild bool) (time.Duration, float64, error) {
	ids := make([]string, n)
	defer func() {
		var made []string
		for _, id := range ids {
			if id != "" {
				made = append(made, id)
			}
		}
		b.rm(made...)
	}()
	// The workspaces are made first: a fork's copies are made inside
	// its timing, but they are empty.
	argss := make([][]string, n)
	for i := range argss {
		var err error
		if argss[i], err = b.upArgs(); err != nil {
			return 0, 0, err
		}
	}
	start := time.Now()
	err := parallel(n, func(i int) error {
		id, err := b.runbox(argss[i]...)
		if err != nil {
			return err
		}
		ids[i] = id
		if rebuild {
			if err := b.write(id, forkChangeBytes); err != nil {
				return err
			}
		}
		_, err = b.runbox("exec", id, "--", "true")
		return err
	})
	d := time.Since(start)
	if err != nil {
		return 0, 0, err
	}
	disk, err := b.sandboxDisk(ids[0])
	return d, float64(disk), err
}

// rmForkSnapshots removes the snapshots fork made of parent.
func (b *branchEnv) rmForkSnapshots(parent string) {
	out, err := b.runbox("snapshot", "ls", "--json")
	if err != nil {
		log.Printf("snapshot: cleanup: %v", err)
		return
	}
	var ss []struct{ Name, Sandbox string }
	if err := json.Unmarshal([]byte(out), &ss); err != nil {
		log.Printf("snapshot: cleanup: %v", err)
		return
	}
	for _, s := range ss {
		if s.Sandbox == parent && strings.HasPrefix(s.Name, "fork-") {
			if _, err := b.runbox("snapshot", "rm", s.Name); err != nil {
				log.Printf("snapshot: cleanup: %v", err)
			}
		}
	}
}

// parallel runs f(0..n-1) at once and returns the first error.
func parallel(n int, f func(i int) error) error {
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = f(i)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// goalsOf says which of the goals the provider's figures meet.
func goalsOf(sp *SnapshotProvider) []Goal {
	var gs []Goal
	for _, w := range sp.Pause.Ways {
		if w.Name == "pause (Go)" || w.Name == "resume (Go)" {
			gs = append(gs, Goal{Goal: fmt.Sprintf("%s < %d ms", w.Name, goalPauseMs),
				Got: fmt.Sprintf("%.1f ms", w.Stat.Median), Met: w.Stat.Median < goalPauseMs})
		}
	}
	for _, f := range sp.Forks {
		gs = append(gs, Goal{Goal: fmt.Sprintf("fork of %d to first exec ≤ %.1f× up", f.N, goalForkRatio),
			Got: fmt.Sprintf("%.2f×", f.RatioUp.Median), Met: f.RatioUp.Median <= goalForkRatio})
	}
	for _, s := range sp.Sizes {
		gs = append(gs, Goal{Goal: fmt.Sprintf("snapshot disk ≈ its %s of changes", mib(s.Changes)),
			Got: fmt.Sprintf("%s (%.2f×, root %s)", mib(s.Disk), float64(s.Disk)/float64(s.Changes), mib(sp.BaseBytes)),
			Met: float64(s.Disk) <= goalDiskPerData*float64(s.Changes)+goalDiskSlack})
	}
	return gs
}

func mib(n int64) string {
	if n >= 10<<30 {
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	}
	return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
}

// printSnapshot writes the section's tables.
func printSnapshot(w io.Writer, rep *SnapshotReport) {
	fmt.Fprintf(w, "\nsnapshot (issue 32), load %s → %s; medians, (× baseline) the median of per-round ratios\n", rep.Machine.LoadBefore, rep.Machine.LoadAfter)
	for _, sp := range rep.Providers {
		fmt.Fprintf(w, "\n%s: pause and resume, %d rounds × %d, with one exec running\n", sp.Provider, sp.Pause.Rounds, sp.Pause.PerRound)
		fmt.Fprintln(w, "| way | ms (p10–p90) | × baseline |")
		fmt.Fprintln(w, "|---|---|---|")
		for _, l := range sp.Pause.Ways {
			r := ""
			if l.Ratio != nil {
				r = fmt.Sprintf("%.2f× %s", l.Ratio.Median, l.Baseline)
			}
			fmt.Fprintf(w, "| %s | %.1f (%.1f–%.1f) | %s |\n", l.Name, l.Stat.Median, l.Stat.P10, l.Stat.P90, r)
		}
		fmt.Fprintf(w, "\n%s: snapshot of a fresh sandbox's changes (base %s)\n", sp.Provider, mib(sp.BaseBytes))
		fmt.Fprintln(w, "| changes | rounds | runbox snapshot, ms | host cp, ms | × cp | disk | disk / changes | disk / base |")
		fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|")
		for _, s := range sp.Sizes {
			fmt.Fprintf(w, "| %s | %d | %.0f | %.0f | %.2f× | %s | %.2f | %.4f |\n", mib(s.Changes), s.Rounds, s.Snapshot.Median, s.Copy.Median, s.Ratio.Median,
				mib(s.Disk), float64(s.Disk)/float64(s.Changes), float64(s.Disk)/float64(sp.BaseBytes))
		}
		fmt.Fprintf(w, "\n%s: N sandboxes to each one's first exec, from a sandbox with %s of changes; ms\n", sp.Provider, mib(forkChangeBytes))
		fmt.Fprintln(w, "| N | rounds | fork | up | rebuild (up + changes) | fork × up | fork × rebuild | disk per fork | per up |")
		fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|")
		for _, f := range sp.Forks {
			fmt.Fprintf(w, "| %d | %d | %.0f | %.0f | %.0f | %.2f× | %.2f× | %s | %s |\n", f.N, f.Rounds, f.Fork.Median, f.Up.Median, f.Rebuild.Median,
				f.RatioUp.Median, f.RatioRebuild.Median, mib(f.ForkDisk), mib(f.UpDisk))
		}
		fmt.Fprintf(w, "\n%s: goals\n", sp.Provider)
		for _, g := range sp.Goals {
			met := "no"
			if g.Met {
				met = "yes"
			}
			fmt.Fprintf(w, "- %s: %s — met: %s\n", g.Goal, g.Got, met)
		}
	}
}
