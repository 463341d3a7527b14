package client

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"connectrpc.com/connect"

	"github.com/runbox/runbox"
	runboxv1 "github.com/runbox/runbox/gen/runbox/v1"
	"github.com/runbox/runbox/internal/files"
)

// Location is one side of a Sync: a directory on this machine or in the
// sandbox.
type Location struct {
	Path   string
	Remote bool // in the sandbox
}

// Local is a directory on this machine.
func Local(dir string) Location { return Location{Path: dir} }

// Remote is a directory in the sandbox.
func Remote(dir string) Location { return Location{Path: dir, Remote: true} }

// String formats the location as the CLI writes it (":PATH" for remote).
func (l Location) String() string {
	if l.Remote {
		return ":" + l.Path
	}
	return l.Path
}

// SyncOptions configures Sync.
type SyncOptions struct {
	// Delete removes destination entries that the source does not have
	// (excluded ones are kept).
	Delete bool
	// Exclude lists .gitignore-style patterns; matching entries are neither
	// sent nor deleted, on either side.
	Exclude []string
	// CacheDir keeps the local side's sha256 cache between syncs (one file
	// per local directory), so unchanged files are never read again. Empty
	// keeps no cache: a file whose mtime changed is then re-read to tell
	// whether its content did.
	CacheDir string
	// Progress, when set, is called as file data travels, with the bytes
	// transferred so far and the total planned.
	Progress func(done, total int64)
}

// SyncStats counts what a Sync did.
type SyncStats struct {
	// Files and Links count regular files and symlinks sent; Dirs counts
	// directories created or whose mode or mtime was updated.
	Files, Links, Dirs int
	// Bytes is the file data sent (archive headers not counted).
	Bytes int64
	// Deleted counts destination entries removed (a tree counts once).
	Deleted int
	// Stripped counts entries a pull wrote without the setuid or setgid
	// bit they had in the sandbox: runbox never makes either.
	Stripped int
	// Skipped counts files and links already up to date.
	Skipped int
}

// Sync makes the directory dst match the directory src, one of them local
// and the other in the sandbox. Both sides list their tree (path, size,
// mode, mtime; a file's sha256 is computed only when its size and mtime
// match but its mtime differs from the other side's, and then only if the
// side's cache does not know it), only changed entries travel, as one tar
// stream, and with Delete what src lacks is removed from dst. A second sync
// with nothing changed sends no file data.
//
// Every path is resolved beneath dst: an entry that would land outside it
// (through "..", an absolute name, or a symlink that appeared in dst after
// the listing) fails the sync with runbox.ErrEscapesRoot, and nothing is
// written outside dst. Symlinks are copied as links and never followed; when
// pulling, names this machine cannot represent fail with
// runbox.ErrInvalidPath.
func (c *Client) Sync(ctx context.Context, src, dst Location, o SyncOptions) (SyncStats, error) {
	switch {
	case src.Remote && !dst.Remote:
		return c.pull(ctx, src.Path, dst.Path, o)
	case !src.Remote && dst.Remote:
		return c.push(ctx, src.Path, dst.Path, o)
	}
	return SyncStats{}, c.fileError("sync", nil, fmt.Errorf("sync %s to %s: %w: one side must be local and the other in the sandbox", src, dst, runbox.ErrInvalidSpec))
}

// push syncs the local directory dir to remote in the sandbox.
func (c *Client) push(ctx context.Context, dir, remote string, o SyncOptions) (SyncStats, error) {
	ex, err := files.NewMatcher(o.Exclude)
	if err != nil {
		return SyncStats{}, c.fileError("sync", nil, err)
	}
	lfs, err := files.Open(dir)
	if err != nil {
		return SyncStats{}, c.fileError("sync", nil, err)
	}
	defer lfs.Close()
	cache, saveCache := loadCache(o.CacheDir, dir)
	// The sandbox lists its side while this side lists its own.
	remoteManifest := c.manifestAsync(ctx, remote, o.Exclude)
	local, err := localManifest(lfs, ex, cache)
	theirs, rerr := remoteManifest()
	if err != nil {
		return SyncStats{}, c.fileError("sync", nil, err)
	}
	if rerr != nil {
		return SyncStats{}, rerr
	}
	plan, err := files.Diff(local, theirs, o.Delete,
		func(fi runbox.FileInfo) ([]byte, error) { return lfs.HashFile(fi.Path, cache) }, nil)
	if err != nil {
		return SyncStats{}, c.fileError("sync", nil, err)
	}
	st := planStats(plan)
	if len(plan.Send) == 0 && len(plan.Delete) == 0 && len(plan.Touch) == 0 {
		return st, saveCache()
	}
	var done int64
	prog := progressFunc(o.Progress, &done, plan.Bytes)
	fo := fileOptions{deletes: plan.Delete, chtimes: plan.Touch}
	if _, err := c.putArchive(ctx, remote, fo, func(w io.Writer) error {
		if len(plan.Send) == 0 {
			return nil // an empty stream is an empty archive
		}
		return lfs.Archive(w, ".", files.ArchiveOptions{Entries: plan.Send, Progress: prog})
	}); err != nil {
		return SyncStats{}, err
	}
	return st, saveCache()
}

