package cli

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/client"
)

// The CLI as a client of runbox serve: with RUNBOX_HOST and RUNBOX_TOKEN (or
// --host and --token) set, every sandbox command goes through the server
// instead of the providers on this machine, with the same output and exit
// codes (compare DOCKER_HOST). serve, token and audit stay local: they work
// on the server's own machine and database.

// remoteFlags are the root's --host and --token.
type remoteFlags struct {
	host, token string
	// providerSet: up or run was given --provider, or $RUNBOX_PROVIDER is
	// set; otherwise the server's default provider is used.
	providerSet bool
	server      *client.Server
}

func (a *app) addRemoteFlags(root *cobra.Command) {
	fs := root.PersistentFlags()
	fs.StringVar(&a.remote.host, "host", os.Getenv("RUNBOX_HOST"), "use the runbox serve at this address (http://HOST:PORT or https://...; $RUNBOX_HOST)")
	fs.StringVar(&a.remote.token, "token", "", "bearer token for --host ($RUNBOX_TOKEN)")
	root.PersistentPreRunE = func(c *cobra.Command, _ []string) error {
		if f := c.Flags().Lookup("provider"); f != nil && f.Changed {
			a.remote.providerSet = true
		}
		if os.Getenv("RUNBOX_PROVIDER") != "" {
			a.remote.providerSet = true
		}
		if a.remote.token == "" {
			a.remote.token = os.Getenv("RUNBOX_TOKEN")
		}
		return nil
	}
}

// remoteServer returns the server client when the CLI works through a
// server (nil otherwise).
func (a *app) remoteServer() (*client.Server, error) {
	if a.remote.host == "" {
		return nil, nil
	}
	if a.remote.server != nil {
		return a.remote.server, nil
	}
	if a.remote.token == "" {
		return nil, fmt.Errorf("%w: RUNBOX_HOST (or --host) is set but no token: set RUNBOX_TOKEN or --token (runbox token create makes one)",
			runbox.ErrUnauthenticated)
	}
	s, err := client.NewServer(a.remote.host, a.remote.token)
	if err != nil {
		return nil, fmt.Errorf("RUNBOX_HOST (or --host) %q: want http://HOST:PORT or https://HOST:PORT", a.remote.host)
	}
	a.remote.server = s
	return s, nil
}

// explain adds to err, a failure of an invocation that went through a
// server, which setting to look at: RUNBOX_HOST when the server did not
// answer, RUNBOX_TOKEN when it refused the token. Other errors, and errors
// of an invocation that used no server, are returned as they are.
func (a *app) explain(err error) error {
	if err == nil || a.remote.server == nil {
		return err
	}
	switch {
	case errors.Is(err, runbox.ErrUnauthenticated):
		return fmt.Errorf("%w (the runbox serve at RUNBOX_HOST=%s refused RUNBOX_TOKEN: runbox token create makes one)", err, a.remote.host)
	case errors.Is(err, runbox.ErrProviderUnavailable) && !errors.Is(err, runbox.ErrSandboxLost):
		return fmt.Errorf("%w (is runbox serve running at RUNBOX_HOST=%s?)", err, a.remote.host)
	}
	return err
}

// remoteProvider is runbox.Provider through a server, creating sandboxes
// with a given provider of the server's (or its default).
type remoteProvider struct {
	*client.Server
	provider string
	opts     client.SandboxOptions
}

// Name is the server-side provider asked for ("" for the server's
// default, which is named "server").
func (p *remoteProvider) Name() string {
	if p.provider == "" {
		return p.Server.Name()
	}
	return p.provider
}

// Create creates the sandbox on the server.
func (p *remoteProvider) Create(ctx context.Context, spec runbox.SandboxSpec) (runbox.Sandbox, error) {
	o := p.opts
	o.Provider = p.provider
	return p.Server.CreateSandbox(ctx, spec, o)
}

// serverOptions are up's and run's flags that only a server takes.
type serverOptions struct {
	labels           []string
	idleTTL, maxLife time.Duration
	recreate         bool
}

func (o *serverOptions) add(fs *pflag.FlagSet) {
	fs.StringArrayVar(&o.labels, "label", nil, "with a server: a KEY=VALUE label (repeatable)")
	fs.DurationVar(&o.idleTTL, "idle-ttl", 0, "with a server: remove the sandbox after this long idle (no exec running, no client attached)")
	fs.DurationVar(&o.maxLife, "max-lifetime", 0, "with a server: remove the sandbox this long after its creation")
	fs.BoolVar(&o.recreate, "recreate", false, "with a server: replace the sandbox with a fresh one if it is found lost")
}

// apply puts the options on p when it is a server's; elsewhere any of them
// is an error.
func (o *serverOptions) apply(p runbox.Provider) error {
	set := len(o.labels) > 0 || o.idleTTL != 0 || o.maxLife != 0 || o.recreate
	rp, ok := p.(*remoteProvider)
	if !ok {
		if set {
			return errors.New("--label, --idle-ttl, --max-lifetime and --recreate need a server (RUNBOX_HOST)")
		}
		return nil
	}
	if o.idleTTL < 0 || o.maxLife < 0 {
		return errors.New("--idle-ttl and --max-lifetime must not be negative")
	}
	labels := map[string]string{}
	for _, kv := range o.labels {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return fmt.Errorf("--label %q: want KEY=VALUE", kv)
		}
		labels[k] = v
	}
	rp.opts = client.SandboxOptions{Labels: labels, IdleTTL: o.idleTTL, MaxLifetime: o.maxLife, Recreate: o.recreate}
	return nil
}

// clientFor returns a client for sb of provider p: through the server for
// a server's sandbox, else through p's Dialer.
func (a *app) clientFor(p runbox.Provider, sb runbox.Sandbox) *client.Client {
	return a.clientWith(p, sb, nil)
}

// clientWith is clientFor whose first connection is conn, a connection to
// sb's runboxd already opened and authenticated (by the lookup's probe),
// when conn is not nil: one connection and handshake fewer before a
// command runs.
func (a *app) clientWith(p runbox.Provider, sb runbox.Sandbox, conn net.Conn) *client.Client {
	if rp, ok := p.(*remoteProvider); ok {
		if conn != nil {
			conn.Close()
		}
		return rp.Sandbox(sb.ID)
	}
	dial := p.Dialer(sb)
	if conn != nil {
		h := &handoff{conn: conn}
		a.unused = append(a.unused, h)
		dial = h.dialer(dial)
	}
	return client.New(dial, client.WithSandboxName(sb.ID))
}

// handoff holds a connection opened before its client: the client's first
// dial takes it, later dials dial anew.
type handoff struct {
	mu   sync.Mutex
	conn net.Conn
}

// dialer returns dial, except that its first call returns the held
// connection.
func (h *handoff) dialer(dial runbox.Dialer) runbox.Dialer {
	return func(ctx context.Context) (net.Conn, error) {
		h.mu.Lock()
		conn := h.conn
		h.conn = nil
		h.mu.Unlock()
		if conn != nil {
			return conn, nil
		}
		return dial(ctx)
	}
}

// close closes the held connection if no dial took it.
func (h *handoff) close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.conn != nil {
		h.conn.Close()
		h.conn = nil
	}
}
