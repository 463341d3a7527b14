package cli

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/client"
)

// pathKind is what a cp operand names: nothing, a directory, or something
// else (a file, a symlink).
type pathKind int

const (
	kindMissing pathKind = iota
	kindDir
	kindOther
)

// statFunc says what p is; a missing p is kindMissing, not an error.
type statFunc func(p string) (pathKind, error)

// localStat is statFunc on this machine, a final symlink followed (as
// docker cp's destination).
func localStat(p string) (pathKind, error) {
	fi, err := os.Stat(p)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return kindMissing, nil
	case err != nil:
		return kindMissing, err
	case fi.IsDir():
		return kindDir, nil
	}
	return kindOther, nil
}

// remoteStat is statFunc in the sandbox of cl.
func remoteStat(ctx context.Context, cl *client.Client) statFunc {
	return func(p string) (pathKind, error) {
		fi, err := cl.Stat(ctx, p, client.FollowLinks())
		switch {
		case errors.Is(err, runbox.ErrFileNotFound):
			return kindMissing, nil
		case err != nil:
			return kindMissing, err
		case fi.IsDir():
			return kindDir, nil
		}
		return kindOther, nil
	}
}

// checkCopy refuses what docker cp refuses, before anything is written:
// DST ending in "/" that is not an existing directory, a DST whose parent
// does not exist (nothing is created above DST), and a directory SRC onto
// an existing non-directory DST. srcKind is what SRC is; stat and join
// are DST's side's (join is path.Join for the sandbox, filepath.Join here).
func checkCopy(srcKind pathKind, dst string, stat statFunc, dir func(string) string) error {
	dstKind, err := stat(dst)
	if err != nil {
		return fmt.Errorf("destination %s: %w", dst, err)
	}
	slash := strings.HasSuffix(dst, "/")
	switch {
	case dstKind == kindMissing && slash:
		return fmt.Errorf("destination directory %s does not exist (runbox cp, as docker cp, creates no directory above the copy): %w", dst, runbox.ErrFileNotFound)
	case dstKind == kindOther && slash:
		return fmt.Errorf("destination %s is not a directory: %w", dst, runbox.ErrNotDirectory)
	case dstKind == kindOther && srcKind == kindDir:
		return fmt.Errorf("cannot copy a directory onto the file %s: %w", dst, runbox.ErrNotDirectory)
	case dstKind == kindMissing:
		parent := dir(strings.TrimRight(dst, "/"))
		pk, err := stat(parent)
		if err != nil {
			return fmt.Errorf("destination %s: %w", dst, err)
		}
		if pk != kindDir {
			return fmt.Errorf("the directory %s holding destination %s does not exist (runbox cp, as docker cp, creates no directory above the copy): %w", parent, dst, runbox.ErrFileNotFound)
		}
	}
	return nil
}

// localDir and remoteDir are the parent of a local and a sandbox path.
func localDir(p string) string  { return filepath.Dir(p) }
func remoteDir(p string) string { return path.Dir(p) }

// plural is n and noun, in the plural unless n is 1: "1 file", "2 files",
// "3 entries".
func plural[N ~int | ~int64](n N, noun string) string {
	switch {
	case n == 1:
		return "1 " + noun
	case strings.HasSuffix(noun, "y"):
		return fmt.Sprintf("%d %sies", n, strings.TrimSuffix(noun, "y"))
	}
	return fmt.Sprintf("%d %ss", n, noun)
}
