package egress

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"sync"
	"time"

	"connectrpc.com/connect"

	"github.com/runbox/runbox"
	runboxv1 "github.com/runbox/runbox/gen/runbox/v1"
	"github.com/runbox/runbox/gen/runbox/v1/runboxv1connect"
)

// dialTimeout bounds the host side's dial of an allowed destination.
const dialTimeout = 10 * time.Second

// Host is the host side of egress: it takes the connections a sandbox's
// runboxd offers (EgressService.Listen), decides on each by the policy,
// dials the allowed ones itself, and splices bytes both ways over Carry.
type Host struct {
	// Dial opens an authenticated stream to the sandbox's runboxd.
	Dial runbox.Dialer
	// Policy returns the policy in force; it is called for every
	// connection, so a changed policy applies to the next one.
	Policy func() (Policy, error)
	// Resolver looks names up; nil means net.DefaultResolver.
	Resolver Resolver
	// PassFDs says runboxd shares this kernel (its socket is a local unix
	// socket: local, host and docker sandboxes): the host side asks it
	// for fd passing (FDEgress) and splices each allowed command's socket
	// with the remote in the kernel. A runboxd that refuses is an error
	// from Serve, never a silent fall back to Carry; false carries every
	// byte over EgressService (ssh, kubernetes).
	PassFDs bool
	// Log gets a line per refusal (level WARN) and per carried connection
	// (DEBUG); nil discards.
	Log *slog.Logger
	// Refusals, when not nil, records every refusal (coalesced and
	// bounded: RefusalLog) for runbox serve's audit log.
	Refusals *RefusalLog
	// MaxConns and MaxPending bound the sandbox's connections this host
	// side carries and decides (resolves, dials) at once, counted here
	// whatever runboxd counts (a taken-over runboxd offers as many as it
	// likes); one past a bound is refused at once with
	// RuleTooManyConnections. Zero means the package's MaxConns and
	// MaxPending.
	MaxConns, MaxPending int

	carried, deciding gate
	boundLog          sparseLog     // refusals past a bound: a line a second
	lookupWait        time.Duration // lookupTimeout; tests set a shorter one
}

// refusedBound records a refusal past a bound (as refused does) and logs
// such refusals at most once a second, with their count: a command
// opening thousands a second costs the log a line a second.
func (h *Host) refusedBound(log *slog.Logger, r *Refusal, via string, n int64) {
	if c := h.boundLog.note(n); c > 0 {
		log.Warn("egress refused", "rule", r.Error(), "count", c)
	}
	h.Refusals.RecordN(r, via, n)
}

func (h *Host) maxConns() int {
	if h.MaxConns > 0 {
		return h.MaxConns
	}
	return MaxConns
}

func (h *Host) maxPending() int {
	if h.MaxPending > 0 {
		return h.MaxPending
	}
	return MaxPending
}

// admit counts an offered connection in (carried, and deciding until
// decided: the caller calls h.deciding.leave() once open returned, and
// h.carried.leave() once the connection ended), or returns the refusal
// of one past a bound.
func (h *Host) admit(msg *runboxv1.EgressListenResponse) *Refusal {
	r := &Refusal{Host: msg.GetHost(), Port: int(msg.GetPort())}
	if !h.carried.enter(h.maxConns()) {
		r.Rule = tooManyCarried(h.maxConns())
		return r
	}
	if !h.deciding.enter(h.maxPending()) {
		h.carried.leave()
		r.Rule = tooManyPending(h.maxPending())
		return r
	}
	return nil
}

// refuseCarry refuses, over Carry, a connection runboxd holds (one past a
// bound): runboxd answers the command. It is bounded in time, as it runs
// in the loop that takes runboxd's offers.
func (h *Host) refuseCarry(ctx context.Context, c runboxv1connect.EgressServiceClient, msg *runboxv1.EgressListenResponse, r *Refusal) {
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	stream := c.Carry(ctx)
	defer stream.CloseResponse()
	if err := stream.Send(&runboxv1.EgressCarryRequest{Id: msg.GetId(), Refusal: r.Error()}); err != nil {
		return
	}
	stream.CloseRequest()
	for {
		if _, err := stream.Receive(); err != nil {
			return
		}
	}
}

// refused logs a refusal and records it, before the command is told: by
// the time a refused command has its answer, the refusal is counted.
func (h *Host) refused(log *slog.Logger, r *Refusal, via string) {
	log.Warn("egress refused", "rule", r.Error())
	h.Refusals.Record(r, via)
}

func (h *Host) log() *slog.Logger {
	if h.Log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return h.Log
}

func (h *Host) resolver() Resolver {
	if h.Resolver == nil {
		return net.DefaultResolver
	}
	return h.Resolver
}

func (h *Host) client() (runboxv1connect.EgressServiceClient, func()) {
	t := h2cTransport(h.Dial)
	return runboxv1connect.NewEgressServiceClient(&http.Client{Transport: t}, "http://runboxd", noGzipClient), t.CloseIdleConnections
}

// Serve listens for the sandbox's connections and carries them until ctx
// ends or the Listen stream breaks (runboxd stopped, or the connection
// failed); the caller decides whether to call it again. ready, when not
// nil, is called once runboxd has accepted the Listen call. Connections
// being carried when it returns go on until they end or ctx does.
func (h *Host) Serve(ctx context.Context, ready func()) error {
	if h.PassFDs {
		return h.serveFD(ctx, ready)
	}
	c, closeIdle := h.client()
	defer closeIdle()
	stream, err := c.Listen(ctx, connect.NewRequest(&runboxv1.EgressListenRequest{}))
	if err != nil {
		return fmt.Errorf("egress listen: %w", err)
	}
	defer stream.Close()
	var wg sync.WaitGroup
	defer wg.Wait()
	for stream.Receive() {
		msg := stream.Msg()
		if msg.GetId() == 0 { // runboxd's hello
			if ready != nil {
				ready()
				ready = nil
			}
			continue
		}
		if r := h.admit(msg); r != nil {
			h.refusedBound(h.log().With("host", msg.GetHost(), "port", msg.GetPort(), "via", msg.GetVia()), r, msg.GetVia(), 1)
			h.refuseCarry(ctx, c, msg, r)
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer h.carried.leave()
			h.carry(ctx, c, msg)
		}()
	}
	if err := stream.Err(); err != nil && ctx.Err() == nil {
		return fmt.Errorf("egress listen: %w", err)
	}
	return ctx.Err()
}

