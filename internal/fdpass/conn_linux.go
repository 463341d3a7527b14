package fdpass

import (
	"encoding/binary"
	"fmt"
	"net"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// headerLen is a frame's header: the payload's length (4 bytes, big
// endian) and a flags byte.
const headerLen = 5

// flagFD says a descriptor travels with the frame.
const flagFD = 1

// oobFDs is how many descriptors one read makes room for: more than the one
// a frame may carry, so that a peer sending several has all of them
// received and closed, not left in flight.
const oobFDs = 8

// Conn is one end of a frame connection. Send may be called from several
// goroutines; Recv from one at a time.
type Conn struct {
	uc  *net.UnixConn
	wmu sync.Mutex
	oob []byte
}

// New returns a frame connection on uc.
func New(uc *net.UnixConn) *Conn {
	return &Conn{uc: uc, oob: make([]byte, unix.CmsgSpace(oobFDs*4))}
}

// Close closes the connection.
func (c *Conn) Close() error { return c.uc.Close() }

// SetReadDeadline bounds the next reads.
func (c *Conn) SetReadDeadline(t time.Time) error { return c.uc.SetReadDeadline(t) }

// Send writes one frame: payload and, when fd is not negative, that
// descriptor (the caller still owns and closes its copy).
func (c *Conn) Send(payload []byte, fd int) error {
	if len(payload) > MaxFrame {
		return fmt.Errorf("frame of %d bytes: the most is %d", len(payload), MaxFrame)
	}
	b := make([]byte, headerLen+len(payload))
	binary.BigEndian.PutUint32(b, uint32(len(payload)))
	var oob []byte
	if fd >= 0 {
		b[4] = flagFD
		oob = unix.UnixRights(fd)
	}
	copy(b[headerLen:], payload)
	c.wmu.Lock()
	defer c.wmu.Unlock()
	n, _, err := c.uc.WriteMsgUnix(b, oob, nil)
	if err != nil {
		return fmt.Errorf("send frame: %w", err)
	}
	if n < len(b) { // the descriptor went with the first part
		if _, err := c.uc.Write(b[n:]); err != nil {
			return fmt.Errorf("send frame: %w", err)
		}
	}
	return nil
}

// Recv reads one frame and returns its payload and the descriptor that
// came with it (nil when none), received close-on-exec (Go's recvmsg on
// Linux passes MSG_CMSG_CLOEXEC). A descriptor is accepted only with the
// first bytes of a frame that announces one, and only alone; any other
// is closed and Recv fails with ErrHostileFD, after which the connection
// is unusable. The descriptor is not checked beyond that: see TCPConn.
func (c *Conn) Recv() ([]byte, *os.File, error) {
	var hdr [headerLen]byte
	var got []int
	if err := c.read(hdr[:], &got, true); err != nil {
		return nil, nil, err
	}
	n := binary.BigEndian.Uint32(hdr[:4])
	if looksHTTP(hdr[:]) {
		closeAll(got)
		return nil, nil, errNotFrames
	}
	if n > MaxFrame || hdr[4]&^flagFD != 0 {
		closeAll(got)
		return nil, nil, fmt.Errorf("frame header %x: %w", hdr, errNotFrames)
	}
	if hdr[4]&flagFD == 0 && len(got) > 0 {
		closeAll(got)
		return nil, nil, fmt.Errorf("%w: a descriptor came with a frame that announced none", ErrHostileFD)
	}
	if hdr[4]&flagFD != 0 && len(got) == 0 {
		return nil, nil, fmt.Errorf("%w: a frame announced a descriptor that did not come", ErrHostileFD)
	}
	payload := make([]byte, n)
	if err := c.read(payload, nil, false); err != nil {
		closeAll(got)
		return nil, nil, err
	}
	if len(got) == 0 {
		return payload, nil, nil
	}
	return payload, os.NewFile(uintptr(got[0]), "fdpass"), nil
}

// read fills b with recvmsg; descriptors are accepted (into *fds) only on
// the first read of a header, and only one.
func (c *Conn) read(b []byte, fds *[]int, first bool) error {
	for off := 0; off < len(b); {
		n, oobn, flags, _, err := c.uc.ReadMsgUnix(b[off:], c.oob)
		if oobn > 0 || flags&unix.MSG_CTRUNC != 0 {
			rcvd, perr := parseRights(c.oob[:oobn])
			switch {
			case perr != nil:
				closeAll(rcvd)
				closeAll(derefs(fds))
				return fmt.Errorf("%w: %v", ErrHostileFD, perr)
			case flags&unix.MSG_CTRUNC != 0:
				closeAll(rcvd)
				closeAll(derefs(fds))
				return fmt.Errorf("%w: more descriptors than fit in one frame (control data truncated)", ErrHostileFD)
			case !first || off > 0 || fds == nil || len(rcvd) != 1:
				closeAll(rcvd)
				closeAll(derefs(fds))
				return fmt.Errorf("%w: %d descriptors outside a frame's start (one is allowed, with a frame's first byte)", ErrHostileFD, len(rcvd))
			}
			*fds = rcvd
		}
		off += n
		if err != nil {
			closeAll(derefs(fds))
			return fmt.Errorf("read frame: %w", err)
		}
		if n == 0 {
			closeAll(derefs(fds))
			return fmt.Errorf("read frame: %w", errEOF)
		}
	}
	return nil
}

func derefs(p *[]int) []int {
	if p == nil {
		return nil
	}
	return *p
}

// parseRights returns every descriptor in oob (all of them, so the caller
// closes those it refuses); any control message but SCM_RIGHTS is an error.
func parseRights(oob []byte) ([]int, error) {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil, fmt.Errorf("control data: %v", err)
	}
	var fds []int
	var bad error
	for _, m := range msgs {
		if m.Header.Level != unix.SOL_SOCKET || m.Header.Type != unix.SCM_RIGHTS {
			bad = fmt.Errorf("control message %d/%d, not SCM_RIGHTS", m.Header.Level, m.Header.Type)
			continue
		}
		r, err := unix.ParseUnixRights(&m)
		if err != nil {
			bad = err
			continue
		}
		fds = append(fds, r...)
	}
	return fds, bad
}

