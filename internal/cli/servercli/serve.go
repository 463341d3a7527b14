package servercli

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/internal/buildinfo"
	"github.com/runbox/runbox/internal/mcpserver"
	"github.com/runbox/runbox/internal/registry"
	"github.com/runbox/runbox/internal/server"
)

// serveFlags are runbox serve's flags.
type serveFlags struct {
	listen, tlsCert, tlsKey, db string
	insecure, idleIgnoresBg     bool
	providers                   []string
	workdirRoots                []string
	workspaces                  string
	operator                    string
	maxSandboxes, maxExecs      int
	maxSnapshots                int
	reapInterval, shutdown      time.Duration
	logLevel                    string
	mcp, mcpAnyHost             bool
	mcpIdle                     time.Duration
	allowHost, sharedNetworks   bool
	egressCIDRs                 []string
	publicURL                   string
	mcpNetworks, mcpAllow       []string
	maxMemory, defMemory        int64
	maxPids, defPids            int64
	maxCPUs, defCPUs            float64
	maxDisk, defDisk            int64
	maxTimeout, defTimeout      time.Duration
	idleTimeout                 time.Duration
	maxConnsPerIP               int
}

func (a *app) serveCmd() *cobra.Command {
	var f serveFlags
	c := &cobra.Command{
		Use:   "serve [flags]",
		Short: "Serve the control plane: sandboxes for many tenants over HTTP (Connect, gRPC, JSON)",
		Long: `Serve runbox's API on one port (gRPC, gRPC-Web and Connect's HTTP/JSON):
SandboxService (create, get, list, delete, Run) and every sandbox's exec and
files services, routed by the Runbox-Sandbox header. Every call needs
"Authorization: Bearer TOKEN" (runbox token create) except /healthz; a
tenant sees only its own sandboxes. Logs are JSON lines on stderr.

Commands run in the sandboxes' runboxd, not here: stopping or killing the
server loses nothing, and clients re-attach to the next one. Plain HTTP is
refused on a non-loopback address unless --insecure is given.

MCP (streamable HTTP) is served at /mcp behind the same tokens: an MCP
agent's "url" is http(s)://HOST:PORT/mcp with the header "Authorization:
Bearer TOKEN" (docs/mcp.md).

The API, with curl examples: docs/serve.md.`,
		Args: exactArgs(0, "no arguments"),
		RunE: func(c *cobra.Command, _ []string) error {
			return a.serve(c.Context(), &f)
		},
	}
	fs := c.Flags()
	fs.StringVar(&f.listen, "listen", "127.0.0.1:7070", "address to serve on")
	fs.StringVar(&f.tlsCert, "tls-cert", "", "TLS certificate file (PEM); with --tls-key, serve HTTPS")
	fs.StringVar(&f.tlsKey, "tls-key", "", "TLS key file (PEM)")
	fs.StringVar(&f.db, "db", "", "the registry database (default $RUNBOX_HOME/runbox.db)")
	fs.BoolVar(&f.insecure, "insecure", false, "allow plain HTTP on a non-loopback address (tokens cross the network in clear)")
	fs.StringSliceVar(&f.providers, "providers", []string{"local", "docker"}, "providers tenants may use, the first being the default (host has no isolation: add it knowingly)")
	fs.StringSliceVar(&f.workdirRoots, "workdir-root", nil, "a directory under which a create may name its workdir (repeatable; default: none, every sandbox gets a fresh workspace)")
	fs.StringVar(&f.workspaces, "workspaces", "", "where fresh workspaces are made (default $RUNBOX_HOME-workspaces)")
	fs.StringVar(&f.operator, "operator-tenant", "", "the tenant whose tokens see server-wide /metrics (others see only their own sandboxes and execs)")
	fs.IntVar(&f.maxSandboxes, "max-sandboxes", 0, "default per-tenant limit of sandboxes (0: none)")
	fs.IntVar(&f.maxExecs, "max-execs", 0, "default per-tenant limit of concurrently running execs (0: none)")
	fs.IntVar(&f.maxSnapshots, "max-snapshots", 20, "per-tenant limit of snapshots kept (0: none)")
	fs.DurationVar(&f.reapInterval, "reap-interval", 10*time.Second, "how often idle, expired and lost sandboxes are looked for")
	fs.BoolVar(&f.idleIgnoresBg, "idle-ignores-background", false, "count a sandbox idle even while processes its ended execs left run (a background server)")
	fs.DurationVar(&f.shutdown, "shutdown-timeout", 30*time.Second, "on SIGTERM, how long unary calls in flight get to finish")
	fs.StringVar(&f.logLevel, "log-level", "info", "debug, info, warn or error")
	fs.BoolVar(&f.mcp, "mcp", true, "serve MCP at /mcp (--mcp=false: not at all)")
	fs.DurationVar(&f.mcpIdle, "mcp-session-idle", mcpserver.DefaultSessionIdle, "end an MCP session (removing its default sandbox) after this long without a request")
	fs.BoolVar(&f.mcpAnyHost, "mcp-any-host", false, "accept /mcp requests that arrive on a loopback address with a non-loopback Host header (a reverse proxy on this machine); off: DNS-rebinding protection")
	fs.BoolVar(&f.allowHost, "allow-host-provider", false, "let --providers name host (no isolation: a tenant's command runs as this server's user)")
	fs.BoolVar(&f.sharedNetworks, "allow-shared-networks", false, "let docker sandboxes use network host or container:X (they see the host's or another container's traffic)")
	fs.StringVar(&f.publicURL, "public-url", "", "this server's address as its users reach it (https://runbox.example.com), the base of port URLs (default: the scheme and Host of the request asking)")
	fs.StringSliceVar(&f.mcpNetworks, "mcp-allow-network", nil, "network modes an MCP model may ask for besides none (e.g. private)")
	fs.StringSliceVar(&f.mcpAllow, "mcp-allow", nil, "names an MCP model may let a private sandbox reach (*, *.example.com, or a name); none: it opens no name")
	fs.StringSliceVar(&f.egressCIDRs, "allow-egress-cidr", nil, "address ranges a tenant's private-network sandbox may open with allow_cidr (by default none: loopback, private and metadata addresses stay closed)")
	fs.Int64Var(&f.maxMemory, "max-memory", 8<<30, "ceiling on a sandbox's memory in bytes (0: none)")
	fs.Int64Var(&f.defMemory, "default-memory", 2<<30, "memory in bytes of a sandbox that asks for none")
	fs.Int64Var(&f.maxPids, "max-pids", 4096, "ceiling on a sandbox's processes (0: none)")
	fs.Int64Var(&f.defPids, "default-pids", 1024, "processes of a sandbox that asks for no limit")
	fs.Float64Var(&f.maxCPUs, "max-cpus", 4, "ceiling on a sandbox's CPUs (0: none)")
	fs.Float64Var(&f.defCPUs, "default-cpus", 1, "CPUs of a sandbox that asks for no limit")
	fs.Int64Var(&f.maxDisk, "max-disk", 20<<30, "ceiling in bytes on what a sandbox may ask to write to disk outside its workspace (0: none)")
	fs.Int64Var(&f.defDisk, "default-disk", 0, "disk bound in bytes of a sandbox that asks for none (0: the provider's default; local: min(10G, half the free space))")
	fs.DurationVar(&f.maxTimeout, "max-exec-timeout", 24*time.Hour, "ceiling on an exec's timeout (0: none; at most runbox.MaxTimeout, 30 days)")
	fs.DurationVar(&f.defTimeout, "default-exec-timeout", time.Hour, "timeout of an exec that gives none")
	fs.DurationVar(&f.idleTimeout, "idle-timeout", server.DefaultIdleTimeout, "close a client connection idle this long")
	fs.IntVar(&f.maxConnsPerIP, "max-conns-per-ip", server.DefaultMaxConnsPerIP, "concurrent connections one client IP may hold; more are closed at once")
	return c
}

