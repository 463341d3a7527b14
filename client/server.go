package client

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"

	"connectrpc.com/connect"

	"github.com/runbox/runbox"
	runboxv1 "github.com/runbox/runbox/gen/runbox/v1"
	"github.com/runbox/runbox/gen/runbox/v1/runboxv1connect"
	"github.com/runbox/runbox/internal/daemon/wire"
	"github.com/runbox/runbox/internal/wiretime"
)

// Server is a client of runbox serve's SandboxService: the sandboxes of
// the token's tenant. It implements runbox.Provider (except Dialer: reach
// a sandbox with Sandbox, which returns a Client with every method of a
// local one).
type Server struct {
	host, token string
	opts        []Option
	o           options
	svc         runboxv1connect.SandboxServiceClient
	transport   *http.Transport
}

var _ runbox.Provider = (*Server)(nil)

// NewServer returns a client of the runbox serve at host (http://HOST:PORT
// or https://HOST:PORT) authenticating with token. opts apply to it and to
// the Clients Sandbox returns.
func NewServer(host, token string, opts ...Option) (*Server, error) {
	if err := checkHost(host); err != nil {
		return nil, err
	}
	o := options{pingAfter: pingAfter, pingTimeout: pingTimeout}
	for _, opt := range opts {
		opt(&o)
	}
	svc, t := sandboxService(host, token, o)
	return &Server{host: host, token: token, opts: opts, o: o, svc: svc, transport: t}, nil
}

// Close closes the Server's idle connections.
func (s *Server) Close() error {
	s.transport.CloseIdleConnections()
	return nil
}

// Host is the server's address.
func (s *Server) Host() string { return s.host }

// Name is "server".
func (s *Server) Name() string { return "server" }

// Sandbox returns a Client for the sandbox with id or name, through the
// server.
func (s *Server) Sandbox(idOrName string, opts ...Option) *Client {
	return NewRemote(s.host, s.token, idOrName, append(append([]Option{}, s.opts...), opts...)...)
}

// Dialer is not how sandboxes of a server are reached: use Sandbox. The
// dialer it returns fails with errors.ErrUnsupported.
func (s *Server) Dialer(sb runbox.Sandbox) runbox.Dialer {
	return func(context.Context) (net.Conn, error) {
		return nil, fmt.Errorf("sandbox %s is held by runbox serve at %s: reach it with Server.Sandbox: %w", sb.ID, s.host, errors.ErrUnsupported)
	}
}

// SandboxOptions are what runbox serve adds to a sandbox's spec.
type SandboxOptions struct {
	// Provider is the provider to create it with; "" is the server's
	// default.
	Provider string
	// Labels tag the sandbox; List can filter by them.
	Labels map[string]string
	// IdleTTL removes the sandbox after this long without an exec running
	// or a client attached; MaxLifetime this long after its creation.
	// Zero means never.
	IdleTTL, MaxLifetime time.Duration
	// Recreate replaces the sandbox with a fresh one of the same spec, under
	// the same id, when it is found lost (the call says so).
	Recreate bool
}

// Create creates a sandbox with the server's default provider.
func (s *Server) Create(ctx context.Context, spec runbox.SandboxSpec) (runbox.Sandbox, error) {
	return s.CreateSandbox(ctx, spec, SandboxOptions{})
}

// CreateSandbox creates a sandbox for the token's tenant. spec's Rootfs,
// HostRoot and DaemonArgs are not available through a server (an error);
// its Workdir must be a directory the server allows; its FromSnapshot
// names one of the tenant's snapshots (Snapshot).
func (s *Server) CreateSandbox(ctx context.Context, spec runbox.SandboxSpec, o SandboxOptions) (runbox.Sandbox, error) {
	if spec.Rootfs != "" || spec.HostRoot || len(spec.DaemonArgs) > 0 {
		return runbox.Sandbox{}, &runbox.Error{Op: "create", Sandbox: spec.Name,
			Err: fmt.Errorf("%w: rootfs, host root and daemon arguments cannot be set through runbox serve", runbox.ErrInvalidSpec)}
	}
	resp, err := s.svc.Create(ctx, connect.NewRequest(&runboxv1.CreateSandboxRequest{Spec: &runboxv1.SandboxSpec{
		Provider: o.Provider, Name: spec.Name, Image: spec.Image, Workdir: spec.Workdir,
		MemoryBytes: spec.Memory, Pids: spec.Pids, Cpus: spec.CPUs, DiskBytes: spec.Disk, Network: spec.Network, Labels: o.Labels,
		IdleTtlMs: wiretime.DurationToMs(o.IdleTTL), MaxLifetimeMs: wiretime.DurationToMs(o.MaxLifetime), Recreate: o.Recreate,
		Egress: egressToWire(spec.Egress), FromSnapshot: spec.FromSnapshot,
	}}))
	if err != nil {
		return runbox.Sandbox{}, s.error("create", spec.Name, ctx, err)
	}
	return s.sandbox(resp.Msg.GetSandbox()), nil
}

// Get finds the tenant's sandbox by id or name; runbox.ErrSandboxNotFound
// when it has none.
func (s *Server) Get(ctx context.Context, idOrName string) (runbox.Sandbox, error) {
	resp, err := s.svc.Get(ctx, connect.NewRequest(&runboxv1.GetSandboxRequest{Id: idOrName}))
	if err != nil {
		return runbox.Sandbox{}, s.error("get", idOrName, ctx, err)
	}
	return s.sandbox(resp.Msg.GetSandbox()), nil
}

// List returns the tenant's sandboxes, oldest first.
func (s *Server) List(ctx context.Context) ([]runbox.Sandbox, error) {
	return s.ListLabelled(ctx, nil)
}

