package host_test

import (
	"os"
	"testing"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/internal/providertest"
	"github.com/runbox/runbox/provider/host"
)

// TestConformance runs the provider conformance suite against host
// sandboxes: runboxd processes on this machine, whose processes the suite
// inspects through this machine's /proc. RUNBOX_REQUIRE_CGROUP2=1 (set in
// CI) makes a missing cgroup v2 hierarchy a failure, not a skip.
func TestConformance(t *testing.T) {
	providertest.Run(t, func(t *testing.T) providertest.Fixture {
		fx := providertest.ProcFixture(newProvider(t), runbox.SandboxSpec{})
		// CI runs on machines with a writable cgroup v2 hierarchy.
		fx.RequireCgroup2 = os.Getenv("RUNBOX_REQUIRE_CGROUP2") == "1"
		fx.Load = true
		return fx
	})
}

// newProvider returns a host provider with its own home, removed when the
// test ends. The home is short on purpose: unix socket paths under it must
// fit in 107 bytes, which a t.TempDir named after a subtest may not.
func newProvider(t testing.TB) *host.Provider {
	t.Helper()
	bin, err := providertest.BuildRunboxd()
	if err != nil {
		t.Fatal(err)
	}
	home, err := os.MkdirTemp("", "rbx")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(home) })
	return &host.Provider{Home: home, Runboxd: bin}
}
