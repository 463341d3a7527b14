package ssh_test

import (
	"testing"

	"github.com/runbox/runbox/internal/loopbacksshd"
	"github.com/runbox/runbox/internal/providertest"
)

// requireEnv makes a missing sshd (or test user) a failure, not a skip.
const requireEnv = "RUNBOX_REQUIRE_SSH"

// req is whether this machine can run a test sshd; RUNBOX_REQUIRE_SSH=1
// (CI) makes it a failure when it cannot.
var req = providertest.CheckRequirement("provider/ssh", requireEnv, loopbacksshd.Probe)

func TestMain(m *testing.M) { providertest.Main(m) }
