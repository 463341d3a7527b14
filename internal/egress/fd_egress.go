package egress

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	runboxv1 "github.com/runbox/runbox/gen/runbox/v1"
	"github.com/runbox/runbox/internal/fdpass"
)

// take removes connection id from the waiting ones and marks it taken; nil
// when none waits (it timed out, or was taken).
func (p *Proxy) take(id uint64) *pending {
	p.mu.Lock()
	pc := p.waiting[id]
	delete(p.waiting, id)
	p.mu.Unlock()
	if pc != nil {
		close(pc.taken)
		p.pending.leave() // decided now: the host side has it
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
		case <-p.refusedWake:
			if n := p.takeRefused(); n > 0 {
				if err := sendMsg(fc, fdMsg{Kind: "refused", Count: n}, nil); err != nil {
					p.refused.Add(n) // for the next host side
					return
				}
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
	defer p.held.leave()
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
		case m.Kind == "refused" && f == nil: // runboxd's count of the ones it refused past a bound
			r := &Refusal{Rule: fmt.Sprintf("%s: runboxd refused them before offering them (the sandbox had %d connections undecided or %d open)", RuleTooManyConnections, MaxPending, MaxConns)}
			h.refusedBound(log, r, "runboxd", max(m.Count, 1))
		case m.Kind != "offer":
			if f != nil {
				f.Close()
			}
			log.Warn("egress: runboxd sent an unexpected frame; its connection is closed", "kind", m.Kind, "fd", f != nil)
			return fmt.Errorf("egress fd passing: %w: a %q frame (descriptor: %v)", fdpass.ErrHostileFD, m.Kind, f != nil)
		case f == nil && m.Via == "http": // one rewritten request: carried over Carry
			if r := h.admit(msg); r != nil {
				h.refusedBound(log, r, m.Via, 1)
				h.refuseCarry(ctx, c, msg, r)
				continue
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer h.carried.leave()
				h.carry(ctx, c, msg)
			}()
		case f == nil:
			log.Warn("egress: runboxd offered a tunnel without its socket; ignored")
		default:
			cmd, err := fdpass.TCPConn(f)
			if err != nil {
				h.refused(log, &Refusal{Host: m.Host, Port: m.Port, Rule: "runboxd's hand-over: " + err.Error()}, m.Via)
				continue
			}
			if r := h.admit(msg); r != nil {
				h.refusedBound(log, r, m.Via, 1)
				answerNow(cmd, m.Via, r.Rule)
				continue
			}
			// Not waited for: a passed connection is the host side's
			// and ends with ctx, not with this connection to runboxd.
			go func() {
				defer h.carried.leave()
				h.decideFD(ctx, log, msg, cmd, m.Data)
			}()
		}
	}
}

// decideFD decides on a tunnel whose socket runboxd handed over, answers
// the command as runboxd would have, and splices the allowed ones.
func (h *Host) decideFD(ctx context.Context, log *slog.Logger, msg *runboxv1.EgressListenResponse, cmd *net.TCPConn, early []byte) {
	remote, pol, r := h.open(ctx, msg)
	h.deciding.leave()
	cmd.SetWriteDeadline(time.Now().Add(headerTimeout))
	if r != nil {
		h.refused(log, r, msg.GetVia())
		answerRefusal(cmd, msg.GetVia(), http.StatusForbidden, r.Error())
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
