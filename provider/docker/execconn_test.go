package docker

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	mrand "math/rand/v2"
	"net"
	"strings"
	"testing"
)

// frame encodes one frame of the engine's multiplexed stream.
func frame(stream byte, payload []byte) []byte {
	hdr := make([]byte, headerLen, headerLen+len(payload))
	hdr[0] = stream
	binary.BigEndian.PutUint32(hdr[4:], uint32(len(payload)))
	return append(hdr, payload...)
}

// pipeConn returns an execConn reading what the returned writer sends, over
// a real in-memory connection.
func pipeConn(t *testing.T) (*execConn, net.Conn) {
	t.Helper()
	a, b := net.Pipe()
	t.Cleanup(func() { a.Close(); b.Close() })
	return newExecConn(a, bufio.NewReader(a), nil, "test"), b
}

// TestExecConnDemux: stdout frames come out byte-exact whatever the frame
// and read sizes, interleaved stderr frames and empty frames are skipped,
// and the end of the stream is io.EOF carrying the proxy's stderr.
func TestExecConnDemux(t *testing.T) {
	c, w := pipeConn(t)
	rng := mrand.New(mrand.NewPCG(1, 2))
	want := make([]byte, 1<<20)
	for i := range want {
		want[i] = byte(rng.IntN(256))
	}
	go func() {
		defer w.Close()
		rng := mrand.New(mrand.NewPCG(3, 4))
		for off := 0; off < len(want); {
			n := min(len(want)-off, rng.IntN(70000))
			w.Write(frame(frameStdout, want[off:off+n]))
			off += n
			if rng.IntN(4) == 0 {
				w.Write(frame(frameStderr, []byte("warning\n")))
			}
		}
		w.Write(frame(frameStderr, []byte("proxy: dial unix /.runbox/run/runboxd.sock: connection refused\n")))
	}()
	var got bytes.Buffer
	buf := make([]byte, 1<<16)
	var end error
	for {
		n, err := c.Read(buf[:1+rng.IntN(len(buf)-1)])
		got.Write(buf[:n])
		if err != nil {
			end = err
			break
		}
	}
	if !bytes.Equal(got.Bytes(), want) {
		t.Errorf("read %d bytes, want %d (equal prefix %d)", got.Len(), len(want), commonPrefix(got.Bytes(), want))
	}
	if !errors.Is(end, io.EOF) || !strings.Contains(end.Error(), "connection refused") {
		t.Errorf("end of stream: %v; want io.EOF quoting the proxy's stderr", end)
	}
}

// TestExecConnEngineError: a system-error frame ends the stream with the
// engine's message; a truncated frame is io.ErrUnexpectedEOF.
func TestExecConnEngineError(t *testing.T) {
	c, w := pipeConn(t)
	go func() {
		w.Write(frame(frameStdout, []byte("ok")))
		w.Write(frame(frameSystem, []byte("exec failed")))
	}()
	buf := make([]byte, 10)
	if n, err := c.Read(buf); n != 2 || err != nil || string(buf[:n]) != "ok" {
		t.Fatalf("read %q, %v", buf[:n], err)
	}
	if _, err := c.Read(buf); err == nil || !strings.Contains(err.Error(), "exec failed") {
		t.Errorf("system frame: %v; want the engine's message", err)
	}

	c, w = pipeConn(t)
	go func() {
		w.Write(frame(frameStdout, []byte("abc"))[:headerLen+1])
		w.Close()
	}()
	if n, err := c.Read(buf); n != 1 || err != nil {
		t.Fatalf("read %d, %v", n, err)
	}
	if _, err := c.Read(buf); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("truncated frame: %v; want io.ErrUnexpectedEOF", err)
	}
}

func commonPrefix(a, b []byte) int {
	i := 0
	for i < len(a) && i < len(b) && a[i] == b[i] {
		i++
	}
	return i
}
