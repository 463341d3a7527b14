package host_test

import (
	"context"
	"testing"
	"time"

	"github.com/runbox/runbox/client"
)

// BenchmarkInfoNewConnection opens a new client, and so a new connection to
// runboxd, for every Info call: what a connection costs, the authentication
// handshake included (one round trip and a SHA-256 on the daemon, once per
// connection; BenchmarkExecTrue reuses one connection and pays it once).
func BenchmarkInfoNewConnection(b *testing.B) {
	dial, _ := benchDialer(b)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for b.Loop() {
		c := client.New(dial)
		if _, err := c.Info(ctx); err != nil {
			b.Fatal(err)
		}
		c.Close()
	}
}
