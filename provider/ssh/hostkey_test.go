package ssh_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	gossh "golang.org/x/crypto/ssh"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/provider/ssh"
)

// An unknown host key is refused with its fingerprint in the message, and
// nothing runs on the host: the server's log shows no login at all, and no
// record is left here.
func TestUnknownHostKey(t *testing.T) {
	e := newEnv(t, nonRootUser(t))
	if err := os.WriteFile(e.knownHosts, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	p := e.provider(t, "rbx")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := p.Create(ctx, runbox.SandboxSpec{})
	t.Logf("create with an unknown host key: %v", err)
	if !errors.Is(err, ssh.ErrHostKeyUnknown) || errors.Is(err, ssh.ErrHostKeyChanged) {
		t.Fatalf("create: %v; want ssh.ErrHostKeyUnknown", err)
	}
	if fp := gossh.FingerprintSHA256(e.sshd.HostKey); !strings.Contains(err.Error(), fp) {
		t.Errorf("the error does not name the key's fingerprint %s", fp)
	}
	var herr *ssh.HostKeyError
	if !errors.As(err, &herr) || herr.Host != "[127.0.0.1]:"+itoa(e.sshd.Port) {
		t.Errorf("error %T does not carry a *ssh.HostKeyError for [127.0.0.1]:%d", err, e.sshd.Port)
	}
	if n := countLog(t, e.sshd, "Accepted publickey"); n != 0 {
		t.Errorf("the server let %d login(s) in; nothing may be sent past the handshake", n)
	}
	if b, _ := os.ReadFile(e.knownHosts); len(b) != 0 {
		t.Errorf("known_hosts was written without accept-new: %q", b)
	}
	if sbs, err := p.List(ctx); err != nil || len(sbs) != 0 {
		t.Errorf("list after the refusal: %v, %v; want no sandbox", sbs, err)
	}
}

// A changed host key is refused with both fingerprints, also with
// accept-new, which accepts unknown keys only.
func TestChangedHostKey(t *testing.T) {
	e := newEnv(t, nonRootUser(t))
	other := newKey(t, e.dir, "other_host_key")
	line := "[127.0.0.1]:" + itoa(e.sshd.Port) + " " + string(gossh.MarshalAuthorizedKey(other.Public))
	if err := os.WriteFile(e.knownHosts, []byte(line), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, acceptNew := range []bool{false, true} {
		p := e.provider(t, "rbx")
		p.AcceptNew = acceptNew
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		_, err := p.Create(ctx, runbox.SandboxSpec{})
		cancel()
		t.Logf("create with a changed host key (accept-new %v): %v", acceptNew, err)
		if !errors.Is(err, ssh.ErrHostKeyChanged) {
			t.Fatalf("create (accept-new %v): %v; want ssh.ErrHostKeyChanged", acceptNew, err)
		}
		for _, fp := range []string{gossh.FingerprintSHA256(e.sshd.HostKey), gossh.FingerprintSHA256(other.Public)} {
			if !strings.Contains(err.Error(), fp) {
				t.Errorf("the error does not name fingerprint %s", fp)
			}
		}
		if !strings.Contains(err.Error(), e.knownHosts+":1") {
			t.Errorf("the error does not name the known_hosts line %s:1", e.knownHosts)
		}
	}
	if n := countLog(t, e.sshd, "Accepted publickey"); n != 0 {
		t.Errorf("the server let %d login(s) in", n)
	}
	if b, _ := os.ReadFile(e.knownHosts); string(b) != line {
		t.Errorf("known_hosts changed: %q", b)
	}
}

// With accept-new, an unknown host's key is recorded (a known_hosts file
// that does not exist yet is created), and later connections without
// accept-new find it there.
func TestAcceptNew(t *testing.T) {
	e := newEnv(t, nonRootUser(t))
	kh := filepath.Join(e.dir, "new", "known_hosts")
	p := e.provider(t, "rbx")
	p.KnownHostsFiles, p.AcceptNew = []string{kh}, true
	sb := create(t, p, runbox.SandboxSpec{})
	b, err := os.ReadFile(kh)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := strings.TrimSpace(string(b)), e.sshd.KnownHostsLine(); got != want {
		t.Errorf("known_hosts holds %q, want %q", got, want)
	}
	// A fresh provider (a later `runbox exec`) without accept-new.
	q := e.provider(t, "rbx")
	q.Home, q.KnownHostsFiles = p.Home, []string{kh}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := newClient(t, q, sb).Exec(ctx, "echo known")
	if err != nil || string(res.Stdout) != "known\n" {
		t.Fatalf("exec through the recorded key: %+v, %v", res, err)
	}
}

func itoa(n int) string { return strconv.Itoa(n) }
