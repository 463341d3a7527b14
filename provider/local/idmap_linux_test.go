package local

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// TestSanitizeSecrets: the sandbox's copy of a password file keeps every
// user and every other field, has no hash, and is owned (on disk) by what
// the host's owner is in the sandbox.
func TestSanitizeSecrets(t *testing.T) {
	root, upper := t.TempDir(), t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "etc"), 0o755); err != nil {
		t.Fatal(err)
	}
	host := "root:$y$j9T$abc$def:20228:0:99999:7:::\nalice:$6$salt$hash:20228:0:99999:7:::\nlocked:!:20228::::::\nnopass::20228::::::\n"
	if err := os.WriteFile(filepath.Join(root, "etc/shadow"), []byte(host), 0o640); err != nil {
		t.Fatal(err)
	}
	m := idMap{userns: true, hostUID: 3_000_000, hostGID: 3_000_000, size: MappedIDs}
	if os.Geteuid() != 0 {
		m = idMap{} // only root may chown; the contents are checked anyway
	}
	if err := sanitizeSecrets(root, upper, m); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(upper, "etc/shadow"))
	if err != nil {
		t.Fatal(err)
	}
	want := "root:*:20228:0:99999:7:::\nalice:*:20228:0:99999:7:::\nlocked:*:20228::::::\nnopass::20228::::::\n"
	if string(b) != want {
		t.Errorf("sanitised shadow:\n%s\nwant:\n%s", b, want)
	}
	if m.mapped() {
		var st syscall.Stat_t
		if err := syscall.Stat(filepath.Join(upper, "etc/shadow"), &st); err != nil {
			t.Fatal(err)
		}
		if st.Uid != 3_000_000 || st.Mode&0o777 != 0o640 {
			t.Errorf("sanitised shadow: owner %d mode %o, want %d and 640", st.Uid, st.Mode&0o777, 3_000_000)
		}
	}
	// A file the host lacks (gshadow here) is not invented.
	if _, err := os.Stat(filepath.Join(upper, "etc/gshadow")); !os.IsNotExist(err) {
		t.Errorf("gshadow made although the host has none: %v", err)
	}
}
