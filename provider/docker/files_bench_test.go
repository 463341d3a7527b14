package docker_test

import (
	"testing"

	"github.com/runbox/runbox"
	rbclient "github.com/runbox/runbox/client"
	"github.com/runbox/runbox/internal/providertest"
)

// BenchmarkDockerPushSmallFiles pushes 581 small files into a container by
// sync and one WriteFile per file, over the bind-mounted socket and over
// the docker exec stream (see providertest.BenchPushSmallFiles).
func BenchmarkDockerPushSmallFiles(b *testing.B) {
	needEngine(b)
	p := newProvider(b, false)
	sb := create(b, p, runbox.SandboxSpec{})
	for _, s := range streams {
		b.Run(s.name, func(b *testing.B) {
			dial := p.Dialer(sb)
			if s.force {
				dial = newProvider(b, true).Dialer(sb)
			}
			c := rbclient.New(dial, rbclient.WithSandboxName(sb.ID))
			defer c.Close()
			providertest.BenchPushSmallFiles(b, c, false)
		})
	}
}
