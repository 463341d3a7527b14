package supervisor

import (
	"testing"

	"github.com/runbox/runbox"
)

// BenchmarkStartTrue runs `bash -c true` through the supervisor alone (no
// RPC): Start, wait for the Result. -benchmem shows what one exec allocates
// in the daemon.
func BenchmarkStartTrue(b *testing.B) {
	for _, mode := range []string{"off", ModeCgroup2} {
		b.Run(mode, func(b *testing.B) {
			if mode == ModeCgroup2 {
				if _, err := findCgroup2Dir(); err != nil {
					b.Skipf("no cgroup v2 hierarchy: %v", err)
				}
			}
			s, err := New(Config{CgroupMode: mode})
			if err != nil {
				b.Fatal(err)
			}
			defer shutdown(b, s)
			b.ReportAllocs()
			for b.Loop() {
				e, _, err := s.Start(runbox.ExecSpec{Command: "true"})
				if err != nil {
					b.Fatal(err)
				}
				<-e.Done()
				if res := e.Result(); res.ExitCode != 0 {
					b.Fatalf("true: %+v", res)
				}
			}
		})
	}
}
