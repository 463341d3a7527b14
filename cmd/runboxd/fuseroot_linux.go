package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/runbox/runbox/internal/jail"
)

// fuseRoot is `runboxd fuse-root`: it becomes the FUSE server of a local
// sandbox's root (see jail.ExecFuseServer); the provider starts it.
func fuseRoot(args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("fuse-root", flag.ContinueOnError)
	fs.SetOutput(stderr)
	server := fs.String("server", "", "the FUSE overlay server to execute (fuse-overlayfs)")
	upper := fs.String("upper", "upper", "the upper layer's name in the layers")
	work := fs.String("work", "work", "the work directory's name in the layers")
	idmap := fs.String("idmap", "", "the server's uid and gid mappings")
	lowers := fs.String("lowers", "", "comma-separated names, in the snapshot layers directory (descriptor 6), of read-only layers stacked above the lower one")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *server == "" || *idmap == "" || fs.NArg() > 0 {
		fs.Usage()
		return errors.New("fuse-root: --server and --idmap are required, and nothing else")
	}
	var names []string
	for n := range strings.SplitSeq(*lowers, ",") {
		if n == "" {
			continue
		}
		if strings.ContainsAny(n, "/:") || n == "." || n == ".." {
			return fmt.Errorf("fuse-root: --lowers: %q is not a name in the snapshot layers directory", n)
		}
		names = append(names, n)
	}
	return jail.ExecFuseServer(*server, *upper, *work, *idmap, names)
}
