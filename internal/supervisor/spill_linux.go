package supervisor

import (
	"os"
	"path/filepath"
	"sync"
	"syscall"
)

// DefaultSpillBytes bounds the total size of a daemon's spill files.
const DefaultSpillBytes = 1 << 30

// spillDir holds spill files: the full output of streams that outgrew a
// Result's head and tail. Their total size is bounded; when a write would
// exceed the bound, the oldest other files are removed first, and a single
// stream larger than the whole budget is truncated: its file keeps the
// stream's first bytes, exactly, and the Result says SpillTruncated. A file
// that cannot be created or written (disk full) is truncated the same way.
//
// The directory should be on disk: on a RAM-backed tmpfs (a local sandbox's
// /tmp) spilled output would take memory outside the sandbox's limits.
// Config.SpillDir (runboxd --spill-dir) chooses it.
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
	f         *os.File // nil when it could not be created
	size      int64
	removed   bool // evicted to make room
	truncated bool // the budget ran out before the stream did
}

// newSpillDir makes the spill files' directory dir (created when the first
// file is), with a budget of limit bytes (0: DefaultSpillBytes).
func newSpillDir(dir string, limit int64) *spillDir {
	if limit <= 0 {
		limit = DefaultSpillBytes
	}
	return &spillDir{dir: dir, limit: limit}
}

// create starts a spill file. One that cannot be created is returned
// truncated, with no path: writes to it are dropped and finish reports it.
func (d *spillDir) create(name string) *spillFile {
	path := filepath.Join(d.dir, name)
	if err := os.MkdirAll(d.dir, 0o700); err != nil {
		return &spillFile{truncated: true, removed: true}
	}
	// Where commands can write the spill directory (local, host), a link
	// planted at a predictable name must not be followed: whatever is there
	// goes, and the file is made anew, never through a link.
	os.Remove(path)
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return &spillFile{truncated: true, removed: true}
	}
	sf := &spillFile{path: path, f: f}
	d.mu.Lock()
	d.files = append(d.files, sf)
	d.mu.Unlock()
	return sf
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
	d.used += int64(len(p)) // reserved now, so concurrent writers stay within the budget
	sf.size += int64(len(p))
	d.mu.Unlock()
	if len(p) == 0 {
		return
	}
	if n, err := sf.f.Write(p); err != nil {
		// Disk full or a write error: the file keeps what was written, a
		// prefix of the stream, and takes no more.
		d.mu.Lock()
		sf.truncated = true
		if !sf.removed { // an evicted file's size was given back whole
			d.used -= int64(len(p) - n)
			sf.size -= int64(len(p) - n)
		}
		d.mu.Unlock()
	}
}

// finish closes sf's file and returns its path ("" when it was evicted) and
// whether it holds less than the whole stream.
func (d *spillDir) finish(sf *spillFile) (string, bool) {
	if sf.f != nil {
		sf.f.Close()
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if sf.removed {
		return "", true
	}
	return sf.path, sf.truncated
}
