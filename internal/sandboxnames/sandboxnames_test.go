package sandboxnames

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

var errInUse = errors.New("in use")

func never(Entry) (bool, error)  { return false, nil }
func always(Entry) (bool, error) { return true, nil }

// TestClaimSetRemove: a claim stands while its process lives; Set makes
// it the sandbox; an entry whose sandbox still stands keeps the name, one
// whose sandbox is gone is taken over; Remove clears only the removed
// sandbox's entry.
func TestClaimSetRemove(t *testing.T) {
	x := At(t.TempDir())
	release, err := x.Claim("a", errInUse, never)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := x.Claim("a", errInUse, never); !errors.Is(err, errInUse) {
		t.Fatalf("second claim while the first's process lives: %v; want in use", err)
	}
	release()
	release2, err := x.Claim("a", errInUse, never)
	if err != nil {
		t.Fatalf("claim after release: %v", err)
	}
	if err := x.Set("a", Entry{Provider: "host", ID: "0123456789ab"}); err != nil {
		t.Fatal(err)
	}
	release2() // after Set: a no-op
	if e, err := x.Lookup("a"); err != nil || e.ID != "0123456789ab" || e.Provider != "host" {
		t.Fatalf("Lookup after Set: %+v, %v", e, err)
	}
	if _, err := x.Claim("a", errInUse, always); !errors.Is(err, errInUse) {
		t.Fatalf("claim of a standing sandbox's name: %v; want in use", err)
	}
	if err := x.Remove("a", "ffffffffffff"); err != nil {
		t.Fatal(err)
	}
	if _, err := x.Lookup("a"); err != nil {
		t.Fatalf("Remove of another id took the entry: %v", err)
	}
	release3, err := x.Claim("a", errInUse, never)
	if err != nil {
		t.Fatalf("claim of a gone sandbox's name: %v", err)
	}
	release3()
	if _, err := x.Lookup("a"); !errors.Is(err, ErrNoEntry) {
		t.Fatalf("Lookup after the released claim: %v; want ErrNoEntry", err)
	}
	if err := x.Set("b", Entry{Provider: "host", ID: "0123456789ab"}); err != nil {
		t.Fatal(err)
	}
	if err := x.Remove("b", "0123456789ab"); err != nil {
		t.Fatal(err)
	}
	if _, err := x.Lookup("b"); !errors.Is(err, ErrNoEntry) {
		t.Fatalf("Lookup after Remove: %v; want ErrNoEntry", err)
	}
}

// TestClaimOfDeadCreator: a pending claim whose process has exited is
// taken over, so a create that died leaves no name taken.
func TestClaimOfDeadCreator(t *testing.T) {
	home := t.TempDir()
	x := At(home)
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(Entry{Pid: cmd.Process.Pid, Start: 1})
	if err := os.MkdirAll(filepath.Join(home, Dir), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(home, Dir, "c"), b, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := x.Claim("c", errInUse, always); err != nil {
		t.Fatalf("claim over a dead creator's: %v", err)
	}
}

// TestNamesStayInTheIndex: a key that cannot be a sandbox name (a path,
// "..") never reads or writes outside the index directory.
func TestNamesStayInTheIndex(t *testing.T) {
	home := t.TempDir()
	x := At(home)
	outside := filepath.Join(home, "secret")
	if err := os.WriteFile(outside, []byte(`{"provider":"host","id":"0123456789ab"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"../secret", "..", ".", "a/b", ""} {
		if _, err := x.Lookup(key); !errors.Is(err, ErrNoEntry) {
			t.Errorf("Lookup(%q): %v; want ErrNoEntry", key, err)
		}
		if err := x.Set(key, Entry{Provider: "host", ID: "0123456789ab"}); err == nil {
			t.Errorf("Set(%q) succeeded", key)
		}
		if _, err := x.Claim(key, errInUse, never); err == nil {
			t.Errorf("Claim(%q) succeeded", key)
		}
	}
}
