package egress

import (
	"context"
	"fmt"
	"net"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/internal/fdpass"
)

// serveFD serves FDForward requests on fc until it closes or the daemon
// stops: for each, the port and an id; runboxd connects to the port and
// answers with that id and the socket (or why not), so one kept
// connection serves every forwarded connection of a caller.
func (f Forwarder) serveFD(fc *fdpass.Conn) {
	var wg sync.WaitGroup
	defer wg.Wait()
	done := make(chan struct{})
	defer close(done)
	go func() {
		select {
		case <-f.Stop:
			fc.Close()
		case <-done:
		}
	}()
	for {
		m, file, err := recvMsg(fc)
		if file != nil { // runboxd takes no descriptor from the caller
			file.Close()
			return
		}
		if err != nil || m.Kind != "forward" {
			return
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			f.forwardFD(fc, m)
		}()
	}
}

// forwardFD connects to the port m names and answers with its socket.
func (f Forwarder) forwardFD(fc *fdpass.Conn, m fdMsg) {
	answer := fdMsg{Kind: "forwarded", ID: m.ID}
	if m.Port <= 0 || m.Port > 65535 {
		answer.Error = fmt.Sprintf("port %d: want 1 to 65535", m.Port)
		sendMsg(fc, answer, nil)
		return
	}
	var d net.Dialer
	ctx, cancel := context.WithTimeout(context.Background(), forwardDialTimeout)
	conn, err := d.DialContext(ctx, "tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(m.Port)))
	cancel()
	if err != nil {
		answer.Error = fmt.Sprintf("nothing answers on port %d in the sandbox: %v", m.Port, err)
		sendMsg(fc, answer, nil)
		return
	}
	defer conn.Close() // the caller's once sent
	sendMsg(fc, answer, conn.(*net.TCPConn))
}

// FDForwarder forwards connections to ports in one sandbox whose runboxd
// shares this kernel: over one kept fd-passing connection (opened at the
// first Forward, opened again after it breaks), runboxd connects to the
// port in the sandbox and passes that socket, which Forward splices with
// the caller's connection. A runboxd that does not pass sockets is an
// error, never a fall back to ForwardService. Close it when done.
type FDForwarder struct {
	// Dial opens an authenticated connection to the sandbox's runboxd
	// over a unix socket on this kernel.
	Dial runbox.Dialer

	mu      sync.Mutex
	fc      *fdpass.Conn
	next    uint64
	waiting map[uint64]chan fdAnswer
	closed  bool
}

// fdAnswer is runboxd's answer to one forward request.
type fdAnswer struct {
	m   fdMsg
	f   *os.File
	err error
}

// conn returns the kept connection, opening it when there is none.
func (w *FDForwarder) conn(ctx context.Context) (*fdpass.Conn, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return nil, net.ErrClosed
	}
	if w.fc != nil {
		return w.fc, nil
	}
	fc, err := fdpass.Dial(ctx, w.Dial, FDForward)
	if err != nil {
		return nil, err
	}
	if w.waiting == nil {
		w.waiting = map[uint64]chan fdAnswer{}
	}
	w.fc = fc
	go w.read(fc)
	return fc, nil
}

// read hands runboxd's answers to the Forward calls waiting for them;
// when fc fails, every waiting call fails with it.
func (w *FDForwarder) read(fc *fdpass.Conn) {
	for {
		m, f, err := recvMsg(fc)
		w.mu.Lock()
		if err != nil {
			if w.fc == fc {
				w.fc = nil
			}
			for id, ch := range w.waiting {
				ch <- fdAnswer{err: err}
				delete(w.waiting, id)
			}
			w.mu.Unlock()
			fc.Close()
			return
		}
		ch := w.waiting[m.ID]
		delete(w.waiting, m.ID)
		w.mu.Unlock()
		if ch == nil { // nobody asked, or gave up waiting
			if f != nil {
				f.Close()
			}
			continue
		}
		ch <- fdAnswer{m: m, f: f}
	}
}

// Close closes the kept connection; Forward calls waiting for an answer
// fail, connections already spliced go on.
func (w *FDForwarder) Close() error {
	w.mu.Lock()
	w.closed = true
	fc := w.fc
	w.fc = nil
	w.mu.Unlock()
	if fc != nil {
		return fc.Close()
	}
	return nil
}

// Forward carries conn, a connection the caller accepted, to port on the
// sandbox's loopback, and returns when both directions have ended. It
// closes conn.
func (w *FDForwarder) Forward(ctx context.Context, port int, conn net.Conn) error {
	defer conn.Close()
	sc, err := w.DialPort(ctx, port)
	if err != nil {
		return err
	}
	spliceConns(ctx, conn, sc)
	return nil
}

// DialPort connects to port on the sandbox's loopback: runboxd connects and
// passes the socket, checked to be a connected TCP socket before it is
// returned. The caller owns the connection (serve's port route speaks
// HTTP over it).
func (w *FDForwarder) DialPort(ctx context.Context, port int) (*net.TCPConn, error) {
	fc, err := w.conn(ctx)
	if err != nil {
		return nil, fmt.Errorf("forward to port %d: %w", port, err)
	}
	ch := make(chan fdAnswer, 1)
	w.mu.Lock()
	w.next++
	id := w.next
	w.waiting[id] = ch
	w.mu.Unlock()
	giveUp := func() {
		w.mu.Lock()
		delete(w.waiting, id)
		w.mu.Unlock()
		select { // an answer that came meanwhile
		case a := <-ch:
			if a.f != nil {
				a.f.Close()
			}
		default:
		}
	}
	if err := sendMsg(fc, fdMsg{Kind: "forward", ID: id, Port: port}, nil); err != nil {
		giveUp()
		fc.Close()
		return nil, fmt.Errorf("forward to port %d: %w", port, err)
	}
	timer := time.NewTimer(forwardDialTimeout + headerTimeout)
	defer timer.Stop()
	var a fdAnswer
	select {
	case a = <-ch:
	case <-ctx.Done():
		giveUp()
		return nil, fmt.Errorf("forward to port %d: %w", port, ctx.Err())
	case <-timer.C:
		giveUp()
		return nil, fmt.Errorf("forward to port %d: runboxd did not answer", port)
	}
	switch {
	case a.err != nil:
		return nil, fmt.Errorf("forward to port %d: runboxd's answer: %w", port, a.err)
	case a.m.Error != "":
		if a.f != nil {
			a.f.Close()
		}
		return nil, fmt.Errorf("forward to port %d: %s", port, a.m.Error)
	case a.f == nil:
		return nil, fmt.Errorf("forward to port %d: runboxd answered without a socket", port)
	}
	sc, err := fdpass.TCPConn(a.f)
	if err != nil {
		return nil, fmt.Errorf("forward to port %d: %w", port, err)
	}
	return sc, nil
}

// ForwardConnFD is FDForwarder's Forward over a connection of its own,
// for a single forwarded connection. It closes conn.
func ForwardConnFD(ctx context.Context, dial runbox.Dialer, port int, conn net.Conn) error {
	w := &FDForwarder{Dial: dial}
	defer w.Close()
	return w.Forward(ctx, port, conn)
}
