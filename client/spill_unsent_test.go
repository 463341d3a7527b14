package client_test

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/client"
)

// Through the daemon's Run handler and HTTP/2: a client that streams every
// byte as it comes gets no spill file, on disk or in its result, while the
// same output without a live stream is spilled whole.
func TestSpillUnsentFastReaderNoSpillFile(t *testing.T) {
	c := newClient(t)
	const size = 8 << 20
	for round := range 5 {
		var out bytes.Buffer
		res, err := c.Exec(testCtx(t), "head -c 8388608 /dev/zero", client.WithStdout(&out), client.WithSpill(runbox.SpillUnsent))
		if err != nil {
			t.Fatal(err)
		}
		if out.Len() != size || res.StdoutBytes != size || res.StreamGaps != 0 {
			t.Fatalf("round %d: streamed %d bytes, result counts %d, %d gaps", round, out.Len(), res.StdoutBytes, res.StreamGaps)
		}
		if res.StdoutSpill != "" || res.StdoutSpillOffset != 0 {
			t.Fatalf("round %d: spill %q at %d for a live reader", round, res.StdoutSpill, res.StdoutSpillOffset)
		}
		if files, _ := filepath.Glob(filepath.Join(os.TempDir(), "*", "spill", res.ID+".*")); len(files) > 0 {
			t.Fatalf("round %d: spill files on disk: %v", round, files)
		}
	}
	res, err := c.Exec(testCtx(t), "head -c 8388608 /dev/zero", client.WithSpill(runbox.SpillUnsent))
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(res.StdoutSpill); err != nil || fi.Size() != size || res.StdoutSpillOffset != 0 {
		t.Fatalf("no live stream: spill %q (%v) at %d; want all %d bytes from 0", res.StdoutSpill, err, res.StdoutSpillOffset, size)
	}
	// The check above looks where spill files are.
	if files, _ := filepath.Glob(filepath.Join(os.TempDir(), "*", "spill", res.ID+".*")); len(files) != 1 || files[0] != res.StdoutSpill {
		t.Fatalf("spill files %v; want the glob to find %s", files, res.StdoutSpill)
	}
	os.Remove(res.StdoutSpill)
}
