package docker_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/runbox/runbox"
)

// buildDeb builds, with the host's dpkg-deb, a .deb of the package name
// whose one program (/usr/bin/NAME) prints marker, and returns its bytes.
// gzip: busybox's dpkg reads no xz.
func buildDeb(t *testing.T, name, marker string) []byte {
	t.Helper()
	if _, err := exec.LookPath("dpkg-deb"); err != nil {
		t.Skip("dpkg-deb is not on this machine (apt-get install dpkg): the test builds its package with it")
	}
	dir := t.TempDir()
	root := filepath.Join(dir, name)
	for _, d := range []string{"DEBIAN", "usr/bin"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	control := "Package: " + name + "\nVersion: 1.0\nArchitecture: all\nMaintainer: runbox <t@example.invalid>\nDescription: a snapshot test\n"
	if err := os.WriteFile(filepath.Join(root, "DEBIAN/control"), []byte(control), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "usr/bin", name), []byte("#!/bin/sh\necho "+marker+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	deb := filepath.Join(dir, name+".deb")
	if out, err := exec.Command("dpkg-deb", "-Zgzip", "--root-owner-group", "--build", root, deb).CombinedOutput(); err != nil {
		t.Fatalf("dpkg-deb --build: %v: %s", err, out)
	}
	b, err := os.ReadFile(deb)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestSnapshotKeepsAnInstalledPackage: a package installed with dpkg in a
// docker sandbox (a .deb built on the host and copied in, so installing it
// needs no network) is in the sandboxes made from the sandbox's snapshot:
// a fork made before the parent is removed keeps working after, with the
// package installed (dpkg -l says "ii") and its program running; a sandbox
// made after the parent is gone, with network none (only a loopback
// interface), has it too.
func TestSnapshotKeepsAnInstalledPackage(t *testing.T) {
	needEngine(t)
	p := newProvider(t, false)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	name := "rbsnap" + strings.ToLower(rand.Text()[:8])
	marker := rand.Text()
	deb := buildDeb(t, name, marker)

	sb := create(t, p, runbox.SandboxSpec{})
	c := dial(t, p, sb)
	if _, err := c.WriteFile(ctx, "/tmp/"+name+".deb", bytes.NewReader(deb)); err != nil {
		t.Fatal(err)
	}
	res := run(t, c, "mkdir -p /var/lib/dpkg/info && touch /var/lib/dpkg/status && dpkg -i /tmp/"+name+".deb >/tmp/dpkg.log 2>&1 || cat /tmp/dpkg.log; rm /tmp/"+name+".deb; "+name)
	wantStdout(t, res, marker+"\n")
	snap := "t" + strings.ToLower(sb.ID) + "-pkg"
	if _, err := p.Snapshot(ctx, sb, snap, runbox.SnapshotOptions{}); err != nil {
		t.Fatal(err)
	}
	// Registered first, so it runs after the sandboxes' removal.
	t.Cleanup(func() {
		if err := p.RemoveSnapshot(context.Background(), snap); err != nil {
			t.Errorf("remove snapshot: %v", err)
		}
	})
	fork := createFrom(t, p, runbox.SandboxSpec{FromSnapshot: snap})
	fc := dial(t, p, fork)
	wantStdout(t, run(t, fc, "echo fork > /etc/who"), "")

	if err := p.Remove(ctx, sb, false); err != nil {
		t.Fatalf("remove the parent: %v", err)
	}
	installed := name + "; dpkg -l " + name + " | tail -n 1 | cut -c1-2; cat /etc/who 2>/dev/null; ls /sys/class/net"
	// The fork's interfaces are whatever the provider's default network
	// gives; its package and its own write are what count.
	res = run(t, fc, name+"; dpkg -l "+name+" | tail -n 1 | cut -c1-2; cat /etc/who")
	wantStdout(t, res, marker+"\nii\nfork\n")
	nsb := createFrom(t, p, runbox.SandboxSpec{FromSnapshot: snap, Network: "none"})
	wantStdout(t, run(t, dial(t, p, nsb), installed), marker+"\nii\nlo\n")
}
