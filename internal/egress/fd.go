package egress

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/runbox/runbox"
	runboxv1 "github.com/runbox/runbox/gen/runbox/v1"
	"github.com/runbox/runbox/internal/fdpass"
)

// The services a host side names on an fd-passing connection to runboxd
// (internal/fdpass): where both share a kernel, a carried connection's
// socket travels over the unix socket between them and the kernel moves
// its bytes, instead of every byte crossing EgressService or
// ForwardService in protobuf messages.
const (
	// FDEgress is egress: runboxd offers each proxied connection, the
	// host side decides and dials, and runboxd then hands it the
	// command's socket, which the host side splices with the remote.
	FDEgress = "egress"
	// FDForward is one forwarded connection: runboxd dials the port in
	// the sandbox and hands that socket to the host side.
	FDForward = "forward"
)

// fdMsg is a frame's payload on an fd-passing connection.
type fdMsg struct {
	// Kind: "hello" (runboxd takes the service, or says why not in
	// Error), "offer" (a command's connection: with its socket for a
	// tunnel, without for a plain HTTP request), "forward" (the port to
	// forward to), "forwarded" (runboxd's answer: the socket it connected
	// there, or Error).
	Kind  string `json:"kind"`
	ID    uint64 `json:"id,omitempty"`
	Host  string `json:"host,omitempty"`
	Port  int    `json:"port,omitempty"`
	Via   string `json:"via,omitempty"`
	Error string `json:"error,omitempty"`
	// Data are the command's bytes runboxd read past its proxy request.
	Data []byte `json:"data,omitempty"`
}

func jsonMsg(m fdMsg) ([]byte, error) { return json.Marshal(m) }

func sendMsg(fc *fdpass.Conn, m fdMsg, conn *net.TCPConn) error {
	b, err := jsonMsg(m)
	if err != nil {
		return err
	}
	if conn != nil {
		return fc.SendConn(b, conn)
	}
	return fc.Send(b, -1)
}

// recvMsg reads one frame; a descriptor that came with it is the caller's.
func recvMsg(fc *fdpass.Conn) (fdMsg, *os.File, error) {
	var m fdMsg
	b, f, err := fc.Recv()
	if err != nil {
		return m, nil, err
	}
	if err := json.Unmarshal(b, &m); err != nil {
		if f != nil {
			f.Close()
		}
		return m, nil, fmt.Errorf("frame: %w", err)
	}
	return m, f, nil
}

// FDServer is runboxd's side of fd passing: the handler for the
// connections fdpass.Divert takes off runboxd's listener.
type FDServer struct {
	// Proxy is the egress proxy; nil refuses FDEgress (a sandbox without
	// a private network).
	Proxy *Proxy
	// Forward serves FDForward.
	Forward Forwarder
	// Log gets a line per refusal; nil discards.
	Log *slog.Logger
}

// Handle serves one diverted connection for service; it closes c.
func (s *FDServer) Handle(service string, c net.Conn) {
	log := s.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	uc, err := fdpass.UnixConn(c)
	if err != nil {
		log.Warn("fd passing refused", "err", err)
		c.Close()
		return
	}
	fc := fdpass.New(uc)
	defer fc.Close()
	switch {
	case service == FDEgress && s.Proxy != nil:
		s.Proxy.serveFD(fc)
	case service == FDForward:
		s.Forward.serveFD(fc)
	default:
		sendMsg(fc, fdMsg{Kind: "hello", Error: fmt.Sprintf("runboxd serves no %q over fd passing here", service)}, nil)
	}
}

// take removes connection id from the waiting ones and marks it taken; nil
// when none waits (it timed out, or was taken).
func (p *Proxy) take(id uint64) *pending {
	p.mu.Lock()
	pc := p.waiting[id]
	delete(p.waiting, id)
	p.mu.Unlock()
	if pc != nil {
		close(pc.taken)
	}
	return pc
}

// serveFD offers the proxy's connections to a host side over fc, as
// Listen does, but hands each tunnel's socket over with its offer,
// keeping no copy: the host side decides, dials, answers the command
// (CONNECT's 200 or 403, SOCKS5's reply) and splices, so one frame is all
// a connection costs here. Plain HTTP requests (one per connection,
// rewritten here) are offered without a socket and carried by Carry,
// which the host side calls for those.
func (p *Proxy) serveFD(fc *fdpass.Conn) {
	if err := sendMsg(fc, fdMsg{Kind: "hello"}, nil); err != nil {
		return
	}
	done := make(chan struct{})
	defer func() { fc.Close(); <-done }()
	go func() {
		// The host side sends nothing after its preface: a frame, a
		// descriptor above all, ends the connection.
		defer close(done)
		_, f, err := recvMsg(fc)
		if f != nil {
			f.Close()
		}
		if err == nil || f != nil {
			p.log.Warn("egress: the host side sent a frame (runboxd takes none); closing its connection")
		}
		fc.Close()
	}()
	for {
		select {
		case <-done:
			return
		case <-p.closed:
			return
		case pc := <-p.offered:
			if !p.offerFD(fc, pc) {
				return
			}
		}
	}
}

