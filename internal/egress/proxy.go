package egress

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"

	runboxv1 "github.com/runbox/runbox/gen/runbox/v1"
	"github.com/runbox/runbox/gen/runbox/v1/runboxv1connect"
)

// Where the proxy listens inside a private-network sandbox (its own
// loopback: nothing outside the sandbox reaches these).
const (
	HTTPAddr  = "127.0.0.1:3128"
	SOCKSAddr = "127.0.0.1:1080"
)

// Env is what the commands of a private-network sandbox get, so that
// programs that honour proxy variables (curl, pip, git, npm, Go, Python's
// urllib) go through the proxy.
var Env = []string{
	"HTTP_PROXY=http://" + HTTPAddr, "http_proxy=http://" + HTTPAddr,
	"HTTPS_PROXY=http://" + HTTPAddr, "https_proxy=http://" + HTTPAddr,
	"ALL_PROXY=socks5h://" + SOCKSAddr, "all_proxy=socks5h://" + SOCKSAddr,
	"NO_PROXY=localhost,127.0.0.1,::1", "no_proxy=localhost,127.0.0.1,::1",
}

// Timing knobs of the inside proxy.
const (
	// headerTimeout bounds the writes of answers to a command and the
	// host side's wait for runboxd's hello. (A command's proxy request
	// has requestTimeout.)
	headerTimeout = 30 * time.Second
	// hostSideWait is how long a connection waits for the host side to
	// take it before the command is told no host side is connected.
	hostSideWait = 10 * time.Second
	// chunk is the most bytes one Carry message holds: bulk transfers
	// cost per message, so large (runbox.MaxMessageBytes bounds them).
	chunk = 256 << 10
)

// Proxy is runboxd's half of egress: HTTP and SOCKS5 proxy listeners on
// the sandbox's loopback, and the EgressService the host side calls to
// take their connections. It never dials anything itself.
type Proxy struct {
	log      *slog.Logger
	hostWait time.Duration // hostSideWait; shorter in tests
	offered  chan *pending // connections for Listen to hand out
	nextID   atomic.Uint64

	mu      sync.Mutex
	waiting map[uint64]*pending // offered, not yet carried

	// The bounds (MaxPending, MaxConns; tests set smaller ones) and the
	// connections in: undecided (from accept until the host side takes
	// or refuses it), and held (from accept until this process closes
	// its socket or hands it over).
	maxPending, maxConns int
	pending, held        gate
	// Connections refused past a bound, not yet reported to a host side
	// (refusedWake), and their log lines.
	refused     atomic.Int64
	refusedWake chan struct{}
	refusedLog  sparseLog

	closeOnce sync.Once
	closed    chan struct{} // Close was called
}

// Close ends Listen and Carry calls, cutting the connections they carry,
// so a stopping daemon is not held by them. The listeners are the
// caller's.
func (p *Proxy) Close() { p.closeOnce.Do(func() { close(p.closed) }) }

var _ runboxv1connect.EgressServiceHandler = (*Proxy)(nil)

// pending is a command's connection waiting for the host side's verdict.
type pending struct {
	id    uint64
	host  string
	port  int
	via   string
	conn  net.Conn
	br    *bufio.Reader // conn's bytes past the proxy request
	raw   *bufio.Reader // conn's own reader, under br when a request parse wrapped it
	req   *http.Request // a plain HTTP request to forward ("http")
	taken chan struct{} // closed once Carry owns conn
}

// NewProxy returns a Proxy; Serve starts its listeners. A nil log
// discards logs.
func NewProxy(log *slog.Logger) *Proxy {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Proxy{log: log, hostWait: hostSideWait, offered: make(chan *pending), waiting: map[uint64]*pending{}, closed: make(chan struct{}),
		maxPending: MaxPending, maxConns: MaxConns, refusedWake: make(chan struct{}, 1)}
}

// Handler returns the EgressService's path and handler.
func (p *Proxy) Handler(opts ...connect.HandlerOption) (string, http.Handler) {
	return runboxv1connect.NewEgressServiceHandler(p, append(opts, noGzip)...)
}

// ServeHTTPProxy accepts HTTP proxy connections (CONNECT and plain HTTP)
// on ln until it is closed.
func (p *Proxy) ServeHTTPProxy(ln net.Listener) error { return p.accept(ln, "http", p.httpRequest) }

// ServeSOCKS accepts SOCKS5 connections on ln until it is closed.
func (p *Proxy) ServeSOCKS(ln net.Listener) error { return p.accept(ln, "socks5", p.socksRequest) }

