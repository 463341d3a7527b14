package supervisor

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/runbox/runbox"
)

func TestPTYSeesTerminalOfRequestedSize(t *testing.T) {
	for _, mode := range modes(t) {
		t.Run(mode, func(t *testing.T) {
			s := newSup(t, mode)
			r := run(t, s, runbox.ExecSpec{
				Command: `test -t 0 && test -t 1 && test -t 2 && stty size && echo "$TERM" && echo err >&2`,
				PTY:     &runbox.PTYSize{Rows: 24, Cols: 80},
			})
			if r.ExitCode != 0 {
				t.Fatalf("exit %d, stdout %q", r.ExitCode, r.Stdout)
			}
			if got := string(r.Stdout); got != "24 80\r\nxterm-256color\r\nerr\r\n" {
				t.Errorf("stdout %q", got)
			}
			if len(r.Stderr) != 0 {
				t.Errorf("stderr %q, want nothing (the pty is stdout)", r.Stderr)
			}
			r = run(t, s, runbox.ExecSpec{Command: `echo "$TERM $PAGER"; stty size`, PTY: &runbox.PTYSize{}, Env: map[string]string{"TERM": "vt100"}})
			if got := string(r.Stdout); got != "vt100 \r\n24 80\r\n" {
				t.Errorf("TERM from request, no PAGER default, default size: %q", got)
			}
		})
	}
}

func TestPTYResize(t *testing.T) {
	s := newSup(t, "off")
	// The commands wait for a gate file the test creates once it has
	// resized, not for a time.
	gate := filepath.Join(t.TempDir(), "gate")
	t.Cleanup(func() { os.WriteFile(gate, nil, 0o600) })
	wait := "while [ ! -e " + gate + " ]; do sleep 0.01; done; "
	e, _, err := s.Start(runbox.ExecSpec{Command: wait + "stty size", PTY: &runbox.PTYSize{Rows: 24, Cols: 80}})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Resize(e.ID(), 40, 120); err != nil {
		t.Fatalf("resize: %v", err)
	}
	plain, _, err := s.Start(runbox.ExecSpec{Command: wait + "true"})
	if err != nil {
		t.Fatal(err)
	}
	if err := plain.Resize(10, 10); !errors.Is(err, runbox.ErrInvalidSpec) {
		t.Errorf("resize without pty: %v", err)
	}
	if err := os.WriteFile(gate, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	<-e.Done()
	if got := string(e.Result().Stdout); got != "40 120\r\n" {
		t.Errorf("after resize: %q", got)
	}
	if err := s.Resize(e.ID(), 10, 10); !errors.Is(err, runbox.ErrNotRunning) {
		t.Errorf("resize after exit: %v", err)
	}
	<-plain.Done()
}

func TestPTYStdin(t *testing.T) {
	s := newSup(t, "off")
	e, _, err := s.Start(runbox.ExecSpec{Argv: []string{"cat"}, PTY: &runbox.PTYSize{Rows: 24, Cols: 80}})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.WriteStdin([]byte("hello\n")); err != nil {
		t.Fatal(err)
	}
	if err := e.CloseStdin(); err != nil { // ^D: cat sees end of file
		t.Fatal(err)
	}
	select {
	case <-e.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("cat did not see end of file")
	}
	r := e.Result()
	// The terminal echoes the input, then cat prints it.
	if r.ExitCode != 0 || strings.Count(string(r.Stdout), "hello\r\n") != 2 {
		t.Errorf("got exit %d stdout %q", r.ExitCode, r.Stdout)
	}
	if err := e.WriteStdin([]byte("x")); !errors.Is(err, runbox.ErrNotRunning) {
		t.Errorf("write after exit: %v", err)
	}
	r = run(t, s, runbox.ExecSpec{Command: "read x; echo got $x", Stdin: []byte("abc\n"), PTY: &runbox.PTYSize{Rows: 24, Cols: 80}})
	if !strings.Contains(string(r.Stdout), "got abc") {
		t.Errorf("stdin bytes on a pty: %q", r.Stdout)
	}
}

func TestPTYCancelKillsTree(t *testing.T) {
	for _, mode := range modes(t) {
		t.Run(mode, func(t *testing.T) {
			s := newSup(t, mode)
			m := marker()
			e, _, err := s.Start(runbox.ExecSpec{Command: strings.ReplaceAll("sleep M & sleep M", "M", m), PTY: &runbox.PTYSize{Rows: 24, Cols: 80}})
			if err != nil {
				t.Fatal(err)
			}
			for deadline := time.Now().Add(10 * time.Second); countAlive(m) < 2; {
				if time.Now().After(deadline) {
					t.Fatalf("only %d sleeps started", countAlive(m))
				}
				time.Sleep(10 * time.Millisecond)
			}
			s.Cancel(e.ID(), 500*time.Millisecond)
			select {
			case <-e.Done():
			case <-time.After(20 * time.Second):
				t.Fatal("cancelled exec did not finish")
			}
			if r := e.Result(); !r.Cancelled {
				t.Errorf("got %+v", r)
			}
			if n := countAlive(m); n != 0 {
				t.Errorf("%d survivors", n)
			}
		})
	}
}