// offerFD offers pc to the host side, with its socket when it is a
// tunnel; false says fc failed.
func (p *Proxy) offerFD(fc *fdpass.Conn, pc *pending) bool {
	m := fdMsg{Kind: "offer", ID: pc.id, Host: pc.host, Port: pc.port, Via: pc.via}
	tc, ok := pc.conn.(*net.TCPConn)
	if pc.req != nil || !ok { // waits for Carry
		return sendMsg(fc, m, nil) == nil
	}
	if p.take(pc.id) == nil {
		return true // it timed out meanwhile, and was answered
	}
	m.Data = pc.buffered()
	if err := sendMsg(fc, m, tc); err != nil {
		p.refuse(pc, http.StatusServiceUnavailable, "runbox egress: the host side's connection failed: "+err.Error())
		return false
	}
	pc.conn.Close() // the host side's now
	return true
}

// buffered returns the command's bytes read past its proxy request.
func (pc *pending) buffered() []byte {
	b, _ := pc.br.Peek(pc.br.Buffered())
	out := append([]byte(nil), b...)
	if pc.raw != nil && pc.raw != pc.br {
		r, _ := pc.raw.Peek(pc.raw.Buffered())
		out = append(out, r...)
	}
	return out
}

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
	fc, err := w.conn(ctx)
	if err != nil {
		return fmt.Errorf("forward to port %d: %w", port, err)
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
		return fmt.Errorf("forward to port %d: %w", port, err)
	}
	timer := time.NewTimer(forwardDialTimeout + headerTimeout)
	defer timer.Stop()
	var a fdAnswer
	select {
	case a = <-ch:
	case <-ctx.Done():
		giveUp()
		return fmt.Errorf("forward to port %d: %w", port, ctx.Err())
	case <-timer.C:
		giveUp()
		return fmt.Errorf("forward to port %d: runboxd did not answer", port)
	}
	switch {
	case a.err != nil:
		return fmt.Errorf("forward to port %d: runboxd's answer: %w", port, a.err)
	case a.m.Error != "":
		if a.f != nil {
			a.f.Close()
		}
		return fmt.Errorf("forward to port %d: %s", port, a.m.Error)
	case a.f == nil:
		return fmt.Errorf("forward to port %d: runboxd answered without a socket", port)
	}
	sc, err := fdpass.TCPConn(a.f)
	if err != nil {
		return fmt.Errorf("forward to port %d: %w", port, err)
	}
	spliceConns(ctx, conn, sc)
	return nil
}

// ForwardConnFD is FDForwarder's Forward over a connection of its own,
// for a single forwarded connection. It closes conn.
func ForwardConnFD(ctx context.Context, dial runbox.Dialer, port int, conn net.Conn) error {
	w := &FDForwarder{Dial: dial}
	defer w.Close()
	return w.Forward(ctx, port, conn)
}

// spliceConns moves bytes both ways between a and b until both directions
// end (a direction's end half-closes its writer) and closes both. Between
// two TCP sockets, io.Copy is splice(2): no byte enters this process.
func spliceConns(ctx context.Context, a, b net.Conn) {
	defer a.Close()
	defer b.Close()
	stop := context.AfterFunc(ctx, func() { a.Close(); b.Close() })
	defer stop()
	done := make(chan struct{})
	go func() {
		defer close(done)
		if _, err := io.Copy(b, a); err != nil {
			a.Close()
			b.Close()
			return
		}
		closeWrite(b)
	}()
	if _, err := io.Copy(a, b); err != nil {
		a.Close()
		b.Close()
	} else {
		closeWrite(a)
	}
	<-done
}

// fdRemote is an allowed connection's remote end, dialled.
type fdRemote struct {
	conn net.Conn
	pol  Policy
	msg  *runboxv1.EgressListenResponse
}

