//go:build !linux

package files

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/runbox/runbox"
)

// errNotLinux is what every file operation returns off Linux: path
// resolution beneath a root needs openat2(2).
var errNotLinux = fmt.Errorf("file operations need Linux (openat2): %w", errors.ErrUnsupported)

// Open fails off Linux.
func Open(root string) (*FS, error) { return nil, errNotLinux }

// Close does nothing off Linux.
func (f *FS) Close() error { return nil }

// Stat fails off Linux.
func (f *FS) Stat(p string, follow bool) (runbox.FileInfo, error) {
	return runbox.FileInfo{}, errNotLinux
}

// OpenFile fails off Linux.
func (f *FS) OpenFile(p string) (*os.File, runbox.FileInfo, error) {
	return nil, runbox.FileInfo{}, errNotLinux
}

// Extract fails off Linux.
func (f *FS) Extract(r io.Reader, o ExtractOptions) (ExtractStats, error) {
	return ExtractStats{}, errNotLinux
}

// Archive fails off Linux.
func (f *FS) Archive(w io.Writer, p string, o ArchiveOptions) error { return errNotLinux }

// Manifest fails off Linux.
func (f *FS) Manifest(p string, exclude *Matcher, cache *HashCache, fn func(runbox.FileInfo) error) error {
	return errNotLinux
}

// HashFile fails off Linux.
func (f *FS) HashFile(p string, cache *HashCache) ([]byte, error) { return nil, errNotLinux }
