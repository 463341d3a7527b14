package runbox

import (
	"fmt"
	"time"
)

// Duration limits. A duration beyond them is refused (a *DurationError,
// ErrInvalidSpec) by the client before sending, by runboxd on receipt and
// by runbox serve, rather than overflowing: as wire milliseconds, anything
// above about 292 years wraps when made a time.Duration (a huge timeout
// read as negative, a huge grace as an immediate SIGKILL).
const (
	// MaxTimeout bounds ExecSpec.Timeout.
	MaxTimeout = 30 * 24 * time.Hour
	// MaxIdleTimeout bounds ExecSpec.IdleTimeout.
	MaxIdleTimeout = MaxTimeout
	// MaxGrace bounds a grace period (ExecSpec.Grace, a cancel's or a
	// shutdown's); a negative one means none (NoGrace).
	MaxGrace = time.Hour
)

// DurationError is the error for a duration out of range. It unwraps to
// ErrInvalidSpec.
type DurationError struct {
	// What is the duration: "timeout", "idle timeout", "grace".
	What string
	// Ms is the value given, in milliseconds.
	Ms int64
	// Limit is the largest allowed; Const names its constant.
	Limit time.Duration
	Const string
	// Negative is set when the value was refused for being negative.
	Negative bool
}

// Error formats as "timeout 9223372036854775807 ms is more than the
// 720h0m0s limit (runbox.MaxTimeout)".
func (e *DurationError) Error() string {
	if e.Negative {
		return fmt.Sprintf("%s %d ms is negative; want 0 to %s (%s)", e.What, e.Ms, e.Limit, e.Const)
	}
	return fmt.Sprintf("%s %d ms is more than the %s limit (%s)", e.What, e.Ms, e.Limit, e.Const)
}

// Unwrap returns ErrInvalidSpec.
func (e *DurationError) Unwrap() error { return ErrInvalidSpec }

// CheckMs returns a *DurationError when ms milliseconds is above limit or,
// unless negativeOK, below zero.
func CheckMs(what string, ms int64, limit time.Duration, constName string, negativeOK bool) error {
	if ms > limit.Milliseconds() || (ms < 0 && !negativeOK) {
		return &DurationError{What: what, Ms: ms, Limit: limit, Const: constName, Negative: ms < 0}
	}
	return nil
}

// CheckDurations checks spec's durations against MaxTimeout,
// MaxIdleTimeout and MaxGrace (timeouts must not be negative; a negative
// grace means none).
func (s ExecSpec) CheckDurations() error {
	if err := checkDuration("timeout", s.Timeout, MaxTimeout, "runbox.MaxTimeout", false); err != nil {
		return err
	}
	if err := checkDuration("idle timeout", s.IdleTimeout, MaxIdleTimeout, "runbox.MaxIdleTimeout", false); err != nil {
		return err
	}
	return checkDuration("grace", s.Grace, MaxGrace, "runbox.MaxGrace", true)
}

func checkDuration(what string, d, limit time.Duration, constName string, negativeOK bool) error {
	if d > limit || (d < 0 && !negativeOK) {
		return &DurationError{What: what, Ms: d.Milliseconds(), Limit: limit, Const: constName, Negative: d < 0}
	}
	return nil
}
