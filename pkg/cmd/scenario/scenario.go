// Package scenario implements `nodeshepherd scenario`: work on scenario files
// (kind: Scenario) that `nodeshepherd simulate` runs.
package scenario

import (
	"github.com/spf13/cobra"

	"github.com/nodeshepherd/nodeshepherd/pkg/cli"
)

// NewCommand returns `nodeshepherd scenario`.
func NewCommand() *cobra.Command {
	c := cli.Group(&cobra.Command{
		Use:   "scenario",
		Short: "Work on scenario files for 'nodeshepherd simulate'",
	})
	c.AddCommand(newSnapshotCommand())
	return c
}
