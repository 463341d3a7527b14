package files

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sync"
)

// DefaultCacheEntries bounds a HashCache: about 100 bytes an entry, so the
// daemon's cache stays under ~100 MiB however many files pass through.
const DefaultCacheEntries = 1 << 20

// HashCache remembers the sha256 of regular files by device and inode,
// valid while their size and mtime are unchanged. It is what makes a
// manifest cheap: a file is hashed only when its size or mtime differs from
// when it was last hashed (or written by an extraction, which hashes as it
// writes). It is safe for concurrent use.
type HashCache struct {
	mu   sync.Mutex
	m    map[fileKey]hashEntry
	used map[fileKey]bool // entries looked up or stored since New or Load
	max  int
}

type fileKey struct{ Dev, Ino uint64 }

type hashEntry struct {
	Size, Mtime int64
	Sum         []byte
}

// NewHashCache returns an empty cache of at most max entries (<= 0:
// DefaultCacheEntries). When full it starts over, which costs rehashing,
// never a wrong answer.
func NewHashCache(max int) *HashCache {
	if max <= 0 {
		max = DefaultCacheEntries
	}
	return &HashCache{m: make(map[fileKey]hashEntry), used: make(map[fileKey]bool), max: max}
}

// get returns the cached digest of the file, if its size and mtime match.
func (c *HashCache) get(dev, ino uint64, size, mtime int64) []byte {
	if c == nil {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	k := fileKey{dev, ino}
	e, ok := c.m[k]
	if !ok || e.Size != size || e.Mtime != mtime {
		return nil
	}
	c.used[k] = true
	return e.Sum
}

// put records the digest of the file.
func (c *HashCache) put(dev, ino uint64, size, mtime int64, sum []byte) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.m) >= c.max {
		c.m = make(map[fileKey]hashEntry)
		c.used = make(map[fileKey]bool)
	}
	k := fileKey{dev, ino}
	c.m[k] = hashEntry{Size: size, Mtime: mtime, Sum: sum}
	c.used[k] = true
}

type cacheRecord struct {
	Dev, Ino    uint64
	Size, Mtime int64
	Sum         []byte
}

// LoadHashCache reads a cache saved by Save; a missing file is an empty
// cache, and so is a damaged one (it only costs rehashing).
func LoadHashCache(file string) *HashCache {
	c := NewHashCache(0)
	b, err := os.ReadFile(file)
	if err != nil {
		return c
	}
	var recs []cacheRecord
	if json.Unmarshal(b, &recs) != nil {
		return c
	}
	for _, r := range recs {
		if len(r.Sum) == 32 {
			c.m[fileKey{r.Dev, r.Ino}] = hashEntry{Size: r.Size, Mtime: r.Mtime, Sum: r.Sum}
		}
	}
	return c
}

// Save writes the entries used since the cache was made or loaded (so files
// that are gone drop out), atomically, creating file's directory.
func (c *HashCache) Save(file string) error {
	c.mu.Lock()
	recs := make([]cacheRecord, 0, len(c.used))
	for k := range c.used {
		if e, ok := c.m[k]; ok {
			recs = append(recs, cacheRecord{Dev: k.Dev, Ino: k.Ino, Size: e.Size, Mtime: e.Mtime, Sum: e.Sum})
		}
	}
	c.mu.Unlock()
	b, err := json.Marshal(recs)
	if err != nil {
		return fmt.Errorf("save hash cache: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(file), 0o700); err != nil {
		return fmt.Errorf("save hash cache: %w", err)
	}
	tmp := file + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return fmt.Errorf("save hash cache: %w", err)
	}
	if err := os.Rename(tmp, file); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("save hash cache: %w", err)
	}
	return nil
}
