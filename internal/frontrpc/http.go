package frontrpc

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/runbox/runbox"
)

// ReadBufferBytes is the size of the buffer a Stream reads the daemon's
// answer into: output chunks are decoded where they lie in it and written
// out from there.
const ReadBufferBytes = 1 << 20

// maxHeaderBytes bounds the response's status line and headers.
const maxHeaderBytes = 64 << 10

// maxInfoBytes bounds the body of an Info answer (an InfoResponse takes a
// few hundred bytes): what a daemon sends past it is not read, so a
// hostile one cannot fill the front's memory.
const maxInfoBytes = 64 << 10

// Paths of the calls (the Connect protocol's /package.Service/Method).
const (
	runPath    = "/runbox.v1.RunboxService/Run"
	attachPath = "/runbox.v1.RunboxService/Attach"
	cancelPath = "/runbox.v1.RunboxService/Cancel"
	infoPath   = "/runbox.v1.RunboxService/Info"
)

// Connect envelope flags.
const (
	flagCompressed = 0x01
	flagEndStream  = 0x02
)

// ErrStreamBroken says the daemon's answer ended or broke before the
// stream's end: the connection failed, or what came was not an answer this
// package understands.
var ErrStreamBroken = errors.New("runboxd's stream broke")

// CallError is an error runboxd answered a call with (the Connect
// protocol's error: a code, a message, and the Runbox-Error tag that names
// the runbox sentinel). It unwraps to that sentinel, so errors.Is tells
// them apart as it does for the Go client's errors.
type CallError struct {
	Code, Message, Tag string
}

// Error is the daemon's message, as the Go client reports a tagged error;
// an untagged one (not runboxd's own) is prefixed with its code, as
// connect formats it.
func (e *CallError) Error() string {
	if e.Tag != "" {
		return e.Message
	}
	return e.Code + ": " + e.Message
}

// Unwrap returns the runbox sentinel the tag names, or nil.
func (e *CallError) Unwrap() error { return Sentinel(e.Tag, e.Message) }

// writeRequest writes an HTTP/1.1 POST of body to path on conn.
func writeRequest(conn net.Conn, path, contentType string, body []byte) error {
	req := make([]byte, 0, 256+len(body))
	req = append(req, "POST "+path+" HTTP/1.1\r\nHost: runboxd\r\nUser-Agent: runbox-front\r\nContent-Type: "+
		contentType+"\r\nConnect-Protocol-Version: 1\r\nContent-Length: "+strconv.Itoa(len(body))+"\r\n\r\n"...)
	req = append(req, body...)
	if _, err := conn.Write(req); err != nil {
		return fmt.Errorf("%w: send %s: %w", ErrStreamBroken, path, err)
	}
	return nil
}

// Stream is the answer to a Run call: the exec's events.
type Stream struct {
	body body
	ev   Event
}

// Run sends a Run call for spec on conn, a connection runboxd accepted
// (daemonauth.Handshake), and reads the answer's headers. The caller closes
// conn.
func Run(conn net.Conn, spec runbox.ExecSpec, streamOutput bool) (*Stream, error) {
	msg, err := AppendRunRequest(make([]byte, 5, 512), spec, streamOutput)
	if err != nil {
		return nil, err
	}
	return open(conn, runPath, msg)
}

// Attach sends an Attach call for the exec id on conn, replaying output
// from sequence number fromSeq, and reads the answer's headers. The caller
// closes conn.
func Attach(conn net.Conn, id string, streamOutput bool, fromSeq uint64) (*Stream, error) {
	msg, err := AppendAttachRequest(make([]byte, 5, 64), id, streamOutput, fromSeq)
	if err != nil {
		return nil, err
	}
	return open(conn, attachPath, msg)
}

// open sends the server-streaming call to path whose enveloped message is
// msg (its first 5 bytes left for the envelope's header) and reads the
// answer's headers.
func open(conn net.Conn, path string, msg []byte) (*Stream, error) {
	if len(msg)-5 > runbox.MaxMessageBytes {
		return nil, fmt.Errorf("%w: the request has %d bytes (the limit is runbox.MaxMessageBytes)", runbox.ErrTooLarge, len(msg)-5)
	}
	binary.BigEndian.PutUint32(msg[1:5], uint32(len(msg)-5))
	if err := writeRequest(conn, path, "application/connect+proto", msg); err != nil {
		return nil, err
	}
	s := &Stream{body: body{conn: conn, buf: make([]byte, ReadBufferBytes)}}
	status, err := s.body.readHeader()
	if err != nil {
		return nil, err
	}
	if status != 200 {
		return nil, fmt.Errorf("%w: HTTP status %d", ErrStreamBroken, status)
	}
	return s, nil
}

