// Package full is the runbox CLI with every provider and command: the
// core of package cli plus the providers that need an engine's or a
// cluster's client (docker, kubernetes) and the commands built on a server,
// a database, the MCP SDK or cobra's man page generator (serve, token,
// audit, mcp, man). cmd/runbox-full
// runs it; the light runbox hands it what it does not link (see
// cli.Features).
package full

import (
	"context"
	"flag"
	"fmt"
	"io"
	"slices"

	"github.com/spf13/cobra"
	"k8s.io/klog/v2"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/client"
	"github.com/runbox/runbox/internal/cli"
	"github.com/runbox/runbox/provider/docker"
	"github.com/runbox/runbox/provider/kubernetes"
)

// init keeps client-go's log (klog) off the CLI's stderr: its streams
// report their own closing as errors there, and runbox reports what failed
// itself, as one line.
func init() {
	fs := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(fs)
	_ = fs.Set("logtostderr", "false")
	_ = fs.Set("alsologtostderr", "false")
	_ = fs.Set("stderrthreshold", "FATAL")
	klog.SetOutput(io.Discard)
}

// Features is every provider and command of runbox, providers in lookup
// order (cheapest first).
func Features() cli.Features {
	ps := append(cli.RecordProviders(),
		cli.ProviderKind{Name: docker.ProviderName, New: func(e cli.Env) runbox.Provider {
			return &docker.Provider{Home: e.Home, Runboxd: e.Runboxd}
		}},
		cli.ProviderKind{Name: kubernetes.ProviderName, New: func(e cli.Env) runbox.Provider {
			return &kubernetes.Provider{Home: e.Home}
		}, Configure: configureKube},
	)
	order := []string{"host", "local", docker.ProviderName, "ssh", kubernetes.ProviderName}
	slices.SortStableFunc(ps, func(a, b cli.ProviderKind) int {
		return slices.Index(order, a.Name) - slices.Index(order, b.Name)
	})
	return cli.Features{
		Providers: ps,
		Commands: []func(cli.App) *cobra.Command{
			func(x cli.App) *cobra.Command { return newApp(x).mcpCmd() },
			func(x cli.App) *cobra.Command { return newApp(x).serveCmd() },
			func(x cli.App) *cobra.Command { return newApp(x).tokenCmd() },
			func(x cli.App) *cobra.Command { return newApp(x).auditCmd() },
			func(x cli.App) *cobra.Command { return newApp(x).manCmd() },
		},
	}
}

// Main runs the full CLI with args (without the program name) and returns
// the exit status (cli.Main).
func Main(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	return cli.Main(ctx, Features(), args, stdin, stdout, stderr)
}

// configureKube gives the kubernetes provider the flags set.
func configureKube(p runbox.Provider, f cli.ProviderFlags) error {
	kp, ok := p.(*kubernetes.Provider)
	if !ok {
		return fmt.Errorf("kubernetes flags: provider %s is not kubernetes'", p.Name())
	}
	if f.KubeNamespace != "" {
		kp.Namespace = f.KubeNamespace
	}
	if f.KubePodTemplate != "" {
		kp.PodTemplate = f.KubePodTemplate
	}
	if f.KubeContext != "" {
		kp.Context = f.KubeContext
	}
	if f.KubeRunboxdImage != "" {
		kp.RunboxdImage = f.KubeRunboxdImage
	}
	return nil
}

// app is one invocation as this package's commands use it: the names they
// had inside package cli, over cli.App.
type app struct {
	x      cli.App
	env    cli.Env
	stdin  io.Reader
	stdout io.Writer
	stderr io.Writer
}

func newApp(x cli.App) *app {
	return &app{x: x, env: x.Env(), stdin: x.Stdin(), stdout: x.Stdout(), stderr: x.Stderr()}
}

func (a *app) provider(name string) (runbox.Provider, error)      { return a.x.Provider(name) }
func (a *app) localProvider(name string) (runbox.Provider, error) { return a.x.LocalProvider(name) }
func (a *app) allProviders() []runbox.Provider                    { return a.x.AllProviders() }
func (a *app) remoteServer() (*client.Server, error)              { return a.x.RemoteServer() }

var (
	exactArgs = cli.ExactArgs
	writeJSON = cli.WriteJSON
	oneLine   = cli.OneLine
)