// serveFD is Serve over an fd-passing connection.
func (h *Host) serveFD(ctx context.Context, ready func()) error {
	fc, err := fdpass.Dial(ctx, h.Dial, FDEgress)
	if err != nil {
		return fmt.Errorf("egress fd passing: %w", err)
	}
	defer fc.Close()
	stop := context.AfterFunc(ctx, func() { fc.Close() })
	defer stop()
	fc.SetReadDeadline(time.Now().Add(headerTimeout))
	hello, f, err := recvMsg(fc)
	if f != nil {
		f.Close()
		return fmt.Errorf("egress fd passing: %w: one came with runboxd's hello", fdpass.ErrHostileFD)
	}
	if err != nil {
		return fmt.Errorf("egress fd passing: runboxd's answer: %w", err)
	}
	if hello.Kind != "hello" || hello.Error != "" {
		return fmt.Errorf("egress fd passing: runboxd refused: %s", hello.Error)
	}
	fc.SetReadDeadline(time.Time{})
	if ready != nil {
		ready()
	}
	c, closeIdle := h.client() // plain HTTP requests go over Carry
	defer closeIdle()
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		m, f, err := recvMsg(fc)
		if err != nil {
			if errors.Is(err, fdpass.ErrHostileFD) {
				h.log().Warn("egress: runboxd broke the fd-passing protocol; its connection is closed", "err", err)
			}
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("egress fd passing: %w", err)
		}
		msg := &runboxv1.EgressListenResponse{Id: m.ID, Host: m.Host, Port: uint32(m.Port), Via: m.Via}
		log := h.log().With("host", m.Host, "port", m.Port, "via", m.Via)
		switch {
		case m.Kind != "offer":
			if f != nil {
				f.Close()
			}
			log.Warn("egress: runboxd sent an unexpected frame; its connection is closed", "kind", m.Kind, "fd", f != nil)
			return fmt.Errorf("egress fd passing: %w: a %q frame (descriptor: %v)", fdpass.ErrHostileFD, m.Kind, f != nil)
		case f == nil && m.Via == "http": // one rewritten request: carried over Carry
			wg.Add(1)
			go func() {
				defer wg.Done()
				h.carry(ctx, c, msg)
			}()
		case f == nil:
			log.Warn("egress: runboxd offered a tunnel without its socket; ignored")
		default:
			cmd, err := fdpass.TCPConn(f)
			if err != nil {
				log.Warn("egress refused", "rule", "runboxd's hand-over: "+err.Error())
				continue
			}
			// Not waited for: a passed connection is the host side's
			// and ends with ctx, not with this connection to runboxd.
			go h.decideFD(ctx, log, msg, cmd, m.Data)
		}
	}
}

// decideFD decides on a tunnel whose socket runboxd handed over, answers
// the command as runboxd would have, and splices the allowed ones.
func (h *Host) decideFD(ctx context.Context, log *slog.Logger, msg *runboxv1.EgressListenResponse, cmd *net.TCPConn, early []byte) {
	remote, pol, refusal := h.open(ctx, msg)
	cmd.SetWriteDeadline(time.Now().Add(headerTimeout))
	if refusal != "" {
		log.Warn("egress refused", "rule", refusal)
		answerRefusal(cmd, msg.GetVia(), http.StatusForbidden, refusal)
		cmd.Close()
		return
	}
	var err error
	switch msg.GetVia() {
	case "connect":
		_, err = io.WriteString(cmd, "HTTP/1.1 200 Connection established\r\n\r\n")
	case "socks5":
		err = socksReply(cmd, socksSucceeded)
	}
	cmd.SetWriteDeadline(time.Time{})
	if err != nil {
		cmd.Close()
		remote.Close()
		return
	}
	h.spliceFD(ctx, log, &fdRemote{conn: remote, pol: pol, msg: msg}, cmd, early)
}

// spliceFD splices the command's socket with the remote: the remote's
// bytes flow to the command at once (a server may speak first), the
// command's once the names in their first bytes have been checked as
// carry checks them.
func (h *Host) spliceFD(ctx context.Context, log *slog.Logger, r *fdRemote, cmd *net.TCPConn, early []byte) {
	defer cmd.Close()
	defer r.conn.Close()
	stop := context.AfterFunc(ctx, func() { cmd.Close(); r.conn.Close() })
	defer stop()
	log.Debug("egress carrying", "remote", r.conn.RemoteAddr().String(), "fd", true)
	toCmd := make(chan struct{})
	var refusing atomic.Bool // the command is about to be told why, not cut
	go func() {
		defer close(toCmd)
		_, err := io.Copy(cmd, r.conn)
		switch {
		case refusing.Load():
		case err != nil:
			cmd.Close()
			r.conn.Close()
		default:
			closeWrite(cmd)
		}
	}()
	defer func() { <-toCmd }()
	buf := make([]byte, 16<<10)
	recv := func() ([]byte, bool, error) {
		if len(early) > 0 {
			b := early
			early = nil
			return b, false, nil
		}
		n, err := cmd.Read(buf)
		if errors.Is(err, io.EOF) {
			return buf[:n], true, nil
		}
		return buf[:n], false, err
	}
	toCommand := func(b []byte) error {
		refusing.Store(true)
		r.conn.Close() // nothing more from the remote...
		<-toCmd        // ...nor being written to the command
		cmd.SetWriteDeadline(time.Now().Add(headerTimeout))
		_, err := cmd.Write(b)
		return err
	}
	data, ended, err := h.checkFirstBytes(log, r.pol, r.msg, recv, toCommand)()
	if err != nil {
		cmd.Close()
		return
	}
	if len(data) > 0 {
		if _, err := r.conn.Write(data); err != nil {
			cmd.Close()
			return
		}
	}
	if !ended {
		if _, err := io.Copy(r.conn, cmd); err != nil {
			cmd.Close()
			r.conn.Close()
			return
		}
	}
	closeWrite(r.conn)
}
