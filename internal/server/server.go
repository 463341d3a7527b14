// Package server is runbox serve, the control plane: it holds the
// providers, keeps a registry of each tenant's sandboxes and an audit log
// (internal/registry), and serves on one port, over the Connect stack
// (gRPC, gRPC-Web and Connect's HTTP/JSON):
//
//   - SandboxService: create, get, list, delete, and a unary Run;
//   - RunboxService and FilesService, proxied to the runboxd of the sandbox
//     the Runbox-Sandbox request header names, event for event, so
//     streaming, attach and replay behave as against runboxd itself;
//   - the route to a sandbox's exposed ports, /sandboxes/{id}/ports/{port}/
//     (HTTP and WebSocket; by token or by signed URL: portroute.go);
//   - /healthz, /readyz and /metrics (Prometheus);
//   - MCP over streamable HTTP at /mcp (Config.MCP): each tenant's
//     sandboxes as MCP tools, made and removed as SandboxService does and
//     reached through the exec and files services above, in process.
//
// Every call but /healthz needs "Authorization: Bearer TOKEN"; a tenant
// sees only its own sandboxes, and another tenant's id answers NotFound
// exactly like one that never existed. Commands run in runboxd, not here:
// the server can be killed at any time, and on restart it resumes watching
// the execs it had started, so no result and no audit row is lost.
package server

import (
	"context"
	"log/slog"
	"net/http"
	"net/netip"
	"sync"
	"time"

	"connectrpc.com/connect"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/gen/runbox/v1/runboxv1connect"
	"github.com/runbox/runbox/internal/mcpserver"
	"github.com/runbox/runbox/internal/registry"
)

// SandboxHeader names the request header that routes a RunboxService or
// FilesService call to a sandbox (its id or name).
const SandboxHeader = "Runbox-Sandbox"

// RecreatedHeader is set on a response whose sandbox was found lost and
// replaced by a fresh one (spec.recreate) before the call ran.
const RecreatedHeader = "Runbox-Sandbox-Recreated"

// Quotas are a tenant's limits; zero means no limit.
type Quotas struct {
	// MaxSandboxes bounds the tenant's sandboxes.
	MaxSandboxes int
	// MaxExecs bounds the tenant's concurrently running execs.
	MaxExecs int
	// MaxSnapshots bounds the snapshots the tenant keeps.
	MaxSnapshots int
}

// Config is what a Server is made of.
type Config struct {
	// Store is the registry; the Server does not close it.
	Store *registry.Store
	// Providers are the providers tenants may create sandboxes with, by
	// name.
	Providers map[string]runbox.Provider
	// DefaultProvider is used when a create names none.
	DefaultProvider string
	// WorkspaceDir holds the fresh workspaces of host and local sandboxes
	// created without a workdir (one directory per sandbox, removed with
	// it); other providers' sandboxes start in their own directory.
	WorkspaceDir string
	// Home is the server's RUNBOX_HOME (optional): at start it is made,
	// or tightened, to mode 0700, as is WorkspaceDir and each directory
	// in it.
	Home string
	// WorkdirRoots are the directories a create may name a workdir under;
	// none means a create may not name one.
	WorkdirRoots []string
	// Limits are the operator's ceilings and defaults for sandboxes and
	// execs (zero: none).
	Limits Limits
	// AllowSharedNetworks lets docker sandboxes use the host's network or
	// another container's (network "host", "container:X"); off, refused.
	AllowSharedNetworks bool
	// EgressCIDRs are the address ranges a tenant's private-network
	// sandbox may open with its egress policy's allow_cidr (loopback,
	// private and metadata ranges stay closed otherwise); none by default.
	EgressCIDRs []netip.Prefix
	// PublicURL is the server's address as its users reach it (such as
	// https://runbox.example.com), the base of the port URLs ExposePort
	// returns; empty: the scheme and Host of the ExposePort request.
	PublicURL string
	// OperatorTenant names the tenant whose tokens see the server-wide
	// /metrics; every other tenant's token sees only its own sandboxes
	// and execs there. Empty: no tenant sees server-wide figures.
	OperatorTenant string
	// Quotas apply to tenants that have none of their own.
	Quotas Quotas
	// ReapInterval is how often the reaper looks for idle, expired and
	// lost sandboxes; zero means 10 s.
	ReapInterval time.Duration
	// EgressAuditInterval is how often the refusals of private sandboxes'
	// egress are taken into the audit log (egress_refusals.go); zero
	// means 2 s. A sandbox's are also taken when it is removed.
	EgressAuditInterval time.Duration
	// IdleIgnoresBackground makes the idle reaper count only running
	// execs: a sandbox whose execs have ended but left processes running
	// (a server started in the background) is idle. By default such a
	// sandbox is in use.
	IdleIgnoresBackground bool
	// Now is the clock of sandboxes' idle TTLs, lifetimes and pauses; nil
	// means time.Now. Tests move it to see the reaper act without waiting.
	Now func() time.Time
	// Log receives the server's structured logs; nil discards them.
	Log *slog.Logger
	// MCP, when set, serves MCP over streamable HTTP at /mcp behind the
	// same bearer tokens (see MCPConfig).
	MCP *MCPConfig
}

