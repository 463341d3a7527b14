package client

import (
	"context"
	"fmt"
	"time"

	"connectrpc.com/connect"

	"github.com/runbox/runbox"
	runboxv1 "github.com/runbox/runbox/gen/runbox/v1"
	"github.com/runbox/runbox/internal/wiretime"
)

// ExposedPort is how to reach a sandbox port that runbox serve exposes.
type ExposedPort struct {
	// URL is the port's route on the server; a request to it needs the
	// tenant's token (Authorization: Bearer) or the cookie a signed URL sets.
	URL string
	// SignedURL reaches the port without a token until ExpiresAt; hand it
	// to a browser.
	SignedURL string
	// ExpiresAt is when SignedURL stops working.
	ExpiresAt time.Time
}

// ExposePort makes port of the tenant's sandbox reachable through the
// server's port route (HTTP and WebSockets), and returns its URL and a
// signed URL valid for urlTTL (0: the server's default). Exposing an
// exposed port again hands out a new signed URL.
func (s *Server) ExposePort(ctx context.Context, sandbox string, port uint16, urlTTL time.Duration) (ExposedPort, error) {
	if port == 0 {
		return ExposedPort{}, &runbox.Error{Op: "expose port", Sandbox: sandbox, Err: fmt.Errorf("%w: port 0", runbox.ErrInvalidSpec)}
	}
	resp, err := s.svc.ExposePort(ctx, connect.NewRequest(&runboxv1.ExposePortRequest{
		SandboxId: sandbox, Port: uint32(port), UrlTtlMs: wiretime.DurationToMs(urlTTL),
	}))
	if err != nil {
		return ExposedPort{}, s.error("expose port", sandbox, ctx, err)
	}
	return ExposedPort{
		URL:       resp.Msg.GetUrl(),
		SignedURL: resp.Msg.GetSignedUrl(),
		ExpiresAt: time.UnixMilli(resp.Msg.GetExpiresAtUnixMs()),
	}, nil
}

// UnexposePort closes the route to port: requests to its URL, signed or
// not, are refused from then on. Unexposing a port that is not exposed is
// not an error.
func (s *Server) UnexposePort(ctx context.Context, sandbox string, port uint16) error {
	_, err := s.svc.UnexposePort(ctx, connect.NewRequest(&runboxv1.UnexposePortRequest{SandboxId: sandbox, Port: uint32(port)}))
	return s.error("unexpose port", sandbox, ctx, err)
}

// SetEgress replaces the egress policy of a sandbox on the private network
// (the next connection follows it) and returns the sandbox as the server
// now describes it. An empty policy refuses every name. A range outside
// the server's --allow-egress-cidr, or a sandbox not on network private, is
// runbox.ErrInvalidSpec.
func (s *Server) SetEgress(ctx context.Context, sandbox string, policy runbox.EgressPolicy) (runbox.Sandbox, error) {
	pol := egressToWire(policy)
	if pol == nil {
		pol = &runboxv1.EgressPolicy{}
	}
	resp, err := s.svc.SetEgress(ctx, connect.NewRequest(&runboxv1.SetEgressRequest{SandboxId: sandbox, Egress: pol}))
	if err != nil {
		return runbox.Sandbox{}, s.error("set egress", sandbox, ctx, err)
	}
	return s.sandbox(resp.Msg.GetSandbox()), nil
}
