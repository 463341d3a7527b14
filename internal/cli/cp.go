package cli

import (
	"fmt"
	"strings"

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
copy. Modes, mtimes and symlinks (as links, never followed) are preserved;
nothing is written outside DST.

A progress bar (bytes, rate, ETA) is drawn on stderr when it is a terminal,
unless --quiet.`,
		Args: exactArgs(2, "SRC DST"),
		RunE: func(c *cobra.Command, args []string) error {
			src, dst := parseLocation(args[0]), parseLocation(args[1])
			key := src.sandbox + dst.sandbox
			if (src.sandbox == "") == (dst.sandbox == "") {
				return fmt.Errorf("cp %s %s: exactly one of SRC and DST must be SANDBOX:PATH (see 'runbox cp --help')", args[0], args[1])
			}
			_, cl, err := a.connect(c.Context(), key)
			if err != nil {
				return fail("cp", key, "", err)
			}
			defer cl.Close()
			bar := newProgress(a.stderr, !quiet && isTerminal(a.stderr), "cp")
			defer bar.finish()
			if dst.sandbox != "" {
				_, err = cl.CopyTo(c.Context(), src.path, dst.path, client.WithProgress(bar.add))
			} else {
				_, err = cl.CopyFrom(c.Context(), src.path, dst.path, client.WithProgress(bar.add))
			}
			return fail("cp", key, "", err)
		},
	}
	c.Flags().BoolVarP(&quiet, "quiet", "q", false, "draw no progress bar")
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
