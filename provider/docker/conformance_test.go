package docker_test

import (
	"os"
	"testing"

	"github.com/runbox/runbox/internal/providertest"
)

// TestConformance runs the provider conformance suite against docker
// sandboxes, on both streams to runboxd: the bind-mounted unix socket and
// the docker exec of runboxd proxy. Processes are counted through the
// engine (docker top), not through runboxd.
func TestConformance(t *testing.T) {
	needEngine(t)
	for _, s := range streams {
		t.Run(s.name, func(t *testing.T) {
			p := newProvider(t, s.force)
			cli := engine(t)
			providertest.Run(t, func(t *testing.T) providertest.Fixture {
				fx := fixture(p, cli)
				// The load cases (Stress, Soak: minutes each) run on the
				// socket stream against Docker; the exec stream is the
				// same daemon, and Podman's runs (TestPodman) leave them
				// to Docker's to keep CI's time.
				fx.Load = !s.force && os.Getenv(podmanChildEnv) == ""
				return fx
			})
		})
	}
}
