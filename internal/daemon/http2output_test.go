package daemon_test

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"sync/atomic"
	"testing"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/client"
)

// chunkChecker collects what a client call delivers and fails the test on
// a sequence number that does not follow the last one delivered (after a
// gap: the gap's end).
type chunkChecker struct {
	t              *testing.T
	next           uint64 // 0 until the first chunk or gap
	outputs        int64
	stdout, stderr bytes.Buffer
	gaps           []runbox.OutputGap
}

func (c *chunkChecker) chunk(ch runbox.Chunk) {
	if c.next != 0 && ch.Seq != c.next {
		c.t.Errorf("output seq %d, want %d", ch.Seq, c.next)
	}
	c.next = ch.Seq + 1
	c.outputs++
	if ch.Stream == runbox.Stderr {
		c.stderr.Write(ch.Data)
	} else {
		c.stdout.Write(ch.Data)
	}
}

func (c *chunkChecker) gap(g runbox.OutputGap) {
	if c.next != 0 && g.FromSeq != c.next {
		c.t.Errorf("gap from seq %d, want %d", g.FromSeq, c.next)
	}
	c.next = g.ToSeq
	c.gaps = append(c.gaps, g)
}

// shutDown shuts the daemon down through c, waits for it to stop serving,
// and closes c.
func shutDown(t *testing.T, c *client.Client, served <-chan error) {
	t.Helper()
	defer c.Close()
	if err := c.Shutdown(testCtx(t), 0); err != nil {
		t.Errorf("shutdown: %v", err)
	}
	if err := <-served; err != nil {
		t.Errorf("serve: %v", err)
	}
}

// TestHTTP2RunBatchesReadyOutput runs a command that writes both streams
// at once through the Go client (HTTP/2) reading slower than the command:
// chunks gather in the ring, and runboxd must write each batch of ready
// Outputs at once (about a write per batch; through Connect's Send each
// Output took two, a 4 KiB DATA frame and the rest), every byte
// of each stream exact and in order, the sequence numbers consecutive, no
// gap. A second exec runs on the same connection meanwhile, as execs share
// it.
func TestHTTP2RunBatchesReadyOutput(t *testing.T) {
	var writes atomic.Int64
	_, socket, served := serveWrapped(t, func(ln net.Listener) net.Listener {
		return &writeCountingListener{Listener: ln, writes: &writes}
	})
	c := client.New(func(ctx context.Context) (net.Conn, error) {
		var d net.Dialer
		conn, err := d.DialContext(ctx, "unix", socket)
		if err != nil {
			return nil, err
		}
		return slowConn{conn}, nil
	})
	defer shutDown(t, c, served)
	ctx := testCtx(t)
	for round := range 3 {
		writes.Store(0)
		other := make(chan error, 1)
		var otherOutputs atomic.Int64
		go func() {
			var out bytes.Buffer
			_, err := c.Exec(ctx, "seq 1 50000", client.WithStdout(&out),
				client.WithOnChunk(func(runbox.Chunk) { otherOutputs.Add(1) }))
			if err == nil && !bytes.Equal(out.Bytes(), seqOutput(50000)) {
				err = fmt.Errorf("the other exec's stdout: %d bytes, or they differ", out.Len())
			}
			other <- err
		}()
		ck := &chunkChecker{t: t}
		res, err := c.Exec(ctx, "seq 1 700000 & seq 1 400000 >&2; wait",
			client.WithOnChunk(ck.chunk), client.WithOnGap(ck.gap))
		if err != nil {
			t.Fatal(err)
		}
		if err := <-other; err != nil {
			t.Fatal(err)
		}
		if res.ExitCode != 0 || res.StreamGaps != 0 || len(ck.gaps) != 0 {
			t.Fatalf("round %d: exit %d, %d gaps", round, res.ExitCode, res.StreamGaps)
		}
		if want := seqOutput(700000); !bytes.Equal(ck.stdout.Bytes(), want) {
			t.Fatalf("round %d: stdout: %d bytes, want %d, or they differ", round, ck.stdout.Len(), len(want))
		}
		if want := seqOutput(400000); !bytes.Equal(ck.stderr.Bytes(), want) {
			t.Fatalf("round %d: stderr: %d bytes, want %d, or they differ", round, ck.stderr.Len(), len(want))
		}
		// About a write per batch, so at most one per Output, against two
		// each before; besides, for both execs, up to about a dozen: the
		// connection's settings and pings, the headers, the started and
		// exited events, the end of each stream. Allow half a write more
		// per Output, as under the race detector the daemon, slowed more
		// than the client, makes smaller batches.
		outputs := ck.outputs + otherOutputs.Load()
		if n := writes.Load(); 2*n > 3*outputs+16 {
			t.Fatalf("round %d: runboxd made %d writes for %d Output events", round, n, outputs)
		}
		t.Logf("round %d: %d writes, %d Output events", round, writes.Load(), outputs)
	}
}

// TestHTTP2AttachReplaysGapThenOutput attaches through the Go client
// (HTTP/2) from sequence number 1 to an exec whose output overran the
// replay ring: the gap must come first, from seq 1, then every chunk still
// in the ring with consecutive sequence numbers, their bytes the end of
// the output; and from a sequence number in the ring, exactly what
// follows it.
func TestHTTP2AttachReplaysGapThenOutput(t *testing.T) {
	_, socket, served := serve(t)
	c := client.DialUnix(socket)
	defer shutDown(t, c, served)
	ctx := testCtx(t)
	const n = 1000000 // 6.9 MB: more than the ring keeps
	p, err := c.Start(ctx, "seq 1 1000000")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	all := seqOutput(n)
	ck := &chunkChecker{t: t}
	res, err := c.Attach(ctx, p.ID(), client.WithOnChunk(ck.chunk), client.WithOnGap(ck.gap))
	if err != nil {
		t.Fatal(err)
	}
	if len(ck.gaps) != 1 || ck.gaps[0].FromSeq != 1 || res.StreamGaps != 1 {
		t.Fatalf("gaps %+v (result counts %d), want one from seq 1", ck.gaps, res.StreamGaps)
	}
	lost := ck.gaps[0].Bytes
	if lost+int64(ck.stdout.Len()) != int64(len(all)) || !bytes.Equal(ck.stdout.Bytes(), all[lost:]) {
		t.Fatalf("%d bytes lost and %d replayed, want the rest of %d", lost, ck.stdout.Len(), len(all))
	}

	from := ck.gaps[0].ToSeq + 3
	tail := &chunkChecker{t: t, next: from}
	if _, err := c.Attach(ctx, p.ID(), client.WithFromSeq(from), client.WithOnChunk(tail.chunk),
		client.WithOnGap(tail.gap)); err != nil {
		t.Fatal(err)
	}
	if len(tail.gaps) != 0 || tail.outputs != ck.outputs-3 || !bytes.HasSuffix(all, tail.stdout.Bytes()) {
		t.Fatalf("from seq %d: %d gaps, %d outputs of %d, or bytes that do not end the output",
			from, len(tail.gaps), tail.outputs, ck.outputs)
	}
}
