package ssh_test

import (
	"testing"

	"github.com/runbox/runbox/internal/providertest"
)

// req is whether this machine can run a test sshd; RUNBOX_REQUIRE_SSH=1
// (CI) makes it a failure when it cannot.
var req = providertest.CheckRequirement("provider/ssh", requireEnv, probeSSHD)

func TestMain(m *testing.M) { providertest.Main(m) }
