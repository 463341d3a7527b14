// Package buildinfo names the version of the running runbox binary, the
// same way for runbox and runboxd, so that runbox version and the daemon's
// version in runbox inspect agree for binaries built from one tree.
package buildinfo

import "runtime/debug"

// Stamp is the version of runbox, runbox-full and runboxd when set at build
// time, one stamp for the three binaries:
// -ldflags "-X github.com/runbox/runbox/internal/buildinfo.Stamp=v1.2.3".
var Stamp = Unstamped

// Current is the running binary's version: Version(Stamp).
func Current() string { return Version(Stamp) }

// Unstamped is the version of a binary built without a version stamp
// outside a version-control checkout.
const Unstamped = "dev"

// Version returns stamped (a version set at build time with -ldflags -X)
// when it is set; else the module version Go recorded (a go install of a
// tagged release); else "dev-" and the first 12 digits of the commit it was
// built from ("-dirty" when the tree had changes); else "dev".
func Version(stamped string) string {
	if stamped != "" && stamped != Unstamped {
		return stamped
	}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return Unstamped
	}
	if v := bi.Main.Version; v != "" && v != "(devel)" {
		return v
	}
	var rev string
	var dirty bool
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if rev == "" {
		return Unstamped
	}
	v := Unstamped + "-" + rev[:min(12, len(rev))]
	if dirty {
		v += "-dirty"
	}
	return v
}
