package providertest

import (
	"bytes"
	"context"
	"fmt"
	mrand "math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/client"
)

// testOutputSeparate: stdout and stderr stay apart and byte-exact, streamed
// and in the result, with sequence numbers across both.
func testOutputSeparate(t *testing.T, fx Fixture) {
	s := newSandbox(t, fx)
	var so, se bytes.Buffer
	res := s.exec(t, `printf 'out1\n'; printf 'err1\n' >&2; printf 'out2'; printf 'err2' >&2; printf '\377\000\r\n' >&2`,
		client.WithStdout(&so), client.WithStderr(&se))
	wantOut, wantErr := "out1\nout2", "err1\nerr2\xff\x00\r\n"
	if string(res.Stdout) != wantOut || string(res.Stderr) != wantErr || res.ExitCode != 0 {
		t.Errorf("result: %s; want stdout %q, stderr %q", describe(res), wantOut, wantErr)
	}
	if so.String() != wantOut || se.String() != wantErr {
		t.Errorf("streamed stdout %q, stderr %q; want %q, %q", so.String(), se.String(), wantOut, wantErr)
	}
	if res.StdoutBytes != int64(len(wantOut)) || res.StderrBytes != int64(len(wantErr)) || res.StdoutDropped != 0 || res.StderrDropped != 0 {
		t.Errorf("byte counts: stdout %d dropped %d, stderr %d dropped %d; want %d, 0, %d, 0",
			res.StdoutBytes, res.StdoutDropped, res.StderrBytes, res.StderrDropped, len(wantOut), len(wantErr))
	}

	wantOK(t, s.exec(t, "printf 'no trailing newline'"), "no trailing newline")

	var chunks []runbox.Chunk
	res = s.exec(t, `for i in 1 2 3; do echo out$i; echo err$i >&2; sleep 0.05; done`,
		client.WithOnChunk(func(c runbox.Chunk) {
			c.Data = append([]byte(nil), c.Data...)
			chunks = append(chunks, c)
		}))
	var streams [3]bytes.Buffer
	var last uint64
	for _, c := range chunks {
		if c.Seq <= last {
			t.Errorf("chunk seq %d after %d: sequence numbers must increase", c.Seq, last)
		}
		last = c.Seq
		if c.Stream != runbox.Stdout && c.Stream != runbox.Stderr {
			t.Fatalf("chunk %d has stream %v", c.Seq, c.Stream)
		}
		streams[c.Stream].Write(c.Data)
	}
	if streams[runbox.Stdout].String() != "out1\nout2\nout3\n" || streams[runbox.Stderr].String() != "err1\nerr2\nerr3\n" {
		t.Errorf("chunks: stdout %q stderr %q", streams[runbox.Stdout].String(), streams[runbox.Stderr].String())
	}
	if string(res.Stdout) != "out1\nout2\nout3\n" || string(res.Stderr) != "err1\nerr2\nerr3\n" {
		t.Errorf("result with chunk callback: %s", describe(res))
	}
}

// binaryOutput returns a command that writes total bytes of binary output
// built from seed (which it reads from stdin), and the bytes it writes. The
// seed's first 256 bytes are every byte value, the rest random; its length
// is prime, so its repetitions never line up with power-of-two chunk
// boundaries and a lost, doubled or reordered chunk shows.
func binaryOutput(total int) (command string, seed, want []byte) {
	const seedLen = 65521
	seed = make([]byte, seedLen)
	for i := range 256 {
		seed[i] = byte(i)
	}
	rng := mrand.NewChaCha8([32]byte{'r', 'u', 'n', 'b', 'o', 'x'})
	rng.Read(seed[256:])
	want = bytes.Repeat(seed, total/seedLen+1)[:total]
	command = fmt.Sprintf(`f=%s; cat > $f; i=0; while [ $i -lt %d ]; do cat $f; i=$((i+1)); done | head -c %d; rm -f $f`,
		tempPath("binary"), total/seedLen+1, total)
	return command, seed, want
}

// testOutputBinary: 10 MB of binary output with every byte value arrives
// byte-exact, streamed and in the result, and the default result keeps its
// exact head and tail.
func testOutputBinary(t *testing.T, fx Fixture) {
	s := newSandbox(t, fx)
	const total = 10_000_000
	cmd, seed, want := binaryOutput(total)

	var streamed bytes.Buffer
	res := s.exec(t, cmd, client.WithStdin(seed), client.WithStdout(&streamed), client.WithOutputLimits(16<<20, 16<<20))
	if res.ExitCode != 0 || len(res.Stderr) != 0 {
		t.Fatalf("binary output: %s", describe(res))
	}
	sameBytes(t, "streamed stdout", streamed.Bytes(), want)
	sameBytes(t, "result stdout (16 MiB limits)", res.Stdout, want)
	if res.StdoutBytes != total || res.StdoutDropped != 0 {
		t.Errorf("stdout bytes %d dropped %d; want %d, 0", res.StdoutBytes, res.StdoutDropped, total)
	}

	cmd, seed, want = binaryOutput(total)
	res = s.exec(t, cmd, client.WithStdin(seed))
	const head, tail = 32 << 10, 32 << 10
	if res.ExitCode != 0 {
		t.Fatalf("binary output, default limits: %s", describe(res))
	}
	sameBytes(t, "result stdout (default head+tail)", res.Stdout, append(want[:head:head], want[total-tail:]...))
	if res.StdoutBytes != total || res.StdoutDropped != total-head-tail {
		t.Errorf("stdout bytes %d dropped %d; want %d, %d", res.StdoutBytes, res.StdoutDropped, total, total-head-tail)
	}
}

