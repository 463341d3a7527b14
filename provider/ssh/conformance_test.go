package ssh_test

import (
	"testing"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/internal/providertest"
)

// TestConformance runs the provider conformance suite against ssh
// sandboxes on a real OpenSSH server on 127.0.0.1, logged in as a non-root
// user (runbox-ssh-test as root): runboxd runs in /proc tracking mode
// there, as on most hosts a plain user reaches. Every case shares one
// provider, so all of them travel over one SSH connection. The remote host
// is this machine, so the suite counts survivors and zombies in this
// machine's /proc.
func TestConformance(t *testing.T) {
	e := newEnv(t, nonRootUser(t))
	fx := providertest.ProcFixture(e.provider(t, "rbx"), runbox.SandboxSpec{})
	providertest.Run(t, func(*testing.T) providertest.Fixture { return fx })
}
