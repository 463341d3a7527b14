// Package cli is the runbox command line: one file per subcommand, a root
// that builds the command tree, and Main, which runs it in-process and turns
// the outcome into an exit code, so tests drive the real CLI without os.Exit.
//
// Exit codes follow docker run: the command's own status, or 125 when runbox
// itself failed (no such sandbox, provider error, lost sandbox), with one
// line on stderr: "runbox: <op> sandbox <sandbox>: <cause>".
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/client"
	"github.com/runbox/runbox/internal/buildinfo"
	"github.com/runbox/runbox/internal/execrules"
	"github.com/runbox/runbox/internal/homes"
	"github.com/runbox/runbox/provider/host"
	"github.com/runbox/runbox/provider/local"
)

// ExitStatusFailure is the exit status when runbox itself failed rather
// than the command it ran (docker run's convention).
const ExitStatusFailure = execrules.ExitStatusFailure

// ExitTimedOut is the exit status of a command that timed out and then
// exited by itself (execrules.ExitTimedOut).
const ExitTimedOut = execrules.ExitTimedOut

// ExitError carries the status a command exited with. Run returns it when
// the command ran and exited non-zero; it is not a runbox failure.
type ExitError struct {
	Code int
}

// Error says which status the command exited with.
func (e *ExitError) Error() string { return fmt.Sprintf("exit status %d", e.Code) }

// Env is what the CLI takes from the environment.
type Env struct {
	// Home is the runbox home ($RUNBOX_HOME, default ~/.runbox), where
	// sandbox records live so separate runbox processes share them.
	Home string
	// Runboxd is the runboxd binary ($RUNBOX_RUNBOXD); "" lets each provider
	// look for it.
	Runboxd string
	// Provider is the provider up and run use without --provider
	// ($RUNBOX_PROVIDER, default local).
	Provider string
}

// defaultProvider is the provider up and run use without --provider or
// $RUNBOX_PROVIDER.
const defaultProvider = local.ProviderName

// Main runs the CLI with args (without the program name), the server
// commands as sc has them, and returns the exit status. Failures of runbox
// itself are reported on stderr as one line.
func Main(ctx context.Context, sc ServerCommands, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	return ExitCode(Run(ctx, sc, args, stdin, stdout, stderr), stderr)
}

// ExitCode maps Run's error to an exit status: 0 for nil, the command's
// status for an *ExitError, else 125 after printing
// "runbox: <error>" on stderr as one line.
func ExitCode(err error, stderr io.Writer) int {
	if err == nil {
		return 0
	}
	var ee *ExitError
	if errors.As(err, &ee) {
		return ee.Code
	}
	return execrules.ReportFailure(stderr, err)
}

// oneLine folds a multi-line message onto one line (execrules.OneLine).
func oneLine(s string) string { return execrules.OneLine(s) }

// Run runs the CLI with args (without the program name) and the server
// commands as sc has them.
func Run(ctx context.Context, sc ServerCommands, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	e, err := envFromOS()
	if err != nil {
		return err
	}
	if !needsNoHome(args) {
		if err := homes.Trusted(e.Home); err != nil {
			return err
		}
	}
	a := &app{env: e, server: sc, args: args, stdin: stdin, stdout: stdout, stderr: stderr}
	defer a.closeProviders()
	if sc.HandOver != nil && handedCompletion(args) {
		return sc.HandOver(args, "runbox "+args[1]+" completion")
	}
	root := a.newRoot()
	root.SetArgs(args)
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	if err := root.ExecuteContext(ctx); err != nil {
		return a.explain(err)
	}
	return a.handErr
}

// envFromOS reads RUNBOX_HOME, RUNBOX_RUNBOXD and RUNBOX_PROVIDER.
func envFromOS() (Env, error) {
	e := Env{Home: os.Getenv("RUNBOX_HOME"), Runboxd: os.Getenv("RUNBOX_RUNBOXD"), Provider: os.Getenv("RUNBOX_PROVIDER")}
	if e.Provider == "" {
		e.Provider = defaultProvider
	}
	if e.Home == "" {
		h, err := os.UserHomeDir()
		if err != nil {
			return e, fmt.Errorf("runbox home: set RUNBOX_HOME: %w", err)
		}
		e.Home = filepath.Join(h, ".runbox")
	}
	return e, nil
}

