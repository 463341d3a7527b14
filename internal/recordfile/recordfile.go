// Package recordfile keeps sandbox records as JSON files, one
// <dir>/<id>/sandbox.json per sandbox, for the providers whose registry is
// a directory on this machine (host, local, ssh).
package recordfile

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// Name is the record's file name inside a sandbox's directory.
const Name = "sandbox.json"

// Record is what List needs to know of a record: the id it claims (it must
// match its directory's name) and when it was made (the listing's order).
type Record interface {
	RecordID() string
	RecordCreated() time.Time
}

// Read reads the record in sbDir (ReadRegular: never through a link, a
// FIFO or a device).
func Read[T any](sbDir string) (T, error) {
	var r T
	b, err := ReadRegular(filepath.Join(sbDir, Name), MaxRecord)
	if err != nil {
		return r, err
	}
	if err := json.Unmarshal(b, &r); err != nil {
		return r, fmt.Errorf("sandbox record %s: %w", sbDir, err)
	}
	return r, nil
}

// Write replaces the record in sbDir atomically, so readers never see half
// a record.
func Write(sbDir string, r any) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return fmt.Errorf("sandbox record: %w", err)
	}
	// A fresh file of a random name (O_EXCL: never an existing file or a
	// link planted there), renamed over the record.
	f, err := os.CreateTemp(sbDir, "."+Name+".*.tmp")
	if err != nil {
		return fmt.Errorf("sandbox record: %w", err)
	}
	_, err = f.Write(append(b, '\n'))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), filepath.Join(sbDir, Name))
	}
	if err != nil {
		os.Remove(f.Name())
		return fmt.Errorf("sandbox record: %w", err)
	}
	return nil
}

// List reads the record of every subdirectory of dir whose name keep
// accepts (nil: every one), oldest first, ties by id. A directory without
// a readable record, or whose record names another id (a Create in
// progress, debris), is skipped; a dir that does not exist lists nothing.
func List[T Record](dir string, keep func(name string) bool) ([]T, error) {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	} else if err != nil {
		return nil, fmt.Errorf("read sandboxes in %s: %w", dir, err)
	}
	var recs []T
	for _, e := range ents {
		if !e.IsDir() || (keep != nil && !keep(e.Name())) {
			continue
		}
		r, err := Read[T](filepath.Join(dir, e.Name()))
		if err != nil || r.RecordID() != e.Name() {
			continue
		}
		recs = append(recs, r)
	}
	slices.SortFunc(recs, func(a, b T) int {
		if c := a.RecordCreated().Compare(b.RecordCreated()); c != 0 {
			return c
		}
		return strings.Compare(a.RecordID(), b.RecordID())
	})
	return recs, nil
}
