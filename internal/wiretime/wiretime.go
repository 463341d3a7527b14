// Package wiretime converts durations to the whole milliseconds the API
// carries, for the Go client's converters (internal/daemon/wire) and the
// runbox front's (internal/frontrpc) alike.
package wiretime

import "time"

// DurationToMs converts d to whole milliseconds, rounding up so that a short
// but non-zero duration never becomes 0 ("no limit") on the wire.
func DurationToMs(d time.Duration) int64 {
	if d <= 0 {
		return int64(d / time.Millisecond)
	}
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}

// GraceToMs converts a grace period for the wire: a negative one (none,
// runbox.NoGrace) stays negative however short it is.
func GraceToMs(d time.Duration) int64 {
	if d < 0 {
		return -1
	}
	return DurationToMs(d)
}
