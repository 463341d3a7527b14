package files

import (
	"errors"
	"fmt"
	"io/fs"
	"strings"

	"github.com/runbox/runbox"
)

// FS resolves paths beneath a root directory, or, without one, as usual.
// It is safe for concurrent use. Close releases the root's descriptor.
type FS struct {
	fd      int    // the root's O_PATH descriptor, or AT_FDCWD
	root    string // the root as given, for messages
	resolve uint64 // openat2 resolve flags
	owned   bool   // fd is ours to close
}

// WriteOptions says how WriteFile writes.
type WriteOptions struct {
	// Perm is the file's mode (permission, setuid, setgid, sticky bits),
	// set exactly (no umask); 0 means 0644.
	Perm fs.FileMode
	// Parents creates missing parent directories (0755).
	Parents bool
	// InPlace truncates and writes the existing file instead of writing a
	// temporary file and renaming it over the old one. A symlink at p is
	// then refused rather than followed.
	InPlace bool
}

// maxNameBytes is the longest file name component Linux file systems take.
const maxNameBytes = 255

// CleanEntryName validates an archive entry name (or a sync path) and
// returns it cleaned, relative, without a trailing slash; "." is the root
// itself. Absolute names and names with ".." components escape the root
// (runbox.ErrEscapesRoot); empty names, NUL bytes and components longer
// than 255 bytes cannot be represented (runbox.ErrInvalidPath).
func CleanEntryName(name string) (string, error) {
	if name == "" {
		return "", &PathError{Op: "entry", Path: name, Kind: runbox.ErrInvalidPath, Err: errors.New("empty name")}
	}
	if strings.IndexByte(name, 0) >= 0 {
		return "", &PathError{Op: "entry", Path: name, Kind: runbox.ErrInvalidPath, Err: errors.New("name has a NUL byte")}
	}
	if strings.HasPrefix(name, "/") {
		return "", &PathError{Op: "entry", Path: name, Kind: runbox.ErrEscapesRoot, Err: errors.New("absolute name")}
	}
	var parts []string
	for _, c := range strings.Split(name, "/") {
		switch {
		case c == "" || c == ".":
		case c == "..":
			return "", &PathError{Op: "entry", Path: name, Kind: runbox.ErrEscapesRoot, Err: errors.New(`".." component`)}
		case len(c) > maxNameBytes:
			return "", &PathError{Op: "entry", Path: name, Kind: runbox.ErrInvalidPath, Err: fmt.Errorf("component longer than %d bytes", maxNameBytes)}
		default:
			parts = append(parts, c)
		}
	}
	if len(parts) == 0 {
		return ".", nil
	}
	return strings.Join(parts, "/"), nil
}

// ExtractOptions says how Extract works.
type ExtractOptions struct {
	// Delete lists paths (relative to the root) removed, recursively,
	// before extracting; missing ones are not an error.
	Delete []string
	// Cache, when set, records the sha256 of every file written (computed
	// while writing), so the next manifest need not read them again.
	Cache *HashCache
	// Progress, when set, is called with the number of file bytes written
	// since its last call.
	Progress func(n int64)
	// Chtimes lists entries (Path relative to the root, ModTime) whose
	// mtime is set after extracting; missing ones are skipped.
	Chtimes []runbox.FileInfo
	// Within, when set, is the only top-level name entries may have (the
	// entry itself or beneath it): a copy into a directory that already
	// holds other files cannot touch them.
	Within string
}

// ExtractStats counts what Extract did.
type ExtractStats struct {
	Files, Dirs, Links, Bytes, Deleted int64
	// Stripped counts the entries whose setuid or setgid bit was dropped:
	// Extract never makes a file or directory with either.
	Stripped int64
}

// privilegeBits are the mode bits runbox never applies to a file it
// writes: setuid and setgid (security rule 4).
const privilegeBits = 0o6000

// ArchiveOptions says what Archive writes.
type ArchiveOptions struct {
	// Name is the entry name of the archived path itself; entries beneath
	// it are named Name/rel. Empty: entries are named relative to the path,
	// which is not an entry itself (a file is then named by its base name).
	Name string
	// Entries, when set, archives only these paths (relative to the
	// archived directory), each alone: a directory is not descended into.
	Entries []string
	// Exclude leaves out matching entries (and everything beneath an
	// excluded directory).
	Exclude *Matcher
	// Progress, when set, is called with the number of file bytes archived
	// since its last call.
	Progress func(n int64)
}
