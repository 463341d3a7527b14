package daemon_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/client"
	runboxv1 "github.com/runbox/runbox/gen/runbox/v1"
	"github.com/runbox/runbox/gen/runbox/v1/runboxv1connect"
	"github.com/runbox/runbox/internal/daemonauth"
	"github.com/runbox/runbox/internal/fdpass"
	"github.com/runbox/runbox/internal/frontrpc"
)

// writeCountingConn counts the Write calls the server makes on it.
type writeCountingConn struct {
	net.Conn
	writes *atomic.Int64
}

func (c writeCountingConn) Write(p []byte) (int, error) {
	c.writes.Add(1)
	return c.Conn.Write(p)
}

// TestHTTP1RunWritesEachOutputOnce runs a command through the front's
// HTTP/1 Run (package frontrpc) and checks that every byte of both streams
// arrives in order, with consecutive sequence numbers and no gap, and that
// runboxd made about one write per Output event: before the HTTP/1 output
// path, net/http's buffered, chunked writer made two to three per event.
func TestHTTP1RunWritesEachOutputOnce(t *testing.T) {
	var writes atomic.Int64
	_, socket, served := serveWrapped(t, func(ln net.Listener) net.Listener {
		return &writeCountingListener{Listener: ln, writes: &writes}
	})
	defer func() {
		c := client.DialUnix(socket)
		defer c.Close()
		if err := c.Shutdown(testCtx(t), 0); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		if err := <-served; err != nil {
			t.Errorf("serve: %v", err)
		}
	}()
	conn, err := net.Dial("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	s, err := frontrpc.Run(conn, runbox.ExecSpec{
		Command: "seq 1 300000; seq 1 2000 >&2; seq 300001 500000",
	}, true)
	if err != nil {
		t.Fatal(err)
	}
	stdout, stderr, outputs := readRun(t, s)
	var want bytes.Buffer
	for i := 1; i <= 500000; i++ {
		fmt.Fprintln(&want, i)
	}
	if !bytes.Equal(stdout, want.Bytes()) {
		t.Fatalf("stdout: %d bytes, want %d, or they differ", len(stdout), want.Len())
	}
	if want := seqOutput(2000); !bytes.Equal(stderr, want) {
		t.Fatalf("stderr: %d bytes, want %d, or they differ", len(stderr), len(want))
	}
	// Besides one write per Output: the headers with the started event,
	// the exited event, the end of the stream (its prefix and message).
	if n := writes.Load(); n > outputs+4 {
		t.Fatalf("runboxd made %d writes for %d Output events", n, outputs)
	}
	t.Logf("%d writes, %d Output events", writes.Load(), outputs)
}

// readRun reads a Run stream to its end and returns each stream's bytes
// and the count of Output events, failing on a gap, on a sequence number
// that does not follow the last, and on an exec that did not exit 0.
func readRun(t *testing.T, s *frontrpc.Stream) (stdout, stderr []byte, outputs int64) {
	t.Helper()
	var next uint64 = 1
	var result *runbox.Result
	for {
		ev, err := s.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		switch ev.Kind {
		case frontrpc.EventOutput:
			outputs++
			if ev.Seq != next {
				t.Fatalf("output seq %d, want %d", ev.Seq, next)
			}
			next++
			if ev.Stream == runbox.Stderr {
				stderr = append(stderr, ev.Data...)
			} else {
				stdout = append(stdout, ev.Data...)
			}
		case frontrpc.EventGap:
			t.Fatalf("a gap for the exec's own stream: %+v", ev.Gap)
		case frontrpc.EventExited:
			r := ev.Result
			result = &r
		}
	}
	if result == nil || result.ExitCode != 0 {
		t.Fatalf("result %+v", result)
	}
	return stdout, stderr, outputs
}

// seqOutput is what seq 1 n prints.
func seqOutput(n int) []byte {
	var b bytes.Buffer
	for i := 1; i <= n; i++ {
		fmt.Fprintln(&b, i)
	}
	return b.Bytes()
}

// slowConn reads at most 16 KiB at a time and yields the processor after
// each read: a client slower than the command.
type slowConn struct{ net.Conn }

func (c slowConn) Read(p []byte) (int, error) {
	runtime.Gosched()
	time.Sleep(50 * time.Microsecond)
	return c.Conn.Read(p[:min(len(p), 16<<10)])
}