// Next returns the stream's next event, valid until the following call. At
// the stream's end it returns io.EOF when the daemon ended it without an
// error, a *CallError when it sent one, and an error wrapping
// ErrStreamBroken when the stream broke.
func (s *Stream) Next() (*Event, error) {
	head, err := s.body.take(5)
	if err != nil {
		return nil, err
	}
	flags, n := head[0], binary.BigEndian.Uint32(head[1:5])
	if n > runbox.MaxMessageBytes {
		return nil, fmt.Errorf("%w: a message of %d bytes (the limit is runbox.MaxMessageBytes)", ErrStreamBroken, n)
	}
	msg, err := s.body.take(int(n))
	if err != nil {
		return nil, err
	}
	switch {
	case flags&flagEndStream != 0:
		return nil, endStream(msg)
	case flags&flagCompressed != 0:
		return nil, fmt.Errorf("%w: a compressed message, which was not asked for", ErrStreamBroken)
	}
	if err := DecodeEvent(msg, &s.ev); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrStreamBroken, err)
	}
	return &s.ev, nil
}

// Buffered reports whether the stream's next envelope has been read in
// whole already: Next then returns its event without reading from the
// connection or moving its buffer, so the Data of the events returned
// before it stay valid too (a caller may gather them for one write).
func (s *Stream) Buffered() bool { return s.body.buffered() }

// endStream reads the Connect end-of-stream message: io.EOF, or the
// daemon's error.
func endStream(msg []byte) error {
	var end struct {
		Error *struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
		Metadata map[string][]string `json:"metadata"`
	}
	if err := json.Unmarshal(msg, &end); err != nil {
		return fmt.Errorf("%w: end of stream: %w", ErrStreamBroken, err)
	}
	if end.Error == nil {
		return io.EOF
	}
	ce := &CallError{Code: end.Error.Code, Message: end.Error.Message}
	for k, v := range end.Metadata {
		if strings.EqualFold(k, "Runbox-Error") && len(v) > 0 {
			ce.Tag = v[0]
		}
	}
	return ce
}

// Cancel sends a Cancel call for the exec id on conn, with the exec's own
// grace, and waits for the answer's status. The caller closes conn.
func Cancel(conn net.Conn, id string) error {
	msg, err := AppendCancelRequest(nil, id, 0)
	if err != nil {
		return err
	}
	if err := writeRequest(conn, cancelPath, "application/proto", msg); err != nil {
		return err
	}
	b := body{conn: conn, buf: make([]byte, 4096)}
	status, err := b.readHeader()
	if err != nil {
		return err
	}
	if status != 200 {
		return fmt.Errorf("cancel exec %s: runboxd answered HTTP status %d", id, status)
	}
	return nil
}

// Info sends an Info call on conn and returns when the daemon started
// (InfoResponse's started_at_unix_ms): a daemon that started after an exec
// did restarted, and the exec died with the one before. The caller closes
// conn.
func Info(conn net.Conn) (time.Time, error) {
	if err := writeRequest(conn, infoPath, "application/proto", nil); err != nil {
		return time.Time{}, err
	}
	b := body{conn: conn, buf: make([]byte, 4096)}
	status, err := b.readHeader()
	if err != nil {
		return time.Time{}, err
	}
	if status != 200 {
		return time.Time{}, fmt.Errorf("info: runboxd answered HTTP status %d", status)
	}
	msg, err := b.all(maxInfoBytes)
	if err != nil {
		return time.Time{}, err
	}
	return DecodeInfoStartedAt(msg)
}

// body reads an HTTP/1.1 response from a connection into one buffer, and
// hands out its body's bytes where they lie in it.
type body struct {
	conn    net.Conn
	buf     []byte
	r, w    int   // buf[r:w] is read and not yet consumed
	chunked bool  // Transfer-Encoding: chunked
	left    int64 // bytes left in the chunk, or in a Content-Length body; -1: until the connection closes
	started bool  // a chunk header was read
	done    bool  // the body ended
	scratch []byte
}

// fill reads more of the response into buf, making room by moving the
// unconsumed bytes to its start (or growing it to hold need of them).
func (b *body) fill(need int) error {
	if b.r > 0 && (b.w == len(b.buf) || need > len(b.buf)-b.r) {
		b.w = copy(b.buf, b.buf[b.r:b.w])
		b.r = 0
	}
	if need > len(b.buf) {
		grown := make([]byte, need+64<<10)
		b.w = copy(grown, b.buf[b.r:b.w])
		b.buf, b.r = grown, 0
	}
	n, err := b.conn.Read(b.buf[b.w:])
	b.w += n
	if n > 0 {
		return nil
	}
	if err == nil || err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	return fmt.Errorf("%w: %w", ErrStreamBroken, err)
}

// line returns the next CRLF-terminated line of the raw response, without
// the CRLF.
func (b *body) line() (string, error) {
	for {
		if i := bytes.IndexByte(b.buf[b.r:b.w], '\n'); i >= 0 {
			l := b.buf[b.r : b.r+i]
			b.r += i + 1
			return strings.TrimSuffix(string(l), "\r"), nil
		}
		if b.w-b.r > maxHeaderBytes {
			return "", fmt.Errorf("%w: a line longer than %d bytes", ErrStreamBroken, maxHeaderBytes)
		}
		if err := b.fill(b.w - b.r + 1); err != nil {
			return "", err
		}
	}
}