// needsNoHome reports whether args name a command that reads and writes
// nothing in the runbox home (version, help, completion, man), which runs
// even where the home is refused.
func needsNoHome(args []string) bool {
	if len(args) == 0 {
		return true
	}
	switch args[0] {
	case "version", "--version", "-v", "help", "--help", "-h", "completion", "man":
		return true
	}
	return false
}

// app is one CLI invocation: its environment and standard streams.
type app struct {
	env    Env
	server ServerCommands
	args   []string // the invocation's arguments, without the program name
	stdin  io.Reader
	stdout io.Writer
	stderr io.Writer

	made   map[string]runbox.Provider // providers made so far, by name
	unused []*handoff                 // probe connections given to clients, closed at the end if never used
	remote remoteFlags                // --host and --token (remote.go)
	// handErr is why a server command's stand-in could not hand `help
	// COMMAND` over (handed.go): cobra's help functions return no error.
	handErr error
}

func (a *app) newRoot() *cobra.Command {
	root := &cobra.Command{
		Use:   "runbox",
		Short: "Run commands in sandboxes that survive timeouts and cancellation",
		Long: `runbox runs shell commands inside sandboxes. A command that times out or is
cancelled dies with every process it spawned, and the sandbox lives on.

Exit status: the command's own, or 125 when runbox itself failed.
Sandbox records live under $RUNBOX_HOME (default ~/.runbox).`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	// runbox completion bash|zsh|fish|powershell prints a completion script.
	root.CompletionOptions.HiddenDefaultCmd = false
	root.Version = buildinfo.Current() // --version prints what version does
	root.SetVersionTemplate("{{.Version}}\n")
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return fmt.Errorf("%s: %w (see '%s --help')", c.Name(), err, c.CommandPath())
	})
	root.AddCommand(
		a.runCmd(),
		a.upCmd(),
		a.execCmd(),
		a.shCmd(),
		a.attachCmd(),
		a.logsCmd(),
		a.psCmd(),
		a.cancelCmd(),
		a.killCmd(),
		a.lsCmd(),
		a.inspectCmd(),
		a.networkCmd(),
		a.portForwardCmd(),
		a.rmCmd(),
		a.pauseCmd(),
		a.resumeCmd(),
		a.snapshotCmd(),
		a.forkCmd(),
		a.cpCmd(),
		a.syncCmd(),
		a.versionCmd(),
		a.endpointCmd(),
		a.egressHostCmd(),
	)
	if a.server.Make != nil {
		root.AddCommand(a.server.Make(a)...)
	}
	a.addHanded(root)
	a.addRemoteFlags(root)
	return root
}

// provider returns the named provider, made once per invocation; through
// a server (RUNBOX_HOST), the server's provider of that name.
func (a *app) provider(name string) (runbox.Provider, error) {
	if srv, err := a.remoteServer(); err != nil || srv != nil {
		if err != nil {
			return nil, err
		}
		if !a.remote.providerSet {
			name = ""
		}
		return &remoteProvider{Server: srv, provider: name}, nil
	}
	return a.localProvider(name)
}

// localProvider returns the named provider of this machine, made once per
// invocation.
func (a *app) localProvider(name string) (runbox.Provider, error) {
	if p, ok := a.made[name]; ok {
		return p, nil
	}
	if p, ok := newProvider(name, a.env); ok {
		if a.made == nil {
			a.made = make(map[string]runbox.Provider)
		}
		a.made[name] = p
		return p, nil
	}
	return nil, fmt.Errorf("unknown provider %q (available: %s)", name, strings.Join(providerNames(), ", "))
}

