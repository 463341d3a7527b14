package frontrpc

import (
	"io"
	"net"
	"time"
)

// slowConn is a net.Conn that returns data at most max bytes per Read.
type slowConn struct {
	net.Conn
	data []byte
	max  int
}

func (c *slowConn) Read(p []byte) (int, error) {
	if len(c.data) == 0 {
		return 0, io.EOF
	}
	n := copy(p[:min(len(p), c.max)], c.data)
	c.data = c.data[n:]
	return n, nil
}

func (c *slowConn) SetReadDeadline(time.Time) error { return nil }
