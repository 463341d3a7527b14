package recordfile_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/runbox/runbox/internal/recordfile"
)

type rec struct {
	ID      string    `json:"id"`
	Created time.Time `json:"created"`
}

func (r rec) RecordID() string         { return r.ID }
func (r rec) RecordCreated() time.Time { return r.Created }

// List returns what Write wrote, oldest first, and passes over directories
// that keep refuses, that hold no record, or whose record names another id.
func TestWriteThenList(t *testing.T) {
	dir := t.TempDir()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, r := range []rec{{"bbb", t0.Add(time.Hour)}, {"aaa", t0}, {"ccc", t0}, {"skipme", t0}} {
		if err := os.Mkdir(filepath.Join(dir, r.ID), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := recordfile.Write(filepath.Join(dir, r.ID), r); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(dir, "empty"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "other"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := recordfile.Write(filepath.Join(dir, "other"), rec{"aaa", t0}); err != nil {
		t.Fatal(err)
	}
	got, err := recordfile.List[rec](dir, func(name string) bool { return name != "skipme" })
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, r := range got {
		ids = append(ids, r.ID)
	}
	if len(ids) != 3 || ids[0] != "aaa" || ids[1] != "ccc" || ids[2] != "bbb" {
		t.Errorf("List: %v; want [aaa ccc bbb]", ids)
	}
	if ents, _ := os.ReadDir(filepath.Join(dir, "aaa")); len(ents) != 1 {
		t.Errorf("Write left %d files in the sandbox directory; want only %s", len(ents), recordfile.Name)
	}
	if recs, err := recordfile.List[rec](filepath.Join(dir, "nothing-here"), nil); err != nil || recs != nil {
		t.Errorf("List of a missing dir: %v, %v; want nothing and no error", recs, err)
	}
}
