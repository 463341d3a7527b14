package cli_test

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/runbox/runbox/internal/cli"
	"github.com/runbox/runbox/provider/docker"
	"github.com/runbox/runbox/provider/kubernetes"
	"github.com/runbox/runbox/provider/ssh"
)

// help runs the CLI in-process with the server commands as sc has them and
// returns what it printed.
func help(t *testing.T, sc cli.ServerCommands, args ...string) string {
	t.Helper()
	t.Setenv("RUNBOX_HOME", t.TempDir())
	var stdout, stderr bytes.Buffer
	if code := cli.Main(context.Background(), sc, args, strings.NewReader(""), &stdout, &stderr); code != 0 {
		t.Fatalf("runbox %q: exit %d, %s", args, code, stderr.String())
	}
	return stdout.String()
}

// TestUpHelpNamesProviderSettings: up's help names the kubernetes and ssh
// providers' settings.
func TestUpHelpNamesProviderSettings(t *testing.T) {
	up := help(t, cli.ServerCommands{}, "up", "--help")
	for _, s := range []string{kubernetes.NamespaceEnv, kubernetes.PodTemplateEnv, kubernetes.ContextEnv, kubernetes.RunboxdImageEnv, kubernetes.DefaultRunboxdImage, ssh.TargetEnv} {
		if !strings.Contains(up, s) {
			t.Errorf("up --help does not name %s", s)
		}
	}
}

// TestUpNamesEveryProvider: up --provider with a name runbox does not
// know lists every provider, each under the name its package gives.
func TestUpNamesEveryProvider(t *testing.T) {
	want := []string{"host", "local", docker.ProviderName, ssh.ProviderName, kubernetes.ProviderName}
	var stderr bytes.Buffer
	t.Setenv("RUNBOX_HOME", t.TempDir())
	cli.Main(context.Background(), cli.ServerCommands{}, []string{"up", "--provider", "nosuch"}, strings.NewReader(""), &bytes.Buffer{}, &stderr)
	if !strings.Contains(stderr.String(), "available: "+strings.Join(slices.Sorted(slices.Values(want)), ", ")) {
		t.Errorf("up --provider nosuch: %q; want every provider named", stderr.String())
	}
}

// TestServerCommandsHandedOver: in runbox-full each server command
// (serve, mcp, token, audit, man) is a stand-in that hands the whole
// invocation, as given, to runbox-server (ServerCommands.HandOver): its flags,
// --help, `help COMMAND`, flags before the command and shell completion of
// its arguments; and where nothing can take it over (in-process), it
// fails, exit 125, saying it is not linked.
func TestServerCommandsHandedOver(t *testing.T) {
	t.Setenv("RUNBOX_HOME", t.TempDir())
	var handed [][]string
	sc := cli.ServerCommands{HandOver: func(args []string, why string) error {
		handed = append(handed, args)
		return fmt.Errorf("%s: handed", why)
	}}
	for _, args := range [][]string{
		{"serve", "--listen", "127.0.0.1:0", "--bad-flag"},
		{"mcp", "--help"},
		{"help", "token"},
		{"--host", "http://127.0.0.1:1", "token", "list"},
		{"audit", "--json"},
		{"man", "/nonexistent/dir"},
		{"__complete", "serve", "--li"},
	} {
		handed = nil
		var stdout, stderr bytes.Buffer
		code := cli.Main(context.Background(), sc, args, strings.NewReader(""), &stdout, &stderr)
		if code != 125 || len(handed) != 1 || !slices.Equal(handed[0], args) || !strings.Contains(stderr.String(), "handed") || stdout.Len() > 0 {
			t.Errorf("runbox-full %q: exit %d, handed %q, stdout %q, stderr %q; want the invocation handed over as given, once, and nothing printed but the failure",
				args, code, handed, stdout.String(), stderr.String())
		}
	}
	for _, args := range [][]string{{"ls"}, {"version"}, {"__complete", "ls", ""}} {
		handed = nil
		code := cli.Main(context.Background(), sc, args, strings.NewReader(""), &bytes.Buffer{}, &bytes.Buffer{})
		if code != 0 || handed != nil {
			t.Errorf("runbox-full %q: exit %d, handed %q; want it run here", args, code, handed)
		}
	}
	var stderr bytes.Buffer
	if code := cli.Main(context.Background(), cli.ServerCommands{}, []string{"serve"}, strings.NewReader(""), &bytes.Buffer{}, &stderr); code != 125 || !strings.Contains(stderr.String(), "not linked") {
		t.Errorf("serve in-process without a handover: exit %d, %q; want 125 saying it is not linked", code, stderr.String())
	}
}
