package local_test

import (
	"os"
	"testing"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/internal/providertest"
)

// TestConformance runs the provider conformance suite against local
// sandboxes. Their processes are visible from the host, so the suite counts
// them through the host's /proc, as for the host provider.
func TestConformance(t *testing.T) {
	providertest.Run(t, func(t *testing.T) providertest.Fixture {
		fx := providertest.ProcFixture(newProvider(t), runbox.SandboxSpec{})
		fx.RequireCgroup2 = os.Getenv("RUNBOX_REQUIRE_CGROUP2") == "1"
		fx.Load = true
		// Limits need cgroups, which only root can make.
		fx.PidsLimit, fx.MemoryLimit = os.Geteuid() == 0, os.Geteuid() == 0
		if os.Geteuid() != 0 {
			fx.NoLimitsReason = "the tests do not run as root, and only root can make the cgroups local limits use (run them as root, as CI does)"
		}
		return fx
	})
}
