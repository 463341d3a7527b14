package cli_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCpAndSync drives cp and sync through the CLI against a host sandbox:
// both directions, a re-sync that sends nothing, --delete, --exclude, and
// exit status 125 with one line on stderr when runbox fails.
func TestCpAndSync(t *testing.T) {
	setHome(t)
	id := up(t)
	src := t.TempDir()
	os.MkdirAll(filepath.Join(src, "dir", "sub"), 0o755)
	os.WriteFile(filepath.Join(src, "dir", "a.txt"), []byte("alpha"), 0o600)
	os.WriteFile(filepath.Join(src, "dir", "sub", "b.log"), []byte("log"), 0o644)
	os.Symlink("a.txt", filepath.Join(src, "dir", "link"))
	remote := filepath.Join(t.TempDir(), "in-sandbox")

	must(t, "cp", filepath.Join(src, "dir"), id+":"+remote)
	back := filepath.Join(t.TempDir(), "back")
	must(t, "cp", id+":"+remote, back)
	if b, err := os.ReadFile(filepath.Join(back, "a.txt")); err != nil || string(b) != "alpha" {
		t.Errorf("cp round trip: a.txt %q, %v", b, err)
	}
	if l, err := os.Readlink(filepath.Join(back, "link")); err != nil || l != "a.txt" {
		t.Errorf("cp round trip: link %q, %v", l, err)
	}

	target := id + ":" + remote + "-sync"
	out := must(t, "sync", "--exclude", "*.log", filepath.Join(src, "dir"), target)
	if !strings.HasPrefix(out, "1 file, 1 link, 1 dir sent") {
		t.Errorf("first sync printed %q", out)
	}
	if _, err := os.Stat(remote + "-sync/sub/b.log"); !os.IsNotExist(err) {
		t.Errorf("excluded b.log was synced: %v", err)
	}
	if out := must(t, "sync", "--exclude", "*.log", filepath.Join(src, "dir"), target); !strings.HasPrefix(out, "0 files, 0 links, 0 dirs sent (0 B), 0 deleted") {
		t.Errorf("second sync printed %q, want nothing sent", out)
	}
	os.Remove(filepath.Join(src, "dir", "a.txt"))
	if out := must(t, "sync", "--delete", "--exclude", "*.log", filepath.Join(src, "dir"), target); !strings.Contains(out, "1 deleted") {
		t.Errorf("sync --delete printed %q", out)
	}
	pulled := t.TempDir()
	must(t, "sync", "--quiet", target, pulled)
	if _, err := os.Lstat(filepath.Join(pulled, "link")); err != nil {
		t.Errorf("pull: %v", err)
	}

	if o := rb(t, "cp", src, filepath.Join(t.TempDir(), "x")); o.code != 125 || !strings.Contains(o.stderr, "SANDBOX:PATH") {
		t.Errorf("cp between two local paths: %+v, want 125 and a reason", o)
	}
	if o := rb(t, "cp", id+":/no/such/file", t.TempDir()); o.code != 125 || strings.Count(strings.TrimSpace(o.stderr), "\n") != 0 || !strings.Contains(o.stderr, "file not found") {
		t.Errorf("cp of a missing file: %+v, want 125 and one line saying file not found", o)
	}
}
