package procbox

import (
	"slices"

	"github.com/runbox/runbox/internal/processrecord"
	"github.com/runbox/runbox/internal/recordfile"
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
// first (see recordfile.List).
func readRecords(dir string) ([]Record, error) { return recordfile.List[Record](dir, nil) }

func readRecord(sbDir string) (Record, error) { return processrecord.Read(sbDir) }

func writeRecord(sbDir string, r Record) error { return recordfile.Write(sbDir, r) }