func closeAll(fds []int) {
	for _, fd := range fds {
		unix.Close(fd)
	}
}

// TCPConn checks that f is a connected inet stream socket (a socket by
// fstat, SO_TYPE SOCK_STREAM, SO_DOMAIN AF_INET or AF_INET6, and
// getpeername answers) and returns it as a non-blocking connection on
// Go's poller, so deadlines work and no read blocks a thread. It closes f
// either way; on error nothing of f stays open.
func TCPConn(f *os.File) (*net.TCPConn, error) {
	defer f.Close()
	fd := int(f.Fd())
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, fmt.Errorf("%w: fstat: %v", ErrHostileFD, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFSOCK {
		return nil, fmt.Errorf("%w: not a socket (mode %#o)", ErrHostileFD, st.Mode&unix.S_IFMT)
	}
	typ, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_TYPE)
	if err != nil || typ != unix.SOCK_STREAM {
		return nil, fmt.Errorf("%w: socket type %d, not a stream (%v)", ErrHostileFD, typ, err)
	}
	dom, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_DOMAIN)
	if err != nil || (dom != unix.AF_INET && dom != unix.AF_INET6) {
		return nil, fmt.Errorf("%w: socket domain %d, not inet or inet6 (%v)", ErrHostileFD, dom, err)
	}
	if _, err := unix.Getpeername(fd); err != nil {
		return nil, fmt.Errorf("%w: not connected: %v", ErrHostileFD, err)
	}
	c, err := net.FileConn(f) // a dup, made non-blocking and registered with the poller
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrHostileFD, err)
	}
	tc, ok := c.(*net.TCPConn)
	if !ok {
		c.Close()
		return nil, fmt.Errorf("%w: a %T, not TCP", ErrHostileFD, c)
	}
	return tc, nil
}

// SendConn sends payload with c's descriptor (c stays the caller's to
// close).
func (c *Conn) SendConn(payload []byte, conn *net.TCPConn) error {
	rc, err := conn.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := rc.Control(func(fd uintptr) { serr = c.Send(payload, int(fd)) }); err != nil {
		return err
	}
	return serr
}
