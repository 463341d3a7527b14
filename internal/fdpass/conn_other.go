//go:build !linux

package fdpass

import (
	"errors"
	"net"
	"os"
	"time"
)

// Conn is one end of a frame connection; fd passing is Linux's only.
type Conn struct{ uc *net.UnixConn }

// New returns a frame connection on uc.
func New(uc *net.UnixConn) *Conn { return &Conn{uc: uc} }

// Close closes the connection.
func (c *Conn) Close() error { return c.uc.Close() }

// SetReadDeadline bounds the next reads.
func (c *Conn) SetReadDeadline(t time.Time) error { return c.uc.SetReadDeadline(t) }

// Send is not supported off Linux.
func (c *Conn) Send([]byte, int) error { return errors.ErrUnsupported }

// SendConn is not supported off Linux.
func (c *Conn) SendConn([]byte, *net.TCPConn) error { return errors.ErrUnsupported }

// Recv is not supported off Linux.
func (c *Conn) Recv() ([]byte, *os.File, error) { return nil, nil, errors.ErrUnsupported }

// TCPConn is not supported off Linux.
func TCPConn(f *os.File) (*net.TCPConn, error) { f.Close(); return nil, errors.ErrUnsupported }
