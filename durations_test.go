package runbox_test

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/runbox/runbox"
)

// TestCheckDurations: durations beyond the documented maxima, or negative
// timeouts, are a *DurationError naming the limit; in range passes.
func TestCheckDurations(t *testing.T) {
	for _, c := range []struct {
		spec  runbox.ExecSpec
		limit string
	}{
		{runbox.ExecSpec{Timeout: math.MaxInt64}, "runbox.MaxTimeout"},
		{runbox.ExecSpec{Timeout: runbox.MaxTimeout + time.Millisecond}, "runbox.MaxTimeout"},
		{runbox.ExecSpec{Timeout: math.MinInt64}, "runbox.MaxTimeout"},
		{runbox.ExecSpec{IdleTimeout: math.MaxInt64}, "runbox.MaxIdleTimeout"},
		{runbox.ExecSpec{Grace: math.MaxInt64}, "runbox.MaxGrace"},
		{runbox.ExecSpec{Grace: runbox.MaxGrace + 1}, "runbox.MaxGrace"},
	} {
		err := c.spec.CheckInput()
		var de *runbox.DurationError
		if !errors.As(err, &de) || !errors.Is(err, runbox.ErrInvalidSpec) || !strings.Contains(err.Error(), c.limit) {
			t.Errorf("%+v: want a DurationError naming %s, got %v", c.spec, c.limit, err)
		}
	}
	for _, ok := range []runbox.ExecSpec{{}, {Timeout: runbox.MaxTimeout, Grace: runbox.NoGrace}, {Grace: math.MinInt64, IdleTimeout: time.Second}} {
		if err := ok.CheckDurations(); err != nil {
			t.Errorf("%+v: %v", ok, err)
		}
	}
	for _, ms := range []int64{math.MaxInt64, math.MaxInt64 / 1000, runbox.MaxTimeout.Milliseconds() + 1, -1, math.MinInt64} {
		if err := runbox.CheckMs("timeout", ms, runbox.MaxTimeout, "runbox.MaxTimeout", false); !errors.Is(err, runbox.ErrInvalidSpec) {
			t.Errorf("timeout %d ms: %v", ms, err)
		}
	}
}
