package egress

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"

	"github.com/runbox/runbox/internal/fdpass"
)

// The services a host side names on an fd-passing connection to runboxd
// (internal/fdpass): where both share a kernel, a carried connection's
// socket travels over the unix socket between them and the kernel moves
// its bytes, instead of every byte crossing EgressService or
// ForwardService in protobuf messages.
const (
	// FDEgress is egress: runboxd offers each proxied connection, the
	// host side decides and dials, and runboxd then hands it the
	// command's socket, which the host side splices with the remote.
	FDEgress = "egress"
	// FDForward is one forwarded connection: runboxd dials the port in
	// the sandbox and hands that socket to the host side.
	FDForward = "forward"
)

// fdMsg is a frame's payload on an fd-passing connection.
type fdMsg struct {
	// Kind: "hello" (runboxd takes the service, or says why not in
	// Error), "offer" (a command's connection: with its socket for a
	// tunnel, without for a plain HTTP request), "forward" (the port to
	// forward to), "forwarded" (runboxd's answer: the socket it connected
	// there, or Error), "refused" (runboxd refused Count connections past
	// a bound, for the refusal log).
	Kind  string `json:"kind"`
	ID    uint64 `json:"id,omitempty"`
	Host  string `json:"host,omitempty"`
	Port  int    `json:"port,omitempty"`
	Via   string `json:"via,omitempty"`
	Error string `json:"error,omitempty"`
	// Data are the command's bytes runboxd read past its proxy request.
	Data []byte `json:"data,omitempty"`
	// Count is, in a "refused" frame, how many connections runboxd
	// refused past a bound (MaxPending, MaxConns) before offering them.
	Count int64 `json:"count,omitempty"`
}

func jsonMsg(m fdMsg) ([]byte, error) { return json.Marshal(m) }

func sendMsg(fc *fdpass.Conn, m fdMsg, conn *net.TCPConn) error {
	b, err := jsonMsg(m)
	if err != nil {
		return err
	}
	if conn != nil {
		return fc.SendConn(b, conn)
	}
	return fc.Send(b, -1)
}

// recvMsg reads one frame; a descriptor that came with it is the caller's.
func recvMsg(fc *fdpass.Conn) (fdMsg, *os.File, error) {
	var m fdMsg
	b, f, err := fc.Recv()
	if err != nil {
		return m, nil, err
	}
	if err := json.Unmarshal(b, &m); err != nil {
		if f != nil {
			f.Close()
		}
		return m, nil, fmt.Errorf("frame: %w", err)
	}
	return m, f, nil
}

// FDServer is runboxd's side of fd passing: the handler for the
// connections fdpass.Divert takes off runboxd's listener.
type FDServer struct {
	// Proxy is the egress proxy; nil refuses FDEgress (a sandbox without
	// a private network).
	Proxy *Proxy
	// Forward serves FDForward.
	Forward Forwarder
	// Log gets a line per refusal; nil discards.
	Log *slog.Logger
}

// Handle serves one diverted connection for service; it closes c.
func (s *FDServer) Handle(service string, c net.Conn) {
	log := s.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	uc, err := fdpass.UnixConn(c)
	if err != nil {
		log.Warn("fd passing refused", "err", err)
		c.Close()
		return
	}
	fc := fdpass.New(uc)
	defer fc.Close()
	switch {
	case service == FDEgress && s.Proxy != nil:
		s.Proxy.serveFD(fc)
	case service == FDForward:
		s.Forward.serveFD(fc)
	default:
		sendMsg(fc, fdMsg{Kind: "hello", Error: fmt.Sprintf("runboxd serves no %q over fd passing here", service)}, nil)
	}
}

// spliceConns moves bytes both ways between a and b until both directions
// end (a direction's end half-closes its writer) and closes both. Between
// two TCP sockets, io.Copy is splice(2): no byte enters this process.
func spliceConns(ctx context.Context, a, b net.Conn) {
	defer a.Close()
	defer b.Close()
	stop := context.AfterFunc(ctx, func() { a.Close(); b.Close() })
	defer stop()
	done := make(chan struct{})
	go func() {
		defer close(done)
		if _, err := io.Copy(b, a); err != nil {
			a.Close()
			b.Close()
			return
		}
		closeWrite(b)
	}()
	if _, err := io.Copy(a, b); err != nil {
		a.Close()
		b.Close()
	} else {
		closeWrite(a)
	}
	<-done
}
