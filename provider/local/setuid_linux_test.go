package local_test

import (
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/internal/providertest"
)

// TestNoSetuidLeavesTheSandbox: whatever a command in a local sandbox does
// (chmod, install -m, open with O_CREAT, mkdir, tar x), no file in its
// workspace carries a setuid or setgid bit on the host (security rule 4).
// Before commands ran under seccomp.PrivilegeRules, chmod 4755 left a
// -rwsr-xr-x root file on the host.
func TestNoSetuidLeavesTheSandbox(t *testing.T) {
	p := newProvider(t)
	ws := t.TempDir()
	_, c := create(t, p, runbox.SandboxSpec{Workdir: ws})
	out := run(t, c, providertest.SetuidScript())
	providertest.CheckNoPrivilegeBits(t, ws, 3, out)
}

// TestCopyFromDropsSetuid: pulling a setuid and a setgid file out of a
// sandbox (here planted from the host side, as the filter keeps commands
// from making one) gives the caller files without either bit, and says how
// many it dropped (security rule 4: before, the root caller got a
// -rwsr-xr-x file).
func TestCopyFromDropsSetuid(t *testing.T) {
	p := newProvider(t)
	ws := t.TempDir()
	_, c := create(t, p, runbox.SandboxSpec{Workdir: ws})
	src := filepath.Join(ws, "pulled")
	if err := os.Mkdir(src, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, mode := range map[string]fs.FileMode{"suid": 0o755 | fs.ModeSetuid, "sgid": 0o755 | fs.ModeSetgid} {
		f := filepath.Join(src, name)
		if err := os.WriteFile(f, []byte("#!/bin/sh\nid\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(f, mode); err != nil {
			t.Fatal(err)
		}
	}
	dst := filepath.Join(t.TempDir(), "copy")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	st, err := c.CopyFrom(ctx, "/workspace/pulled", dst)
	if err != nil {
		t.Fatal(err)
	}
	if st.Stripped != 2 {
		t.Errorf("Stripped = %d, want 2", st.Stripped)
	}
	for _, name := range []string{"suid", "sgid"} {
		info, err := os.Lstat(filepath.Join(dst, name))
		if err != nil {
			t.Fatal(err)
		}
		if info.Mode()&(fs.ModeSetuid|fs.ModeSetgid) != 0 || info.Mode().Perm() != 0o755 {
			t.Errorf("pulled %s is %v, want -rwxr-xr-x", name, info.Mode())
		}
	}
}

// TestNoFileCapabilityLeavesTheSandbox: sandbox root cannot give a file in
// the workspace a file capability (setcap, the security.capability
// xattr), which through the id-mapped workspace would be the host's: a
// host user running it would gain the capability. Before, `setcap
// cap_setuid+ep` left a host file with cap_setuid=ep.
func TestNoFileCapabilityLeavesTheSandbox(t *testing.T) {
	p := newProvider(t)
	ws := t.TempDir()
	_, c := create(t, p, runbox.SandboxSpec{Workdir: ws})
	// A VFS_CAP_REVISION_2 header with CAP_SETUID (7) permitted and
	// effective, written directly, as setcap would.
	probe := `import os, struct, sys
p = "/workspace/capped"
open(p, "wb").write(b"x")
data = struct.pack("<IIIII", 0x02000001, 1 << 7, 0, 0, 0)
try:
    os.setxattr(p, "security.capability", data)
    print("set")
except OSError as e:
    print("refused", e.errno)`
	out := run(t, c, "python3 -c '"+probe+"'")
	if strings.HasPrefix(out, "set") {
		t.Errorf("a command set a file capability in the workspace: %q", out)
	}
	if v, err := unix.Lgetxattr(filepath.Join(ws, "capped"), "security.capability", make([]byte, 64)); err == nil && v > 0 {
		t.Errorf("the host file has a security.capability xattr (%d bytes)", v)
	}
}
