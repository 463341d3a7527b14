package cli

import (
	"io"

	"github.com/spf13/cobra"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/client"
)

// ServerCommands is what a binary does with the server commands (serve,
// mcp, token, audit, man: handover.ServerCommands), which only
// runbox-server links. The zero value does neither: those commands fail,
// saying they are not linked (the CLI run in-process, as tests run it).
type ServerCommands struct {
	// Make makes the server commands for one invocation (runbox-server:
	// package servercli).
	Make func(Invocation) []*cobra.Command
	// HandOver replaces this process with runbox-server run with args (the
	// invocation's, as given), for the server commands Make does not make
	// (runbox-full: handover.Server.Exec); why names the command for the
	// error, returned only when that cannot be done.
	HandOver func(args []string, why string) error
}

// Invocation is one CLI invocation as the server commands see it: its
// environment, standard streams and providers.
type Invocation interface {
	// Env is what the CLI takes from the environment.
	Env() Env
	// Stdin, Stdout and Stderr are the invocation's standard streams.
	Stdin() io.Reader
	Stdout() io.Writer
	Stderr() io.Writer
	// Provider returns the named provider (through a server with
	// RUNBOX_HOST).
	Provider(name string) (runbox.Provider, error)
	// LocalProvider returns the named provider of this machine.
	LocalProvider(name string) (runbox.Provider, error)
	// AllProviders returns every provider, in lookup order (through a
	// server: the server).
	AllProviders() []runbox.Provider
	// RemoteServer returns the server client when the CLI works through a
	// server (RUNBOX_HOST), else nil.
	RemoteServer() (*client.Server, error)
	// ProviderChosen reports whether the invocation names a provider
	// (--provider or $RUNBOX_PROVIDER); through a server, without one the
	// server's default provider is used.
	ProviderChosen() bool
}

var _ Invocation = (*app)(nil)

// Env is what the CLI takes from the environment (Invocation).
func (a *app) Env() Env { return a.env }

// Stdin is the invocation's standard input (Invocation).
func (a *app) Stdin() io.Reader { return a.stdin }

// Stdout is the invocation's standard output (Invocation).
func (a *app) Stdout() io.Writer { return a.stdout }

// Stderr is the invocation's standard error (Invocation).
func (a *app) Stderr() io.Writer { return a.stderr }

// Provider returns the named provider (Invocation).
func (a *app) Provider(name string) (runbox.Provider, error) { return a.provider(name) }

// LocalProvider returns the named provider of this machine (Invocation).
func (a *app) LocalProvider(name string) (runbox.Provider, error) { return a.localProvider(name) }

// AllProviders returns every provider in lookup order (Invocation).
func (a *app) AllProviders() []runbox.Provider { return a.allProviders() }

// RemoteServer returns the server client, or nil (Invocation).
func (a *app) RemoteServer() (*client.Server, error) { return a.remoteServer() }

// ProviderChosen reports whether the invocation names a provider
// (Invocation).
func (a *app) ProviderChosen() bool { return a.remote.providerSet }

// ExactArgs is cobra.ExactArgs with a message naming the expected operands.
func ExactArgs(n int, what string) cobra.PositionalArgs { return exactArgs(n, what) }

// WriteJSON writes v as one line of JSON, HTML characters unescaped.
func WriteJSON(w io.Writer, v any) error { return writeJSON(w, v) }

// OneLine folds a multi-line message onto one line.
func OneLine(s string) string { return oneLine(s) }

// ParseBytes parses a size as --memory takes it (512M, 2G, 1.5GiB; plain
// bytes); "" is zero.
func ParseBytes(s string) (int64, error) { return parseBytes(s) }
