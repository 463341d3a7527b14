package client

import "time"

// WithPingTimeouts shortens the half-dead connection check for tests.
func WithPingTimeouts(after, timeout time.Duration) Option {
	return func(o *options) { o.pingAfter, o.pingTimeout = after, timeout }
}
