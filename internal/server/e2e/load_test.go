package e2e_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/client"
)

// maxDBFiles bounds the descriptors the registry's connection pool may hold
// open: 4 connections (registry.maxConns), each on the database and its
// WAL, and one shared -shm. The pool keeps them between requests; how many
// are open depends on how many requests overlapped, so TestLoad counts them
// apart from every other descriptor.
const maxDBFiles = 4*2 + 1

// openFiles counts the server process's open descriptors: those on its
// database files (db), and all the others.
func (sp *serveProc) openFiles() (other, db int) {
	dir := fmt.Sprintf("/proc/%d/fd", sp.cmd.Process.Pid)
	ents, err := os.ReadDir(dir)
	if err != nil {
		sp.t.Fatalf("server descriptors: %v", err)
	}
	for _, e := range ents {
		target, err := os.Readlink(filepath.Join(dir, e.Name()))
		if err != nil {
			continue // closed since the listing
		}
		if strings.HasPrefix(target, sp.db) {
			db++
		} else {
			other++
		}
	}
	return other, db
}

// TestLoad: 50 clients, each with its own connection, run 20 execs each
// through one server at once, on 5 sandboxes. Every result is checked;
// afterwards the server's goroutines (its own /metrics: go_goroutines) and
// open descriptors (/proc, apart from its database pool's, which is
// bounded) return to what they were before.
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
		g = sp.metric("go_goroutines") // first: its connection counts in both
		other, db := sp.openFiles()
		if db > maxDBFiles {
			t.Errorf("the server holds %d descriptors of its database, more than its pool's bound (%d)", db, maxDBFiles)
		}
		return g, float64(other)
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
			socks, _ := exec.Command("ss", "-apn").CombinedOutput()
			for line := range strings.Lines(string(socks)) {
				if strings.Contains(line, fmt.Sprintf("pid=%d,", sp.cmd.Process.Pid)) {
					t.Logf("server socket: %s", strings.TrimSpace(line))
				}
			}
			t.Fatalf("server leaked: goroutines %v -> %v, open fds %v -> %v", g0, g, fd0, fds)
		}
	}
	t.Logf("server goroutines %v -> %v, open fds %v -> %v", g0, g, fd0, fds)
}
