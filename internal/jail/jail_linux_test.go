package jail

import (
	"os"
	"path/filepath"
	"testing"
)

func TestCopyResolvConf(t *testing.T) {
	host := []byte("nameserver 192.0.2.53\n")
	hostConf := filepath.Join(t.TempDir(), "resolv.conf")
	if err := os.WriteFile(hostConf, host, 0o644); err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	etc := filepath.Join(root, "etc")
	if err := os.MkdirAll(filepath.Join(root, "run", "ok"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(etc, 0o755); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(etc, "resolv.conf")

	// A link into a /run the sandbox does not have: replaced by the file.
	if err := os.Symlink("../run/systemd/resolve/stub-resolv.conf", link); err != nil {
		t.Fatal(err)
	}
	copyResolvConf(hostConf, root)
	if b, err := os.ReadFile(link); err != nil || string(b) != string(host) {
		t.Errorf("dangling link: resolv.conf is %q, %v; want the host's", b, err)
	}

	// An absolute link that resolves on the host but not in the sandbox.
	os.Remove(link)
	if err := os.Symlink("/etc/resolv.conf.runbox-test-missing", link); err != nil {
		t.Fatal(err)
	}
	copyResolvConf(hostConf, root)
	if fi, err := os.Lstat(link); err != nil || fi.Mode()&os.ModeSymlink != 0 {
		t.Errorf("absolute dangling link left as a link: %v", err)
	}

	// A link that resolves inside the sandbox stays.
	os.Remove(link)
	if err := os.WriteFile(filepath.Join(root, "run", "ok", "r"), []byte("nameserver 127.0.0.53\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/run/ok/r", link); err != nil {
		t.Fatal(err)
	}
	copyResolvConf(hostConf, root)
	if target, err := os.Readlink(link); err != nil || target != "/run/ok/r" {
		t.Errorf("a link that resolves in the sandbox was replaced: %q, %v", target, err)
	}
}

func TestEscapeOverlay(t *testing.T) {
	for in, want := range map[string]string{
		"/plain/path":     "/plain/path",
		"/a,b:c":          `/a\,b\:c`,
		`/back\slash`:     `/back\\slash`,
		"/rb,l:123/upper": `/rb\,l\:123/upper`,
	} {
		if got := escapeOverlay(in); got != want {
			t.Errorf("escapeOverlay(%q) = %q, want %q", in, got, want)
		}
	}
}
