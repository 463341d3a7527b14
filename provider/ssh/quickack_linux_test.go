package ssh

import (
	"io"
	"net"
	"testing"

	"golang.org/x/sys/unix"
)

// TestQuickAckAfterEveryRead holds a request-and-answer exchange over
// loopback TCP with a server that keeps Nagle's algorithm on, as sshd does
// for forwarded channels, and looks, after each answer is read, whether
// the server has had its acknowledgement (with Nagle on, its next small
// write waits for that). A plain connection falls into the kernel's
// delayed-ACK ("pingpong") mode and leaves the answer unacknowledged (the
// control, so the test can fail); through withQuickAck every read is
// acknowledged at once.
func TestQuickAckAfterEveryRead(t *testing.T) {
	plain, plainServer := tcpPair(t)
	delayed := 0
	for range 50 {
		if !answeredAndAcked(t, plain, plain, plainServer) {
			delayed++
		}
	}
	if delayed == 0 {
		t.Skip("the kernel acknowledged every answer of a plain loopback connection at once: nothing to compare with")
	}

	client, server := tcpPair(t)
	wrapped := withQuickAck(client)
	if _, ok := wrapped.(*quickAckConn); !ok {
		t.Fatalf("withQuickAck(%T) = %T, want *quickAckConn", client, wrapped)
	}
	for i := range 50 {
		if !answeredAndAcked(t, wrapped, client, server) {
			t.Fatalf("round %d: the answer read through withQuickAck is not acknowledged (a plain connection left %d of 50 so)", i, delayed)
		}
	}
}

// answeredAndAcked sends a request through conn (whose socket is tcp),
// has server answer it with one small write, reads the answer through
// conn, and reports whether server's answer is acknowledged by then.
func answeredAndAcked(t *testing.T, conn net.Conn, tcp, server *net.TCPConn) bool {
	t.Helper()
	if _, err := conn.Write([]byte{'q'}); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(server, make([]byte, 1)); err != nil {
		t.Fatal(err)
	}
	if _, err := server.Write([]byte{'a'}); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(conn, make([]byte, 1)); err != nil {
		t.Fatal(err)
	}
	return unacked(t, server) == 0
}

// unacked returns how many segments c has sent that its peer has not
// acknowledged.
func unacked(t *testing.T, c *net.TCPConn) uint32 {
	t.Helper()
	rc, err := c.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var info *unix.TCPInfo
	var gerr error
	if err := rc.Control(func(fd uintptr) {
		info, gerr = unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO)
	}); err != nil {
		t.Fatal(err)
	}
	if gerr != nil {
		t.Fatal(gerr)
	}
	return info.Unacked
}

// tcpPair returns both ends of a loopback TCP connection; the server's
// end keeps Nagle's algorithm on.
func tcpPair(t *testing.T) (client, server *net.TCPConn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		accepted <- c
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	s := <-accepted
	if s == nil {
		t.Fatal("accept failed")
	}
	t.Cleanup(func() { c.Close(); s.Close() })
	server = s.(*net.TCPConn)
	if err := server.SetNoDelay(false); err != nil {
		t.Fatal(err)
	}
	return c.(*net.TCPConn), server
}