// closeProviders closes the providers that hold resources (an engine
// client).
func (a *app) closeProviders() {
	for _, p := range a.made {
		if c, ok := p.(io.Closer); ok {
			_ = c.Close()
		}
	}
	a.made = nil
	for _, h := range a.unused {
		h.close()
	}
	a.unused = nil
	if a.remote.server != nil {
		a.remote.server.Close()
		a.remote.server = nil
	}
}

// providerNames lists the providers runbox knows, sorted.
func providerNames() []string {
	return slices.Sorted(slices.Values(providerOrder))
}

// allProviders returns every provider, in lookup order (through a server:
// the server).
func (a *app) allProviders() []runbox.Provider {
	if srv, _ := a.remoteServer(); srv != nil {
		return []runbox.Provider{&remoteProvider{Server: srv}}
	}
	ps := make([]runbox.Provider, 0, len(providerOrder))
	for _, name := range providerOrder {
		p, _ := a.localProvider(name)
		ps = append(ps, p)
	}
	return ps
}

// find looks a sandbox up by id, id prefix or name across every provider
// (see findAcross).
func (a *app) find(ctx context.Context, key string) (runbox.Provider, runbox.Sandbox, error) {
	p, sb, conn, err := a.findConn(ctx, key)
	if conn != nil {
		conn.Close()
	}
	return p, sb, err
}

// findConn is find, which also returns the connection its provider's probe
// opened to the sandbox's runboxd when it has one (see findAcross): the
// caller owns it.
func (a *app) findConn(ctx context.Context, key string) (runbox.Provider, runbox.Sandbox, net.Conn, error) {
	if srv, err := a.remoteServer(); err != nil || srv != nil {
		if err != nil {
			return nil, runbox.Sandbox{}, nil, err
		}
		sb, err := srv.Get(ctx, key)
		return &remoteProvider{Server: srv}, sb, nil, err
	}
	return a.findAcross(ctx, key)
}

// isPlainNotFound reports whether err says no more than ErrSandboxNotFound.
func isPlainNotFound(err error) bool {
	var re *runbox.Error
	if errors.As(err, &re) {
		err = re.Err
	}
	return err == runbox.ErrSandboxNotFound
}

// connect finds the sandbox named key and returns a client for it. A sandbox
// whose runboxd is gone is ErrSandboxLost at once, not after the client's
// reconnect window.
func (a *app) connect(ctx context.Context, key string) (runbox.Sandbox, *client.Client, error) {
	p, sb, conn, err := a.findConn(ctx, key)
	if err != nil {
		return sb, nil, err
	}
	if !sb.Alive {
		if conn != nil {
			conn.Close()
		}
		why := sb.Detail["lost"] // the provider's own account, when it has one
		if why == "" {
			why = "runboxd is not answering"
		}
		rm := "runbox rm " + sb.ID
		if sb.Provider == host.ProviderName {
			rm = "runbox rm -f " + sb.ID // commands it started may still run
		}
		return sb, nil, fmt.Errorf("%w: %s (runbox inspect %s shows its record; %s removes it)",
			runbox.ErrSandboxLost, why, sb.ID, rm)
	}
	return sb, a.clientWith(p, sb, conn), nil
}

// fail wraps err as a *runbox.Error for op on sandbox key, so the message
// names both. When err is itself a *runbox.Error its own op and sandbox are
// dropped (they repeat ours) and its exec id kept.
func fail(op, key, exec string, err error) error {
	if err == nil {
		return nil
	}
	var ee *ExitError
	if errors.As(err, &ee) {
		return err
	}
	if re, ok := err.(*runbox.Error); ok {
		if exec == "" {
			exec = re.Exec
		}
		err = re.Err
	}
	return &runbox.Error{Op: op, Sandbox: key, Exec: exec, Err: err}
}

// exactArgs is cobra.ExactArgs with a message naming the expected operands.
func exactArgs(n int, what string) cobra.PositionalArgs {
	return func(c *cobra.Command, args []string) error {
		if len(args) != n {
			return fmt.Errorf("%s: expected %s, got %d argument(s) (see '%s --help')", c.Name(), what, len(args), c.CommandPath())
		}
		return nil
	}
}
