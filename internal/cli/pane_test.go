package cli_test

import (
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"
)

// needTmux skips (or, with RUNBOX_REQUIRE_TMUX=1, fails) a test that
// drives a real terminal when tmux is not installed.
func needTmux(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("tmux"); err != nil {
		if os.Getenv("RUNBOX_REQUIRE_TMUX") == "1" {
			t.Fatal("RUNBOX_REQUIRE_TMUX=1 but tmux is not installed")
		}
		t.Skip("tmux is not installed (apt-get install tmux); set RUNBOX_REQUIRE_TMUX=1 to make this a failure")
	}
}

// pane is a live tmux pane (a real terminal) on a tmux server of its own,
// driven by keys as a user would, for as long as the test runs.
type pane struct {
	t    *testing.T
	sock string
}

// newPane starts command in a fresh 100x30 tmux pane and returns it; the
// pane's server is killed when the test ends.
func newPane(t *testing.T, command string) *pane {
	t.Helper()
	tmuxMu.Lock()
	tmuxServers++
	p := &pane{t: t, sock: fmt.Sprintf("rbtest%d-%d", os.Getpid(), tmuxServers)}
	tmuxMu.Unlock()
	t.Cleanup(func() { exec.Command("tmux", "-L", p.sock, "kill-server").Run() })
	p.tmux("new-session", "-d", "-x", "100", "-y", "30", "-s", "t", command)
	return p
}

// tmux runs a tmux command against the pane's server.
func (p *pane) tmux(args ...string) string {
	p.t.Helper()
	out, err := exec.Command("tmux", append([]string{"-L", p.sock, "-f", "/dev/null"}, args...)...).CombinedOutput()
	if err != nil {
		p.t.Fatalf("tmux %q: %v\n%s", args, err, out)
	}
	return string(out)
}

// keys sends keys to the pane as tmux send-keys names them ("C-c",
// "Tab", "Enter") or, with literal, as text typed.
func (p *pane) keys(literal bool, keys ...string) {
	p.t.Helper()
	args := []string{"send-keys", "-t", "t"}
	if literal {
		args = append(args, "-l")
	}
	p.tmux(append(args, keys...)...)
}

// screen returns what the pane shows.
func (p *pane) screen() string {
	p.t.Helper()
	return p.tmux("capture-pane", "-p", "-t", "t")
}

// waitFor waits until the pane shows a match of re, and fails the test
// with the screen when it does not within hangBound (a hang, not a time
// measured).
func (p *pane) waitFor(re *regexp.Regexp, what string) {
	p.t.Helper()
	deadline := time.Now().Add(hangBound)
	for {
		s := p.screen()
		if re.MatchString(s) {
			return
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("the terminal never showed %s (%s); screen:\n%s", what, re, strings.TrimRight(s, "\n"))
		}
		time.Sleep(20 * time.Millisecond)
	}
}
