package files

import (
	"bytes"
	"io/fs"
	"path"

	"github.com/runbox/runbox"
)

// Plan is what a sync must do to make a destination tree match a source
// tree.
type Plan struct {
	// Send lists the source entries to transfer (each alone: a directory
	// entry carries only its mode and mtime), parents before children.
	Send []string
	// Delete lists destination paths to remove, recursively, before the
	// transfer: entries gone from the source (only with delete) and entries
	// whose type changed.
	Delete []string
	// Files, Links and Dirs count the entries in Send by type; Bytes is the
	// size of the regular files in Send.
	Files, Links, Dirs int
	Bytes              int64
	// Skipped counts files and links already up to date, Touch included.
	Skipped int
	// Touch lists regular files whose content is already right but whose
	// mtime differs: only the source's mtime travels.
	Touch []runbox.FileInfo
}

// SumFunc returns the sha256 of a manifest entry's content, or nil when it
// cannot be known cheaply.
type SumFunc func(fi runbox.FileInfo) ([]byte, error)

// Diff compares two manifests (relative paths, parents before children,
// as Manifest produces) and plans the transfer from src to dst. A regular
// file travels when its size or permissions differ, or its mtime differs
// and its content does too (by sha256, from the manifests or srcSum and
// dstSum, which are called only for such files); a file whose digest on
// either side is unknown travels. With del, destination entries missing
// from the source are deleted.
func Diff(src, dst []runbox.FileInfo, del bool, srcSum, dstSum SumFunc) (Plan, error) {
	var p Plan
	dstBy := make(map[string]runbox.FileInfo, len(dst))
	for _, d := range dst {
		dstBy[d.Path] = d
	}
	srcDirs := make(map[string]runbox.FileInfo)
	srcHas := make(map[string]bool, len(src))
	sentDir := make(map[string]bool)
	deleted := make(map[string]bool)
	send := func(fi runbox.FileInfo) {
		switch {
		case fi.IsDir():
			if sentDir[fi.Path] {
				return
			}
			sentDir[fi.Path] = true
			p.Dirs++
		case fi.IsSymlink():
			p.Links++
		default:
			p.Files++
			p.Bytes += fi.Size
		}
		p.Send = append(p.Send, fi.Path)
	}
	// touchParent sends the parent directory entry of a changed path, so
	// its mtime (changed by writing into it) is set back to the source's.
	touchParent := func(rel string) {
		if dir := path.Dir(rel); dir != "." {
			if d, ok := srcDirs[dir]; ok {
				send(d)
			}
		}
	}
	for _, s := range src {
		srcHas[s.Path] = true
		if !s.IsDir() && !s.IsSymlink() && !s.IsRegular() {
			continue // devices, fifos, sockets never travel
		}
		if s.IsDir() {
			srcDirs[s.Path] = s
		}
		d, ok := dstBy[s.Path]
		if ok && d.Mode.Type() != s.Mode.Type() {
			p.Delete = append(p.Delete, d.Path)
			deleted[d.Path] = true
			ok = false
		}
		if !ok {
			touchParent(s.Path)
			send(s)
			continue
		}
		same, err := sameEntry(s, d, srcSum, dstSum)
		if err != nil {
			return p, err
		}
		switch {
		case same && s.IsRegular() && !s.ModTime.Equal(d.ModTime):
			p.Touch = append(p.Touch, runbox.FileInfo{Path: s.Path, ModTime: s.ModTime})
			p.Skipped++
		case same && !s.IsDir():
			p.Skipped++
		case same:
		default:
			if !s.IsDir() {
				touchParent(s.Path)
			}
			send(s)
		}
	}
	if del {
		for _, d := range dst {
			if srcHas[d.Path] || beneath(d.Path, deleted) {
				continue
			}
			p.Delete = append(p.Delete, d.Path)
			deleted[d.Path] = true
			touchParent(d.Path)
		}
	}
	return p, nil
}

// beneath reports whether one of rel's parent directories is in set.
func beneath(rel string, set map[string]bool) bool {
	for d := path.Dir(rel); d != "." && d != "/"; d = path.Dir(d) {
		if set[d] {
			return true
		}
	}
	return false
}

// sameEntry reports whether d already matches s (same type assumed).
func sameEntry(s, d runbox.FileInfo, srcSum, dstSum SumFunc) (bool, error) {
	// Not setuid or setgid: runbox never applies them, so a source with
	// them would differ from its copy forever.
	const meta = fs.ModePerm | fs.ModeSticky
	if s.Mode&meta != d.Mode&meta {
		return false, nil
	}
	switch {
	case s.IsDir():
		return s.ModTime.Equal(d.ModTime), nil
	case s.IsSymlink():
		return s.LinkTarget == d.LinkTarget && s.ModTime.Equal(d.ModTime), nil
	case !s.IsRegular():
		return true, nil // never transferred
	}
	if s.Size != d.Size {
		return false, nil
	}
	if s.ModTime.Equal(d.ModTime) {
		return true, nil
	}
	ss, err := sum(s, srcSum)
	if err != nil || ss == nil {
		return false, err
	}
	ds, err := sum(d, dstSum)
	if err != nil || ds == nil {
		return false, err
	}
	return bytes.Equal(ss, ds), nil
}

func sum(fi runbox.FileInfo, f SumFunc) ([]byte, error) {
	if fi.SHA256 != nil || f == nil {
		return fi.SHA256, nil
	}
	return f(fi)
}
