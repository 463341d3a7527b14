package server_test

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/client"
	"github.com/runbox/runbox/provider/host"
)

// benchSetup starts a server and one sandbox, and returns a direct client of
// the sandbox's runboxd beside the server's clients.
func benchSetup(b *testing.B) (ts *testServer, srv *client.Server, direct *client.Client, sbID string, tok string) {
	ts = startServerB(b, func(c *serverConfig) { c.ReapInterval = 10 * time.Second })
	tok = ts.tokenB(b, "bench")
	srv, err := client.NewServer(ts.url, tok)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { srv.Close() })
	ctx := context.Background()
	sb, err := srv.Create(ctx, runbox.SandboxSpec{})
	if err != nil {
		b.Fatal(err)
	}
	hp := &host.Provider{Home: ts.home}
	hsb, err := hp.Get(ctx, sb.Detail["provider_id"])
	if err != nil {
		b.Fatal(err)
	}
	direct = client.New(hp.Dialer(hsb))
	b.Cleanup(func() { direct.Close() })
	return ts, srv, direct, sb.ID, tok
}

// BenchmarkRunTrue compares Run("true") straight to the sandbox's runboxd
// with the same through the server: the streaming exec API (Go client),
// and the unary SandboxService.Run. Each iteration runs all three in turn,
// so a machine busy with other work slows them alike; it reports each
// one's median and the server's added median.
func BenchmarkRunTrue(b *testing.B) {
	_, srv, direct, id, _ := benchSetup(b)
	ctx := context.Background()
	remote := srv.Sandbox(id)
	defer remote.Close()
	ops := []struct {
		name string
		op   func() (runbox.Result, error)
	}{
		{"direct", func() (runbox.Result, error) { return direct.Exec(ctx, "true") }},
		{"server", func() (runbox.Result, error) { return remote.Exec(ctx, "true") }},
		{"server-unary", func() (runbox.Result, error) {
			res, _, err := srv.Run(ctx, id, runbox.ExecSpec{Command: "true"})
			return res, err
		}},
	}
	lat := make([][]time.Duration, len(ops))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for j, o := range ops {
			start := time.Now()
			res, err := o.op()
			if err != nil || res.ExitCode != 0 {
				b.Fatalf("%s: %+v, %v", o.name, res, err)
			}
			lat[j] = append(lat[j], time.Since(start))
		}
	}
	b.StopTimer()
	p50 := make([]float64, len(ops))
	for j, o := range ops {
		slices.Sort(lat[j])
		p50[j] = float64(lat[j][len(lat[j])/2].Microseconds()) / 1000
		b.ReportMetric(p50[j], o.name+"-p50-ms")
	}
	b.ReportMetric(p50[1]-p50[0], "added-p50-ms")
	b.ReportMetric(p50[2]-p50[0], "added-unary-p50-ms")
}

// BenchmarkExecs50Clients: 50 clients, each with its own connection, run
// execs at once, straight to runboxd and through the server; reports
// execs per second.
func BenchmarkExecs50Clients(b *testing.B) {
	ts, srv, _, id, tok := benchSetup(b)
	ctx := context.Background()
	hp := &host.Provider{Home: ts.home}
	got, _ := srv.Get(ctx, id)
	hsb, _ := hp.Get(ctx, got.Detail["provider_id"])
	for _, c := range []struct {
		name string
		make func() *client.Client
	}{
		{"direct", func() *client.Client { return client.New(hp.Dialer(hsb)) }},
		{"server", func() *client.Client { return client.NewRemote(ts.url, tok, id) }},
	} {
		b.Run(c.name, func(b *testing.B) {
			const clients = 50
			var next atomic.Int64
			var wg sync.WaitGroup
			b.ResetTimer()
			start := time.Now()
			for i := 0; i < clients; i++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					cl := c.make()
					defer cl.Close()
					for next.Add(1) <= int64(b.N) {
						if res, err := cl.Exec(ctx, "true"); err != nil || res.ExitCode != 0 {
							b.Errorf("%+v, %v", res, err)
							return
						}
					}
				}()
			}
			wg.Wait()
			b.StopTimer()
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "execs/s")
		})
	}
}
