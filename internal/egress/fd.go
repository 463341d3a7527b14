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
	// Kind: "hello" (runboxd takes the service), "offer" (a command's
	// connection, for a verdict), "verdict" (the host side's), "conn"
	// (runboxd hands over a command's socket), "forward" (the port to
	// forward to), "forwarded" (its socket).
	Kind    string `json:"kind"`
	ID      uint64 `json:"id,omitempty"`
	Host    string `json:"host,omitempty"`
	Port    int    `json:"port,omitempty"`
	Via     string `json:"via,omitempty"`
	Refusal string `json:"refusal,omitempty"`
	Error   string `json:"error,omitempty"`
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
// Listen does, and takes its verdicts: a refusal is answered as Carry's
// is; an allowed connection is answered (CONNECT's 200, SOCKS5's
// success) and its socket handed to the host side, runboxd keeping no
// copy. Plain HTTP requests (one per connection, rewritten here) are
// carried by Carry still: the host side calls it for those.
func (p *Proxy) serveFD(fc *fdpass.Conn) {
	if err := sendMsg(fc, fdMsg{Kind: "hello"}, nil); err != nil {
		return
	}
	done := make(chan struct{})
	defer func() { fc.Close(); <-done }()
	go func() {
		defer close(done)
		for {
			m, f, err := recvMsg(fc)
			if f != nil { // runboxd takes no descriptor from the host side
				f.Close()
				p.log.Warn("egress: the host side sent a descriptor; closing its connection")
				fc.Close()
				return
			}
			if err != nil {
				fc.Close()
				return
			}
			if m.Kind != "verdict" {
				continue
			}
			if pc := p.take(m.ID); pc != nil {
				go p.handOver(fc, pc, m.Refusal)
			}
		}
	}()
	for {
		select {
		case <-done:
			return
		case <-p.closed:
			return
		case pc := <-p.offered:
			if err := sendMsg(fc, fdMsg{Kind: "offer", ID: pc.id, Host: pc.host, Port: pc.port, Via: pc.via}, nil); err != nil {
				return
			}
		}
	}
}

