package main

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/client"
	"github.com/runbox/runbox/provider/docker"
	"github.com/runbox/runbox/provider/local"
)

// benchPause measures pause and resume of a sandbox with one exec running
// (a sleep, so the freezer has a process to freeze), through the Go API
// (the provider's Pauser where it is one, as the CLI does, else the
// sandbox's runboxd) and the CLI, each beside `exec true` the same way,
// interleaved round by round.
func (b *branchEnv) benchPause(ctx context.Context) (*LatencyReport, error) {
	id, err := b.up()
	if err != nil {
		return nil, err
	}
	defer b.rm(id)
	var p runbox.Provider
	switch b.provider {
	case "docker":
		dp := &docker.Provider{Home: b.cfg.home}
		defer dp.Close()
		p = dp
	default:
		p = &local.Provider{Home: b.cfg.home}
	}
	sb, err := p.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	var dial runbox.Dialer
	switch pp := p.(type) {
	case *docker.Provider:
		dial = pp.Dialer(sb)
	case *local.Provider:
		dial = pp.Dialer(sb)
	}
	c := client.New(dial, client.WithSandboxName(id))
	defer c.Close()
	// One exec running through the pauses, ended with the sandbox.
	bg := exec.Command(filepath.Join(b.cfg.bin, "runbox"), "exec", id, "--", "sleep", "100000")
	if err := bg.Start(); err != nil {
		return nil, err
	}
	defer func() { bg.Process.Kill(); bg.Wait() }()

	pause := func(on bool) error {
		if pp, ok := p.(runbox.Pauser); ok {
			if on {
				return pp.Pause(ctx, sb)
			}
			return pp.Resume(ctx, sb)
		}
		if on {
			return c.Pause(ctx)
		}
		return c.Resume(ctx)
	}
	timed := func(f func() error) func() (time.Duration, error) {
		return func() (time.Duration, error) {
			start := time.Now()
			err := f()
			return time.Since(start), err
		}
	}
	runbox := filepath.Join(b.cfg.bin, "runbox")
	cli := func(args ...string) func() (time.Duration, error) {
		return func() (time.Duration, error) { return timeCmd(append([]string{runbox}, args...)) }
	}
	// Each pause way is followed by its resume way in every round, so the
	// sandbox is running at the start of each round.
	ways := []*way{
		{name: "exec true (Go)", once: timed(func() error {
			res, err := c.Exec(ctx, "true")
			if err == nil && res.ExitCode != 0 {
				err = fmt.Errorf("exit %d", res.ExitCode)
			}
			return err
		})},
		{name: "pause (Go)", baseline: "exec true (Go)", once: timed(func() error { return pause(true) })},
		{name: "resume (Go)", baseline: "exec true (Go)", once: timed(func() error { return pause(false) })},
		{name: "runbox exec SB -- true", once: cli("exec", id, "--", "true")},
		{name: "runbox pause SB", baseline: "runbox exec SB -- true", once: cli("pause", id)},
		{name: "runbox resume SB", baseline: "runbox exec SB -- true", once: cli("resume", id)},
	}
	rounds, perRound := 10, 5
	if b.cfg.quick {
		rounds, perRound = 3, 3
	}
	// Warm up.
	for _, w := range ways {
		if _, err := w.once(); err != nil {
			return nil, fmt.Errorf("%s: %w", w.name, err)
		}
	}
	for range rounds {
		samples := make([][]float64, len(ways))
		// A pause and its resume alternate: pause, resume, pause, ...
		for k := 0; k < len(ways); k++ {
			w := ways[k]
			if strings.HasPrefix(w.name, "pause") || strings.HasPrefix(w.name, "runbox pause") {
				r := ways[k+1]
				for range perRound {
					for j, ww := range []*way{w, r} {
						d, err := ww.once()
						if err != nil {
							return nil, fmt.Errorf("%s: %w", ww.name, err)
						}
						samples[k+j] = append(samples[k+j], ms(d))
					}
				}
				k++
				continue
			}
			for range perRound {
				d, err := w.once()
				if err != nil {
					return nil, fmt.Errorf("%s: %w", w.name, err)
				}
				samples[k] = append(samples[k], ms(d))
			}
		}
		for k, w := range ways {
			w.perRound = append(w.perRound, samples[k])
		}
	}
	return latencyReport(ways, rounds, perRound), nil
}