// pull syncs the sandbox directory remote to the local directory dir.
func (c *Client) pull(ctx context.Context, remote, dir string, o SyncOptions) (SyncStats, error) {
	ex, err := files.NewMatcher(o.Exclude)
	if err != nil {
		return SyncStats{}, c.fileError("sync", nil, err)
	}
	theirs, err := c.manifest(ctx, remote, o.Exclude)
	if err != nil {
		return SyncStats{}, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return SyncStats{}, c.fileError("sync", nil, err)
	}
	lfs, err := files.Open(dir)
	if err != nil {
		return SyncStats{}, c.fileError("sync", nil, err)
	}
	defer lfs.Close()
	cache, saveCache := loadCache(o.CacheDir, dir)
	local, err := localManifest(lfs, ex, cache)
	if err != nil {
		return SyncStats{}, c.fileError("sync", nil, err)
	}
	plan, err := files.Diff(theirs, local, o.Delete, nil,
		func(fi runbox.FileInfo) ([]byte, error) { return lfs.HashFile(fi.Path, cache) })
	if err != nil {
		return SyncStats{}, c.fileError("sync", nil, err)
	}
	st := planStats(plan)
	if len(plan.Send) == 0 && len(plan.Delete) == 0 && len(plan.Touch) == 0 {
		return st, saveCache()
	}
	var r io.Reader = eofReader{}
	if len(plan.Send) > 0 {
		ar, err := c.getArchive(ctx, remote, fileOptions{entries: plan.Send})
		if err != nil {
			return SyncStats{}, err
		}
		defer ar.Close()
		r = ar
	}
	var done int64
	prog := progressFunc(o.Progress, &done, plan.Bytes)
	est, err := lfs.Extract(r, files.ExtractOptions{Delete: plan.Delete, Chtimes: plan.Touch, Cache: cache, Progress: prog})
	if err != nil {
		return SyncStats{}, c.fileError("sync", nil, err)
	}
	st.Stripped = int(est.Stripped)
	return st, saveCache()
}

// eofReader is an empty tar stream's reader: tar.Reader takes EOF at the
// start as an empty archive.
type eofReader struct{}

func (eofReader) Read([]byte) (int, error) { return 0, io.EOF }

func planStats(p files.Plan) SyncStats {
	return SyncStats{Files: p.Files, Links: p.Links, Dirs: p.Dirs, Bytes: p.Bytes, Deleted: len(p.Delete), Skipped: p.Skipped}
}

func progressFunc(fn func(done, total int64), done *int64, total int64) func(int64) {
	if fn == nil {
		return nil
	}
	return func(n int64) {
		*done += n
		fn(*done, total)
	}
}

// localManifest lists the local tree.
func localManifest(lfs *files.FS, ex *files.Matcher, cache *files.HashCache) ([]runbox.FileInfo, error) {
	var out []runbox.FileInfo
	err := lfs.Manifest(".", ex, cache, func(fi runbox.FileInfo) error {
		out = append(out, fi)
		return nil
	})
	return out, err
}

// loadCache loads the hash cache kept for the local directory dir under
// cacheDir, and returns a function saving it back; without a cacheDir the
// cache lives for this sync only.
func loadCache(cacheDir, dir string) (*files.HashCache, func() error) {
	if cacheDir == "" {
		return files.NewHashCache(0), func() error { return nil }
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		abs = dir
	}
	sum := sha256.Sum256([]byte(abs))
	file := filepath.Join(cacheDir, hex.EncodeToString(sum[:12])+".json")
	cache := files.LoadHashCache(file)
	return cache, func() error { return cache.Save(file) }
}

// manifestAsync starts listing a sandbox tree for sync and returns a
// function waiting for the result.
func (c *Client) manifestAsync(ctx context.Context, p string, exclude []string) func() ([]runbox.FileInfo, error) {
	type result struct {
		entries []runbox.FileInfo
		err     error
	}
	done := make(chan result, 1)
	go func() {
		entries, err := c.manifest(ctx, p, exclude)
		done <- result{entries, err}
	}()
	return func() ([]runbox.FileInfo, error) {
		r := <-done
		return r.entries, r.err
	}
}

// manifest lists a sandbox tree for sync; a missing directory is empty.
func (c *Client) manifest(ctx context.Context, p string, exclude []string) ([]runbox.FileInfo, error) {
	ctx, cancel := c.callContext(ctx)
	defer cancel()
	stream, err := c.files().Manifest(ctx, connect.NewRequest(&runboxv1.ManifestRequest{Path: p, Exclude: exclude}))
	if err != nil {
		return nil, c.fileError("manifest", ctx, err)
	}
	out, err := receiveEntries(stream)
	if err != nil {
		err = c.fileError("manifest", ctx, err)
		if errors.Is(err, runbox.ErrFileNotFound) {
			return nil, nil
		}
		return nil, err
	}
	return out, nil
}
