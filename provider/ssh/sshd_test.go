package ssh_test

import (
	"testing"

	"github.com/runbox/runbox/internal/loopbacksshd"
)

// The tests' sshd is internal/loopbacksshd's: a real OpenSSH server on a
// free 127.0.0.1 port, with its own configuration, host key,
// authorized_keys and log in a temporary directory. It never touches a
// system sshd or its files. The helpers here bind it to a test.

// nonRootUser is the non-root user to log in as: loopbacksshd.TestUser as
// root, else the user running the tests.
func nonRootUser(t testing.TB) string {
	t.Helper()
	u, err := loopbacksshd.LoginUser()
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// startSSHD starts a server that lets its one key in, and stops it (and
// removes its files) when t ends; it skips t, or fails it under
// RUNBOX_REQUIRE_SSH=1, when the machine cannot run one.
func startSSHD(t testing.TB) *loopbacksshd.Server {
	t.Helper()
	req.Need(t)
	s, err := loopbacksshd.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

// newKey makes a fresh ed25519 key pair in dir.
func newKey(t testing.TB, dir, name string) loopbacksshd.Key {
	t.Helper()
	k, err := loopbacksshd.NewKey(dir, name)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// countLog counts the lines of s's log that contain substr.
func countLog(t testing.TB, s *loopbacksshd.Server, substr string) int {
	t.Helper()
	n, err := s.CountLog(substr)
	if err != nil {
		t.Fatal(err)
	}
	return n
}
