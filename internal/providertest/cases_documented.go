package providertest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/client"
)

// documentedCases are behaviours the README and docs/api.md promise that no
// other case exercised (issue 20): the idle timeout, login shells, and the
// session calls over the wire.
func documentedCases() []testCase {
	return []testCase{
		{name: "IdleTimeout", run: testIdleTimeout},
		{name: "LoginShell", run: testLoginShell},
		{name: "SessionsOverWire", run: testSessionsOverWire},
	}
}

// testIdleTimeout: a command tree that goes quiet is stopped by the idle
// timeout (idle_timed_out, not timed_out; exit 143 after SIGTERM) with every
// process it started, and output keeps a command alive past the idle
// timeout: the clock restarts with each write.
func testIdleTimeout(t *testing.T, fx Fixture) {
	s := newSandbox(t, fx)
	w := s.runWatched(t, 2, time.Second, func(m string) string { return "echo started; " + m + " & " + m },
		func(idle time.Duration) []client.ExecOption { return []client.ExecOption{client.WithIdleTimeout(idle)} })
	res := w.res
	if !res.IdleTimedOut || res.TimedOut || res.Cancelled || res.ExitCode != 143 || res.Signal != "TERM" {
		t.Errorf("quiet command with a %v idle timeout: %s; want idle_timed_out, exit 143, signal TERM", w.window, describe(res))
	}
	if string(res.Stdout) != "started\n" {
		t.Errorf("stdout %q, want the output before the quiet spell", res.Stdout)
	}
	// The daemon's own clock: the idle timeout is a lower bound.
	if res.Duration < w.window {
		t.Errorf("stopped after %v, before the %v idle timeout", res.Duration, w.window)
	}
	if res.Killed < 2 {
		t.Errorf("the stop protocol signalled %d processes, want at least the 2 sleeps", res.Killed)
	}
	s.noSurvivors(t, w.marker)

	// 30 writes 100 ms apart, on both streams, over 3 s: never quiet for
	// anything near the 2 s idle timeout, so it runs to its end.
	res = s.exec(t, `i=0; while [ $i -lt 30 ]; do if [ $((i % 2)) -eq 0 ]; then echo $i; else echo $i >&2; fi; sleep 0.1; i=$((i+1)); done; echo done`,
		client.WithIdleTimeout(2*time.Second))
	if !res.OK() || !strings.HasSuffix(string(res.Stdout), "done\n") {
		t.Errorf("a command writing every 100 ms with a 2s idle timeout: %s; want it to run to its end", describe(res))
	}
	if res.Duration < 2*time.Second {
		t.Errorf("the chatty command ran %v: it must outlast the idle timeout to show output restarts the clock", res.Duration)
	}
}

// testLoginShell: WithLogin runs the shell as a login shell, which reads
// $HOME/.profile (sh and bash alike); without it the profile is not read.
func testLoginShell(t *testing.T, fx Fixture) {
	s := newSandbox(t, fx)
	home := tempPath("login-home")
	token := "login-" + randDigits(10)
	// bash reads the first of .bash_profile, .bash_login and .profile; a
	// POSIX sh reads .profile.
	wantOK(t, s.exec(t, fmt.Sprintf("mkdir -p %[1]s && echo 'export RUNBOX_LOGIN_MARK=%[2]s' > %[1]s/.profile", home, token)), "")
	t.Cleanup(func() {
		if !s.removed {
			s.exec(t, "rm -rf "+home)
		}
	})
	const show = `echo "mark=${RUNBOX_LOGIN_MARK:-none}"`
	res := s.exec(t, show, client.WithEnv("HOME", home), client.WithLogin())
	if res.ExitCode != 0 || !strings.HasSuffix(string(res.Stdout), "mark="+token+"\n") {
		t.Errorf("login shell with HOME=%s: %s; want it to have read %s/.profile (mark=%s)", home, describe(res), home, token)
	}
	res = s.exec(t, show, client.WithEnv("HOME", home))
	wantOK(t, res, "mark=none\n")
}

// testSessionsOverWire: Sessions lists a session after an exec ran in it,
// with the directory it ended in; DeleteSession forgets it, so the next exec
// in that name starts afresh; deleting an unknown session is
// ErrSessionNotFound, through the real client and daemon.
func testSessionsOverWire(t *testing.T, fx Fixture) {
	s := newSandbox(t, fx)
	ctx, cancel := context.WithTimeout(context.Background(), caseTimeout)
	defer cancel()
	dir := tempPath("session-dir")
	name := "sess-" + randDigits(8)
	wantOK(t, s.exec(t, fmt.Sprintf("mkdir -p %[1]s && cd %[1]s && export RUNBOX_SESSION_VAR=kept", dir),
		client.WithSession(name)), "")
	t.Cleanup(func() {
		if !s.removed {
			s.exec(t, "rm -rf "+dir)
		}
	})
	wantOK(t, s.exec(t, `echo "$PWD $RUNBOX_SESSION_VAR"`, client.WithSession(name)), dir+" kept\n")

	list, err := s.c.Sessions(ctx)
	if err != nil {
		t.Fatalf("sessions: %v", err)
	}
	var found *runbox.SessionInfo
	for i := range list {
		if list[i].Name == name {
			found = &list[i]
		}
	}
	if found == nil || found.Cwd != dir || found.Execs != 2 || found.EnvVars < 1 {
		t.Errorf("sessions: %+v; want %s in %s after 2 execs, with its exported variable", list, name, dir)
	}

	if err := s.c.DeleteSession(ctx, name); err != nil {
		t.Fatalf("delete session %s: %v", name, err)
	}
	list, err = s.c.Sessions(ctx)
	if err != nil {
		t.Fatalf("sessions after delete: %v", err)
	}
	for _, si := range list {
		if si.Name == name {
			t.Errorf("sessions after delete still lists %+v", si)
		}
	}
	// Forgotten: the next exec in that name has neither its directory nor
	// its variable.
	res := s.exec(t, `echo "$PWD ${RUNBOX_SESSION_VAR:-unset}"`, client.WithSession(name))
	if !res.OK() || strings.HasPrefix(string(res.Stdout), dir+" ") || !strings.HasSuffix(string(res.Stdout), " unset\n") {
		t.Errorf("exec in a deleted session: %s; want a fresh session (not %s, variable unset)", describe(res), dir)
	}

	err = s.c.DeleteSession(ctx, "no-such-session-"+randDigits(8))
	if !errors.Is(err, runbox.ErrSessionNotFound) || errors.Is(err, runbox.ErrSandboxLost) {
		t.Errorf("delete an unknown session: %v; want ErrSessionNotFound", err)
	}
}
