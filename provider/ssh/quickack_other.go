//go:build !linux

package ssh

import "net"

// withQuickAck returns nc as it is: TCP_QUICKACK is Linux's (see
// quickack_linux.go).
func withQuickAck(nc net.Conn) net.Conn { return nc }
