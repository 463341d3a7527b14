package providertest

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/client"
)

// PushFiles is the number of files in the small-files push benchmark: the
// 581-file push a peer system took 803 s for, one file per call.
const PushFiles = 581

// BenchPushSmallFiles measures pushing PushFiles small files (a source tree
// of 20 directories, 200 B to 8 KiB each) into the sandbox c reaches, two
// ways in the same run so their ratio means something:
//
//   - sync: one Client.Sync of the tree into a fresh directory (a manifest
//     call, then every file in one tar stream);
//   - write-per-file: one Client.WriteFile call per file, through the same
//     API and connection.
//
// Each op pushes the whole tree; files-per-s is reported beside ns/op. Both
// run twice: into the sandbox's /tmp ("disk"), and into its /dev/shm
// ("tmpfs", skipped when it has none), which takes the file system's cost of
// creating files out of the comparison.
//
// With sameFS (the sandbox's paths are this machine's, as on the host
// provider) a third way runs beside them, create-floor: this process
// creates the same files in the same place itself (mkdir per directory,
// then open, write, close per file, the content already in memory), which is
// what the kernel charges for the tree before any transport, archive or
// hashing: no push can beat it.
func BenchPushSmallFiles(b *testing.B, c *client.Client, sameFS bool) {
	src := b.TempDir()
	var rels []string
	for i := range PushFiles {
		rel := fmt.Sprintf("pkg%02d/file%03d.go", i%20, i)
		p := filepath.Join(src, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			b.Fatal(err)
		}
		body := "package x\n// " + strings.Repeat("abcdefgh", 25+(i*37)%1000) + "\n"
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			b.Fatal(err)
		}
		rels = append(rels, rel)
	}
	ctx := context.Background()
	for _, fsys := range []struct{ name, dir string }{{"disk", "/tmp"}, {"tmpfs", "/dev/shm"}} {
		b.Run(fsys.name, func(b *testing.B) {
			if fi, err := c.Stat(ctx, fsys.dir, client.FollowLinks()); err != nil || !fi.IsDir() {
				b.Skipf("no %s in the sandbox: %v", fsys.dir, err)
			}
			benchPush(b, c, src, rels, fsys.dir+"/runbox-bench-push-"+randDigits(10), sameFS)
		})
	}
}

func benchPush(b *testing.B, c *client.Client, src string, rels []string, base string, sameFS bool) {
	ctx := context.Background()
	run := 0
	fresh := func() string {
		run++
		return fmt.Sprintf("%s/%d", base, run)
	}
	// Each run's tree is removed before the next, so a small tmpfs does
	// not fill up; removing is outside the timed part.
	clean := func(b *testing.B) {
		b.StopTimer()
		if err := c.Remove(ctx, base, client.Recursive()); err != nil && !errors.Is(err, runbox.ErrFileNotFound) {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	b.Cleanup(func() { c.Remove(context.Background(), base, client.Recursive()) })
	report := func(b *testing.B) {
		b.ReportMetric(float64(PushFiles*b.N)/b.Elapsed().Seconds(), "files/s")
	}
	b.Run("sync", func(b *testing.B) {
		for b.Loop() {
			st, err := c.Sync(ctx, client.Local(src), client.Remote(fresh()), client.SyncOptions{})
			if err != nil || st.Files != PushFiles {
				b.Fatalf("sync: %+v, %v", st, err)
			}
			clean(b)
		}
		report(b)
	})
	if sameFS {
		b.Run("create-floor", func(b *testing.B) {
			contents := make([][]byte, len(rels))
			dirs := map[string]bool{}
			for i, rel := range rels {
				data, err := os.ReadFile(filepath.Join(src, rel))
				if err != nil {
					b.Fatal(err)
				}
				contents[i] = data
				dirs[filepath.Dir(rel)] = true
			}
			for b.Loop() {
				dst := fresh()
				if err := os.MkdirAll(dst, 0o755); err != nil {
					b.Fatal(err)
				}
				for d := range dirs {
					if err := os.Mkdir(filepath.Join(dst, d), 0o755); err != nil {
						b.Fatal(err)
					}
				}
				for i, rel := range rels {
					f, err := os.OpenFile(filepath.Join(dst, rel), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
					if err != nil {
						b.Fatal(err)
					}
					_, err = f.Write(contents[i])
					if cerr := f.Close(); err == nil {
						err = cerr
					}
					if err != nil {
						b.Fatal(err)
					}
				}
				clean(b)
			}
			report(b)
		})
	}
	b.Run("write-per-file", func(b *testing.B) {
		for b.Loop() {
			dst := fresh()
			for _, rel := range rels {
				f, err := os.Open(filepath.Join(src, rel))
				if err != nil {
					b.Fatal(err)
				}
				_, err = c.WriteFile(ctx, dst+"/"+rel, f, client.WithPerm(fs.FileMode(0o644)))
				f.Close()
				if err != nil {
					b.Fatalf("write %s: %v", rel, err)
				}
			}
			clean(b)
		}
		report(b)
	})
}
