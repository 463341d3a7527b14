package loopbacksshd_test

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/runbox/runbox/internal/loopbacksshd"
	"github.com/runbox/runbox/internal/providertest"
)

// req is whether this machine can run the server; RUNBOX_REQUIRE_SSH=1
// (CI) makes it a failure when it cannot.
var req = providertest.CheckRequirement("internal/loopbacksshd", "RUNBOX_REQUIRE_SSH", loopbacksshd.Probe)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// start starts a server and a client side for the login user, closed when
// t ends.
func start(t *testing.T) (*loopbacksshd.Server, *loopbacksshd.Client) {
	t.Helper()
	req.Need(t)
	s, err := loopbacksshd.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	u, err := loopbacksshd.LoginUser()
	if err != nil {
		t.Fatal(err)
	}
	c, err := s.WriteClient(t.TempDir(), u)
	if err != nil {
		t.Fatal(err)
	}
	return s, c
}

func logins(t *testing.T, s *loopbacksshd.Server) int {
	t.Helper()
	n, err := s.CountLog("Accepted publickey")
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// The ssh binary logs in as the login user with the client side's config
// alone (the host key known, the key accepted, no prompt), and the log
// shows the login; after a restart the same client logs in again (the
// same port and host key); Close leaves nothing listening and no files.
func TestLoginRestartClose(t *testing.T) {
	s, c := start(t)
	o, err := c.OpenSSH("")
	if err != nil {
		t.Fatal(err)
	}
	id := func() {
		t.Helper()
		out, err := o.Command("id", "-un").CombinedOutput()
		if err != nil || strings.TrimSpace(string(out)) != c.User {
			t.Fatalf("ssh rbx id -un: %v: %q; want %s", err, out, c.User)
		}
	}
	id()
	if n := logins(t, s); n != 1 {
		t.Errorf("the log shows %d logins after one ssh, want 1", n)
	}
	line := s.KnownHostsLine()
	if err := s.Restart(0); err != nil {
		t.Fatal(err)
	}
	if s.KnownHostsLine() != line {
		t.Errorf("known_hosts line %q after a restart, was %q", s.KnownHostsLine(), line)
	}
	id()
	s.Close()
	if conn, err := net.Dial("tcp", s.Addr()); err == nil {
		conn.Close()
		t.Errorf("%s accepts connections after Close", s.Addr())
	}
	if _, err := os.Stat(s.Dir); !os.IsNotExist(err) {
		t.Errorf("%s after Close: %v; want it gone", s.Dir, err)
	}
}

// Commands through a ControlMaster ride its one login, which KillSessions
// drops.
func TestControlMaster(t *testing.T) {
	s, c := start(t)
	m, err := c.OpenControlMaster(filepath.Join(c.Dir, "ctl.sock"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	for range 3 {
		if out, err := m.Command("true").CombinedOutput(); err != nil {
			t.Fatalf("ssh through the master: %v: %s", err, out)
		}
	}
	if n := logins(t, s); n != 1 {
		t.Errorf("the log shows %d logins after a master and 3 commands through it, want 1", n)
	}
	if n := s.KillSessions(); n == 0 {
		t.Errorf("KillSessions killed nothing while the master's connection was open")
	}
}
