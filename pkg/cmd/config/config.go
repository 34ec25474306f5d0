// Package config implements `nodeshepherd config`: the configuration file.
package config

import (
	"github.com/spf13/cobra"

	"github.com/nodeshepherd/nodeshepherd/pkg/cli"
	"github.com/nodeshepherd/nodeshepherd/pkg/cmd/run"
)

// NewCommand returns `nodeshepherd config`.
func NewCommand() *cobra.Command {
	c := cli.Group(&cobra.Command{
		Use:   "config",
		Short: "Print nodeshepherd's configuration file (kind: NodeShepherdConfiguration)",
	})
	c.AddCommand(&cobra.Command{
		Use:   "default",
		Short: "Print a complete configuration with every setting at its default, commented",
		Long: `Print a NodeShepherdConfiguration with every setting of 'nodeshepherd run' at its default
and its help as a comment. Edit it and pass it with 'nodeshepherd run --config FILE'; flags given on
the command line override the file.`,
		Example: `  nodeshepherd config default > nodeshepherd.yaml
  nodeshepherd run --config nodeshepherd.yaml --dry-run`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return run.WriteDefaultConfig(cmd.OutOrStdout())
		},
	})
	return c
}
