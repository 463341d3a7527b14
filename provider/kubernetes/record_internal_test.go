package kubernetes

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/runbox/runbox/internal/daemonauth"
)

// TestLocalRecord: the record a persistent endpoint and the front read is
// written private (directory 0700, secret 0600), read back as written,
// refused when it names another sandbox, removed by forget, and not kept
// at all without a home.
func TestLocalRecord(t *testing.T) {
	home := t.TempDir()
	p := &Provider{Home: home}
	secret, err := daemonauth.NewSecret()
	if err != nil {
		t.Fatal(err)
	}
	const id = "0123456789ab"
	rec := localRecord{ID: id, Name: "n", Namespace: "ns", Pod: "runbox-" + id, UID: "u"}
	p.remember(rec, secret)
	dir := filepath.Join(home, recordsDir, id)
	for path, want := range map[string]os.FileMode{dir: 0o700, filepath.Join(dir, "secret"): 0o600, filepath.Join(dir, "sandbox.json"): 0o600} {
		if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != want {
			t.Errorf("%s: %v; want mode %v", path, err, want)
		}
	}
	got, s, err := p.readRecord(id)
	if err != nil || got != rec || !bytes.Equal(s, secret) {
		t.Fatalf("readRecord: %+v, %v; want %+v", got, err, rec)
	}
	if _, _, err := (&Provider{Home: home}).StreamDialer(id); err != nil {
		t.Errorf("StreamDialer with a record: %v", err)
	}
	// A record moved under another id's name is refused.
	const other = "ba9876543210"
	if err := os.Rename(dir, filepath.Join(home, recordsDir, other)); err != nil {
		t.Fatal(err)
	}
	if _, _, err := p.readRecord(other); err == nil {
		t.Error("a record naming another sandbox was read")
	}
	p.forget(other)
	if _, err := os.Stat(filepath.Join(home, recordsDir, other)); !os.IsNotExist(err) {
		t.Errorf("after forget: %v", err)
	}
	if _, _, err := p.StreamDialer(id); err == nil {
		t.Error("StreamDialer without a record: no error")
	}
	// Not an id: nothing is written or read outside the records.
	p.remember(localRecord{ID: "../x"}, secret)
	if _, err := os.Stat(filepath.Join(home, "x")); !os.IsNotExist(err) {
		t.Errorf("a record for a bad id was written: %v", err)
	}
	// Without a home, no record.
	(&Provider{}).remember(rec, secret)
	if _, _, err := (&Provider{}).readRecord(id); err == nil {
		t.Error("a provider without a home read a record")
	}
}
