package egress

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"
)

// maxPeek bounds what the host side reads of a tunnel's first bytes to
// find its TLS server name or HTTP Host (a ClientHello with post-quantum
// key shares is a few KiB; an HTTP head rarely passes 8 KiB).
const maxPeek = 64 << 10

// peeked is what firstNames read of a tunnel's first bytes.
type peeked struct {
	// name is the name they carry, kind which one ("TLS server name",
	// "HTTP Host"); "" when they carry none (another protocol, a
	// ClientHello without SNI).
	name, kind string
	// read is every byte read, for the remote end; closed says the
	// command's side ended (close-write) meanwhile.
	read   []byte
	closed bool
	// bad says why the bytes could not be read as the protocol they
	// start as (a malformed or oversized ClientHello or HTTP head).
	bad error
}

// firstNames reads the first bytes a command sends into a tunnel (CONNECT
// or SOCKS5) through recv and finds the name they carry. An error is
// recv's: the stream failed.
func firstNames(recv func() ([]byte, bool, error)) (peeked, error) {
	var pk peeked
	var streamErr error
	more := func() error {
		if pk.closed {
			return io.ErrUnexpectedEOF
		}
		if len(pk.read) >= maxPeek {
			return fmt.Errorf("the first %d bytes hold no complete TLS ClientHello or HTTP head", maxPeek)
		}
		data, cw, err := recv()
		if err != nil {
			streamErr = err
			return err
		}
		pk.read = append(pk.read, data...)
		pk.closed = cw
		return nil
	}
	// The first chunk decides the protocol.
	for len(pk.read) == 0 && !pk.closed {
		if err := more(); err != nil {
			return pk, err
		}
	}
	switch {
	case len(pk.read) == 0:
	case pk.read[0] == 0x16: // a TLS handshake record
		pk.kind = "TLS server name"
		pk.name, pk.bad = clientHelloName(&pk.read, more)
	case looksLikeHTTP(pk.read):
		pk.kind = "HTTP Host"
		for !bytes.Contains(pk.read, []byte("\r\n\r\n")) {
			if pk.bad = more(); pk.bad != nil {
				break
			}
		}
		if pk.bad == nil {
			req, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(pk.read)))
			if err != nil {
				pk.bad = fmt.Errorf("HTTP request head: %w", err)
			} else {
				pk.name = req.Host
			}
		}
	}
	return pk, streamErr
}

// looksLikeHTTP reports whether b starts as an HTTP/1 request line does:
// a method and a space.
func looksLikeHTTP(b []byte) bool {
	for _, m := range []string{"GET ", "HEAD ", "POST ", "PUT ", "DELETE ", "OPTIONS ", "PATCH ", "TRACE ", "CONNECT "} {
		if bytes.HasPrefix(b, []byte(m)) {
			return true
		}
	}
	return false
}

// errGotHello stops crypto/tls's handshake once it has parsed the
// ClientHello.
var errGotHello = errors.New("got the ClientHello")

// clientHelloName parses the TLS ClientHello in *read (asking more for
// bytes it lacks) with crypto/tls itself and returns its server name.
func clientHelloName(read *[]byte, more func() error) (string, error) {
	var name string
	c := &replayConn{read: read, more: more}
	err := tls.Server(c, &tls.Config{GetConfigForClient: func(h *tls.ClientHelloInfo) (*tls.Config, error) {
		name = h.ServerName
		return nil, errGotHello
	}}).Handshake()
	if errors.Is(err, errGotHello) {
		return name, nil
	}
	if c.err != nil {
		return "", fmt.Errorf("TLS ClientHello: %w", c.err)
	}
	return "", fmt.Errorf("TLS ClientHello: %w", err)
}

// replayConn hands crypto/tls the bytes read so far, then more; what the
// handshake writes (an alert) is dropped.
type replayConn struct {
	read *[]byte
	off  int
	more func() error
	err  error
}

func (c *replayConn) Read(b []byte) (int, error) {
	for c.off == len(*c.read) {
		if err := c.more(); err != nil {
			c.err = err
			return 0, err
		}
	}
	n := copy(b, (*c.read)[c.off:])
	c.off += n
	return n, nil
}

func (c *replayConn) Write(b []byte) (int, error)      { return len(b), nil }
func (c *replayConn) Close() error                     { return nil }
func (c *replayConn) LocalAddr() net.Addr              { return &net.TCPAddr{} }
func (c *replayConn) RemoteAddr() net.Addr             { return &net.TCPAddr{} }
func (c *replayConn) SetDeadline(time.Time) error      { return nil }
func (c *replayConn) SetReadDeadline(time.Time) error  { return nil }
func (c *replayConn) SetWriteDeadline(time.Time) error { return nil }

// checkInner decides on the name a tunnel's first bytes carry (kind says
// which: a TLS server name, an HTTP Host), against the name the command
// asked the proxy for (target). A tunnel to a name may carry only that
// name: a CONNECT to an allowed name with the SNI of another is domain
// fronting. A tunnel to an address (which an --allow-cidr let through)
// may carry a name the policy allows. It returns the refusal, or nil.
func checkInner(p Policy, target string, port int, kind, inner string) *Refusal {
	if inner == "" {
		return nil
	}
	in := normName(hostOnly(inner))
	t := normName(target)
	if isAddr(t) {
		if isAddr(in) {
			return nil
		}
		if r := p.nameRule(in); r != "" {
			return &Refusal{Host: target, Port: port, Rule: fmt.Sprintf("the %s %s: %s", kind, in, r)}
		}
		return nil
	}
	if in != t {
		return &Refusal{Host: target, Port: port, Rule: fmt.Sprintf("the %s %s does not match the name asked for (%s)", kind, in, t)}
	}
	return nil
}

// hostOnly strips a port from an HTTP Host.
func hostOnly(h string) string {
	if host, _, err := net.SplitHostPort(h); err == nil {
		return host
	}
	return h
}

func normName(s string) string {
	return strings.ToLower(strings.TrimSuffix(strings.Trim(s, "[]"), "."))
}

// tlsAccessDenied is a fatal TLS alert (access_denied), what a command's
// TLS client is told when its server name is refused.
var tlsAccessDenied = []byte{0x15, 0x03, 0x03, 0x00, 0x02, 0x02, 0x31}

// refusalBytes is what a command whose tunnel's first bytes were refused
// reads: an HTTP 403 naming the rule, or a TLS alert.
func refusalBytes(kind, msg string) []byte {
	if kind == "HTTP Host" {
		var b bytes.Buffer
		writeStatus(&b, http.StatusForbidden, msg)
		return b.Bytes()
	}
	return tlsAccessDenied
}