// carry decides on one connection admitted (admit) and, allowed, splices
// it.
func (h *Host) carry(ctx context.Context, c runboxv1connect.EgressServiceClient, msg *runboxv1.EgressListenResponse) {
	log := h.log().With("host", msg.GetHost(), "port", msg.GetPort(), "via", msg.GetVia())
	remote, pol, r := h.open(ctx, msg)
	h.deciding.leave()
	refusal := ""
	if r != nil {
		h.refused(log, r, msg.GetVia())
		refusal = r.Error()
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream := c.Carry(ctx)
	defer stream.CloseResponse()
	if err := stream.Send(&runboxv1.EgressCarryRequest{Id: msg.GetId(), Refusal: refusal}); err != nil {
		if remote != nil {
			remote.Close()
		}
		log.Debug("egress carry", "err", err)
		return
	}
	if remote == nil {
		stream.CloseRequest()
		for {
			if _, err := stream.Receive(); err != nil {
				return
			}
		}
	}
	defer remote.Close()
	log.Debug("egress carrying", "remote", remote.RemoteAddr().String())
	var sendMu sync.Mutex // the remote's bytes and a refusal both go to the command
	send := func(b []byte) error {
		sendMu.Lock()
		defer sendMu.Unlock()
		return stream.Send(&runboxv1.EgressCarryRequest{Data: b})
	}
	recv := func() ([]byte, bool, error) {
		resp, err := stream.Receive()
		return resp.GetData(), resp.GetCloseWrite(), err
	}
	if msg.GetVia() != "http" { // runboxd checked a plain request's Host itself
		recv = h.checkFirstBytes(log, pol, msg, recv, send)
	}
	spliceStream(remote, send, stream.CloseRequest, recv)
	// Let runboxd end the stream before it is cancelled: a refusal's
	// answer (sent just before the request side closed) must reach the
	// command, not be dropped with a reset stream.
	for {
		if _, err := stream.Receive(); err != nil {
			return
		}
	}
}

// checkFirstBytes wraps recv (the command's bytes) so that its first call
// reads the tunnel's first bytes and checks the name they carry (TLS
// server name, HTTP Host) against the name the command asked for; a
// mismatch is refused: the command is told (a TLS alert, an HTTP 403)
// and recv fails, which closes the remote before it got a byte.
func (h *Host) checkFirstBytes(log *slog.Logger, pol Policy, msg *runboxv1.EgressListenResponse, recv func() ([]byte, bool, error), toCommand func([]byte) error) func() ([]byte, bool, error) {
	checked := false
	return func() ([]byte, bool, error) {
		if checked {
			return recv()
		}
		checked = true
		pk, err := firstNames(recv)
		if err != nil {
			return pk.read, pk.closed, err
		}
		r := checkInner(pol, msg.GetHost(), int(msg.GetPort()), pk.kind, pk.name)
		if pk.bad != nil {
			r = &Refusal{Host: msg.GetHost(), Port: int(msg.GetPort()), Rule: "its " + pk.kind + " cannot be read: " + pk.bad.Error()}
		}
		if r != nil {
			h.refused(log, r, msg.GetVia())
			toCommand(refusalBytes(pk.kind, r.Error()))
			return nil, false, ErrRefused
		}
		return pk.read, pk.closed, nil
	}
}

// open applies the policy and dials; it returns the connection and the
// policy that allowed it, or the refusal the command is told.
func (h *Host) open(ctx context.Context, msg *runboxv1.EgressListenResponse) (net.Conn, Policy, *Refusal) {
	refuse := func(rule string) *Refusal {
		return &Refusal{Host: msg.GetHost(), Port: int(msg.GetPort()), Rule: rule}
	}
	p, err := h.Policy()
	if err != nil {
		return nil, p, refuse("no policy could be read, so every connection is refused: " + err.Error())
	}
	wait := h.lookupWait
	if wait <= 0 {
		wait = lookupTimeout
	}
	lctx, cancel := context.WithTimeout(ctx, wait)
	addrs, err := p.Decide(lctx, h.resolver(), msg.GetHost(), int(msg.GetPort()))
	cancel()
	if err != nil {
		var r *Refusal
		if errors.As(err, &r) {
			return nil, p, r
		}
		return nil, p, refuse(err.Error())
	}
	var d net.Dialer
	dctx, cancel := context.WithTimeout(ctx, dialTimeout)
	defer cancel()
	var last error
	for _, a := range addrs {
		conn, err := d.DialContext(dctx, "tcp", net.JoinHostPort(a.String(), strconv.Itoa(int(msg.GetPort()))))
		if err == nil {
			return conn, p, nil
		}
		last = err
	}
	return nil, p, refuse(fmt.Sprintf("allowed, but the host could not connect to %v: %v", addrs, last))
}

// StaticResolver maps names to addresses, for tests; a name it lacks is
// not found.
type StaticResolver map[string][]netip.Addr

// LookupNetIP returns the addresses of host.
func (s StaticResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	if a, ok := s[host]; ok {
		return a, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

var _ io.Writer = (*streamWriter)(nil)