// snapshotDisk is what the snapshot name takes on disk: its directory
// (local) or its image's own layer (docker).
func (b *branchEnv) snapshotDisk(name string) (int64, error) {
	if b.provider == "docker" {
		out, err := exec.Command("docker", "image", "inspect", "-f", "{{.GraphDriver.Data.UpperDir}}", docker.SnapshotRepo+"/"+name).Output()
		if err != nil {
			return 0, fmt.Errorf("docker image inspect %s: %w", name, err)
		}
		return du(strings.TrimSpace(string(out)))
	}
	return du(filepath.Join(b.cfg.home, "snapshots", name))
}

// sandboxDisk is what the sandbox id adds on disk: its state directory
// (local: its disk image's allocated blocks among them, after a sync;
// files that are hard links to the snapshot it was made from are the
// snapshot's, not counted) or its container's writable layer (docker).
func (b *branchEnv) sandboxDisk(id string) (int64, error) {
	// A local sandbox's writes reach its disk image through a loop
	// device's cache: flushed first, or the image looks empty.
	unix.Sync()
	detail, err := inspectDetail(b.runbox, id)
	if err != nil {
		return 0, err
	}
	if b.provider == "docker" {
		out, err := exec.Command("docker", "container", "inspect", "--size", "-f", "{{.SizeRw}}", detail["container"]).Output()
		if err != nil {
			return 0, fmt.Errorf("docker container inspect: %w", err)
		}
		return strconv.ParseInt(strings.TrimSpace(string(out)), 10, 64)
	}
	var shared map[inode]bool
	if snap := detail["snapshot"]; snap != "" {
		if shared, err = inodes(filepath.Join(b.cfg.home, "snapshots", snap)); err != nil {
			return 0, err
		}
	}
	return duExcept(detail["dir"], shared)
}

// inode names a file on this machine.
type inode struct{ dev, ino uint64 }

// inodes returns the inodes of the files (not directories) under dir.
func inodes(dir string) (map[inode]bool, error) {
	set := map[inode]bool{}
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		var st unix.Stat_t
		if err := unix.Lstat(path, &st); err != nil {
			return err
		}
		set[inode{st.Dev, st.Ino}] = true
		return nil
	})
	if err != nil && !os.IsNotExist(err) {
		return nil, fmt.Errorf("inodes of %s: %w", dir, err)
	}
	return set, nil
}

// baseBytes is what a full copy would take: the host's root (local) or
// the sandbox's image (docker).
func (b *branchEnv) baseBytes() int64 {
	if b.provider == "docker" {
		out, err := exec.Command("docker", "image", "inspect", "-f", "{{.Size}}", "runbox-test:busybox").Output()
		if err != nil {
			return 0
		}
		n, _ := strconv.ParseInt(strings.TrimSpace(string(out)), 10, 64)
		return n
	}
	return rootUsed()
}

// rootUsed is what the host's root filesystem holds (statfs).
func rootUsed() int64 {
	var st unix.Statfs_t
	if unix.Statfs("/", &st) != nil {
		return 0
	}
	return int64(st.Blocks-st.Bfree) * st.Bsize
}

// du is the disk the tree at dir takes, as du counts it: allocated blocks,
// a file with several hard links under dir counted once.
func du(dir string) (int64, error) { return duExcept(dir, nil) }

// duExcept is du of dir, leaving out the files in except (another tree's,
// which they are hard links to).
func duExcept(dir string, except map[inode]bool) (int64, error) {
	seen := map[inode]bool{}
	var n int64
	err := filepath.WalkDir(dir, func(path string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		var st unix.Stat_t
		if err := unix.Lstat(path, &st); err != nil {
			return err
		}
		if st.Nlink > 1 && st.Mode&unix.S_IFMT != unix.S_IFDIR {
			k := inode{st.Dev, st.Ino}
			if seen[k] || except[k] {
				return nil
			}
			seen[k] = true
		}
		n += st.Blocks * 512
		return nil
	})
	if err != nil && !os.IsNotExist(err) {
		return n, fmt.Errorf("du %s: %w", dir, err)
	}
	return n, nil
}