// limits checks the ceilings and defaults (none negative, each default
// within its ceiling) and returns them.
func (f *serveFlags) limits() (server.Limits, error) {
	l := server.Limits{MaxMemory: f.maxMemory, DefaultMemory: f.defMemory, MaxPids: f.maxPids, DefaultPids: f.defPids,
		MaxCPUs: f.maxCPUs, DefaultCPUs: f.defCPUs, MaxExecTimeout: f.maxTimeout, DefaultExecTimeout: f.defTimeout,
		MaxDisk: f.maxDisk, DefaultDisk: f.defDisk}
	switch {
	case l.MaxMemory < 0 || l.DefaultMemory < 0 || l.MaxPids < 0 || l.DefaultPids < 0 || l.MaxCPUs < 0 || l.DefaultCPUs < 0 || l.MaxExecTimeout < 0 || l.DefaultExecTimeout < 0 || l.MaxDisk < 0 || l.DefaultDisk < 0:
		return l, fmt.Errorf("serve: --max-* and --default-* must not be negative")
	case l.MaxMemory > 0 && l.DefaultMemory > l.MaxMemory, l.MaxPids > 0 && l.DefaultPids > l.MaxPids,
		l.MaxCPUs > 0 && l.DefaultCPUs > l.MaxCPUs, l.MaxDisk > 0 && l.DefaultDisk > l.MaxDisk, l.MaxExecTimeout > 0 && l.DefaultExecTimeout > l.MaxExecTimeout:
		return l, fmt.Errorf("serve: a --default-* is above its --max-*")
	case l.MaxExecTimeout > runbox.MaxTimeout || l.DefaultExecTimeout > runbox.MaxTimeout:
		return l, fmt.Errorf("serve: --max-exec-timeout and --default-exec-timeout are at most %s (runbox.MaxTimeout)", runbox.MaxTimeout)
	}
	return l, nil
}

