package server_test

import (
	"errors"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/client"
	"github.com/runbox/runbox/provider/host"
)

// TestEgressPolicyThroughServe: a private-network sandbox's allowlist goes
// through the API to the provider intact; allow_cidr is limited to the
// operator's --allow-egress-cidr ranges (so a tenant cannot open loopback,
// the server's private network or the metadata address), and a policy
// without network private, or a malformed one, is invalid_argument.
func TestEgressPolicyThroughServe(t *testing.T) {
	rec := &recorder{}
	ts := startServer(t, func(c *serverConfig) {
		rec.Provider = &host.Provider{Home: c.Providers["host"].(*host.Provider).Home}
		c.Providers = map[string]runbox.Provider{"local": rec}
		c.DefaultProvider = "local"
		c.EgressCIDRs = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/24")}
	})
	ctx := ctxT(t)
	srv := ts.tenant(t, "a")
	want := runbox.EgressPolicy{Allow: []string{"pypi.org", "*.pythonhosted.org"}, AllowCIDR: []string{"127.0.0.2/32", "127.0.0.9"},
		Deny: []string{"evil.pythonhosted.org"}, Resolve: map[string]string{"pkg.test": "127.0.0.2"}}
	if _, err := srv.CreateSandbox(ctx, runbox.SandboxSpec{Network: "private", Egress: want}, client.SandboxOptions{}); err != nil {
		t.Fatal(err)
	}
	rec.mu.Lock()
	got := rec.specs[len(rec.specs)-1]
	rec.mu.Unlock()
	if got.Network != "private" || !slices.Equal(got.Egress.Allow, want.Allow) || !slices.Equal(got.Egress.AllowCIDR, want.AllowCIDR) ||
		!slices.Equal(got.Egress.Deny, want.Deny) || got.Egress.Resolve["pkg.test"] != "127.0.0.2" {
		t.Errorf("the provider was asked for %+v, want network private and %+v", got, want)
	}
	for _, c := range []struct {
		spec runbox.SandboxSpec
		says string
	}{
		{runbox.SandboxSpec{Network: "private", Egress: runbox.EgressPolicy{AllowCIDR: []string{"127.0.0.0/8"}}}, "--allow-egress-cidr"},
		{runbox.SandboxSpec{Network: "private", Egress: runbox.EgressPolicy{AllowCIDR: []string{"169.254.169.254"}}}, "--allow-egress-cidr"},
		{runbox.SandboxSpec{Network: "private", Egress: runbox.EgressPolicy{AllowCIDR: []string{"10.0.0.0/8"}}}, "--allow-egress-cidr"},
		{runbox.SandboxSpec{Network: "host", Egress: runbox.EgressPolicy{Allow: []string{"pypi.org"}}}, "network private"},
		{runbox.SandboxSpec{Egress: runbox.EgressPolicy{Allow: []string{"pypi.org"}}}, "network private"},
		{runbox.SandboxSpec{Network: "private", Egress: runbox.EgressPolicy{Allow: []string{"a.*.org"}}}, "--allow"},
	} {
		if _, err := srv.CreateSandbox(ctx, c.spec, client.SandboxOptions{}); !errors.Is(err, runbox.ErrInvalidSpec) || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%+v: want invalid_argument naming %s, got %v", c.spec, c.says, err)
		}
	}
}
