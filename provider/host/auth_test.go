package host_test

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/client"
	"github.com/runbox/runbox/internal/daemonauth"
)

// The sandbox's secret is a 0600 file of 32 bytes in its state directory;
// runboxd's command line and environment hold only its hash, so a process
// that reads them (any process of the user, on the host) learns nothing it
// can authenticate with. Each sandbox has its own secret.
func TestSecretStaysOnTheHostSide(t *testing.T) {
	p := newProvider(t)
	sb := create(t, p, runbox.SandboxSpec{})
	other := create(t, p, runbox.SandboxSpec{})

	path := filepath.Join(sb.Detail["dir"], "secret")
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("%s has mode %v; want 0600", path, fi.Mode().Perm())
	}
	secret, err := os.ReadFile(path)
	if err != nil || len(secret) != daemonauth.SecretSize {
		t.Fatalf("secret: %d bytes, %v; want %d", len(secret), err, daemonauth.SecretSize)
	}
	if o, _ := os.ReadFile(filepath.Join(other.Detail["dir"], "secret")); bytes.Equal(o, secret) {
		t.Error("two sandboxes share a secret")
	}

	pid := strconv.Itoa(pidOf(t, sb))
	for _, f := range []string{"cmdline", "environ"} {
		b, err := os.ReadFile("/proc/" + pid + "/" + f)
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(b, secret) || bytes.Contains(bytes.ToLower(b), []byte(hex.EncodeToString(secret))) {
			t.Errorf("runboxd's %s holds the secret: %q", f, b)
		}
		if f == "cmdline" && !bytes.Contains(b, []byte(daemonauth.Sum(secret))) {
			t.Errorf("runboxd's command line does not hold the secret's hash: %q", b)
		}
	}
}

// The provider's own dialer authenticates (it reads the secret from the
// state directory), and a sandbox whose secret is gone is refused with
// runbox.ErrUnauthenticated that says what happened, not ErrSandboxLost.
func TestDialerUsesTheSecretFile(t *testing.T) {
	p := newProvider(t)
	sb := create(t, p, runbox.SandboxSpec{})
	c := client.New(p.Dialer(sb), client.WithSandboxName(sb.ID))
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := c.Info(ctx); err != nil {
		t.Fatalf("info through the provider's dialer: %v", err)
	}

	path := filepath.Join(sb.Detail["dir"], "secret")
	secret, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	fresh := client.New(p.Dialer(sb), client.WithSandboxName(sb.ID))
	defer fresh.Close()
	_, err = fresh.Info(ctx)
	if !errors.Is(err, runbox.ErrUnauthenticated) || errors.Is(err, runbox.ErrSandboxLost) {
		t.Errorf("info without the secret file: %v; want runbox.ErrUnauthenticated", err)
	}
	t.Logf("without the secret file: %v", err)
	if err := os.WriteFile(path, secret, 0o600); err != nil {
		t.Fatal(err)
	}
}
