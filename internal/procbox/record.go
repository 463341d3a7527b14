package procbox

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// records returns the store's own kind's records under dir, oldest first.
func (p *Store) records(dir string) ([]Record, error) {
	all, err := readRecords(dir)
	if err != nil {
		return nil, err
	}
	return slices.DeleteFunc(all, func(r Record) bool { return r.Provider != p.Name }), nil
}

// readRecords reads every sandbox record under dir, of every kind, oldest
// first. Directories without a readable record (a Create in progress,
// debris) are skipped.
func readRecords(dir string) ([]Record, error) {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	} else if err != nil {
		return nil, fmt.Errorf("read sandboxes: %w", err)
	}
	var recs []Record
	for _, e := range ents {
		if !e.IsDir() {
			continue
		}
		r, err := readRecord(filepath.Join(dir, e.Name()))
		if err != nil || r.ID != e.Name() {
			continue
		}
		recs = append(recs, r)
	}
	slices.SortFunc(recs, func(a, b Record) int {
		if c := a.Created.Compare(b.Created); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	return recs, nil
}

func readRecord(sbDir string) (Record, error) {
	b, err := os.ReadFile(filepath.Join(sbDir, "sandbox.json"))
	if err != nil {
		return Record{}, err
	}
	var r Record
	if err := json.Unmarshal(b, &r); err != nil {
		return Record{}, fmt.Errorf("sandbox record %s: %w", sbDir, err)
	}
	return r, nil
}

// writeRecord replaces sandbox.json atomically, so readers never see half a
// record.
func writeRecord(sbDir string, r Record) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return fmt.Errorf("sandbox record: %w", err)
	}
	tmp := filepath.Join(sbDir, ".sandbox.json.tmp")
	if err := os.WriteFile(tmp, append(b, '\n'), 0o600); err != nil {
		return fmt.Errorf("sandbox record: %w", err)
	}
	if err := os.Rename(tmp, filepath.Join(sbDir, "sandbox.json")); err != nil {
		return fmt.Errorf("sandbox record: %w", err)
	}
	return nil
}
