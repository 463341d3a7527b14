package e2e_test

import (
	"fmt"
	"os/exec"
	"sync"
	"testing"
	"time"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/client"
)

// TestLoad: 50 clients, each with its own connection, run 20 execs each
// through one server at once, on 5 sandboxes. Every result is checked;
// afterwards the server's goroutines and open files (its own /metrics:
// go_goroutines, process_open_fds) return to what they were before.
func TestLoad(t *testing.T) {
	const clients, execs, sandboxes = 50, 20, 5
	sp := startServe(t)
	ctx := ctxT(t)
	tok := sp.token("load")
	srv, err := client.NewServer(sp.url, tok)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	var ids []string
	for i := 0; i < sandboxes; i++ {
		sb, err := srv.Create(ctx, runbox.SandboxSpec{})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, sb.ID)
	}
	// Warm up: the server's connection to each sandbox's runboxd, and its
	// database connections (a fixed pool), with a burst of concurrent Runs.
	var warm sync.WaitGroup
	for i := 0; i < 4*sandboxes; i++ {
		warm.Add(1)
		go func(id string) {
			defer warm.Done()
			if _, _, err := srv.Run(ctx, id, runbox.ExecSpec{Command: "true"}); err != nil {
				t.Error(err)
			}
		}(ids[i%sandboxes])
	}
	warm.Wait()
	settle := func() (g, fds float64) {
		// Let connections that just closed be noticed.
		time.Sleep(200 * time.Millisecond)
		return sp.metric("go_goroutines"), sp.metric("process_open_fds")
	}
	g0, fd0 := settle()

	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, clients*execs)
	for i := 0; i < clients; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			c := client.NewRemote(sp.url, tok, ids[i%sandboxes])
			defer c.Close()
			for j := 0; j < execs; j++ {
				want := fmt.Sprintf("c%d-e%d", i, j)
				res, err := c.Exec(ctx, "echo "+want+"; echo "+want+" >&2; exit "+fmt.Sprint(j%7))
				switch {
				case err != nil:
					errs <- fmt.Errorf("client %d exec %d: %w", i, j, err)
				case string(res.Stdout) != want+"\n" || string(res.Stderr) != want+"\n" || res.ExitCode != j%7:
					errs <- fmt.Errorf("client %d exec %d: %+v", i, j, res)
				}
			}
		}(i)
	}
	wg.Wait()
	elapsed := time.Since(start)
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	t.Logf("%d execs by %d clients in %v: %.0f execs/s", clients*execs, clients, elapsed, float64(clients*execs)/elapsed.Seconds())

	// Every exec is audited, each with its exit code.
	rows := sp.auditRows("--tenant", "load")
	n := 0
	for _, r := range rows {
		if r["kind"] == "exec" && r["ended"] != nil {
			n++
		}
	}
	if want := clients*execs + 4*sandboxes; n != want {
		t.Errorf("%d finished exec rows, want %d", n, want)
	}

	var g, fds float64
	deadline := time.Now().Add(60 * time.Second)
	for {
		g, fds = settle()
		if g <= g0+2 && fds <= fd0 {
			break
		}
		if time.Now().After(deadline) {
			out, _ := exec.Command("ls", "-l", fmt.Sprintf("/proc/%d/fd", sp.cmd.Process.Pid)).CombinedOutput()
			t.Logf("server fds:\n%s", out)
			t.Fatalf("server leaked: goroutines %v -> %v, open fds %v -> %v", g0, g, fd0, fds)
		}
	}
	t.Logf("server goroutines %v -> %v, open fds %v -> %v", g0, g, fd0, fds)
}
