package cli

import (
	"fmt"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/runbox/runbox/client"
)

func (a *app) syncCmd() *cobra.Command {
	var (
		del     bool
		exclude []string
		quiet   bool
	)
	c := &cobra.Command{
		Use:   "sync [--delete] [--exclude PATTERN]... [--quiet] SRC DST",
		Short: "Make a directory in a sandbox match a local one, or the reverse",
		Long: `Make DST match SRC, where one is a local directory and the other
SANDBOX:PATH:

  runbox sync ./repo sb:/work/repo        push
  runbox sync sb:/work/repo/out ./out     pull

Both sides list their tree; only changed files travel (a file is compared by
size and mtime, and by sha256 when only its mtime differs), as one stream. A
sync with nothing changed sends no file data. --delete removes what SRC does
not have. --exclude takes .gitignore-style patterns (repeatable); excluded
entries are neither sent nor deleted. Symlinks are copied as links; nothing
is written outside DST, and entries that would be are refused.

One line of counts is printed when done; a progress bar is drawn on stderr
when it is a terminal, unless --quiet. The local side's sha256 cache lives
under $RUNBOX_HOME/sync-cache.`,
		Args: exactArgs(2, "SRC DST"),
		RunE: func(c *cobra.Command, args []string) error {
			src, dst := parseLocation(args[0]), parseLocation(args[1])
			key := src.sandbox + dst.sandbox
			if (src.sandbox == "") == (dst.sandbox == "") {
				return fmt.Errorf("sync %s %s: exactly one of SRC and DST must be SANDBOX:PATH (see 'runbox sync --help')", args[0], args[1])
			}
			_, cl, err := a.connect(c.Context(), key)
			if err != nil {
				return fail("sync", key, "", err)
			}
			defer cl.Close()
			bar := newProgress(a.stderr, !quiet && isTerminal(a.stderr), widthOf(a.stderr), "sync")
			from, to := client.Local(src.path), client.Remote(dst.path)
			if src.sandbox != "" {
				from, to = client.Remote(src.path), client.Local(dst.path)
			}
			st, err := cl.Sync(c.Context(), from, to, client.SyncOptions{
				Delete:   del,
				Exclude:  exclude,
				CacheDir: filepath.Join(a.env.Home, "sync-cache"),
				Progress: bar.set,
			})
			bar.finish()
			if err != nil {
				return fail("sync", key, "", err)
			}
			if !quiet {
				fmt.Fprintf(a.stdout, "%s, %s, %s sent (%s), %d deleted, %d up to date\n",
					plural(st.Files, "file"), plural(st.Links, "link"), plural(st.Dirs, "dir"), humanBytes(st.Bytes), st.Deleted, st.Skipped)
			}
			if st.Stripped > 0 {
				fmt.Fprintf(a.stderr, "runbox: sync: dropped the setuid/setgid bit of %s (runbox never creates them)\n", plural(st.Stripped, "entry"))
			}
			return nil
		},
	}
	c.Flags().BoolVar(&del, "delete", false, "delete what SRC does not have from DST")
	c.Flags().StringArrayVar(&exclude, "exclude", nil, ".gitignore-style pattern of entries to leave out (repeatable)")
	c.Flags().BoolVarP(&quiet, "quiet", "q", false, "print nothing and draw no progress bar")
	return c
}
