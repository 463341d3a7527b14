package local_test

import (
	"testing"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/internal/providertest"
)

// BenchmarkPushSmallFiles pushes 581 small files into a local sandbox by
// sync and one WriteFile per file, in the same run (issue 6's goal: sync
// under 2 s and at least 50× faster). docs/performance.md records the
// figures:
//
//	go test -run '^$' -bench PushSmallFiles -benchtime 5x -count 2 ./provider/local/
func BenchmarkPushSmallFiles(b *testing.B) {
	_, c := create(b, newProvider(b), runbox.SandboxSpec{})
	providertest.BenchPushSmallFiles(b, c, false)
}
