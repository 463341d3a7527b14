package supervisor

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
)

// DefaultSpillBytes bounds the total size of a daemon's spill files.
const DefaultSpillBytes = 1 << 30

// spillDir holds spill files: the full output of streams that outgrew a
// Result's head and tail. Their total size is bounded; when a write would
// exceed the bound, the oldest other files are removed first, and a single
// stream larger than the whole budget is truncated.
type spillDir struct {
	dir   string
	limit int64

	mu    sync.Mutex
	used  int64
	files []*spillFile // oldest first
}

// spillFile is one stream's spill file, written by that stream's reader.
type spillFile struct {
	path      string
	f         *os.File
	size      int64
	removed   bool // evicted to make room
	truncated bool // the budget ran out before the stream did
}

func newSpillDir(stateDir string, limit int64) *spillDir {
	if limit <= 0 {
		limit = DefaultSpillBytes
	}
	return &spillDir{dir: filepath.Join(stateDir, "spill"), limit: limit}
}

func (d *spillDir) create(name string) (*spillFile, error) {
	if err := os.MkdirAll(d.dir, 0o700); err != nil {
		return nil, fmt.Errorf("spill: %w", err)
	}
	path := filepath.Join(d.dir, name)
	f, err := os.OpenFile(path, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return nil, fmt.Errorf("spill: %w", err)
	}
	sf := &spillFile{path: path, f: f}
	d.mu.Lock()
	d.files = append(d.files, sf)
	d.mu.Unlock()
	return sf, nil
}

// write appends p to sf, evicting older files to stay within the budget.
func (d *spillDir) write(sf *spillFile, p []byte) {
	d.mu.Lock()
	if sf.removed || sf.truncated {
		d.mu.Unlock()
		return
	}
	for d.used+int64(len(p)) > d.limit {
		victim := -1
		for i, o := range d.files {
			if o != sf {
				victim = i
				break
			}
		}
		if victim < 0 {
			break
		}
		o := d.files[victim]
		d.files = append(d.files[:victim], d.files[victim+1:]...)
		d.used -= o.size
		o.removed = true
		os.Remove(o.path)
	}
	if room := d.limit - d.used; int64(len(p)) > room {
		p = p[:max(room, 0)]
		sf.truncated = true
	}
	d.used += int64(len(p))
	sf.size += int64(len(p))
	d.mu.Unlock()
	if len(p) > 0 {
		if _, err := sf.f.Write(p); err != nil {
			d.mu.Lock()
			sf.truncated = true
			d.mu.Unlock()
		}
	}
}

// finish closes sf's file and returns its path ("" when it was evicted) and
// whether it holds less than the whole stream.
func (d *spillDir) finish(sf *spillFile) (string, bool) {
	sf.f.Close()
	d.mu.Lock()
	defer d.mu.Unlock()
	if sf.removed {
		return "", true
	}
	return sf.path, sf.truncated
}
