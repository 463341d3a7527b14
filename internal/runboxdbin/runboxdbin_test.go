package runboxdbin

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func TestLocateOrder(t *testing.T) {
	dir := t.TempDir()
	explicit := filepath.Join(dir, "explicit")
	fromEnv := filepath.Join(dir, "env")
	for _, f := range []string{explicit, fromEnv} {
		if err := os.WriteFile(f, []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("RUNBOX_RUNBOXD", fromEnv)
	if got, err := Locate(explicit); err != nil || got != explicit {
		t.Errorf("Locate(explicit) = %q, %v; want %q", got, err, explicit)
	}
	if got, err := Locate(""); err != nil || got != fromEnv {
		t.Errorf("Locate with $RUNBOX_RUNBOXD = %q, %v; want %q", got, err, fromEnv)
	}
}

func TestLocateRefusesWhatCannotRun(t *testing.T) {
	dir := t.TempDir()
	notExec := filepath.Join(dir, "plain")
	if err := os.WriteFile(notExec, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{filepath.Join(dir, "missing"), notExec, dir} {
		if _, err := Locate(path); !errors.Is(err, ErrNotFound) {
			t.Errorf("Locate(%s) = %v, want ErrNotFound", path, err)
		}
	}
	t.Setenv("RUNBOX_RUNBOXD", filepath.Join(dir, "missing"))
	if _, err := Locate(""); !errors.Is(err, ErrNotFound) {
		t.Errorf("Locate with a missing $RUNBOX_RUNBOXD = %v, want ErrNotFound", err)
	}
}

func TestCheckStatic(t *testing.T) {
	// The test binary itself is dynamically linked or static depending on
	// how it was built; /bin/sh on Debian is dynamic.
	sh, err := os.ReadFile("/bin/sh")
	if err != nil {
		t.Skip("no /bin/sh to check")
	}
	if err := CheckStatic(sh, "/bin/sh"); !errors.Is(err, ErrNotStatic) {
		t.Errorf("CheckStatic(/bin/sh) = %v, want ErrNotStatic", err)
	}
	if err := CheckStatic([]byte("#!/bin/sh\n"), "script"); err == nil || errors.Is(err, ErrNotStatic) {
		t.Errorf("CheckStatic(script) = %v, want a not-an-executable error", err)
	}
}
