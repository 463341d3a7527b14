package frontrpc_test

import (
	"context"
	"errors"
	"io"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/internal/daemon"
	"github.com/runbox/runbox/internal/frontrpc"
	"github.com/runbox/runbox/internal/supervisor"
)

// serve runs runboxd's API (supervisor and daemon server) in this process
// on a unix socket, and returns the socket and when it started.
func serve(t *testing.T) (socket string, started time.Time) {
	t.Helper()
	dir := t.TempDir()
	started = time.Now()
	sup, err := supervisor.New(supervisor.Config{Dir: dir, Version: "test"})
	if err != nil {
		t.Fatal(err)
	}
	socket = filepath.Join(dir, "runboxd.sock")
	ln, err := daemon.Listen(socket)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- daemon.NewServer(sup, nil).Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		<-served
	})
	return socket, started
}

func dial(t *testing.T, socket string) net.Conn {
	t.Helper()
	c, err := net.Dial("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// TestAttachAfterARunLeftOff: a Run stream left after some output, then
// an Attach from the next sequence number on a new connection, show every
// line once and the exec's status; Info says when runboxd started; an
// Attach to an unknown exec is runboxd's exec-not-found answer, which
// unwraps to runbox.ErrExecNotFound.
func TestAttachAfterARunLeftOff(t *testing.T) {
	socket, before := serve(t)
	spec := runbox.ExecSpec{ID: "left-off", Command: "for i in $(seq 1 50); do echo line $i; sleep 0.01; done; exit 7"}
	s, err := frontrpc.Run(dial(t, socket), spec, true)
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	var last uint64
	for last < 5 {
		ev, err := s.Next()
		if err != nil {
			t.Fatalf("run: %v", err)
		}
		if ev.Kind == frontrpc.EventOutput {
			out.Write(ev.Data)
			last = ev.Seq
		}
	}
	// The Run's connection stays open, unread: the Attach is a second
	// follower, as after a break the daemon has not noticed yet.
	a, err := frontrpc.Attach(dial(t, socket), spec.ID, true, last+1)
	if err != nil {
		t.Fatal(err)
	}
	var res runbox.Result
	for done := false; !done; {
		ev, err := a.Next()
		if err != nil {
			t.Fatalf("attach: %v", err)
		}
		switch ev.Kind {
		case frontrpc.EventOutput:
			if ev.Seq <= last {
				t.Fatalf("attach from %d replayed chunk %d", last+1, ev.Seq)
			}
			out.Write(ev.Data)
			last = ev.Seq
		case frontrpc.EventExited:
			res, done = ev.Result, true
		}
	}
	var want strings.Builder
	for i := 1; i <= 50; i++ {
		want.WriteString("line " + strconv.Itoa(i) + "\n")
	}
	if out.String() != want.String() || res.ExitCode != 7 {
		t.Errorf("run then attach: exit %d, output %q; want exit 7 and each line once", res.ExitCode, out.String())
	}

	up, err := frontrpc.Info(dial(t, socket))
	if err != nil || up.Before(before.Add(-time.Second)) || up.After(time.Now()) {
		t.Errorf("info: started at %v (%v); want between %v and now", up, err, before)
	}

	u, err := frontrpc.Attach(dial(t, socket), "no-such-exec", true, 1)
	if err == nil {
		_, err = u.Next()
	}
	if !errors.Is(err, runbox.ErrExecNotFound) {
		t.Errorf("attach to an unknown exec: %v; want runbox.ErrExecNotFound", err)
	}
}

// TestBufferedKeepsEarlierData reads a Run stream of a command that writes
// much faster than it is read (the reader pauses after each read) as the
// front shows output: the Data of Output events are kept, not copied,
// while Buffered says the next envelope is read already, and joined only
// before a Next that may read. Every byte must come out exact and in
// order, so Buffered never says yes when Next then moves the buffer; and
// some events must have been kept together.
func TestBufferedKeepsEarlierData(t *testing.T) {
	socket, _ := serve(t)
	s, err := frontrpc.Run(pausingConn{dial(t, socket)}, runbox.ExecSpec{Command: "seq 1 400000"}, true)
	if err != nil {
		t.Fatal(err)
	}
	var shown, want strings.Builder
	var kept [][]byte
	most := 0
	show := func() {
		for _, b := range kept {
			shown.Write(b)
		}
		most = max(most, len(kept))
		kept = kept[:0]
	}
	for {
		if !s.Buffered() {
			show()
		}
		ev, err := s.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if ev.Kind == frontrpc.EventOutput {
			kept = append(kept, ev.Data)
		}
	}
	show()
	for i := 1; i <= 400000; i++ {
		want.WriteString(strconv.Itoa(i) + "\n")
	}
	if shown.String() != want.String() {
		t.Fatalf("shown %d bytes, want %d, or they differ", shown.Len(), want.Len())
	}
	if most < 2 {
		t.Fatalf("never more than %d events kept together", most)
	}
	t.Logf("up to %d events kept together", most)
}

// pausingConn sleeps briefly before each read, so the daemon's writes
// gather in the socket.
type pausingConn struct{ net.Conn }

func (c pausingConn) Read(p []byte) (int, error) {
	time.Sleep(2 * time.Millisecond)
	return c.Conn.Read(p)
}