// Server is the control plane. Make one with New, serve its Handler (or
// call Serve), and Close it.
type Server struct {
	cfg     Config
	store   *registry.Store
	log     *slog.Logger
	metrics *metrics

	// bg is the context of background work (watchers, the reaper); Close
	// ends it. streams ends streaming calls at shutdown.
	bg         context.Context
	stopBG     context.CancelFunc
	streams    context.Context
	endStreams context.CancelFunc
	wg         sync.WaitGroup

	mu        sync.Mutex
	upstreams map[string]*upstream     // by sandbox id
	usage     map[string]*usage        // by sandbox id
	execs     map[execKey]*execTrack   // execs known to be running
	creating  map[string]int           // sandboxes being created, by tenant (admitMu)
	snapping  map[string]int           // snapshots being taken, by tenant (admitMu)
	unknown   []runbox.Sandbox         // found at start, not in the registry
	egressSbs map[string]egressSandbox // private sandboxes, by id (egressAuditLoop)
	conns     *capListener             // Serve's listener (nil before)

	cleanups   cleanupQueue // failed cleanups, retried by the reaper
	recreateMu sync.Mutex   // one recreate at a time
	// admitMu makes a tenant's sandbox count exact for max_sandboxes: a
	// create counts the registry and the creates in flight, and a made
	// sandbox goes into the registry and out of creating, each under it.
	admitMu sync.Mutex
	started bool // Start has finished

	// mcp serves /mcp (nil without Config.MCP); mcpPlaces are its tenants'
	// views of the server, by tenant name; self is the in-process way
	// into the server's own exec and files API their sessions use.
	mcp       *mcpserver.HTTPHandler
	mcpPlaces map[string]*mcpPlace
	self      *selfAPI

	// signer holds the key of signed port URLs (portsign.go).
	signer portSigner
}