// accept accepts connections on ln, each parsed (its proxy request) by
// parse. A connection past MaxPending undecided or MaxConns held is
// answered and closed here, before a goroutine or a buffer is spent on it.
func (p *Proxy) accept(ln net.Listener, via string, parse func(*pending) error) error {
	for {
		conn, err := ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return err
		}
		if rule := p.admit(); rule != "" {
			p.refuseEarly(conn, via, rule)
			continue
		}
		go p.handle(conn, parse)
	}
}

// admit counts a new connection in, or returns the rule that refuses it.
func (p *Proxy) admit() string {
	if !p.pending.enter(p.maxPending) {
		return tooManyPending(p.maxPending)
	}
	if !p.held.enter(p.maxConns) {
		p.pending.leave()
		return tooManyCarried(p.maxConns)
	}
	return ""
}

// refuseEarly answers a connection refused past a bound before its proxy
// request was read (a SOCKS5 client gets "no authentication" and then
// the refusal, as it reads them in turn), counts it for the host side's
// refusal log and closes it.
func (p *Proxy) refuseEarly(conn net.Conn, via, rule string) {
	if via == "socks5" {
		conn.SetWriteDeadline(time.Now().Add(refuseWriteTimeout))
		conn.Write([]byte{socksVersion, socksNoAuth})
	}
	answerNow(conn, via, rule)
	p.refused.Add(1)
	select {
	case p.refusedWake <- struct{}{}:
	default:
	}
	if n := p.refusedLog.note(1); n > 0 {
		p.log.Warn("egress refused", "rule", rule, "via", via, "count", n)
	}
}

// takeRefused returns the count of connections refused past a bound since
// the last call.
func (p *Proxy) takeRefused() int64 { return p.refused.Swap(0) }

// handle reads the command's request, offers the connection to the host
// side, and answers the command itself when no host side takes it.
func (p *Proxy) handle(conn net.Conn, parse func(*pending) error) {
	br := bufio.NewReader(conn)
	pc := &pending{conn: conn, br: br, raw: br, taken: make(chan struct{})}
	conn.SetDeadline(time.Now().Add(requestTimeout))
	if err := parse(pc); err != nil {
		p.pending.leave()
		p.held.leave()
		if r := (*Refusal)(nil); errors.As(err, &r) {
			p.log.Warn("egress refused", "host", r.Host, "port", r.Port, "rule", r.Rule)
		} else {
			p.log.Debug("egress: bad proxy request", "err", err)
		}
		conn.Close()
		return
	}
	conn.SetDeadline(time.Time{})
	pc.id = p.nextID.Add(1)
	p.mu.Lock()
	p.waiting[pc.id] = pc
	p.mu.Unlock()
	timer := time.NewTimer(p.hostWait)
	defer timer.Stop()
	select {
	case p.offered <- pc:
		select {
		case <-pc.taken:
			return
		case <-timer.C:
		}
	case <-timer.C:
	}
	p.mu.Lock()
	_, still := p.waiting[pc.id]
	delete(p.waiting, pc.id)
	p.mu.Unlock()
	if still {
		p.pending.leave()
		p.refuse(pc, http.StatusServiceUnavailable, "runbox egress: no host side is carrying this sandbox's connections")
		p.held.leave()
		return
	}
	<-pc.taken // Carry took it just now
}

// httpRequest parses an HTTP proxy request: CONNECT host:port, or a plain
// request in absolute form.
func (p *Proxy) httpRequest(pc *pending) error {
	// The head as sent, for its Host line (ReadRequest drops it when the
	// request line has an absolute URL).
	head := &headTap{}
	br := bufio.NewReader(io.TeeReader(pc.br, head))
	req, err := http.ReadRequest(br)
	if err != nil {
		return err
	}
	head.done = true
	pc.br = br
	if req.Method == http.MethodConnect {
		pc.via = "connect"
		host, port, err := splitHostPort(req.RequestURI, 443)
		if err != nil {
			writeStatus(pc.conn, http.StatusBadRequest, "runbox egress: CONNECT "+req.RequestURI+": "+err.Error())
			return err
		}
		pc.host, pc.port = host, port
		return nil
	}
	pc.via = "http"
	target := req.Host
	if req.URL.Host != "" {
		target = req.URL.Host
	}
	if req.URL.Scheme != "" && req.URL.Scheme != "http" {
		writeStatus(pc.conn, http.StatusBadRequest, "runbox egress: only http:// URLs go through a plain proxy request; use CONNECT for "+req.URL.Scheme)
		return fmt.Errorf("scheme %q", req.URL.Scheme)
	}
	host, port, err := splitHostPort(target, 80)
	if err != nil {
		writeStatus(pc.conn, http.StatusBadRequest, "runbox egress: "+err.Error())
		return err
	}
	// The policy decides by the URL's host; a Host line naming another
	// would have the server answer for that one.
	if hl := hostLine(head.buf.Bytes()); hl != "" && req.URL.Host != "" {
		// By name: virtual hosts are named; clients differ on writing a
		// default port.
		if h, _, err := splitHostPort(hl, 80); err != nil || normName(h) != normName(host) {
			r := &Refusal{Host: host, Port: port, Rule: fmt.Sprintf("the HTTP Host %s does not match the URL's host (%s)", hl, target)}
			writeStatus(pc.conn, http.StatusForbidden, r.Error())
			return r
		}
	}
	pc.host, pc.port = host, port
	// Origin form for the server; one request per connection, so a
	// client reusing it for another host opens a new one (and is decided
	// again).
	req.URL.Scheme, req.URL.Host = "", ""
	req.Header.Del("Proxy-Connection")
	req.Header.Del("Proxy-Authorization")
	req.Close = true
	pc.req = req
	return nil
}

