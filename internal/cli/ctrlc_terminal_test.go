package cli_test

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestCtrlCInTerminal (issue 30): in a real terminal, Ctrl-C typed while
// `runbox logs -f` follows an exec ends the watch (exit 130, nothing on
// stderr) and leaves the exec running; Ctrl-C typed while `runbox attach`
// follows it stops the exec (exit 143, its status; "cancelled", no
// "closed network connection") and none of its processes is left. The
// key goes through the terminal's line discipline to the foreground
// process group, as a user's does.
func TestCtrlCInTerminal(t *testing.T) {
	needTmux(t)
	setHome(t)
	id := up(t)
	m := marker(t)
	must(t, "exec", "--detach", "--id", "job", id, "--", "echo started; "+m+"; echo done")

	code, stderr := ctrlCIn(t, "logs", "-f", id, "job")
	if code != 130 || stderr != "" {
		t.Errorf("logs -f after Ctrl-C in a terminal: exit %d, stderr %q; want 130 and nothing on stderr", code, stderr)
	}
	if n := pollCount(t, m, 0, nil2); n == 0 {
		t.Fatal("the exec's processes are gone after Ctrl-C in logs -f; want it still running")
	}
	if ps := must(t, "ps", id); !strings.Contains(ps, "running") {
		t.Errorf("ps after Ctrl-C in logs -f:\n%s\nwant the exec running", ps)
	}

	code, stderr = ctrlCIn(t, "attach", id, "job")
	if code != 143 || !strings.Contains(stderr, "cancelled") || strings.Contains(stderr, "closed") {
		t.Errorf("attach after Ctrl-C in a terminal: exit %d, stderr %q; want 143 (the exec's status), cancelled, no failed cancel", code, stderr)
	}
	if n := pollCount(t, m, 0, nil2); n != 0 {
		t.Errorf("%d processes of the exec alive after Ctrl-C in attach; want none", n)
	}
}

// ctrlCIn runs runbox with args in a fresh terminal (stdin and stdout the
// terminal, stderr to a file), waits until it shows the exec's first line,
// types Ctrl-C, and returns its exit status and stderr.
func ctrlCIn(t *testing.T, args ...string) (int, string) {
	t.Helper()
	dir := t.TempDir()
	errFile, codeFile := filepath.Join(dir, "stderr"), filepath.Join(dir, "code")
	cmd := binary(t)
	for _, a := range args {
		cmd += " " + a
	}
	p := newPane(t, fmt.Sprintf("bash --norc --noprofile -c '%s 2>%s; echo $? >%s.tmp && mv %s.tmp %s; sleep 600'",
		cmd, errFile, codeFile, codeFile, codeFile))
	p.waitFor(regexp.MustCompile(`(?m)^started\s*$`), "the exec's output")
	p.keys(false, "C-c")
	deadline := time.Now().Add(hangBound)
	for {
		b, err := os.ReadFile(codeFile)
		if err == nil {
			code, err := strconv.Atoi(strings.TrimSpace(string(b)))
			if err != nil {
				t.Fatalf("exit status %q: %v", b, err)
			}
			e, _ := os.ReadFile(errFile)
			return code, string(e)
		}
		if time.Now().After(deadline) {
			t.Fatalf("runbox %q did not end after Ctrl-C; screen:\n%s", args, p.screen())
		}
		time.Sleep(20 * time.Millisecond)
	}
}
