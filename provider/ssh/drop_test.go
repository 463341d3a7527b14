package ssh_test

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/client"
)

// lineWriter collects streamed output and signals once it holds a line.
type lineWriter struct {
	mu     sync.Mutex
	buf    bytes.Buffer
	want   string
	signal chan struct{}
	once   sync.Once
}

func (w *lineWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	if strings.Contains(w.buf.String(), w.want) {
		w.once.Do(func() { close(w.signal) })
	}
	return len(p), nil
}

func (w *lineWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

// Killing the sshd processes that serve the provider's SSH connection in
// the middle of an exec (the whole connection drops, not one channel)
// leaves the command running on the host: the client dials a new
// connection, re-attaches, and gets every line exactly once and the real
// exit status. Repeated with the drop at a random line.
func TestSSHConnectionKilledMidExec(t *testing.T) {
	e := newEnv(t, nonRootUser(t))
	p := e.provider(t, "rbx")
	sb := create(t, p, runbox.SandboxSpec{})
	c := newClient(t, p, sb)
	const lines = 30
	var want strings.Builder
	for i := 1; i <= lines; i++ {
		fmt.Fprintf(&want, "line %d\n", i)
	}
	for round := range 4 {
		at := 1 + rand.IntN(lines-5)
		logins := countLog(t, e.sshd, "Accepted publickey")
		file := fmt.Sprintf("/tmp/rbx-drop-%d-%d", os.Getpid(), rand.Uint32())
		w := &lineWriter{want: fmt.Sprintf("line %d\n", at), signal: make(chan struct{})}
		killed := make(chan int, 1)
		go func() {
			select {
			case <-w.signal:
				killed <- e.sshd.KillSessions()
			case <-time.After(time.Minute):
				killed <- -1
			}
		}()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		res, err := c.Exec(ctx, fmt.Sprintf("for i in $(seq 1 %d); do echo line $i; echo line $i >> %s; sleep 0.1; done; exit 7", lines, file),
			client.WithStdout(w))
		cancel()
		n := <-killed
		if n <= 0 {
			t.Fatalf("round %d: killed %d sshd process(es) at line %d", round, n, at)
		}
		if err != nil {
			t.Fatalf("round %d: exec across a killed connection (at line %d): %v", round, at, err)
		}
		if res.ExitCode != 7 {
			t.Errorf("round %d: exit %d, want 7", round, res.ExitCode)
		}
		if got := w.String(); got != want.String() {
			t.Errorf("round %d: streamed %q, want every line exactly once", round, got)
		}
		if string(res.Stdout) != want.String() {
			t.Errorf("round %d: result stdout %q", round, res.Stdout)
		}
		if after := countLog(t, e.sshd, "Accepted publickey"); after <= logins {
			t.Errorf("round %d: no new SSH login after the kill (%d before, %d after)", round, logins, after)
		}
		// The command ran on, on the host, through the drop.
		b, err := os.ReadFile(file)
		os.Remove(file)
		if err != nil || string(b) != want.String() {
			t.Errorf("round %d: the command's own record %q (%v): it did not run to its end", round, b, err)
		}
		t.Logf("round %d: killed %d sshd process(es) after line %d; exit %d, %d bytes streamed once", round, n, at, res.ExitCode, len(w.String()))
	}
}

// An outage longer than the client's own reconnect window (sshd stopped
// for 3 s, every connection dropped, then started again) does not lose the
// exec either: the provider keeps dialling while the host does not answer,
// and the stream resumes with every line once.
func TestSSHDRestartedMidExec(t *testing.T) {
	e := newEnv(t, nonRootUser(t))
	p := e.provider(t, "rbx")
	sb := create(t, p, runbox.SandboxSpec{})
	c := newClient(t, p, sb)
	var want strings.Builder
	for i := 1; i <= 60; i++ {
		fmt.Fprintf(&want, "line %d\n", i)
	}
	w := &lineWriter{want: "line 3\n", signal: make(chan struct{})}
	restarted := make(chan struct{})
	go func() {
		defer close(restarted)
		select {
		case <-w.signal:
			if err := e.sshd.Restart(3 * time.Second); err != nil {
				t.Error(err)
			}
		case <-time.After(time.Minute):
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res, err := c.Exec(ctx, "for i in $(seq 1 60); do echo line $i; sleep 0.1; done; exit 5", client.WithStdout(w))
	<-restarted
	if err != nil {
		t.Fatalf("exec across an sshd restart: %v", err)
	}
	if res.ExitCode != 5 || w.String() != want.String() {
		t.Errorf("exit %d, streamed %q; want 5 and every line once", res.ExitCode, w.String())
	}
}
