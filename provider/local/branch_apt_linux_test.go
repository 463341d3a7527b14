package local_test

import (
	"context"
	"crypto/rand"
	"os"
	osexec "os/exec"
	"strings"
	"testing"

	"github.com/runbox/runbox"
)

// TestSnapshotKeepsAnInstalledPackage: a package installed with apt-get in
// a sandbox (a .deb built there, so installing it needs no network) is in a
// sandbox made from the sandbox's snapshot on network none: dpkg has it
// installed and its program runs. The parent's removal changes nothing.
func TestSnapshotKeepsAnInstalledPackage(t *testing.T) {
	needRootHost(t)
	if _, err := osexec.LookPath("dpkg-deb"); err != nil {
		t.Skip("dpkg-deb is not on this machine (the sandbox sees its root): not a Debian-like host")
	}
	p := newProvider(t)
	ctx := context.Background()
	t.Cleanup(func() { os.RemoveAll(p.Home + "-workspaces") })
	sb, c := create(t, p, runbox.SandboxSpec{Workdir: t.TempDir()})
	name := "rbsnap" + strings.ToLower(rand.Text()[:8])
	marker := rand.Text()
	script := strings.NewReplacer("PKG", name, "MARKER", marker).Replace(`set -e
mkdir -p /usr/local/src/PKG-build && cd /usr/local/src/PKG-build && mkdir -p PKG/DEBIAN PKG/usr/bin
printf 'Package: PKG\nVersion: 1.0\nArchitecture: all\nMaintainer: runbox <t@example.invalid>\nDescription: a snapshot test\n' >PKG/DEBIAN/control
printf '#!/bin/sh\necho MARKER\n' >PKG/usr/bin/PKG && chmod 755 PKG/usr/bin/PKG
dpkg-deb --root-owner-group --build PKG PKG.deb >/dev/null
apt-get install -y "$PWD/PKG.deb" >/tmp/apt.log 2>&1 || { cat /tmp/apt.log; exit 1; }
PKG`)
	if got := run(t, c, script); got != marker+"\n" {
		t.Fatalf("apt-get install of a local package: %q", got)
	}
	snap, err := p.Snapshot(ctx, sb, "", runbox.SnapshotOptions{NoWorkspace: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Remove(ctx, sb, true); err != nil {
		t.Fatal(err)
	}
	_, c2 := create(t, p, runbox.SandboxSpec{FromSnapshot: snap.Name, Network: "none", Workdir: t.TempDir()})
	if got, want := run(t, c2, name+"; dpkg -s "+name+" | grep Status"), marker+"\nStatus: install ok installed\n"; got != want {
		t.Errorf("a sandbox from the snapshot, network none: %q, want %q", got, want)
	}
}