// TestHTTP1RunBatchesReadyOutput runs a command that writes both streams
// at once to a client slower than the command: while runboxd waits for the
// client, chunks gather in the ring, and it must send every chunk ready
// together with one write (fewer writes than Output events; before the
// batches each Output event took a write of its own), every byte of each
// stream exact and in order, the sequence numbers consecutive, no gap.
func TestHTTP1RunBatchesReadyOutput(t *testing.T) {
	var writes atomic.Int64
	_, socket, served := serveWrapped(t, func(ln net.Listener) net.Listener {
		return &writeCountingListener{Listener: ln, writes: &writes}
	})
	defer func() {
		c := client.DialUnix(socket)
		defer c.Close()
		if err := c.Shutdown(testCtx(t), 0); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		if err := <-served; err != nil {
			t.Errorf("serve: %v", err)
		}
	}()
	for round := range 3 {
		writes.Store(0)
		conn, err := net.Dial("unix", socket)
		if err != nil {
			t.Fatal(err)
		}
		s, err := frontrpc.Run(slowConn{conn}, runbox.ExecSpec{
			Command: "seq 1 700000 & seq 1 400000 >&2; wait",
		}, true)
		if err != nil {
			t.Fatal(err)
		}
		stdout, stderr, outputs := readRun(t, s)
		conn.Close()
		if want := seqOutput(700000); !bytes.Equal(stdout, want) {
			t.Fatalf("round %d: stdout: %d bytes, want %d, or they differ", round, len(stdout), len(want))
		}
		if want := seqOutput(400000); !bytes.Equal(stderr, want) {
			t.Fatalf("round %d: stderr: %d bytes, want %d, or they differ", round, len(stderr), len(want))
		}
		// Besides the Outputs: the headers with the started event, the
		// exited event, the end of the stream.
		if n := writes.Load(); n-4 >= outputs {
			t.Fatalf("round %d: runboxd made %d writes for %d Output events", round, n, outputs)
		}
		t.Logf("round %d: %d writes, %d Output events", round, writes.Load(), outputs)
	}
}

type writeCountingListener struct {
	net.Listener
	writes      *atomic.Int64
	passThrough bool // the connections have NetConn (passThroughCountingConn)
}

func (l *writeCountingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	if l.passThrough {
		return passThroughCountingConn{Conn: c, writes: l.writes}, nil
	}
	return writeCountingConn{Conn: c, writes: l.writes}, nil
}

