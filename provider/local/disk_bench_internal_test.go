package local

import (
	"os"
	"testing"
)

// BenchmarkDiskSetup is what a sandbox's disk bound adds to its create and
// remove, alone: a 10 GiB sparse image, mkfs.ext4, a loop device, a
// detached mount, then letting go of it and waiting for the loop device to
// be free.
//
//	go test -run '^$' -bench DiskSetup -benchtime 50x ./provider/local/
func BenchmarkDiskSetup(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("a disk bound needs root (a loop-mounted filesystem)")
	}
	for b.Loop() {
		dir, err := os.MkdirTemp("", "rbdisk")
		if err != nil {
			b.Fatal(err)
		}
		d, err := newDisk(dir, DefaultMaxDisk, false)
		if err != nil {
			b.Fatal(err)
		}
		d.Close()
		if err := releaseDisk(dir); err != nil {
			b.Fatal(err)
		}
		os.RemoveAll(dir)
	}
}
