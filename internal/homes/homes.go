// Package homes holds the rules of runbox homes. A home is opened only
// when no one but its user and root may change it or its path (Open,
// Trusted): runbox acts on what its records there say. And the package
// keeps the machine's list of runbox homes, so that no sandbox's workdir
// is, contains or lies inside another runbox's home (a server's, another
// user's, another RUNBOX_HOME's): each holds sandboxes' secrets and
// sockets, which a workspace would hand to the sandbox.
//
// Every home runbox opens registers itself: a marker file in the home
// (MarkerName) and an entry in the machine's registry directory
// (SystemDir, written by root) and in the user's own (under
// $XDG_STATE_HOME, for a user who is not root). Check reads both.
package homes

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/runbox/runbox"
)

// SystemDir is the machine's registry of runbox homes (root's to write).
const SystemDir = "/var/lib/runbox/homes"

// MarkerName is the file each runbox home holds, to say what it is.
const MarkerName = ".runbox-home"

// userDir returns the calling user's own registry directory.
func userDir() string {
	if d := os.Getenv("XDG_STATE_HOME"); filepath.IsAbs(d) {
		return filepath.Join(d, "runbox", "homes")
	}
	if h, err := os.UserHomeDir(); err == nil {
		return filepath.Join(h, ".local", "state", "runbox", "homes")
	}
	return ""
}

// registries returns the registry directories this process reads.
func registries() []string {
	dirs := []string{SystemDir}
	if os.Geteuid() != 0 {
		if d := userDir(); d != "" {
			dirs = append(dirs, d)
		}
	}
	return dirs
}

// Register records home (which must exist) as a runbox home: its marker,
// and its entry in the registry this user may write (the machine's as
// root, the user's own otherwise).
func Register(home string) error {
	abs, err := filepath.Abs(home)
	if err != nil {
		return fmt.Errorf("register runbox home %s: %w", home, err)
	}
	if r, err := filepath.EvalSymlinks(abs); err == nil {
		abs = r
	}
	marker := filepath.Join(abs, MarkerName)
	if _, err := os.Lstat(marker); err != nil {
		if err := os.WriteFile(marker, []byte("runbox home\n"), 0o600); err != nil {
			return fmt.Errorf("register runbox home %s: %w", abs, err)
		}
	}
	dir := SystemDir
	if os.Geteuid() != 0 {
		if dir = userDir(); dir == "" {
			return nil
		}
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("register runbox home %s: %w", abs, err)
	}
	sum := sha256.Sum256([]byte(abs))
	entry := filepath.Join(dir, hex.EncodeToString(sum[:12]))
	if b, err := os.ReadFile(entry); err == nil && string(b) == abs+"\n" {
		return nil
	}
	tmp := entry + ".tmp"
	if err := os.WriteFile(tmp, []byte(abs+"\n"), 0o600); err != nil {
		return fmt.Errorf("register runbox home %s: %w", abs, err)
	}
	if err := os.Rename(tmp, entry); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("register runbox home %s: %w", abs, err)
	}
	return nil
}

// Known returns every registered home that still is one (its marker is
// there), and forgets, where it may, the entries of homes that are gone.
func Known() []string {
	var out []string
	for _, dir := range registries() {
		ents, err := os.ReadDir(dir)
		if err != nil {
			continue
		}
		for _, e := range ents {
			if strings.HasSuffix(e.Name(), ".tmp") {
				continue
			}
			p := filepath.Join(dir, e.Name())
			b, err := os.ReadFile(p)
			if err != nil {
				continue
			}
			home := strings.TrimSuffix(string(b), "\n")
			if _, err := os.Lstat(filepath.Join(home, MarkerName)); errors.Is(err, os.ErrNotExist) {
				os.Remove(p) // a home removed since
				continue
			}
			out = append(out, home)
		}
	}
	return out
}

// Check refuses (runbox.ErrInvalidSpec) a workdir that is, contains or lies
// inside a runbox home other than own (the sandbox's own home, which its
// provider handles): a registered one, or one whose marker is in the
// workdir or a directory above it.
func Check(workdir, own string) error {
	wd := resolve(workdir)
	ownR := ""
	if own != "" {
		ownR = resolve(own)
	}
	refuse := func(home string) error {
		return fmt.Errorf("workdir %s and the runbox home %s overlap: a home holds its sandboxes' secrets and sockets, which the workspace would hand to this sandbox; pick a directory apart from every runbox home: %w",
			workdir, home, runbox.ErrInvalidSpec)
	}
	for _, home := range Known() {
		h := resolve(home)
		if h == ownR {
			continue
		}
		if within(h, wd) || within(wd, h) {
			return refuse(home)
		}
	}
	for d := wd; ; d = filepath.Dir(d) {
		if d != ownR {
			if _, err := os.Lstat(filepath.Join(d, MarkerName)); err == nil {
				return refuse(d)
			}
		}
		if d == "/" || d == "." {
			break
		}
	}
	return nil
}

// resolve returns p absolute with its links resolved where it exists.
func resolve(p string) string {
	if a, err := filepath.Abs(p); err == nil {
		p = a
	}
	if r, err := filepath.EvalSymlinks(p); err == nil {
		return r
	}
	return p
}

// within reports whether p is dir or lies inside it.
func within(dir, p string) bool {
	rel, err := filepath.Rel(dir, p)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, "../")
}
