package host_test

import (
	"testing"

	"github.com/runbox/runbox/internal/providertest"
)

// BenchmarkPushSmallFiles pushes 581 small files into a host sandbox by
// sync and one WriteFile per file (issue 6's goal: sync under 2 s and at
// least 50× faster). docs/performance.md records the figures:
//
//	go test -run '^$' -bench PushSmallFiles -count 5 ./provider/host/ ./provider/docker/
func BenchmarkPushSmallFiles(b *testing.B) {
	c, _ := benchSandbox(b)
	providertest.BenchPushSmallFiles(b, c, true)
}
