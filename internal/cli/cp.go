package cli

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/runbox/runbox/client"
)

func (a *app) cpCmd() *cobra.Command {
	var quiet bool
	c := &cobra.Command{
		Use:   "cp [--quiet] SRC DST",
		Short: "Copy files between this machine and a sandbox",
		Long: `Copy a file, symlink or directory tree between this machine and a sandbox,
like docker cp. One of SRC and DST is SANDBOX:PATH, the other a local path
(write ./a:b for a local path with a colon). When DST is an existing
directory, SRC lands inside it under its own name; otherwise DST names the
copy. As with docker cp, nothing is created above DST: a DST whose directory
does not exist, a DST ending in "/" that is not an existing directory, and a
directory SRC onto an existing file are errors (exit status 125). Modes, mtimes and symlinks (as links, never followed) are preserved;
nothing is written outside DST.

A progress bar (bytes, total, percentage, rate, ETA) is drawn on stderr
when it is a terminal, and one summary line is printed there when done,
unless --quiet.`,
		Args: exactArgs(2, "SRC DST"),
		RunE: func(c *cobra.Command, args []string) error {
			src, dst := parseLocation(args[0]), parseLocation(args[1])
			key := src.sandbox + dst.sandbox
			if (src.sandbox == "") == (dst.sandbox == "") {
				return fmt.Errorf("cp %s %s: exactly one of SRC and DST must be SANDBOX:PATH (see 'runbox cp --help')", args[0], args[1])
			}
			var srcKind pathKind
			if dst.sandbox != "" {
				// A missing local source is this machine's problem, not
				// the sandbox's.
				fi, err := os.Lstat(src.path)
				if err != nil {
					return fmt.Errorf("cp: local source: %w", err)
				}
				if fi.IsDir() {
					srcKind = kindDir
				}
			}
			_, cl, err := a.connect(c.Context(), key)
			if err != nil {
				return fail("cp", key, "", err)
			}
			defer cl.Close()
			ctx := c.Context()
			if dst.sandbox != "" {
				err = checkCopy(srcKind, dst.path, remoteStat(ctx, cl), remoteDir)
			} else {
				fi, serr := cl.Stat(ctx, src.path)
				switch {
				case serr != nil:
					err = fmt.Errorf("source %s: %w", src.path, serr)
				case fi.IsDir():
					srcKind = kindDir
				}
				if err == nil {
					err = checkCopy(srcKind, dst.path, localStat, localDir)
				}
			}
			if err != nil {
				return fail("cp", key, "", err)
			}
			bar := newProgress(a.stderr, !quiet && isTerminal(a.stderr), widthOf(a.stderr), "cp")
			start := time.Now()
			var st client.ArchiveStats
			if dst.sandbox != "" {
				bar.setTotal(localSize(src.path))
				st, err = cl.CopyTo(ctx, src.path, dst.path, client.WithProgress(bar.add))
			} else {
				bar.setTotal(remoteSize(ctx, cl, src.path))
				st, err = cl.CopyFrom(ctx, src.path, dst.path, client.WithProgress(bar.add))
			}
			bar.finish()
			if err != nil {
				return fail("cp", key, "", err)
			}
			if !quiet {
				fmt.Fprintf(a.stderr, "copied %s, %s, %s (%s) to %s in %v\n",
					plural(st.Files, "file"), plural(st.Links, "link"), plural(st.Dirs, "dir"),
					humanBytes(st.Bytes), args[1], time.Since(start).Round(time.Millisecond))
			}
			if st.Stripped > 0 {
				// Said even with --quiet: the copy differs from its source.
				fmt.Fprintf(a.stderr, "runbox: cp: dropped the setuid/setgid bit of %s (runbox never creates them)\n", plural(st.Stripped, "entry"))
			}
			return nil
		},
	}
	c.Flags().BoolVarP(&quiet, "quiet", "q", false, "draw no progress bar and print no summary")
	return c
}

// location is a cp or sync operand: a local path, or SANDBOX:PATH.
type location struct {
	sandbox string // "" for a local path
	path    string
}

// parseLocation reads SANDBOX:PATH, as docker cp does: a colon before any
// slash makes the operand remote; "./a:b" and "/a:b" stay local.
func parseLocation(arg string) location {
	i := strings.IndexByte(arg, ':')
	if i <= 0 || strings.Contains(arg[:i], "/") {
		return location{path: arg}
	}
	p := arg[i+1:]
	if p == "" {
		p = "."
	}
	return location{sandbox: arg[:i], path: p}
}

// localSize is the bytes of regular files under path (symlinks not
// followed), for a progress bar's total; 0 when unknown.
func localSize(path string) int64 {
	var n int64
	_ = filepath.WalkDir(path, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if fi, err := d.Info(); err == nil {
				n += fi.Size()
			}
		}
		return nil
	})
	return n
}

// remoteSize is the bytes of regular files under path in the sandbox, for
// a progress bar's total; 0 when unknown.
func remoteSize(ctx context.Context, cl *client.Client, path string) int64 {
	fi, err := cl.Stat(ctx, path)
	if err != nil || !fi.IsDir() {
		return fi.Size
	}
	entries, err := cl.ListDir(ctx, path, client.Recursive())
	if err != nil {
		return 0
	}
	var n int64
	for _, e := range entries {
		if e.Mode.IsRegular() {
			n += e.Size
		}
	}
	return n
}