// New returns a Server for cfg. It starts nothing: call Start (Serve does).
func New(cfg Config) *Server {
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.ReapInterval <= 0 {
		cfg.ReapInterval = 10 * time.Second
	}
	if cfg.EgressAuditInterval <= 0 {
		cfg.EgressAuditInterval = defaultEgressAuditInterval
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	bg, stopBG := context.WithCancel(context.Background())
	streams, endStreams := context.WithCancel(context.Background())
	s := &Server{
		cfg: cfg, store: cfg.Store, log: cfg.Log,
		bg: bg, stopBG: stopBG, streams: streams, endStreams: endStreams,
		upstreams: make(map[string]*upstream),
		usage:     make(map[string]*usage),
		execs:     make(map[execKey]*execTrack),
		creating:  make(map[string]int),
		snapping:  make(map[string]int),
		egressSbs: make(map[string]egressSandbox),
	}
	s.metrics = newMetrics(s)
	if cfg.MCP != nil {
		s.mcpPlaces = make(map[string]*mcpPlace)
		s.self = newSelfAPI(s)
		mcpCfg := cfg.MCP.Server
		// A model behind /mcp sees only the sandboxes its session made
		// (the client holds the tenant's token; the model does not), or
		// the one its client bound it to (mcpserver.SandboxHeader).
		s.mcp = mcpserver.NewHTTPHandler(s.resolveMCP, mcpCfg, mcpserver.HTTPOptions{
			SessionIdle: cfg.MCP.SessionIdle, AnyHost: cfg.MCP.AnyHost})
	}
	return s
}

// Start reconciles the registry with the providers (sandboxes gone are
// marked lost; sandboxes the registry does not know are reported, never
// adopted or deleted), resumes watching the execs left running by a
// previous run, and starts the reaper.
func (s *Server) Start(ctx context.Context) error {
	if err := s.privateDirs(); err != nil {
		return err
	}
	if err := s.reconcile(ctx); err != nil {
		return err
	}
	if err := s.resumeExecs(ctx); err != nil {
		return err
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		s.reapLoop()
	}()
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		s.egressAuditLoop()
	}()
	s.mu.Lock()
	s.started = true
	s.mu.Unlock()
	return nil
}

// Close ends background work and the connections to sandboxes. Sandboxes
// and their execs keep running; a later server resumes them. MCP sessions
// cannot outlive the server: they are ended first (see CloseMCP).
func (s *Server) Close() error {
	mctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	s.CloseMCP(mctx)
	cancel()
	s.endStreams()
	s.stopBG()
	s.wg.Wait()
	s.mu.Lock()
	for id, up := range s.upstreams {
		up.close()
		delete(s.upstreams, id)
	}
	s.mu.Unlock()
	if s.self != nil {
		s.self.close()
	}
	return nil
}

// handlerOptions are the options of every Connect handler.
func (s *Server) handlerOptions() connect.HandlerOption {
	return connect.WithHandlerOptions(
		// A message over the limit is refused from its length prefix.
		connect.WithReadMaxBytes(runbox.MaxMessageBytes),
		// JSON requests with unknown fields are refused, naming the field.
		connect.WithCodec(strictJSON{name: "json"}),
		connect.WithCodec(strictJSON{name: "json; charset=utf-8"}),
		connect.WithInterceptors(s.metrics.interceptor(s.log)),
	)
}

// sandboxAPI adds the services routed to a sandbox's runboxd (exec and
// files) to mux.
func (s *Server) sandboxAPI(mux *http.ServeMux) {
	mux.Handle(runboxv1connect.NewRunboxServiceHandler(&execProxy{s}, s.handlerOptions()))
	mux.Handle(runboxv1connect.NewFilesServiceHandler(&filesProxy{s}, s.handlerOptions()))
}

// Handler returns the HTTP handler serving every endpoint.
func (s *Server) Handler() http.Handler {
	api := http.NewServeMux()
	api.Handle(runboxv1connect.NewSandboxServiceHandler(&sandboxService{s}, s.handlerOptions()))
	s.sandboxAPI(api)
	api.Handle("/metrics", s.metrics.handler(s))
	api.HandleFunc("/readyz", s.readyz)
	if s.mcp != nil {
		api.Handle("/mcp", s.mcp)
		api.Handle("/mcp/", s.mcp)
	}
	root := http.NewServeMux()
	root.HandleFunc("/healthz", healthz)
	// The port route authenticates by token or signed URL itself.
	root.HandleFunc(portRoutePrefix, s.portRoute)
	root.Handle("/", withBaseURL(s.authenticate(api)))
	return root
}

// now is the server's clock (Config.Now).
func (s *Server) now() time.Time { return s.cfg.Now() }
