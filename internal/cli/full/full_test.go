package full_test

import (
	"bytes"
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/runbox/runbox/internal/cli"
	"github.com/runbox/runbox/internal/cli/full"
	"github.com/runbox/runbox/provider/docker"
	"github.com/runbox/runbox/provider/kubernetes"
	"github.com/runbox/runbox/provider/ssh"
)

// help runs the CLI with features in-process and returns what it printed.
func help(t *testing.T, f cli.Features, args ...string) string {
	t.Helper()
	t.Setenv("RUNBOX_HOME", t.TempDir())
	var stdout, stderr bytes.Buffer
	if code := cli.Main(context.Background(), f, args, strings.NewReader(""), &stdout, &stderr); code != 0 {
		t.Fatalf("runbox %q: exit %d, %s", args, code, stderr.String())
	}
	return stdout.String()
}

// TestUpHelpNamesProviderSettings: up's help names the kubernetes and ssh
// providers' settings.
func TestUpHelpNamesProviderSettings(t *testing.T) {
	up := help(t, full.Features(), "up", "--help")
	for _, s := range []string{kubernetes.NamespaceEnv, kubernetes.PodTemplateEnv, kubernetes.ContextEnv, kubernetes.RunboxdImageEnv, kubernetes.DefaultRunboxdImage, ssh.TargetEnv} {
		if !strings.Contains(up, s) {
			t.Errorf("up --help does not name %s (the core names the provider's settings without linking it)", s)
		}
	}
}

// TestFullLinksEveryProvider: runbox-full links each provider --provider
// accepts, under the name its package gives, in lookup order.
func TestFullLinksEveryProvider(t *testing.T) {
	var names []string
	for _, k := range full.Features().Providers {
		names = append(names, k.Name)
	}
	want := []string{"host", "local", docker.ProviderName, ssh.ProviderName, kubernetes.ProviderName}
	if !slices.Equal(names, want) {
		t.Errorf("runbox-full's providers: %v; want %v", names, want)
	}
	var stderr bytes.Buffer
	t.Setenv("RUNBOX_HOME", t.TempDir())
	cli.Main(context.Background(), full.Features(), []string{"up", "--provider", "nosuch"}, strings.NewReader(""), &bytes.Buffer{}, &stderr)
	if !strings.Contains(stderr.String(), "available: "+strings.Join(slices.Sorted(slices.Values(want)), ", ")) {
		t.Errorf("up --provider nosuch: %q; want every provider named", stderr.String())
	}
}
