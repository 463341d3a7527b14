package wire

import (
	"errors"
	"math"
	"testing"

	"github.com/runbox/runbox"
	runboxv1 "github.com/runbox/runbox/gen/runbox/v1"
)

// TestSpecMsOutOfRange: wire milliseconds beyond the maxima are refused
// before they become a (wrapped) time.Duration; a hugely negative grace is
// NoGrace, not an overflow to the default.
func TestSpecMsOutOfRange(t *testing.T) {
	for _, p := range []*runboxv1.ExecSpec{
		{Command: "true", TimeoutMs: math.MaxInt64},
		{Command: "true", TimeoutMs: math.MaxInt64 / 1000},
		{Command: "true", TimeoutMs: -1},
		{Command: "true", IdleTimeoutMs: math.MaxInt64},
		{Command: "true", GraceMs: math.MaxInt64},
		{Command: "true", GraceMs: runbox.MaxGrace.Milliseconds() + 1},
	} {
		if _, err := SpecFromProto(p); !errors.Is(err, runbox.ErrInvalidSpec) {
			t.Errorf("%v: want ErrInvalidSpec, got %v", p, err)
		}
	}
	s, err := SpecFromProto(&runboxv1.ExecSpec{Command: "true", GraceMs: math.MinInt64})
	if err != nil || s.Grace != runbox.NoGrace {
		t.Errorf("grace MinInt64: %v %v, want NoGrace", s.Grace, err)
	}
}
