package cli

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/runbox/runbox/internal/buildinfo"
)

func (a *app) versionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print runbox's version (also runbox --version)",
		Args:  exactArgs(0, "no arguments"),
		RunE: func(*cobra.Command, []string) error {
			fmt.Fprintln(a.stdout, buildinfo.Current())
			return nil
		},
	}
}
