// Package sandboxnames is the name index of a runbox home: one file per
// sandbox name, <home>/names/<name>, saying which provider's sandbox has
// that name and its id. It lets the runbox front and runbox-full resolve a
// name with one file read instead of asking every provider (a docker
// engine, a cluster, every ssh host) for every sandbox.
//
// The index is a cache of what the providers know, never the truth: a
// reader checks that the sandbox an entry names still has that name (its
// record, or its provider) before using it, so an entry left behind by a
// sandbox removed behind runbox's back resolves as an unknown name does,
// never to another sandbox. Sandboxes made without the index (by the Go
// library, or another machine's runbox through a shared engine or cluster)
// are found by the full lookup, which writes the entry back (Repair).
//
// Writers serialise on a lock file (flock) in the index directory, and
// every entry is replaced by a rename, so a reader, which takes no lock,
// sees a whole entry or none. Claim is how a create reserves its name: it
// holds the lock while it decides whether the name's entry still stands,
// so of concurrent creates of one name exactly one gets it.
package sandboxnames

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/runbox/runbox/internal/processrecord"
	"github.com/runbox/runbox/internal/sandboxkey"
)

// Dir is the index's directory under the runbox home.
const Dir = "names"

// Entry is what the index says of one name.
type Entry struct {
	// Provider and ID name the sandbox; both are "" while a create that
	// claimed the name has not finished (Pending).
	Provider string `json:"provider,omitempty"`
	ID       string `json:"id,omitempty"`
	// Pid and Start (field 22 of /proc/PID/stat) are the process whose
	// create claimed the name: a pending entry stands while that process
	// lives, so a create that died leaves no name taken.
	Pid   int    `json:"pid,omitempty"`
	Start uint64 `json:"start,omitempty"`
}

// Pending reports whether the entry is a create's claim, not yet a sandbox.
func (e Entry) Pending() bool { return e.ID == "" }

// claimerAlive reports whether the process that made a pending entry runs.
func (e Entry) claimerAlive() bool {
	return e.Pid > 0 && processrecord.SameProcess(e.Pid, e.Start)
}

// ErrNoEntry means the index has no entry for the name.
var ErrNoEntry = errors.New("no name index entry")

// ErrNotOwn means the index's directory or one of its files is neither
// this user's own nor its home owner's (or is not a regular file):
// another user may have planted it, so it is neither read nor written
// through.
var ErrNotOwn = errors.New("not this user's")

// Index is the name index under one runbox home.
type Index struct{ dir string }

// At returns the index of the runbox home.
func At(home string) Index { return Index{dir: filepath.Join(home, Dir)} }

// path returns name's entry file, or "" when name cannot be a sandbox's
// name (and so is never a path outside the index).
func (x Index) path(name string) string {
	if !sandboxkey.ValidName(name) {
		return ""
	}
	return filepath.Join(x.dir, name)
}

// Lookup reads name's entry without locking. A name without one, or one
// that cannot be a sandbox's name, is ErrNoEntry.
func (x Index) Lookup(name string) (Entry, error) {
	if x.path(name) == "" {
		return Entry{}, ErrNoEntry
	}
	dir, err := x.openDir(false)
	if errors.Is(err, fs.ErrNotExist) {
		return Entry{}, ErrNoEntry
	} else if err != nil {
		return Entry{}, err
	}
	defer closeDir(dir)
	return lookupIn(dir, x.path(name))
}

// lookupIn reads the entry at path from the index's directory dir.
func lookupIn(dir dirFD, path string) (Entry, error) {
	b, err := readEntry(dir, filepath.Base(path))
	if errors.Is(err, fs.ErrNotExist) {
		return Entry{}, ErrNoEntry
	} else if err != nil {
		return Entry{}, fmt.Errorf("name index entry %s: %w", path, err)
	}
	var e Entry
	if err := json.Unmarshal(b, &e); err != nil {
		return Entry{}, fmt.Errorf("name index entry %s: %w", path, err)
	}
	return e, nil
}