// ListLabelled returns the tenant's sandboxes carrying every label given.
func (s *Server) ListLabelled(ctx context.Context, labels map[string]string) ([]runbox.Sandbox, error) {
	resp, err := s.svc.List(ctx, connect.NewRequest(&runboxv1.ListSandboxesRequest{Labels: labels}))
	if err != nil {
		return nil, s.error("list", "", ctx, err)
	}
	out := make([]runbox.Sandbox, 0, len(resp.Msg.GetSandboxes()))
	for _, sb := range resp.Msg.GetSandboxes() {
		out = append(out, s.sandbox(sb))
	}
	return out, nil
}

// Remove stops every exec of the sandbox with the stop protocol and
// destroys it; a lost sandbox needs force.
func (s *Server) Remove(ctx context.Context, sb runbox.Sandbox, force bool) error {
	_, err := s.svc.Delete(ctx, connect.NewRequest(&runboxv1.DeleteSandboxRequest{Id: sb.ID, Force: force}))
	return s.error("remove", sb.ID, ctx, err)
}

// Run runs spec in the sandbox with one unary call and returns its result.
// recreated says the sandbox had been lost and was replaced first.
func (s *Server) Run(ctx context.Context, sandbox string, spec runbox.ExecSpec) (res runbox.Result, recreated bool, err error) {
	if err := checkSpec(spec); err != nil {
		return runbox.Result{}, false, &runbox.Error{Op: "run", Sandbox: sandbox, Exec: spec.ID, Err: err}
	}
	resp, err := s.svc.Run(ctx, connect.NewRequest(&runboxv1.RunCommandRequest{SandboxId: sandbox, Spec: wire.SpecToProto(spec)}))
	if err != nil {
		return runbox.Result{}, false, s.error("run", sandbox, ctx, err)
	}
	return wire.ResultFromProto(resp.Msg.GetResult()), resp.Msg.GetRecreated(), nil
}

// error wraps a failed call's error: the server's tagged errors as their
// sentinels; a server that cannot be reached as
// runbox.ErrProviderUnavailable.
func (s *Server) error(op, sandbox string, ctx context.Context, err error) error {
	if err == nil {
		return nil
	}
	if _, _, tagged := wire.FromConnectError(err); !tagged && !connect.IsWireError(err) && ctx.Err() == nil {
		return &runbox.Error{Op: op, Sandbox: sandbox, Err: fmt.Errorf("%w: runbox serve at %s: %v", runbox.ErrProviderUnavailable, s.host, err)}
	}
	err = cause(ctx, err)
	if errors.Is(err, runbox.ErrSandboxNotFound) {
		// The server's message names the sandbox, which the *runbox.Error
		// already does: say it as a local lookup would.
		err = runbox.ErrSandboxNotFound
	}
	return &runbox.Error{Op: op, Sandbox: sandbox, Err: err}
}

// sandbox converts the server's description.
func (s *Server) sandbox(p *runboxv1.Sandbox) runbox.Sandbox {
	state := "ready"
	if p.GetState() == runboxv1.SandboxState_SANDBOX_STATE_LOST {
		state = "lost"
	}
	detail := map[string]string{
		"server":        s.host,
		"state":         state,
		"provider_id":   p.GetProviderId(),
		"running_execs": strconv.Itoa(int(p.GetRunningExecs())),
		"last_used":     time.UnixMilli(p.GetLastUsedAtUnixMs()).UTC().Format(time.RFC3339Nano),
	}
	if p.GetLostReason() != "" {
		detail["lost"] = p.GetLostReason()
	}
	if p.GetPaused() {
		detail["paused"] = "true"
	}
	if p.GetRecreated() > 0 {
		detail["recreated"] = strconv.Itoa(int(p.GetRecreated()))
	}
	if labels := p.GetSpec().GetLabels(); len(labels) > 0 {
		kv := make([]string, 0, len(labels))
		for k, v := range labels {
			kv = append(kv, k+"="+v)
		}
		sort.Strings(kv)
		detail["labels"] = strings.Join(kv, ",")
	}
	if ttl := p.GetSpec().GetIdleTtlMs(); ttl > 0 {
		detail["idle_ttl"] = wire.MsToDuration(ttl).String()
	}
	if life := p.GetSpec().GetMaxLifetimeMs(); life > 0 {
		detail["max_lifetime"] = wire.MsToDuration(life).String()
	}
	if n := p.GetSpec().GetNetwork(); n != "" {
		detail["network"] = n
	}
	if e := p.GetSpec().GetEgress(); e != nil {
		for key, list := range map[string][]string{"egress_allow": e.GetAllow(), "egress_allow_cidr": e.GetAllowCidr(), "egress_deny": e.GetDeny()} {
			if len(list) > 0 {
				detail[key] = strings.Join(list, ",")
			}
		}
	}
	if ports := p.GetExposedPorts(); len(ports) > 0 {
		s := make([]string, len(ports))
		for i, port := range ports {
			s[i] = strconv.FormatUint(uint64(port), 10)
		}
		detail["exposed_ports"] = strings.Join(s, ",")
	}
	return runbox.Sandbox{
		ID: p.GetId(), Name: p.GetName(), Provider: p.GetProvider(),
		Created: time.UnixMilli(p.GetCreatedAtUnixMs()), Alive: state == "ready", Detail: detail,
	}
}

// egressToWire converts an egress policy for the server (nil when empty).
func egressToWire(p runbox.EgressPolicy) *runboxv1.EgressPolicy {
	if p.Empty() {
		return nil
	}
	return &runboxv1.EgressPolicy{Allow: p.Allow, AllowCidr: p.AllowCIDR, Deny: p.Deny, Resolve: p.Resolve}
}
