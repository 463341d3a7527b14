package supervisor

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/runbox/runbox"
)

func TestSessionKeepsCwdEnvAndFunctions(t *testing.T) {
	s := newSup(t, "auto")
	dir := t.TempDir()
	r := run(t, s, runbox.ExecSpec{Session: "a", Command: "cd " + dir + " && mkdir -p x && cd x; export A=1; f() { echo func-$1; }; alias hi='echo alias-hi'"})
	if len(r.Stdout) != 0 || len(r.Stderr) != 0 || r.ExitCode != 0 {
		t.Fatalf("first exec printed %q %q (exit %d)", r.Stdout, r.Stderr, r.ExitCode)
	}
	if r.Cwd != filepath.Join(dir, "x") {
		t.Errorf("result cwd %q", r.Cwd)
	}
	r = run(t, s, runbox.ExecSpec{Session: "a", Command: "pwd; echo $A; f x\nhi"})
	want := filepath.Join(dir, "x") + "\n1\nfunc-x\nalias-hi\n"
	if string(r.Stdout) != want {
		t.Errorf("second exec: got %q want %q (stderr %q)", r.Stdout, want, r.Stderr)
	}
	// exit status survives the state save; exit inside the command still saves
	r = run(t, s, runbox.ExecSpec{Session: "a", Command: "cd /; exit 3"})
	if r.ExitCode != 3 || r.Cwd != "/" {
		t.Errorf("exit 3: got %d cwd %q", r.ExitCode, r.Cwd)
	}
}

func TestSessionUnchangedByTimeout(t *testing.T) {
	s := newSup(t, "auto")
	dir := t.TempDir()
	run(t, s, runbox.ExecSpec{Session: "b", Command: "cd " + dir})
	r := run(t, s, runbox.ExecSpec{Session: "b", Command: "cd /; export B=2; sleep 30", Timeout: 300 * time.Millisecond})
	if !r.TimedOut {
		t.Fatalf("not timed out: %+v", r)
	}
	r = run(t, s, runbox.ExecSpec{Session: "b", Command: "pwd; echo \"B=$B\""})
	if string(r.Stdout) != dir+"\nB=\n" {
		t.Errorf("after timeout: %q", r.Stdout)
	}
}

func TestSessionsIndependentAndConcurrent(t *testing.T) {
	s := newSup(t, "auto")
	base := t.TempDir()
	for i := range 4 {
		d := filepath.Join(base, fmt.Sprint(i))
		os.Mkdir(d, 0o755)
		run(t, s, runbox.ExecSpec{Session: fmt.Sprint("s", i), Command: fmt.Sprintf("cd %s; export N=%d", d, i)})
	}
	var wg sync.WaitGroup
	for j := range 8 {
		i := j % 4
		wg.Go(func() {
			r := run(t, s, runbox.ExecSpec{Session: fmt.Sprint("s", i), Command: "sleep 0.2; echo $PWD $N"})
			want := fmt.Sprintf("%s %d\n", filepath.Join(base, fmt.Sprint(i)), i)
			if string(r.Stdout) != want {
				t.Errorf("session s%d: got %q want %q", i, r.Stdout, want)
			}
		})
	}
	wg.Wait()
	if n := len(s.Sessions()); n != 4 {
		t.Errorf("%d sessions", n)
	}
}

func TestSessionDeletedDirFallsBackToParent(t *testing.T) {
	s := newSup(t, "auto")
	dir := t.TempDir()
	gone := filepath.Join(dir, "a", "b")
	os.MkdirAll(gone, 0o755)
	run(t, s, runbox.ExecSpec{Session: "c", Command: "cd " + gone})
	os.RemoveAll(filepath.Join(dir, "a"))
	r := run(t, s, runbox.ExecSpec{Session: "c", Command: "pwd"})
	if string(r.Stdout) != dir+"\n" || r.CwdFallbackFrom != gone {
		t.Errorf("got %q fallback %q", r.Stdout, r.CwdFallbackFrom)
	}
}

func TestNonInteractiveDefaults(t *testing.T) {
	s := newSup(t, "auto")
	r := run(t, s, runbox.ExecSpec{Command: `echo "$PAGER $GIT_PAGER $TERM $GIT_TERMINAL_PROMPT $DEBIAN_FRONTEND"`})
	if string(r.Stdout) != "cat cat dumb 0 noninteractive\n" {
		t.Errorf("defaults: %q", r.Stdout)
	}
	r = run(t, s, runbox.ExecSpec{Command: `echo $PAGER`, Env: map[string]string{"PAGER": "less"}})
	if string(r.Stdout) != "less\n" {
		t.Errorf("override: %q", r.Stdout)
	}
}
