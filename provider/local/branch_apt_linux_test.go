package local_test

import (
	"context"
	"crypto/rand"
	"os"
	osexec "os/exec"
	"strings"
	"testing"
	"time"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/client"
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

// TestSnapshotKeepsArchiveAndPipPackages: what an agent installs from
// Debian's archive with apt-get (sl; RUNBOX_TEST_APT=1 makes it required,
// CI sets it) and from a wheel with pip is in a sandbox made from the
// snapshot on network none: installed as dpkg and pip say, and it runs.
func TestSnapshotKeepsArchiveAndPipPackages(t *testing.T) {
	needRootHost(t)
	p := newProvider(t)
	ctx := context.Background()
	sb, c := create(t, p, runbox.SandboxSpec{Workdir: t.TempDir()})
	apt := os.Getenv("RUNBOX_TEST_APT") == "1"
	if _, err := os.Stat("/usr/games/sl"); apt && err == nil {
		t.Log("sl is installed on this machine, whose root the sandbox sees: apt-get would install nothing, so the archive package is left out")
		apt = false
	}
	if apt {
		res := exec(t, c, "apt-get install -y -q sl >/tmp/apt.log 2>&1 || { tail -20 /tmp/apt.log; exit 1; }; test -x /usr/games/sl",
			client.WithTimeout(5*time.Minute))
		if res.ExitCode != 0 {
			t.Fatalf("apt-get install sl from the archive: exit %d\n%s%s", res.ExitCode, res.Stdout, res.Stderr)
		}
	} else {
		t.Log("RUNBOX_TEST_APT=1 is not set: the archive package is left out (it needs Debian's archive reachable; .ci/run sets it)")
	}
	pip := exec(t, c, "python3 -m pip --version").ExitCode == 0
	module := "rbsnap" + strings.ToLower(rand.Text()[:8])
	if pip {
		mk := strings.ReplaceAll(`import zipfile
with zipfile.ZipFile("/workspace/MOD-1.0-py3-none-any.whl", "w") as z:
    z.writestr("MOD.py", "VALUE = 42\n")
    z.writestr("MOD-1.0.dist-info/METADATA", "Metadata-Version: 2.1\nName: MOD\nVersion: 1.0\n")
    z.writestr("MOD-1.0.dist-info/WHEEL", "Wheel-Version: 1.0\nGenerator: hand\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
    z.writestr("MOD-1.0.dist-info/RECORD", "")
`, "MOD", module)
		run(t, c, "python3 -c '"+mk+"'")
		run(t, c, "python3 -m pip install -q --no-index --break-system-packages /workspace/"+module+"-1.0-py3-none-any.whl 2>&1 | grep -v WARNING || true")
	} else {
		t.Log("this machine's python3 has no pip (apt-get install python3-pip): the pip package is left out")
	}
	if !apt && !pip {
		t.Skip("nothing to install: run `apt-get update` and set RUNBOX_TEST_APT=1 (Debian's archive reachable; .ci/run sets it), or `apt-get install python3-pip`, then run this test again")
	}
	snap, err := p.Snapshot(ctx, sb, "", runbox.SnapshotOptions{NoWorkspace: true})
	if err != nil {
		t.Fatal(err)
	}
	_, c2 := create(t, p, runbox.SandboxSpec{FromSnapshot: snap.Name, Network: "none", Workdir: t.TempDir()})
	if apt {
		if got, want := run(t, c2, "dpkg -s sl | grep Status; test -x /usr/games/sl && echo runs"), "Status: install ok installed\nruns\n"; got != want {
			t.Errorf("sl in a sandbox from the snapshot, network none: %q, want %q", got, want)
		}
	}
	if pip {
		if got := run(t, c2, "cd / && python3 -c 'import "+module+"; print("+module+".VALUE)'"); got != "42\n" {
			t.Errorf("the pip package in a sandbox from the snapshot, network none: %q, want 42", got)
		}
	}
}
