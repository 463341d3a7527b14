package cli

import (
	"flag"
	"io"

	"k8s.io/klog/v2"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/provider/docker"
	"github.com/runbox/runbox/provider/host"
	"github.com/runbox/runbox/provider/kubernetes"
	"github.com/runbox/runbox/provider/local"
	"github.com/runbox/runbox/provider/ssh"
)

// The CLI is runbox-full (cmd/runbox-full) and runbox-server
// (cmd/runbox-server); the runbox front (internal/front) runs the common
// execs itself and hands everything else to one of them. This package
// links every provider; package servercli adds the commands built on a
// server, a database, the MCP SDK or a man page generator (serve, mcp,
// token, audit, man) through the ServerCommands it passes to Main.
// runbox-full has a stand-in for each of those commands that hands it to
// runbox-server (handed.go).

// providerOrder is every provider of runbox, in the order a sandbox is
// looked for (cheapest lookup first): what --provider accepts.
var providerOrder = []string{host.ProviderName, local.ProviderName, docker.ProviderName, ssh.ProviderName, kubernetes.ProviderName}

// newProvider makes the named provider for the environment e; false when
// runbox has no provider of that name.
func newProvider(name string, e Env) (runbox.Provider, bool) {
	switch name {
	case host.ProviderName:
		return &host.Provider{Home: e.Home, Runboxd: e.Runboxd}, true
	case local.ProviderName:
		return &local.Provider{Home: e.Home, Runboxd: e.Runboxd}, true
	case docker.ProviderName:
		return &docker.Provider{Home: e.Home, Runboxd: e.Runboxd}, true
	case ssh.ProviderName:
		return &ssh.Provider{Home: e.Home, Runboxd: e.Runboxd}, true
	case kubernetes.ProviderName:
		return &kubernetes.Provider{Home: e.Home}, true
	}
	return nil, false
}

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
