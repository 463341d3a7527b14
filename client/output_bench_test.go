package client_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/client"
	"github.com/runbox/runbox/internal/frontrpc"
)

// outputBenchBytes is what each exec of BenchmarkOutput prints.
const outputBenchBytes = 256 << 20

// BenchmarkOutput carries outputBenchBytes of a command's output
// (head -c of /dev/zero) through the Go client (client.Exec over HTTP/2,
// no spill) and, as the baseline in the same run, through the CLI front's
// path (frontrpc's Run over HTTP/1, the front's raw output path): MB/s,
// and CPU seconds per GiB of this process, where both the daemon and the
// client run (getrusage; the command itself is a child, not counted).
// The ways alternate exec by exec, so that the other load of a shared
// machine falls on both alike:
//
//	go test -run '^$' -bench Output -benchtime 8x ./client/
func BenchmarkOutput(b *testing.B) {
	socket := socketPath(b)
	c := client.DialUnix(socket)
	defer c.Close()
	ctx := context.Background()
	command := fmt.Sprintf("head -c %d /dev/zero", outputBenchBytes)
	ways := []struct {
		name string
		run  func() error
	}{
		{"client.Exec", func() error {
			res, err := c.Exec(ctx, command, client.WithStdout(io.Discard), client.WithSpill(runbox.SpillNever))
			if err == nil && res.StdoutBytes != outputBenchBytes {
				err = fmt.Errorf("carried %d bytes of %d", res.StdoutBytes, outputBenchBytes)
			}
			return err
		}},
		{"front", func() error { return frontRun(socket, command) }},
	}
	wall := make([]time.Duration, len(ways))
	cpu := make([]float64, len(ways))
	for b.Loop() {
		for i, w := range ways {
			cpu0, start := selfCPU(), time.Now()
			if err := w.run(); err != nil {
				b.Fatalf("%s: %v", w.name, err)
			}
			wall[i] += time.Since(start)
			cpu[i] += selfCPU() - cpu0
		}
	}
	gib := float64(outputBenchBytes) * float64(b.N) / (1 << 30)
	for i, w := range ways {
		b.ReportMetric(float64(outputBenchBytes)*float64(b.N)/1e6/wall[i].Seconds(), w.name+"-MB/s")
		b.ReportMetric(cpu[i]/gib, w.name+"-cpu-s/GiB")
	}
}

// frontRun runs command through the front's HTTP/1 Run and reads its
// stream to the end, checking that every byte came.
func frontRun(socket, command string) error {
	conn, err := net.Dial("unix", socket)
	if err != nil {
		return err
	}
	defer conn.Close()
	s, err := frontrpc.Run(conn, runbox.ExecSpec{Command: command, Spill: runbox.SpillNever}, true)
	if err != nil {
		return err
	}
	var n int64
	for {
		ev, err := s.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
		if ev.Kind == frontrpc.EventOutput {
			n += int64(len(ev.Data))
		}
	}
	if n != outputBenchBytes {
		return fmt.Errorf("front: carried %d bytes of %d", n, outputBenchBytes)
	}
	return nil
}

// selfCPU returns the CPU seconds this process has used.
func selfCPU() float64 {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}
