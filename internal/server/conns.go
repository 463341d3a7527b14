package server

import (
	"net"
	"sync"
	"time"
)

// Connection limits (ServeOptions' defaults).
const (
	// DefaultIdleTimeout closes a keep-alive connection (HTTP/1.1 or
	// HTTP/2) that has carried no request for this long: an idle client
	// reconnects at no cost, and held-open connections cannot pile up.
	DefaultIdleTimeout = 2 * time.Minute
	// DefaultMaxConnsPerIP bounds one client address's concurrent
	// connections; a connection over it is closed at once.
	DefaultMaxConnsPerIP = 256
)

// capListener closes, as soon as it is accepted, a connection from an IP
// that already has max open.
type capListener struct {
	net.Listener
	max int
	mu  sync.Mutex
	n   map[string]int
}

func newCapListener(ln net.Listener, max int) *capListener {
	return &capListener{Listener: ln, max: max, n: map[string]int{}}
}

// Accept returns the next connection within its IP's cap.
func (l *capListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		ip := remoteIP(c)
		l.mu.Lock()
		if l.n[ip] >= l.max {
			l.mu.Unlock()
			c.Close()
			continue
		}
		l.n[ip]++
		l.mu.Unlock()
		return &cappedConn{Conn: c, l: l, ip: ip}, nil
	}
}

func (l *capListener) release(ip string) {
	l.mu.Lock()
	if l.n[ip]--; l.n[ip] <= 0 {
		delete(l.n, ip)
	}
	l.mu.Unlock()
}

// open returns the number of connections held (for tests and metrics).
func (l *capListener) open() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	t := 0
	for _, n := range l.n {
		t += n
	}
	return t
}

func remoteIP(c net.Conn) string {
	if a, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		return a.IP.String()
	}
	return c.RemoteAddr().String()
}

// cappedConn gives its slot back once, on its first Close.
type cappedConn struct {
	net.Conn
	l    *capListener
	ip   string
	once sync.Once
}

func (c *cappedConn) Close() error {
	c.once.Do(func() { c.l.release(c.ip) })
	return c.Conn.Close()
}

// OpenConns returns the client connections Serve holds open (0 before
// Serve).
func (s *Server) OpenConns() int {
	s.mu.Lock()
	l := s.conns
	s.mu.Unlock()
	if l == nil {
		return 0
	}
	return l.open()
}
