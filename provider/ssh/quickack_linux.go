package ssh

import (
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

// withQuickAck returns nc, a TCP connection to an SSH server, so that
// every read acknowledges what it read at once, instead of leaving the
// acknowledgement to the kernel's delayed-ACK timer.
//
// OpenSSH's server turns Nagle's algorithm off only for interactive
// sessions, not for the forwarded channels runbox carries: when runboxd
// writes an answer as two small messages (an exec's exited event, then the
// end of its stream), sshd holds the second until the first is
// acknowledged. A connection that carries request-and-answer traffic is in
// the kernel's "pingpong" mode, which delays that acknowledgement by 40 ms
// or more, so each `runbox exec` through an ssh endpoint waited about that
// long for its last bytes (64 ms per exec against 12 ms once acknowledged
// at once, provider/ssh BenchmarkCLIExecOnSandbox/endpoint). TCP_QUICKACK
// is not sticky (the kernel returns to pingpong mode by itself), hence a
// setsockopt after every read that returned data.
func withQuickAck(nc net.Conn) net.Conn {
	tc, ok := nc.(*net.TCPConn)
	if !ok {
		return nc
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return nc
	}
	return &quickAckConn{TCPConn: tc, raw: rc}
}

// quickAckConn is a TCP connection that acknowledges each read at once.
type quickAckConn struct {
	*net.TCPConn
	raw syscall.RawConn
}

// Read reads from the connection, then has the kernel send the
// acknowledgement of what arrived now.
func (c *quickAckConn) Read(b []byte) (int, error) {
	n, err := c.TCPConn.Read(b)
	if n > 0 {
		_ = c.raw.Control(func(fd uintptr) {
			_ = unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_QUICKACK, 1)
		})
	}
	return n, err
}
