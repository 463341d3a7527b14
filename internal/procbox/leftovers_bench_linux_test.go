package procbox

import (
	"context"
	"testing"
)

// BenchmarkKillMarkedNone is the /proc scan every host Remove now ends
// with when nothing is left: a marker no process carries, every process
// since boot a candidate.
func BenchmarkKillMarkedNone(b *testing.B) {
	for b.Loop() {
		if n, err := killMarked(context.Background(), "00000000000000000000000000000000", 0); n != 0 || err != nil {
			b.Fatal(n, err)
		}
	}
}
