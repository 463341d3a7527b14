package main

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/client"
	"github.com/runbox/runbox/internal/daemonauth"
)

// runboxd serve does not start without the hash of a secret, and says what
// to pass; a malformed hash or both flags are refused too.
func TestServeRefusesToRunUnauthenticated(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "--auth-sha256"},
		{[]string{"--auth-sha256", "abc"}, "--auth-sha256"},
		{[]string{"--auth-sha256", daemonauth.Sum(testSecret), "--insecure-no-auth"}, "exclude each other"},
	} {
		cmd := runboxd(append([]string{"serve", "--socket", filepath.Join(dir, "x.sock")}, tc.args...)...)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		if err := cmd.Run(); err == nil || !strings.Contains(stderr.String(), tc.want) {
			t.Errorf("serve %q: %v, %q; want a failure naming %q", tc.args, err, stderr.String(), tc.want)
		}
	}
}

// A client with a wrong secret gets runbox.ErrUnauthenticated, directly and
// through `runboxd proxy`, and the daemon keeps serving the right one.
func TestServeRefusesWrongSecret(t *testing.T) {
	cmd, c, logs, socket := startDaemon(t)
	wrong, err := daemonauth.NewSecret()
	if err != nil {
		t.Fatal(err)
	}
	bad := client.New(unixDialer(socket, wrong), client.WithSandboxName("test"))
	defer bad.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err = bad.Exec(ctx, "echo should not run")
	if !errors.Is(err, runbox.ErrUnauthenticated) || errors.Is(err, runbox.ErrSandboxLost) || ctx.Err() != nil {
		t.Fatalf("exec with a wrong secret: %v; want runbox.ErrUnauthenticated", err)
	}
	t.Logf("exec with a wrong secret: %v", err)
	if res, err := c.Exec(ctx, "echo ok"); err != nil || string(res.Stdout) != "ok\n" {
		t.Fatalf("exec with the right secret after a refusal: %+v, %v", res, err)
	}
	if err := c.Shutdown(ctx, 0); err != nil {
		t.Fatal(err)
	}
	waitExit(t, cmd) // logs is complete once runboxd has exited
	if !strings.Contains(logs.String(), "wrong secret") {
		t.Errorf("the daemon's log does not record the refusal:\n%s", logs)
	}
}

// --insecure-no-auth (tests only) serves a client that has no secret.
func TestInsecureNoAuth(t *testing.T) {
	dir := t.TempDir()
	socket := filepath.Join(dir, "runboxd.sock")
	cmd := runboxd("serve", "--socket", socket, "--dir", dir, "--insecure-no-auth")
	var logs strings.Builder
	cmd.Stderr = &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	stopped := false
	defer func() {
		if !stopped {
			cmd.Process.Kill()
			cmd.Wait()
		}
	}()
	c := client.DialUnix(socket)
	defer c.Close()
	waitAnswers(t, c, "runboxd --insecure-no-auth, asked by a client without a secret,", &logs)
	cmd.Process.Kill()
	cmd.Wait() // logs is complete once runboxd has exited
	stopped = true
	if !strings.Contains(logs.String(), "WITHOUT authentication") {
		t.Errorf("the daemon's log does not warn that it serves unauthenticated:\n%s", &logs)
	}
}
