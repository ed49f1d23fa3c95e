package cli

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/msgq/msgq/internal/buildinfo"
)

func newVersionCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print msgq's version",
		Args:  exactArgs(0, "no arguments"),
		RunE: func(*cobra.Command, []string) error {
			in := buildinfo.Get()
			if a.cfg.Output == outJSON {
				return printJSON(a.ios.Out, in)
			}
			commit := in.Commit
			if commit == "" {
				commit = "unknown commit"
			}
			_, err := fmt.Fprintf(a.ios.Out, "msgq %s (%s, %s, %s)\n", in.Version, commit, in.GoVersion, in.Platform)
			return err
		},
	}
}