// TestHTTP1JSONRunKeepsConnectFraming runs a command through an HTTP/1 Run
// in Connect's JSON codec (the Python SDK's local mode): the HTTP/1 output
// path, which frames protobuf, must leave it to Connect, and every byte
// must arrive.
func TestHTTP1JSONRunKeepsConnectFraming(t *testing.T) {
	_, socket, served := serve(t)
	hc := &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", socket)
		},
	}}
	defer func() {
		hc.CloseIdleConnections()
		c := client.DialUnix(socket)
		defer c.Close()
		if err := c.Shutdown(testCtx(t), 0); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		if err := <-served; err != nil {
			t.Errorf("serve: %v", err)
		}
	}()
	msg := []byte(`{"spec":{"command":"seq 1 200000"},"streamOutput":true}`)
	body := append([]byte{0, 0, 0, 0, 0}, msg...)
	binary.BigEndian.PutUint32(body[1:5], uint32(len(msg)))
	req, err := http.NewRequestWithContext(testCtx(t), "POST", "http://runboxd"+runboxv1connect.RunboxServiceRunProcedure, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/connect+json")
	req.Header.Set("Connect-Protocol-Version", "1")
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/connect+json" {
		t.Fatalf("status %d, content type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	var stdout bytes.Buffer
	ended := false
	for !ended {
		var prefix [5]byte
		if _, err := io.ReadFull(resp.Body, prefix[:]); err != nil {
			t.Fatalf("read envelope: %v", err)
		}
		m := make([]byte, binary.BigEndian.Uint32(prefix[1:]))
		if _, err := io.ReadFull(resp.Body, m); err != nil {
			t.Fatalf("read envelope: %v", err)
		}
		if prefix[0]&2 != 0 {
			if string(m) != "{}" {
				t.Fatalf("end of stream %s", m)
			}
			ended = true
			continue
		}
		var ev runboxv1.ExecEvent
		if err := protojson.Unmarshal(m, &ev); err != nil {
			t.Fatalf("an event that is not Connect JSON: %v: %.100q", err, m)
		}
		stdout.Write(ev.GetOutput().GetData())
	}
	var want bytes.Buffer
	for i := 1; i <= 200000; i++ {
		fmt.Fprintln(&want, i)
	}
	if !bytes.Equal(stdout.Bytes(), want.Bytes()) {
		t.Fatalf("stdout: %d bytes, want %d, or they differ", stdout.Len(), want.Len())
	}
}

// passThroughCountingConn counts the Write calls made through it and,
// like daemonauth's connection, says with NetConn that it writes what it
// is given unchanged.
type passThroughCountingConn struct {
	net.Conn
	writes *atomic.Int64
}

func (c passThroughCountingConn) Write(p []byte) (int, error) {
	c.writes.Add(1)
	return c.Conn.Write(p)
}

func (c passThroughCountingConn) NetConn() net.Conn { return c.Conn }

// TestHTTP1RunWritesOutputToTheSocket serves through runboxd's own
// connection wrappers (daemonauth's handshake, fdpass's diversion) over a
// counting wrapper that passes writes through: the Output envelopes must
// go to the socket under them (a writev of each batch, each chunk from
// where it lies, no copy), so the wrappers see only the writes of the
// headers with the started event, the exited event and the end of the
// stream; every byte of both streams must arrive exact and in order, with
// consecutive sequence numbers. Before, each batch was copied into one
// buffer and written through every wrapper: a write through them per batch.
func TestHTTP1RunWritesOutputToTheSocket(t *testing.T) {
	secret, err := daemonauth.NewSecret()
	if err != nil {
		t.Fatal(err)
	}
	sum, err := daemonauth.ParseSum(daemonauth.Sum(secret))
	if err != nil {
		t.Fatal(err)
	}
	var writes atomic.Int64
	_, socket, served := serveWrapped(t, func(ln net.Listener) net.Listener {
		counted := &writeCountingListener{Listener: ln, writes: &writes, passThrough: true}
		return fdpass.Divert(daemonauth.Listen(counted, sum, nil), func(_ string, c net.Conn) { c.Close() })
	})
	dial := func() net.Conn {
		conn, err := net.Dial("unix", socket)
		if err != nil {
			t.Fatal(err)
		}
		authed, err := daemonauth.Handshake(testCtx(t), conn, secret)
		if err != nil {
			conn.Close()
			t.Fatal(err)
		}
		return authed
	}
	defer func() {
		c := client.New(daemonauth.Dialer(func(ctx context.Context) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", socket)
		}, secret))
		defer c.Close()
		if err := c.Shutdown(testCtx(t), 0); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		if err := <-served; err != nil {
			t.Errorf("serve: %v", err)
		}
	}()
	for round, slow := range []bool{false, true} {
		conn := dial()
		writes.Store(0)
		var rc net.Conn = conn
		if slow {
			rc = slowConn{conn} // batches of many chunks
		}
		s, err := frontrpc.Run(rc, runbox.ExecSpec{
			Command: "seq 1 300000; seq 1 2000 >&2; seq 300001 500000 & seq 1 400000 >&2; wait",
		}, true)
		if err != nil {
			t.Fatal(err)
		}
		stdout, stderr, outputs := readRun(t, s)
		conn.Close()
		if want := seqOutput(500000); !bytes.Equal(stdout, want) {
			t.Fatalf("round %d: stdout: %d bytes, want %d, or they differ", round, len(stdout), len(want))
		}
		if want := append(seqOutput(2000), seqOutput(400000)...); !bytes.Equal(stderr, want) {
			t.Fatalf("round %d: stderr: %d bytes, want %d, or they differ", round, len(stderr), len(want))
		}
		if n := writes.Load(); n > 4 || outputs < 10 {
			t.Fatalf("round %d: %d writes through the wrappers for %d Output events", round, n, outputs)
		}
		t.Logf("round %d: %d writes through the wrappers, %d Output events", round, writes.Load(), outputs)
	}
}
