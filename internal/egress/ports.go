package egress

import (
	"context"
	"net"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/gen/runbox/v1/runboxv1connect"
)

// FDPasser is a provider that says whether connected sockets travel to and
// from a sandbox's runboxd (internal/fdpass): local, host, and docker with
// its socket on this machine.
type FDPasser interface {
	PassesFDs(runbox.Sandbox) bool
}

// PassesFDs says whether p passes connected sockets to and from sb's
// runboxd; a provider that does not say, does not.
func PassesFDs(p runbox.Provider, sb runbox.Sandbox) bool {
	fp, ok := p.(FDPasser)
	return ok && fp.PassesFDs(sb)
}

// Ports forwards connections to ports on one sandbox's loopback, by the
// road runbox port-forward takes: where runboxd shares this kernel, the
// socket it connects is passed back and spliced by the kernel
// (FDForwarder); elsewhere (docker's exec stream, ssh, kubernetes) the
// bytes travel in ForwardService messages (ForwardConn). Close it when
// done.
type Ports struct {
	fd        *FDForwarder
	fc        runboxv1connect.ForwardServiceClient
	closeIdle func()
}

// NewPorts returns a Ports over dial, an authenticated stream to the
// sandbox's runboxd; passFDs picks socket passing (see PassesFDs).
func NewPorts(dial runbox.Dialer, passFDs bool) *Ports {
	if passFDs {
		return &Ports{fd: &FDForwarder{Dial: dial}}
	}
	fc, closeIdle := NewForwardClient(dial)
	return &Ports{fc: fc, closeIdle: closeIdle}
}

// PassesFDs says whether the connections go by socket passing.
func (p *Ports) PassesFDs() bool { return p.fd != nil }

// Forward carries conn, a connection the caller accepted, to port on the
// sandbox's loopback, and returns when both directions have ended, or at
// once with an error when nothing answers on the port. It closes conn.
func (p *Ports) Forward(ctx context.Context, port int, conn net.Conn) error {
	if p.fd != nil {
		return p.fd.Forward(ctx, port, conn)
	}
	return ForwardConn(ctx, p.fc, port, conn)
}

// Close closes the kept connection to runboxd (socket passing) or the
// idle streams (messages); connections being forwarded go on.
func (p *Ports) Close() error {
	if p.fd != nil {
		return p.fd.Close()
	}
	p.closeIdle()
	return nil
}
