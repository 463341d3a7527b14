// Package full is the runbox CLI with every provider: the core of package
// cli plus the providers that need an engine's or a cluster's client
// (docker, kubernetes). cmd/runbox-full runs it; the front hands it every
// command it does not run itself but the server commands (serve, mcp,
// token, audit, man), which live in runbox-server (package servercli) and
// which runbox-full hands on to it (cli.Features.HandOver).
package full

import (
	"context"
	"flag"
	"fmt"
	"io"
	"slices"

	"k8s.io/klog/v2"

	"github.com/runbox/runbox"
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

// Features is every provider of runbox, in lookup order (cheapest first),
// and no command beyond the core's.
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
	return cli.Features{Providers: ps}
}

// Main runs the CLI with every provider and args (without the program
// name) in this process and returns the exit status (cli.Main). The server
// commands fail here, not linked: cmd/runbox-full hands them to
// runbox-server.
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
