package runbox

import (
	"io/fs"
	"time"
)

// FileInfo describes a file in a sandbox (or, during a sync, on this
// machine). Paths are slash-separated and relative to the directory listed,
// or as requested for a single file.
type FileInfo struct {
	// Path is the file's path: relative to the listed directory in listings,
	// the requested path otherwise.
	Path string
	// Mode holds the type bits (fs.ModeDir, fs.ModeSymlink, fs.ModeIrregular
	// for anything else) and the permission, setuid, setgid and sticky bits.
	Mode fs.FileMode
	// Size is the length in bytes of a regular file (of the target path, for
	// a symlink).
	Size int64
	// ModTime is the modification time, with nanoseconds.
	ModTime time.Time
	// LinkTarget is a symlink's target, as stored (never resolved).
	LinkTarget string
	// SHA256 is the digest of a regular file's content when known (sync
	// manifests), else nil.
	SHA256 []byte
}

// IsDir reports whether the entry is a directory.
func (fi FileInfo) IsDir() bool { return fi.Mode.IsDir() }

// IsSymlink reports whether the entry is a symbolic link.
func (fi FileInfo) IsSymlink() bool { return fi.Mode&fs.ModeSymlink != 0 }

// IsRegular reports whether the entry is a regular file.
func (fi FileInfo) IsRegular() bool { return fi.Mode.IsRegular() }