// Claim reserves name for a create by this process. An entry that still
// stands keeps the name: a pending one whose creating process lives, or a
// sandbox for which taken reports true (taken asks the entry's provider
// whether that sandbox still exists with that name; it runs under the
// index's lock). Then Claim returns taken's error, or one saying who has
// the name, wrapping inUse. Otherwise the name is this process's until
// Set replaces the claim with the sandbox, or release (idempotent, and a
// no-op once Set ran or another claim replaced it) gives it up.
func (x Index) Claim(name string, inUse error, taken func(Entry) (bool, error)) (release func(), err error) {
	p := x.path(name)
	if p == "" {
		return nil, fmt.Errorf("name index: invalid name %q", name)
	}
	start := selfStart()
	mine := Entry{Pid: os.Getpid(), Start: start}
	err = x.locked(func(dir dirFD) error {
		old, err := lookupIn(dir, p)
		switch {
		case errors.Is(err, ErrNoEntry):
		case err != nil:
			// An entry that cannot be read is replaced.
		case old.Pending() && old.claimerAlive():
			return fmt.Errorf("name %q is being taken by another runbox create (pid %d): %w", name, old.Pid, inUse)
		case !old.Pending():
			t, terr := taken(old)
			if terr != nil {
				return terr
			}
			if t {
				return fmt.Errorf("name %q is used by %s sandbox %s: %w", name, old.Provider, old.ID, inUse)
			}
		}
		return x.write(dir, name, mine)
	})
	if err != nil {
		return nil, err
	}
	return func() { _ = x.removeIf(name, func(e Entry) bool { return e == mine }) }, nil
}

// Set records that name is the sandbox e (Provider and ID set), replacing
// whatever entry it had.
func (x Index) Set(name string, e Entry) error {
	if x.path(name) == "" {
		return fmt.Errorf("name index: invalid name %q", name)
	}
	return x.locked(func(dir dirFD) error { return x.write(dir, name, e) })
}

// Repair records that name is the sandbox e, found by a full lookup,
// unless a create has claimed the name meanwhile.
func (x Index) Repair(name string, e Entry) error {
	if x.path(name) == "" {
		return fmt.Errorf("name index: invalid name %q", name)
	}
	return x.locked(func(dir dirFD) error {
		if old, err := lookupIn(dir, x.path(name)); err == nil && (old == e || old.Pending() && old.claimerAlive()) {
			return nil
		}
		return x.write(dir, name, e)
	})
}

// Remove deletes name's entry if it names the sandbox id (a removed
// sandbox's), and leaves any other: a later create's claim or sandbox.
func (x Index) Remove(name, id string) error {
	if x.path(name) == "" || id == "" {
		return nil
	}
	return x.removeIf(name, func(e Entry) bool { return e.ID == id })
}

// removeIf deletes name's entry when match accepts it, under the lock.
func (x Index) removeIf(name string, match func(Entry) bool) error {
	return x.locked(func(dir dirFD) error {
		e, err := lookupIn(dir, x.path(name))
		if err != nil || !match(e) {
			return nil
		}
		if err := removeEntry(dir.fd, name); err != nil {
			return fmt.Errorf("name index: %w", err)
		}
		return nil
	})
}

// write replaces name's entry with e by a rename, in the index's
// directory dir (the caller holds the lock).
func (x Index) write(dir dirFD, name string, e Entry) error {
	b, err := json.Marshal(e)
	if err != nil {
		return fmt.Errorf("name index: %w", err)
	}
	if err := writeEntry(dir.fd, name, b); err != nil {
		return fmt.Errorf("name index %s: %w", x.path(name), err)
	}
	return nil
}

// selfStart returns this process's start time (field 22 of its stat).
func selfStart() uint64 {
	_, start, err := processrecord.ProcStat(os.Getpid())
	if err != nil {
		return 0
	}
	return start
}