func splitHostPort(s string, def int) (string, int, error) {
	host, portS, err := net.SplitHostPort(s)
	if err != nil {
		if strings.Contains(err.Error(), "missing port") {
			return strings.Trim(s, "[]"), def, nil
		}
		return "", 0, fmt.Errorf("target %q: %w", s, err)
	}
	port, err := strconv.Atoi(portS)
	if err != nil || port <= 0 || port > 65535 {
		return "", 0, fmt.Errorf("target %q: bad port", s)
	}
	return host, port, nil
}

// SOCKS5 (RFC 1928), without authentication, CONNECT only.
const (
	socksVersion        = 5
	socksNoAuth         = 0
	socksNoAcceptable   = 0xff
	socksConnect        = 1
	socksIPv4           = 1
	socksDomain         = 3
	socksIPv6           = 4
	socksSucceeded      = 0
	socksGeneralFailure = 1
	socksNotAllowed     = 2
	socksCmdUnsupported = 7
)

func (p *Proxy) socksRequest(pc *pending) error {
	pc.via = "socks5"
	r := pc.br
	var hdr [2]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return err
	}
	if hdr[0] != socksVersion {
		return fmt.Errorf("socks version %d", hdr[0])
	}
	methods := make([]byte, hdr[1])
	if _, err := io.ReadFull(r, methods); err != nil {
		return err
	}
	if !strings.Contains(string(methods), string([]byte{socksNoAuth})) {
		pc.conn.Write([]byte{socksVersion, socksNoAcceptable})
		return errors.New("socks: client offers no unauthenticated method")
	}
	if _, err := pc.conn.Write([]byte{socksVersion, socksNoAuth}); err != nil {
		return err
	}
	var req [4]byte
	if _, err := io.ReadFull(r, req[:]); err != nil {
		return err
	}
	if req[1] != socksConnect {
		socksReply(pc.conn, socksCmdUnsupported)
		return fmt.Errorf("socks command %d", req[1])
	}
	switch req[3] {
	case socksIPv4, socksIPv6:
		b := make([]byte, map[byte]int{socksIPv4: 4, socksIPv6: 16}[req[3]])
		if _, err := io.ReadFull(r, b); err != nil {
			return err
		}
		a, _ := netip.AddrFromSlice(b)
		pc.host = a.Unmap().String()
	case socksDomain:
		n, err := r.ReadByte()
		if err != nil {
			return err
		}
		b := make([]byte, n)
		if _, err := io.ReadFull(r, b); err != nil {
			return err
		}
		pc.host = string(b)
	default:
		socksReply(pc.conn, socksGeneralFailure)
		return fmt.Errorf("socks address type %d", req[3])
	}
	var port [2]byte
	if _, err := io.ReadFull(r, port[:]); err != nil {
		return err
	}
	pc.port = int(binary.BigEndian.Uint16(port[:]))
	return nil
}

func socksReply(w io.Writer, code byte) error {
	_, err := w.Write([]byte{socksVersion, code, 0, socksIPv4, 0, 0, 0, 0, 0, 0})
	return err
}

// headTap keeps the bytes written to it until done: the head of a
// request, not its body.
type headTap struct {
	buf  bytes.Buffer
	done bool
}

func (t *headTap) Write(b []byte) (int, error) {
	if !t.done {
		t.buf.Write(b)
	}
	return len(b), nil
}

// hostLine returns the value of the Host line of an HTTP head, or "".
func hostLine(head []byte) string {
	end := bytes.Index(head, []byte("\r\n\r\n"))
	if end < 0 {
		end = len(head)
	}
	for _, line := range bytes.Split(head[:end], []byte("\r\n"))[1:] {
		k, v, ok := bytes.Cut(line, []byte(":"))
		if ok && strings.EqualFold(string(bytes.TrimSpace(k)), "host") {
			return string(bytes.TrimSpace(v))
		}
	}
	return ""
}

