package recordfile_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/runbox/runbox/internal/recordfile"
	"github.com/runbox/runbox/internal/strangertest"
)

// TestRecordFilesNeverFollowALink: links planted, by another local user
// who could write in a directory of records (a runbox home in a shared
// directory: sandboxes/, a sandbox's own directory swapped for theirs,
// the endpoints' directory), where runbox takes a lock or writes a
// record: the lock as a dangling link into a root-only directory at a
// random path, the record's temporary file as a link to a root-only file
// at a random path. Taking the lock (LockDir, TryLock) and writing the
// record must neither create the first target nor change the second.
// Before: as root, the lock's target was created (a file at a path of the
// stranger's choice, such as /etc/nologin), and the root-only file was
// overwritten with the record.
func TestRecordFilesNeverFollowALink(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root, to plant as another user")
	}
	for range 3 {
		home := strangertest.SharedHome(t)
		dir := filepath.Join(home, strangertest.RandomHex(12))
		if err := os.Mkdir(dir, 0o777); err != nil {
			t.Fatal(err)
		}
		vault := filepath.Join(t.TempDir(), strangertest.RandomHex(9))
		if err := os.Mkdir(vault, 0o700); err != nil {
			t.Fatal(err)
		}
		created := filepath.Join(vault, strangertest.RandomHex(11))
		secret := filepath.Join(vault, strangertest.RandomHex(11))
		if err := os.WriteFile(secret, []byte("root only\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		other := strangertest.RandomHex(8) + ".lock"
		plants := map[string]string{
			filepath.Join(dir, recordfile.LockFile):        created,
			filepath.Join(dir, other):                      created,
			filepath.Join(dir, "."+recordfile.Name+".tmp"): secret,
		}
		for p, target := range plants {
			if err := os.Symlink(target, p); err != nil {
				t.Fatal(err)
			}
			if err := os.Lchown(p, strangertest.UID, strangertest.UID); err != nil {
				t.Fatal(err)
			}
		}
		if release, err := recordfile.LockDir(dir); err == nil {
			release()
			t.Errorf("LockDir took a planted link as its lock")
		} else if !errors.Is(err, recordfile.ErrNotRegular) {
			t.Errorf("LockDir: %v; want ErrNotRegular", err)
		}
		if release, _, err := recordfile.TryLock(filepath.Join(dir, other)); err == nil {
			if release != nil {
				release()
			}
			t.Errorf("TryLock took a planted link as its lock")
		}
		err := recordfile.Write(dir, map[string]string{"id": "0123456789ab"})
		if err != nil {
			t.Errorf("Write beside a planted temporary link: %v", err)
		}
		if _, err := os.Lstat(created); err == nil {
			t.Errorf("taking the lock created %s through the planted link", created)
		}
		if b, _ := os.ReadFile(secret); string(b) != "root only\n" {
			t.Errorf("the root-only file behind the planted link now holds %q", b)
		}
	}
}