func (a *app) serve(ctx context.Context, f *serveFlags) error {
	if (f.tlsCert == "") != (f.tlsKey == "") {
		return fmt.Errorf("serve: --tls-cert and --tls-key go together")
	}
	if err := server.CheckListen(f.listen, f.tlsCert != "", f.insecure); err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(f.logLevel)); err != nil {
		return fmt.Errorf("serve: --log-level %q: want debug, info, warn or error", f.logLevel)
	}
	if f.reapInterval <= 0 || f.shutdown <= 0 {
		return fmt.Errorf("serve: --reap-interval and --shutdown-timeout must be positive")
	}
	if f.mcpIdle <= 0 {
		return fmt.Errorf("serve: --mcp-session-idle must be positive")
	}
	if f.maxSandboxes < 0 || f.maxExecs < 0 || f.maxSnapshots < 0 {
		return fmt.Errorf("serve: --max-sandboxes, --max-execs and --max-snapshots must not be negative")
	}
	limits, err := f.limits()
	if err != nil {
		return err
	}
	if f.idleTimeout <= 0 || f.maxConnsPerIP <= 0 {
		return fmt.Errorf("serve: --idle-timeout and --max-conns-per-ip must be positive")
	}
	log := slog.New(slog.NewJSONHandler(a.stderr, &slog.HandlerOptions{Level: level}))
	providers := map[string]runbox.Provider{}
	for _, name := range f.providers {
		if name == "host" && !f.allowHost {
			return fmt.Errorf("serve: --providers host: the host provider has no isolation (a tenant's command runs as this server's user); pass --allow-host-provider to offer it anyway")
		}
		p, err := a.LocalProvider(name)
		if err != nil {
			return fmt.Errorf("serve: --providers: %w", err)
		}
		providers[name] = p
	}
	if len(providers) == 0 {
		return fmt.Errorf("serve: --providers: name at least one")
	}
	var roots []string
	for _, r := range f.workdirRoots {
		abs, err := filepath.Abs(r)
		if err != nil {
			return fmt.Errorf("serve: --workdir-root %s: %w", r, err)
		}
		roots = append(roots, abs)
	}
	workspaces := f.workspaces
	if workspaces == "" {
		workspaces = strings.TrimRight(a.env.Home, "/") + "-workspaces"
	}
	var tlsConfig *tls.Config
	if f.tlsCert != "" {
		cert, err := tls.LoadX509KeyPair(f.tlsCert, f.tlsKey)
		if err != nil {
			return fmt.Errorf("serve: TLS: %w", err)
		}
		tlsConfig = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	}
	var egressCIDRs []netip.Prefix
	for _, c := range f.egressCIDRs {
		p, err := netip.ParsePrefix(c)
		if err != nil {
			return fmt.Errorf("serve: --allow-egress-cidr %q: want a range such as 10.1.0.0/16", c)
		}
		egressCIDRs = append(egressCIDRs, p.Masked())
	}
	store, err := registry.Open(ctx, a.dbPath(f.db))
	if err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	defer store.Close()
	ln, err := net.Listen("tcp", f.listen)
	if err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	var mcp *server.MCPConfig
	if f.mcp {
		mcpserver.Version = buildinfo.Current()
		mcp = &server.MCPConfig{SessionIdle: f.mcpIdle, AnyHost: f.mcpAnyHost,
			Server: mcpserver.Config{Providers: f.providers, Logger: log.With("component", "mcp"),
				Limits: mcpserver.Limits{Networks: f.mcpNetworks, Allow: f.mcpAllow}}}
	}
	srv := server.New(server.Config{
		Store: store, Providers: providers, DefaultProvider: f.providers[0],
		Home: a.env.Home, WorkspaceDir: workspaces, WorkdirRoots: roots,
		Limits: limits, AllowSharedNetworks: f.sharedNetworks, EgressCIDRs: egressCIDRs, PublicURL: f.publicURL,
		Quotas:       server.Quotas{MaxSandboxes: f.maxSandboxes, MaxExecs: f.maxExecs, MaxSnapshots: f.maxSnapshots},
		ReapInterval: f.reapInterval, Log: log, MCP: mcp,
		IdleIgnoresBackground: f.idleIgnoresBg, OperatorTenant: f.operator,
	})
	return srv.Serve(ctx, ln, server.ServeOptions{TLS: tlsConfig, ShutdownTimeout: f.shutdown,
		IdleTimeout: f.idleTimeout, MaxConnsPerIP: f.maxConnsPerIP})
}

// dbPath is the registry database: flag, else $RUNBOX_HOME/runbox.db.
func (a *app) dbPath(flag string) string {
	if flag != "" {
		return flag
	}
	if p := os.Getenv("RUNBOX_DB"); p != "" {
		return p
	}
	return filepath.Join(a.env.Home, "runbox.db")
}