// writeStatus answers an HTTP proxy request with status and a text body.
func writeStatus(w io.Writer, status int, msg string) {
	fmt.Fprintf(w, "HTTP/1.1 %d %s\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s\n",
		status, http.StatusText(status), len(msg)+1, msg)
}

// refuse answers the command that its connection is refused, and closes it.
func (p *Proxy) refuse(pc *pending, status int, msg string) {
	pc.conn.SetWriteDeadline(time.Now().Add(headerTimeout))
	answerRefusal(pc.conn, pc.via, status, msg)
	pc.conn.Close()
}

// answerRefusal tells a command its proxy request is refused: an HTTP
// status with msg, or SOCKS5's "not allowed" (which has no text).
func answerRefusal(w io.Writer, via string, status int, msg string) {
	if via == "socks5" {
		socksReply(w, socksNotAllowed)
	} else {
		writeStatus(w, status, msg)
	}
}

// Listen hands the host side every connection commands open, as they come.
func (p *Proxy) Listen(ctx context.Context, _ *connect.Request[runboxv1.EgressListenRequest], stream *connect.ServerStream[runboxv1.EgressListenResponse]) error {
	// Tell the host side at once that it is listening.
	if err := stream.Send(&runboxv1.EgressListenResponse{}); err != nil {
		return err
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-p.closed:
			return nil
		case pc := <-p.offered:
			err := stream.Send(&runboxv1.EgressListenResponse{Id: pc.id, Host: pc.host, Port: uint32(pc.port), Via: pc.via})
			if err != nil {
				return err
			}
		}
	}
}

// Carry carries one connection Listen offered, with the host side's verdict.
func (p *Proxy) Carry(ctx context.Context, stream *connect.BidiStream[runboxv1.EgressCarryRequest, runboxv1.EgressCarryResponse]) error {
	first, err := stream.Receive()
	if err != nil {
		return err
	}
	pc := p.take(first.GetId())
	if pc == nil {
		return connect.NewError(connect.CodeNotFound, fmt.Errorf("egress connection %d: none waiting (it timed out or was carried)", first.GetId()))
	}
	defer p.held.leave()
	defer pc.conn.Close()
	carried := make(chan struct{})
	defer close(carried)
	go func() {
		// Unblocks the copies below when the daemon stops or the host side goes.
		select {
		case <-p.closed:
		case <-ctx.Done():
		case <-carried:
			return
		}
		pc.conn.Close()
	}()
	if r := first.GetRefusal(); r != "" {
		p.refuse(pc, refusalStatus(r), r)
		return nil
	}
	switch pc.via {
	case "connect":
		_, err = io.WriteString(pc.conn, "HTTP/1.1 200 Connection established\r\n\r\n")
	case "socks5":
		err = socksReply(pc.conn, socksSucceeded)
	}
	if err != nil {
		return nil
	}
	out := &streamWriter{stream: stream}
	if len(first.GetData()) > 0 {
		pc.conn.Write(first.GetData())
	}
	remoteDone := make(chan struct{})
	go func() {
		// The remote's bytes to the command, until it half-closes.
		defer close(remoteDone)
		for {
			msg, err := stream.Receive()
			if err != nil {
				if errors.Is(err, io.EOF) {
					closeWrite(pc.conn)
				} else {
					pc.conn.Close()
				}
				return
			}
			if _, err := pc.conn.Write(msg.GetData()); err != nil {
				pc.conn.Close()
				return
			}
		}
	}()
	if pc.req != nil {
		// One request, its body included; a request pipelined after it
		// (which could name another Host) is dropped, never forwarded.
		err = pc.req.Write(out)
		if err == nil {
			_, err = io.Copy(io.Discard, pc.br)
		}
	} else {
		_, err = io.CopyBuffer(out, pc.br, make([]byte, chunk))
	}
	if err == nil {
		err = stream.Send(&runboxv1.EgressCarryResponse{CloseWrite: true})
	}
	if err != nil {
		pc.conn.Close()
	}
	select {
	case <-remoteDone:
	case <-ctx.Done():
		pc.conn.Close()
	case <-p.closed:
		pc.conn.Close()
	}
	return nil
}

type streamWriter struct {
	stream *connect.BidiStream[runboxv1.EgressCarryRequest, runboxv1.EgressCarryResponse]
}

func (w *streamWriter) Write(b []byte) (int, error) {
	n := 0
	for len(b) > 0 {
		c := b[:min(len(b), chunk)]
		if err := w.stream.Send(&runboxv1.EgressCarryResponse{Data: c}); err != nil {
			return n, err
		}
		n += len(c)
		b = b[len(c):]
	}
	return n, nil
}

func closeWrite(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite()
	} else {
		c.Close()
	}
}
