package local_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/client"
	"github.com/runbox/runbox/internal/jail"
)

// homeUsage is what the files under dir take on disk, in bytes: allocated
// blocks, each inode counted once however many names it has (as du does).
func homeUsage(t *testing.T, dir string) int64 {
	t.Helper()
	type inode struct{ dev, ino uint64 }
	seen := map[inode]bool{}
	var n int64
	err := filepath.WalkDir(dir, func(path string, _ fs.DirEntry, err error) error {
		if err != nil {
			return nil // a file gone under the walk
		}
		var st syscall.Stat_t
		if syscall.Lstat(path, &st) != nil {
			return nil
		}
		if k := (inode{st.Dev, st.Ino}); !seen[k] {
			seen[k] = true
			n += st.Blocks * 512
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// mountOptions returns the per-mount options of the mount at target in
// process pid's mount namespace, or "" when there is none.
func mountOptions(t *testing.T, pid, target string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("/proc", pid, "mountinfo"))
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 5 && f[4] == target {
			return f[5]
		}
	}
	return ""
}

// fileID is a file's identity and the state a write would change.
type fileID struct {
	dev, ino uint64
	size     int64
	mtime    syscall.Timespec
	mode     uint32
	sum      string
}

func statFile(t *testing.T, path string) fileID {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Lstat(path, &st); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	return fileID{dev: st.Dev, ino: st.Ino, size: st.Size, mtime: st.Mtim, mode: st.Mode, sum: hex.EncodeToString(sum[:])}
}

// TestSnapshotLayersSharedUnderTheDiskBound: sandboxes made from a
// snapshot with the default disk bound (their own layer on a disk image of
// their own) stand on the snapshot's files themselves, not on copies: the
// file each one's FUSE server stacks is the snapshot's inode, and three of
// them add far less than one copy of a 32 MiB file to the home. The
// shared files are read-only to every sandbox: writes, chmod and touch in
// one copy the file up into its own layer, and the snapshot's file (its
// content, mode, mtime) and the other sandboxes are unchanged. The shared
// layer is not counted against the bound: a sandbox whose 40 MiB disk
// could not hold the 32 MiB file as well as 24 MiB of its own writes
// holds both, and is still refused past its bound. Removing the snapshot
// and a sandbox leaves the others reading the file. (Before, the layer
// was copied into each sandbox's disk image: EXDEV on the hard links.)
func TestSnapshotLayersSharedUnderTheDiskBound(t *testing.T) {
	needRootDisk(t)
	p := newProvider(t)
	ctx := context.Background()
	const blob = 32 << 20
	parent, pc := create(t, p, runbox.SandboxSpec{})
	run(t, pc, fmt.Sprintf("mkdir -p /opt/big && head -c %d /dev/urandom > /opt/big/blob && echo small > /opt/big/small && sha256sum /opt/big/blob | cut -d' ' -f1 > /opt/big/blob.sum", blob))
	snap, err := p.Snapshot(ctx, parent, "shared", runbox.SnapshotOptions{NoWorkspace: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Remove(ctx, parent, true); err != nil {
		t.Fatal(err)
	}
	layer := filepath.Join(snap.Detail["dir"], "layer", "opt", "big")
	before := statFile(t, filepath.Join(layer, "blob"))
	smallBefore := statFile(t, filepath.Join(layer, "small"))
	if before.size != blob {
		t.Fatalf("the snapshot's blob has %d bytes, want %d", before.size, blob)
	}
	syscall.Sync()
	base := homeUsage(t, p.Home)

	const n = 3
	sbs := make([]runbox.Sandbox, n)
	cls := make([]*client.Client, n)
	for i := range sbs {
		sbs[i], cls[i] = create(t, p, runbox.SandboxSpec{FromSnapshot: snap.Name})
		if sbs[i].Detail["disk"] == "" {
			t.Fatalf("sandbox %s has no disk bound; the test is of the default one", sbs[i].ID)
		}
		// (a) it sees the file, whole.
		if got := run(t, cls[i], "sha256sum /opt/big/blob | cut -d' ' -f1; cat /opt/big/blob.sum /opt/big/small"); got != before.sum+"\n"+before.sum+"\nsmall\n" {
			t.Errorf("sandbox %s reads %q, want the snapshot's blob (%s) and small", sbs[i].ID, got, before.sum)
		}
		// (c) the layer its FUSE server stacks holds the snapshot's inode.
		for _, path := range []string{
			filepath.Join(sbs[i].Detail["dir"], "snapshot-layers", "snapshot", "opt", "big", "blob"),
			filepath.Join("/proc", sbs[i].Detail["fuse_server_pid"], "root", jail.Scratch, "snapshots", "snapshot", "opt", "big", "blob"),
		} {
			var st syscall.Stat_t
			if err := syscall.Stat(path, &st); err != nil {
				t.Errorf("the stacked layer: %v", err)
			} else if got := (fileID{dev: st.Dev, ino: st.Ino}); got.dev != before.dev || got.ino != before.ino {
				t.Errorf("%s is inode %d on device %d, not the snapshot's (%d on %d): copied, not shared", path, got.ino, got.dev, before.ino, before.dev)
			}
		}
	}
	// The FUSE server has the shared layers on a read-only mount: even a
	// bug of its own cannot write them in place.
	for _, sb := range sbs {
		if opts := mountOptions(t, sb.Detail["fuse_server_pid"], jail.Scratch+"/snapshots"); !slices.Contains(strings.Split(opts, ","), "ro") {
			t.Errorf("sandbox %s's FUSE server has the snapshot layers mounted %q, want read-only", sb.ID, opts)
		}
	}
	// (b) three sandboxes cost the home far less than one copy of the blob.
	syscall.Sync()
	if grew := homeUsage(t, p.Home) - base; grew > blob/2 {
		t.Errorf("the home grew by %d bytes for %d sandboxes from a snapshot of %d bytes: the layer was copied", grew, n, blob)
	} else {
		t.Logf("the home grew by %d KiB for %d sandboxes from a snapshot of %d MiB", grew>>10, n, blob>>20)
	}

	// (d) one sandbox's writes, chmod and touch are its own.
	run(t, cls[0], "echo mine >> /opt/big/small && chmod 600 /opt/big/small && touch -d 2001-01-01 /opt/big/blob && dd if=/dev/zero of=/opt/big/blob bs=4096 count=1 conv=notrunc 2>/dev/null")
	if got := run(t, cls[0], "cat /opt/big/small; stat -c %a /opt/big/small; sha256sum /opt/big/blob | cut -d' ' -f1"); got == "small\nmine\n600\n"+before.sum+"\n" || !strings.HasPrefix(got, "small\nmine\n600\n") {
		t.Errorf("the writing sandbox reads back %q, want its own changes", got)
	}
	for i := 1; i < n; i++ {
		if got := run(t, cls[i], "cat /opt/big/small; stat -c %a /opt/big/small; sha256sum /opt/big/blob | cut -d' ' -f1"); got != "small\n644\n"+before.sum+"\n" {
			t.Errorf("sandbox %s sees another's writes: %q", sbs[i].ID, got)
		}
	}
	if after := statFile(t, filepath.Join(layer, "blob")); after != before {
		t.Errorf("a sandbox's write changed the snapshot's blob: %+v, was %+v", after, before)
	}
	if after := statFile(t, filepath.Join(layer, "small")); after != smallBefore {
		t.Errorf("a sandbox's write changed the snapshot's small file: %+v, was %+v", after, smallBefore)
	}

	// (e) the shared layer is outside the bound; the bound still holds.
	const bound = 40 << 20
	bsb, bc := create(t, p, runbox.SandboxSpec{FromSnapshot: snap.Name, Disk: bound})
	if got := allocated(t, filepath.Join(bsb.Detail["dir"], "disk.img")); got > blob/2 {
		t.Errorf("the bounded sandbox's disk image takes %d bytes at create: the snapshot's %d were copied into it", got, blob)
	}
	out := run(t, bc, "dd if=/dev/zero of=/var/tmp/own bs=1M count=24 2>&1; echo own=$?; dd if=/dev/zero of=/var/tmp/more bs=1M count=64 2>&1; echo more=$?; sha256sum /opt/big/blob | cut -d' ' -f1")
	if !strings.Contains(out, "own=0") || strings.Contains(out, "more=0") || !strings.Contains(out, "No space left on device") || !strings.HasSuffix(out, before.sum+"\n") {
		t.Errorf("a 40 MiB sandbox on a 32 MiB snapshot: 24 MiB of its own should fit, 64 more should not, and the blob should read whole:\n%s", out)
	}
	// Its disk is full: a write into the shared file must copy it up,
	// which fails, and never lands in the snapshot's inode.
	res := exec(t, bc, "echo over >> /opt/big/blob")
	if res.ExitCode == 0 {
		t.Errorf("an append to the shared blob succeeded in a full sandbox (it must copy 32 MiB up into a full disk)")
	}
	if after := statFile(t, filepath.Join(layer, "blob")); after != before {
		t.Errorf("a full sandbox's write changed the snapshot's blob: %+v, was %+v", after, before)
	}
	if got := allocated(t, filepath.Join(bsb.Detail["dir"], "disk.img")); got > bound {
		t.Errorf("the bounded sandbox's disk takes %d bytes on the host, more than its %d bound", got, bound)
	}

	// Removing the snapshot and a sandbox leaves the others working.
	if err := p.RemoveSnapshot(ctx, snap.Name); err != nil {
		t.Fatal(err)
	}
	if err := p.Remove(ctx, sbs[1], true); err != nil {
		t.Fatal(err)
	}
	for _, i := range []int{0, 2} {
		if got := run(t, cls[i], "cat /opt/big/blob.sum; sha256sum /opt/big/blob | cut -d' ' -f1"); !strings.HasPrefix(got, before.sum+"\n") {
			t.Errorf("sandbox %s after the snapshot and a sibling were removed: %q", sbs[i].ID, got)
		}
	}
}
