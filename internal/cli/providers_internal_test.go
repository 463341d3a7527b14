package cli

import (
	"slices"
	"testing"

	"github.com/runbox/runbox/provider/docker"
	"github.com/runbox/runbox/provider/host"
	"github.com/runbox/runbox/provider/kubernetes"
	"github.com/runbox/runbox/provider/local"
	"github.com/runbox/runbox/provider/ssh"
)

// TestProviderOrder: the CLI looks a sandbox up in every provider,
// cheapest first, and each name it knows makes the provider of that name.
func TestProviderOrder(t *testing.T) {
	want := []string{host.ProviderName, local.ProviderName, docker.ProviderName, ssh.ProviderName, kubernetes.ProviderName}
	if !slices.Equal(providerOrder, want) {
		t.Errorf("providerOrder = %v; want %v", providerOrder, want)
	}
	for _, name := range providerOrder {
		p, ok := newProvider(name, Env{Home: t.TempDir()})
		if !ok || p.Name() != name {
			t.Errorf("newProvider(%q) = %v, %v; want the provider of that name", name, p, ok)
		}
	}
	if p, ok := newProvider("nosuch", Env{}); ok {
		t.Errorf("newProvider(nosuch) = %v; want none", p)
	}
}