// readHeader reads the status line and headers and returns the status.
func (b *body) readHeader() (int, error) {
	l, err := b.line()
	if err != nil {
		return 0, err
	}
	proto, rest, _ := strings.Cut(l, " ")
	code, _, _ := strings.Cut(rest, " ")
	status, err := strconv.Atoi(code)
	if !strings.HasPrefix(proto, "HTTP/1.") || err != nil {
		return 0, fmt.Errorf("%w: not an HTTP/1.1 answer: %q", ErrStreamBroken, l)
	}
	b.left = -1
	for {
		l, err := b.line()
		if err != nil {
			return 0, err
		}
		if l == "" {
			break
		}
		k, v, _ := strings.Cut(l, ":")
		v = strings.TrimSpace(v)
		switch {
		case strings.EqualFold(k, "Transfer-Encoding"):
			b.chunked = strings.EqualFold(v, "chunked")
		case strings.EqualFold(k, "Content-Length"):
			if b.left, err = strconv.ParseInt(v, 10, 64); err != nil || b.left < 0 {
				return 0, fmt.Errorf("%w: Content-Length %q", ErrStreamBroken, v)
			}
		}
	}
	if b.chunked {
		b.left = 0
	}
	return status, nil
}

// ready makes the body's next bytes available: it reads the next chunk's
// header when the last chunk is used up. It reports io.ErrUnexpectedEOF
// (wrapped in ErrStreamBroken) at the body's end.
func (b *body) ready() error {
	for b.chunked && b.left == 0 && !b.done {
		if b.started {
			if l, err := b.line(); err != nil {
				return err
			} else if l != "" {
				return fmt.Errorf("%w: bad chunk end %q", ErrStreamBroken, l)
			}
		}
		l, err := b.line()
		if err != nil {
			return err
		}
		b.started = true
		size, _, _ := strings.Cut(l, ";")
		n, err := strconv.ParseInt(strings.TrimSpace(size), 16, 64)
		if err != nil || n < 0 {
			return fmt.Errorf("%w: bad chunk size %q", ErrStreamBroken, l)
		}
		b.left = n
		if n == 0 {
			b.done = true
		}
	}
	if b.done || b.left == 0 {
		return fmt.Errorf("%w: %w", ErrStreamBroken, io.ErrUnexpectedEOF)
	}
	return nil
}

// buffered reports whether the next envelope (prefix and message) lies in
// buf whole, in an unchunked body.
func (b *body) buffered() bool {
	if b.chunked || b.w-b.r < 5 {
		return false
	}
	need := 5 + int64(binary.BigEndian.Uint32(b.buf[b.r+1:b.r+5]))
	return need <= int64(b.w-b.r) && (b.left < 0 || need <= b.left)
}

// take returns the body's next n bytes, where they lie in the buffer when
// they are in one chunk (the common case), else gathered in a scratch
// buffer. They are valid until the next take.
func (b *body) take(n int) ([]byte, error) {
	if err := b.ready(); err != nil {
		return nil, err
	}
	if b.left < 0 || int64(n) <= b.left {
		for b.w-b.r < n {
			if err := b.fill(n); err != nil {
				return nil, err
			}
		}
		p := b.buf[b.r : b.r+n]
		b.r += n
		if b.left > 0 {
			b.left -= int64(n)
		}
		return p, nil
	}
	b.scratch = b.scratch[:0]
	for len(b.scratch) < n {
		if err := b.ready(); err != nil {
			return nil, err
		}
		if b.w == b.r {
			if err := b.fill(1); err != nil {
				return nil, err
			}
		}
		k := min(n-len(b.scratch), b.w-b.r)
		if b.left >= 0 {
			k = min(k, int(b.left))
			b.left -= int64(k)
		}
		b.scratch = append(b.scratch, b.buf[b.r:b.r+k]...)
		b.r += k
	}
	return b.scratch, nil
}

// all returns the rest of the body: up to its Content-Length, its last
// chunk, or the connection's end; a body of more than limit bytes is an
// error (ErrStreamBroken) once limit is passed, the rest unread.
func (b *body) all(limit int) ([]byte, error) {
	var out []byte
	for {
		if len(out) > limit {
			return nil, fmt.Errorf("%w: an answer of more than %d bytes", ErrStreamBroken, limit)
		}
		switch {
		case b.chunked:
			err := b.ready()
			if b.done {
				return out, nil
			}
			if err != nil {
				return nil, err
			}
		case b.left == 0:
			return out, nil
		case b.left < 0:
			// Until the connection closes.
			out = append(out, b.buf[b.r:min(b.w, b.r+limit+1-len(out))]...)
			b.r = b.w
			if len(out) > limit {
				continue // refused above
			}
			if err := b.fill(1); err != nil {
				if errors.Is(err, io.ErrUnexpectedEOF) {
					return out, nil
				}
				return nil, err
			}
			continue
		}
		p, err := b.take(int(min(b.left, ReadBufferBytes, int64(limit+1-len(out)))))
		if err != nil {
			return nil, err
		}
		out = append(out, p...)
	}
}