// handOver answers an allowed command and passes its socket to the host
// side, or answers a refusal.
func (p *Proxy) handOver(fc *fdpass.Conn, pc *pending, refusal string) {
	defer pc.conn.Close()
	fail := func(why string) { sendMsg(fc, fdMsg{Kind: "conn", ID: pc.id, Error: why}, nil) }
	if refusal != "" {
		p.refuse(pc, http.StatusForbidden, refusal)
		return
	}
	tc, ok := pc.conn.(*net.TCPConn)
	if !ok || pc.req != nil {
		fail("not a tunnel")
		p.refuse(pc, http.StatusBadGateway, "runbox egress: this connection cannot be handed over")
		return
	}
	pc.conn.SetWriteDeadline(time.Now().Add(headerTimeout))
	var err error
	switch pc.via {
	case "connect":
		_, err = io.WriteString(pc.conn, "HTTP/1.1 200 Connection established\r\n\r\n")
	case "socks5":
		err = socksReply(pc.conn, socksSucceeded)
	}
	pc.conn.SetWriteDeadline(time.Time{})
	if err != nil {
		fail(err.Error())
		return
	}
	if err := sendMsg(fc, fdMsg{Kind: "conn", ID: pc.id, Data: pc.buffered()}, tc); err != nil {
		p.log.Debug("egress: hand over", "err", err)
	}
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

// serveFD serves one FDForward request: the port, then runboxd's answer
// with the socket it connected there.
func (f Forwarder) serveFD(fc *fdpass.Conn) {
	fc.SetReadDeadline(time.Now().Add(headerTimeout))
	m, file, err := recvMsg(fc)
	if file != nil {
		file.Close()
		return
	}
	if err != nil || m.Kind != "forward" {
		return
	}
	if m.Port <= 0 || m.Port > 65535 {
		sendMsg(fc, fdMsg{Kind: "forwarded", Error: fmt.Sprintf("port %d: want 1 to 65535", m.Port)}, nil)
		return
	}
	var d net.Dialer
	ctx, cancel := context.WithTimeout(context.Background(), forwardDialTimeout)
	conn, err := d.DialContext(ctx, "tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(m.Port)))
	cancel()
	if err != nil {
		sendMsg(fc, fdMsg{Kind: "forwarded", Error: fmt.Sprintf("nothing answers on port %d in the sandbox: %v", m.Port, err)}, nil)
		return
	}
	defer conn.Close()
	sendMsg(fc, fdMsg{Kind: "forwarded"}, conn.(*net.TCPConn))
}

// ForwardConnFD is ForwardConn where runboxd shares this kernel and passes
// sockets: runboxd connects to port in the sandbox and hands that socket
// over a fresh connection from dial; the kernel splices it with conn. A
// runboxd that does not pass sockets is an error, not a fallback. It
// closes conn.
func ForwardConnFD(ctx context.Context, dial runbox.Dialer, port int, conn net.Conn) error {
	defer conn.Close()
	fc, err := fdpass.Dial(ctx, dial, FDForward)
	if err != nil {
		return fmt.Errorf("forward to port %d: %w", port, err)
	}
	defer fc.Close()
	if err := sendMsg(fc, fdMsg{Kind: "forward", Port: port}, nil); err != nil {
		return fmt.Errorf("forward to port %d: %w", port, err)
	}
	fc.SetReadDeadline(time.Now().Add(forwardDialTimeout + headerTimeout))
	stop := context.AfterFunc(ctx, func() { fc.Close() })
	m, f, err := recvMsg(fc)
	stop()
	switch {
	case err != nil:
		return fmt.Errorf("forward to port %d: runboxd's answer: %w", port, err)
	case m.Error != "":
		if f != nil {
			f.Close()
		}
		return fmt.Errorf("forward to port %d: %s", port, m.Error)
	case f == nil:
		return fmt.Errorf("forward to port %d: runboxd answered without a socket", port)
	}
	fc.Close()
	sc, err := fdpass.TCPConn(f)
	if err != nil {
		return fmt.Errorf("forward to port %d: %w", port, err)
	}
	spliceConns(ctx, conn, sc)
	return nil
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

// fdRemote is an allowed connection's remote end, dialled, waiting for
// runboxd to hand over the command's socket.
type fdRemote struct {
	conn  net.Conn
	pol   Policy
	msg   *runboxv1.EgressListenResponse
	timer *time.Timer
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
	var mu sync.Mutex
	remotes := map[uint64]*fdRemote{}
	var wg sync.WaitGroup
	defer wg.Wait()
	defer func() {
		mu.Lock()
		for id, r := range remotes {
			r.timer.Stop()
			r.conn.Close()
			delete(remotes, id)
		}
		mu.Unlock()
	}()
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
		case m.Kind == "offer" && f == nil:
			wg.Add(1)
			go func() {
				defer wg.Done()
				if m.Via == "http" { // one rewritten request: runboxd carries it over Carry
					h.carry(ctx, c, msg)
					return
				}
				remote, pol, refusal := h.open(ctx, msg)
				if refusal != "" {
					log.Warn("egress refused", "rule", refusal)
					sendMsg(fc, fdMsg{Kind: "verdict", ID: m.ID, Refusal: refusal}, nil)
					return
				}
				r := &fdRemote{conn: remote, pol: pol, msg: msg}
				mu.Lock()
				remotes[m.ID] = r
				// A hand-over that never comes must not hold the remote.
				r.timer = time.AfterFunc(headerTimeout, func() {
					mu.Lock()
					if remotes[m.ID] == r {
						delete(remotes, m.ID)
						remote.Close()
					}
					mu.Unlock()
				})
				mu.Unlock()
				if err := sendMsg(fc, fdMsg{Kind: "verdict", ID: m.ID}, nil); err != nil {
					fc.Close()
				}
			}()
		case m.Kind == "conn":
			mu.Lock()
			r := remotes[m.ID]
			delete(remotes, m.ID)
			mu.Unlock()
			if r != nil {
				r.timer.Stop()
			}
			if f == nil || r == nil {
				if f != nil {
					f.Close()
					log.Warn("egress: runboxd handed over a socket nobody allowed; closed", "id", m.ID)
				}
				if r != nil {
					r.conn.Close()
					log.Debug("egress: runboxd did not hand the connection over", "err", m.Error)
				}
				continue
			}
			log = h.log().With("host", r.msg.GetHost(), "port", r.msg.GetPort(), "via", r.msg.GetVia())
			cmd, err := fdpass.TCPConn(f)
			if err != nil {
				r.conn.Close()
				log.Warn("egress refused", "rule", "runboxd's hand-over: "+err.Error())
				continue
			}
			// Not waited for: a spliced connection is the host side's
			// and ends with ctx, not with this connection to runboxd.
			go h.spliceFD(ctx, log, r, cmd, m.Data)
		default:
			if f != nil {
				f.Close()
			}
			log.Warn("egress: runboxd sent an unexpected frame; its connection is closed", "kind", m.Kind, "fd", f != nil)
			return fmt.Errorf("egress fd passing: %w: a %q frame (descriptor: %v)", fdpass.ErrHostileFD, m.Kind, f != nil)
		}
	}
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
