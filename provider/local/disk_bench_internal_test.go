package local

import (
	"os"
	"testing"
)

// BenchmarkDiskSetup is what a sandbox's disk image adds to its create and
// remove, alone: a sparse image, mkfs.ext4, a loop device, a detached
// mount, then letting go of it and waiting for the loop device to be free.
// bound: the default bound's 10 GiB image; unbounded: the image of a FUSE
// root with --disk 0, as large as the filesystem of the temporary
// directory, mounted with discard.
//
//	go test -run '^$' -bench DiskSetup -benchtime 50x ./provider/local/
func BenchmarkDiskSetup(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("a disk image needs root (a loop-mounted filesystem)")
	}
	unbounded, err := unboundedDisk(os.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct {
		name    string
		size    int64
		discard bool
	}{{"bound", DefaultMaxDisk, false}, {"unbounded", unbounded, true}} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				dir, err := os.MkdirTemp("", "rbdisk")
				if err != nil {
					b.Fatal(err)
				}
				d, err := newDisk(dir, c.size, c.discard)
				if err != nil {
					b.Fatal(err)
				}
				d.Close()
				if err := releaseDisk(dir); err != nil {
					b.Fatal(err)
				}
				os.RemoveAll(dir)
			}
		})
	}
}
