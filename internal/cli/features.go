package cli

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/client"
	"github.com/runbox/runbox/provider/host"
	"github.com/runbox/runbox/provider/local"
	"github.com/runbox/runbox/provider/ssh"
)

// The CLI is runbox-full (cmd/runbox-full) and runbox-server
// (cmd/runbox-server); the runbox front (internal/front) runs the common
// execs itself and hands everything else to one of them. The core here
// links the providers whose sandboxes are records under $RUNBOX_HOME (host,
// local, ssh); package full adds the providers that need an engine's or a
// cluster's client (docker, kubernetes), and package servercli the
// commands built on a server, a database, the MCP SDK or a man page
// generator (serve, mcp, token, audit, man), through the Features they
// pass to Main. runbox-full has a stand-in for each of those commands that
// hands it to runbox-server (handed.go).

// Features is what a binary links: its providers and the commands it adds
// to the core's.
type Features struct {
	// Providers are the providers the binary links, in the order a sandbox
	// is looked for (cheapest lookup first).
	Providers []ProviderKind
	// Commands make the commands the binary adds to the core's (serve,
	// token, audit, mcp, man in runbox-server).
	Commands []func(App) *cobra.Command
	// HandOver replaces this process with runbox-server run with args (the
	// invocation's, as given), for the server commands (serve, mcp, token,
	// audit, man) that Commands do not provide (handed.go); why names the
	// command for the error, returned only when that cannot be done. nil:
	// those commands fail, saying they are not linked.
	HandOver func(args []string, why string) error
}

// ProviderKind is a provider a binary links.
type ProviderKind struct {
	// Name is the provider's name (--provider).
	Name string
	// New makes the provider for this invocation's environment.
	New func(Env) runbox.Provider
	// Configure gives a provider New made up's provider-specific flags
	// (--ssh, --namespace, ...), called only when one of the provider's
	// own flags is set (nil: it takes none).
	Configure func(runbox.Provider, ProviderFlags) error
}

// ProviderFlags are up's (and run's) flags that belong to one provider.
type ProviderFlags struct {
	// SSHTarget and SSHAcceptNew are --ssh and --ssh-accept-new.
	SSHTarget    string
	SSHAcceptNew bool
	// Kube* are --namespace, --pod-template, --context and --runboxd-image;
	// "" leaves the provider's default.
	KubeNamespace, KubePodTemplate, KubeContext, KubeRunboxdImage string
}

// The providers the CLI knows, linked or not. The core names them without
// importing the packages it does not link (a test of runbox-full's checks
// these names against the packages' own).
const (
	dockerProvider     = "docker"
	sshProvider        = ssh.ProviderName
	kubernetesProvider = "kubernetes"
)

// knownProviders lists every provider of runbox in lookup order: what
// --provider accepts in either binary.
var knownProviders = []string{host.ProviderName, local.ProviderName, dockerProvider, sshProvider, kubernetesProvider}

// RecordProviders are the providers the core links: those whose sandboxes
// are records under $RUNBOX_HOME, found without an engine or a cluster.
func RecordProviders() []ProviderKind {
	return []ProviderKind{
		{Name: host.ProviderName, New: func(e Env) runbox.Provider { return &host.Provider{Home: e.Home, Runboxd: e.Runboxd} }},
		{Name: local.ProviderName, New: func(e Env) runbox.Provider { return &local.Provider{Home: e.Home, Runboxd: e.Runboxd} }},
		{Name: ssh.ProviderName, New: func(e Env) runbox.Provider { return &ssh.Provider{Home: e.Home, Runboxd: e.Runboxd} }, Configure: configureSSH},
	}
}

// configureSSH gives the ssh provider its target and host key policy.
func configureSSH(p runbox.Provider, f ProviderFlags) error {
	sp, ok := p.(*ssh.Provider)
	if !ok {
		return fmt.Errorf("ssh flags: provider %s is not ssh's", p.Name())
	}
	sp.Target, sp.AcceptNew = f.SSHTarget, f.SSHAcceptNew
	return nil
}

// App is one CLI invocation as the commands of Features.Commands see it.
type App struct{ a *app }

// Env is what the CLI takes from the environment.
func (x App) Env() Env { return x.a.env }

// Stdin, Stdout and Stderr are the invocation's standard streams.
func (x App) Stdin() io.Reader { return x.a.stdin }

// Stdout is the invocation's standard output.
func (x App) Stdout() io.Writer { return x.a.stdout }

// Stderr is the invocation's standard error.
func (x App) Stderr() io.Writer { return x.a.stderr }

// Provider returns the named provider (through a server with RUNBOX_HOST).
func (x App) Provider(name string) (runbox.Provider, error) { return x.a.provider(name) }

// LocalProvider returns the named provider of this machine.
func (x App) LocalProvider(name string) (runbox.Provider, error) { return x.a.localProvider(name) }

// AllProviders returns every provider, in lookup order (through a server:
// the server).
func (x App) AllProviders() []runbox.Provider { return x.a.allProviders() }

// RemoteServer returns the server client when the CLI works through a
// server (RUNBOX_HOST), else nil.
func (x App) RemoteServer() (*client.Server, error) { return x.a.remoteServer() }

// ProviderChosen reports whether the invocation names a provider
// (--provider or $RUNBOX_PROVIDER); through a server, without one the
// server's default provider is used.
func (x App) ProviderChosen() bool { return x.a.remote.providerSet }

// ExactArgs is cobra.ExactArgs with a message naming the expected operands.
func ExactArgs(n int, what string) cobra.PositionalArgs { return exactArgs(n, what) }

// WriteJSON writes v as one line of JSON, HTML characters unescaped.
func WriteJSON(w io.Writer, v any) error { return writeJSON(w, v) }

// OneLine folds a multi-line message onto one line.
func OneLine(s string) string { return oneLine(s) }

// linked returns the kind of the named provider when this binary links it.
func (a *app) linked(name string) (ProviderKind, bool) {
	for _, k := range a.features.Providers {
		if k.Name == name {
			return k, true
		}
	}
	return ProviderKind{}, false
}

// ParseBytes parses a size as --memory takes it (512M, 2G, 1.5GiB; plain
// bytes); "" is zero.
func ParseBytes(s string) (int64, error) { return parseBytes(s) }
