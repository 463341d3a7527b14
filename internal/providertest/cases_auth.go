package providertest

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/client"
	"github.com/runbox/runbox/internal/daemonauth"
)

// authCases are the cases of "every runboxd connection is authenticated
// with a per-sandbox secret that only the host side holds".
func authCases() []testCase {
	return []testCase{
		{name: "AuthOwnSocketFromInside", run: testAuthOwnSocketFromInside},
		{name: "AuthOtherSandboxSocket", run: testAuthOtherSandboxSocket},
		{name: "AuthWrongSecret", run: testAuthWrongSecret},
	}
}

// testAuthOwnSocketFromInside: a command that reaches its own sandbox's
// runboxd socket, without the secret, cannot make the daemon do anything:
// the daemon refuses it, and the file the attempted exec would create does
// not appear. Where the command cannot reach the socket at all (a jail that
// hides it), there is nothing to attack and the case says so.
func testAuthOwnSocketFromInside(t *testing.T, fx Fixture) {
	s := newSandbox(t, fx)
	attack(t, s, s, "own")
}

// testAuthOtherSandboxSocket is the attack of issue 13: a command in sandbox
// A connects to sandbox B's runboxd socket under the runbox home and asks it
// to run `touch` (as B's daemon's user: host root in the report). B refuses,
// and the file does not appear.
func testAuthOtherSandboxSocket(t *testing.T, fx Fixture) {
	a := newSandbox(t, fx)
	b := newSandbox(t, fx)
	attack(t, a, b, "other")
}

// attack runs the attacker (this test binary, see attackerEnv) as a command
// in from, against to's runboxd socket, and checks that to refused it.
func attack(t *testing.T, from, to *sandbox, name string) {
	t.Helper()
	socket := to.sb.Detail["socket"]
	if socket == "" {
		t.Skipf("sandbox %s has no runboxd socket on this machine: nothing for a command to reach", to.sb.ID)
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if res := from.exec(t, "test -S "+shq(socket)); !res.OK() {
		t.Skipf("a command in sandbox %s cannot reach %s: the socket is out of its reach, nothing to attack", from.sb.ID, socket)
	}
	if res := from.exec(t, "test -x "+shq(exe)); !res.OK() {
		t.Skipf("a command in sandbox %s reaches %s but cannot run the attacker %s (this test binary): not tested here", from.sb.ID, socket, exe)
	}
	marker := tempPath("auth-" + name)
	res := from.exec(t, shq(exe)+" "+shq(socket)+" "+shq(marker), client.WithEnv(attackerEnv, "1"))
	t.Logf("attacker in %s against %s's socket: %s", from.sb.ID, to.sb.ID, describe(res))
	out := string(res.Stdout)
	if !res.OK() || !strings.Contains(out, "exec: ") || !strings.Contains(out, "raw: ") {
		t.Fatalf("the attacker did not run to its end: %s", describe(res))
	}
	if ran := to.exec(t, "test -e "+shq(marker)); ran.OK() {
		to.exec(t, "rm -f "+shq(marker))
		t.Errorf("sandbox %s's daemon ran the attacker's command: %s exists (attacker said %q)", to.sb.ID, marker, out)
	}
	if strings.Contains(out, "exec: ran") {
		t.Errorf("the attacker's exec ran without the secret: %q", out)
	}
	if !strings.Contains(out, "REFUSED") {
		t.Errorf("the daemon's refusal was not observed on a raw connection: %q", out)
	}
}

// shq quotes s for a POSIX shell.
func shq(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// testAuthWrongSecret: a client that dials the sandbox's socket with a
// wrong secret gets runbox.ErrUnauthenticated (never ErrSandboxLost, never
// a hang until its deadline) and runs nothing; a peer that sends no secret
// is told why and cut off; the provider's own dialer, which holds the
// secret, works.
func testAuthWrongSecret(t *testing.T, fx Fixture) {
	s := newSandbox(t, fx)
	socket := s.sb.Detail["socket"]
	if socket == "" {
		t.Skipf("sandbox %s has no runboxd socket on this machine to dial with a wrong secret", s.sb.ID)
	}
	raw := func(ctx context.Context) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", socket)
	}
	wrong, err := daemonauth.NewSecret()
	if err != nil {
		t.Fatal(err)
	}
	c := s.newClientDial(t, daemonauth.Dialer(raw, wrong))
	marker := tempPath("auth-wrong")
	ctx, cancel := context.WithTimeout(context.Background(), caseTimeout)
	defer cancel()
	for _, call := range []struct {
		name string
		do   func() error
	}{
		{"info", func() error { _, err := c.Info(ctx); return err }},
		{"exec", func() error { _, err := c.ExecArgv(ctx, []string{"touch", marker}); return err }},
		{"write file", func() error { _, err := c.WriteFile(ctx, marker, strings.NewReader("x")); return err }},
	} {
		err := call.do()
		if !errors.Is(err, runbox.ErrUnauthenticated) || errors.Is(err, runbox.ErrSandboxLost) || ctx.Err() != nil {
			t.Errorf("%s with a wrong secret: %v; want runbox.ErrUnauthenticated before the call's deadline", call.name, err)
		}
		if _, ok := errors.AsType[*runbox.Error](err); !ok {
			t.Errorf("%s with a wrong secret: %T %v; want a *runbox.Error", call.name, err, err)
		}
	}
	if res := s.exec(t, "test -e "+shq(marker)); res.OK() {
		t.Errorf("a call with a wrong secret created %s", marker)
	}

	// A peer that starts with HTTP/2 (a client without the secret) is
	// answered with the reason and cut off.
	conn, err := raw(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(caseTimeout))
	if _, err := io.WriteString(conn, "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(io.LimitReader(conn, 4096))
	if !strings.HasPrefix(string(b), "RUNBOXD-AUTH REFUSED no secret") || err != nil {
		t.Errorf("a peer without the secret read %q (%v); want the refusal line, then end of stream", b, err)
	}

	wantOK(t, s.exec(t, "echo ok"), "ok\n")
}