// testOutputSlowReader: a client that consumes streamed output more slowly
// than the command writes it still gets every byte, because the command's
// output waits for it (flow control) instead of dropping what it has not
// read. 10 MB outruns every buffer on the way (the pipe, the replay ring, the
// transport's windows), so when the command exits the client is megabytes
// behind, and the output still in flight must not be evicted from under it.
func testOutputSlowReader(t *testing.T, fx Fixture) {
	s := newSandbox(t, fx)
	const total = 10_000_000
	cmd, seed, want := binaryOutput(total)
	w := &slowWriter{perByte: time.Second / (1 << 20)} // 1 MiB/s
	res := s.exec(t, cmd, client.WithStdin(seed), client.WithStdout(w))
	if res.ExitCode != 0 || res.StdoutBytes != total {
		t.Fatalf("binary output to a slow reader: %s, %d bytes", describe(res), res.StdoutBytes)
	}
	if res.StreamGaps != 0 || res.StreamLost != 0 {
		t.Errorf("a connected slow reader saw %d gaps (%d bytes lost)", res.StreamGaps, res.StreamLost)
	}
	// The daemon read every byte (StdoutBytes); each must reach the client.
	sameBytes(t, fmt.Sprintf("stdout streamed to a slow reader (result counts %d bytes)", res.StdoutBytes), w.buf.Bytes(), want)
}

// testOutputGapReported: attaching after the replay ring has moved on (the
// only way a stream can miss output) is reported, never silent: the result
// counts the gap and its bytes exactly, and the streamed bytes plus the lost
// ones are the whole output.
func testOutputGapReported(t *testing.T, fx Fixture) {
	s := newSandbox(t, fx)
	const total = 3 << 20 // three times the default ring
	ctx, cancel := context.WithTimeout(context.Background(), caseTimeout)
	defer cancel()
	p, err := s.c.Start(ctx, fmt.Sprintf("head -c %d /dev/zero", total))
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	if res, err := p.Wait(ctx); err != nil || res.StdoutBytes != total {
		t.Fatalf("wait: %v, %d bytes", err, res.StdoutBytes)
	}
	var streamed countWriter
	var gaps []runbox.OutputGap
	res, err := s.c.Attach(ctx, p.ID(), client.WithStdout(&streamed),
		client.WithOnGap(func(g runbox.OutputGap) { gaps = append(gaps, g) }))
	if err != nil {
		t.Fatalf("attach: %v", err)
	}
	if res.StreamGaps != 1 || len(gaps) != 1 || gaps[0].FromSeq != 1 {
		t.Fatalf("attach after the ring moved on: %d gaps reported (%+v), want one from seq 1", res.StreamGaps, gaps)
	}
	if res.StreamLost == 0 || int64(streamed)+res.StreamLost != total {
		t.Errorf("streamed %d + lost %d bytes, want %d in all", streamed, res.StreamLost, total)
	}
}

// countWriter counts the bytes written to it.
type countWriter int64

func (w *countWriter) Write(p []byte) (int, error) {
	*w += countWriter(len(p))
	return len(p), nil
}

// slowWriter is an io.Writer that takes perByte for each byte written.
type slowWriter struct {
	perByte time.Duration
	buf     bytes.Buffer
}

func (w *slowWriter) Write(p []byte) (int, error) {
	time.Sleep(time.Duration(len(p)) * w.perByte)
	return w.buf.Write(p)
}

// testOutputHuge: 1 GB of output keeps the daemon's memory bounded and the
// result counts what it dropped exactly.
func testOutputHuge(t *testing.T, fx Fixture) {
	s := newSandbox(t, fx)
	const (
		total   = 1_000_000_000
		head    = 32 << 10
		tail    = 32 << 10
		line    = "abcdefghi\n"
		rssKeep = 200 << 20
	)
	var rss0 int64
	if fx.DaemonRSS != nil {
		rss0 = fx.DaemonRSS(t, s.sb)
	}
	type outcome struct {
		res runbox.Result
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), caseTimeout)
		defer cancel()
		res, err := s.c.Exec(ctx, fmt.Sprintf("yes %s | head -c %d", strings.TrimSuffix(line, "\n"), total))
		done <- outcome{res, err}
	}()
	var (
		o       outcome
		maxRSS  int64
		samples int
	)
sample:
	for {
		select {
		case o = <-done:
			break sample
		case <-time.After(50 * time.Millisecond):
			if fx.DaemonRSS != nil {
				maxRSS = max(maxRSS, fx.DaemonRSS(t, s.sb))
				samples++
			}
		}
	}
	if o.err != nil {
		t.Fatalf("1 GB output: %v", o.err)
	}
	res := o.res
	if res.ExitCode != 0 {
		t.Errorf("1 GB output: %s", describe(res))
	}
	if res.StdoutBytes != total || res.StdoutDropped != total-head-tail {
		t.Errorf("stdout bytes %d dropped %d; want %d, %d", res.StdoutBytes, res.StdoutDropped, total, total-head-tail)
	}
	at := func(off int) byte { return line[off%len(line)] }
	want := make([]byte, 0, head+tail)
	for i := range head {
		want = append(want, at(i))
	}
	for i := total - tail; i < total; i++ {
		want = append(want, at(i))
	}
	sameBytes(t, "result stdout", res.Stdout, want)
	if fx.DaemonRSS == nil {
		t.Log("fixture has no DaemonRSS: memory bound not checked")
		return
	}
	t.Logf("daemon RSS %d MiB before, at most %d MiB in %d samples during 1 GB of output", rss0>>20, maxRSS>>20, samples)
	if samples == 0 {
		t.Errorf("no RSS sample taken during the exec")
	}
	if maxRSS > rssKeep {
		t.Errorf("daemon RSS reached %d MiB during 1 GB of output, want under %d MiB", maxRSS>>20, rssKeep>>20)
	}
}
