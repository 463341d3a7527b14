package runboxdbin

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
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

// elfImage returns a minimal 64-bit little-endian ELF executable whose one
// program header has type progType (PT_INTERP makes it dynamically linked).
func elfImage(progType elf.ProgType) []byte {
	h := elf.Header64{
		Type: uint16(elf.ET_EXEC), Machine: uint16(elf.EM_X86_64), Version: uint32(elf.EV_CURRENT),
		Phoff: 64, Ehsize: 64, Phentsize: 56, Phnum: 1,
	}
	copy(h.Ident[:], []byte{0x7f, 'E', 'L', 'F', byte(elf.ELFCLASS64), byte(elf.ELFDATA2LSB), byte(elf.EV_CURRENT)})
	var b bytes.Buffer
	binary.Write(&b, binary.LittleEndian, h)
	binary.Write(&b, binary.LittleEndian, elf.Prog64{Type: uint32(progType), Off: 120, Filesz: 1, Memsz: 1})
	b.WriteByte(0)
	return b.Bytes()
}

func TestCheckStatic(t *testing.T) {
	if err := CheckStatic(elfImage(elf.PT_LOAD), "static"); err != nil {
		t.Errorf("CheckStatic(a static executable) = %v, want nil", err)
	}
	if err := CheckStatic(elfImage(elf.PT_INTERP), "dynamic"); !errors.Is(err, ErrNotStatic) {
		t.Errorf("CheckStatic(a dynamic executable) = %v, want ErrNotStatic", err)
	}
	if err := CheckStatic([]byte("#!/bin/sh\n"), "script"); err == nil || errors.Is(err, ErrNotStatic) {
		t.Errorf("CheckStatic(script) = %v, want a not-an-executable error", err)
	}
}
