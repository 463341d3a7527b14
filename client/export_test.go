package client

import "time"

// WithPingTimeouts shortens the half-dead connection check for tests.
func WithPingTimeouts(after, timeout time.Duration) Option {
	return func(o *options) { o.pingAfter, o.pingTimeout = after, timeout }
}

// WithOverdue shortens the headroom past an exec's deadline, and the most a
// client waits on for a daemon that still has the exec, for tests.
func WithOverdue(headroom, max time.Duration) Option {
	return func(o *options) { o.headroom, o.maxOverdue = headroom, max }
}
