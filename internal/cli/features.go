package cli

import (
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/client"
	"github.com/runbox/runbox/provider/host"
	"github.com/runbox/runbox/provider/local"
	"github.com/runbox/runbox/provider/ssh"
)

// The CLI is one code base built into two binaries (docs/cli.md, "Two
// binaries"). Go runs the init of every package a binary links before
// main, so the binary agents call on every command, runbox, links only
// what its hot commands use: this package's core and the providers whose
// sandboxes are records under $RUNBOX_HOME (host, local, ssh). runbox-full
// adds the providers that need an engine's or a cluster's client (docker,
// kubernetes) and the commands built on a server, a database or the MCP
// SDK (serve, token, audit, mcp), through the Features it passes to Main.
// What runbox cannot do itself it hands to runbox-full with the same
// arguments (delegate.go).

// Features is what a binary links: its providers and the commands it adds
// to the core's.
type Features struct {
	// Providers are the providers the binary links, in the order a sandbox
	// is looked for (cheapest lookup first).
	Providers []ProviderKind
	// Commands make the commands the binary adds to the core's (serve,
	// token, audit, mcp). A command the core knows by name but the binary
	// lacks is listed anyway, and handed to the full binary when run.
	Commands []func(App) *cobra.Command
	// Delegate runs the invocation (args, without the program name) in the
	// binary that links everything, and returns only if it could not
	// (ExecFull). why says what the full binary is needed for. nil: the
	// binary links every provider and command and never delegates.
	Delegate func(args []string, why string) error
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

// Light is the feature set of the runbox binary: the providers whose
// sandboxes are records on this machine (host, local, ssh); everything else
// is delegated to the full binary.
func Light(delegate func(args []string, why string) error) Features {
	return Features{Providers: RecordProviders(), Delegate: delegate}
}

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

// fullOnlyCommands are the commands the core knows but does not link, with
// the one-line help the full binary's own command has (a test of
// runbox-full's checks they agree).
var fullOnlyCommands = []struct{ name, short string }{
	{"mcp", "Serve runbox as MCP tools on stdin/stdout (for AI agents)"},
	{"serve", "Serve the control plane: sandboxes for many tenants over HTTP (Connect, gRPC, JSON)"},
	{"token", "Create, list and revoke runbox serve's bearer tokens"},
	{"audit", "Print runbox serve's audit log: every exec and lifecycle call"},
}

// stubCommand stands for a command this binary does not link: it takes
// any arguments and hands the invocation to the full binary.
func (a *app) stubCommand(name, short string) *cobra.Command {
	return &cobra.Command{
		Use:   name,
		Short: short,
		Long: short + `.

This command is run by runbox-full, the binary with every provider and
command, which runbox finds beside itself or on PATH ($` + FullEnv + ` names
it): "runbox ` + name + ` --help" shows its flags.`,
		DisableFlagParsing: true,
		RunE: func(*cobra.Command, []string) error {
			return needFull("runbox " + name)
		},
	}
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

// linksAll reports whether this binary links every provider runbox knows.
func (a *app) linksAll() bool {
	for _, name := range knownProviders {
		if _, ok := a.linked(name); !ok {
			return false
		}
	}
	return true
}

// needAllProviders returns a needFull error when the invocation must see
// every provider's sandboxes (ls, a name's uniqueness) and this binary
// does not link them all; through a server it needs none.
func (a *app) needAllProviders(what string) error {
	if srv, _ := a.remoteServer(); srv != nil || a.linksAll() {
		return nil
	}
	return needFull(what + " (it looks at every provider's sandboxes: " + strings.Join(a.unlinked(), ", ") + ")")
}

// unlinked lists the known providers this binary does not link.
func (a *app) unlinked() []string {
	var out []string
	for _, name := range knownProviders {
		if _, ok := a.linked(name); !ok {
			out = append(out, name)
		}
	}
	return out
}
