package scenario

import (
	"errors"

	"github.com/spf13/cobra"
)

func newSnapshotCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "snapshot",
		Short: "Write a scenario file from a live cluster (not implemented yet)",
		RunE: func(*cobra.Command, []string) error {
			return errors.New("scenario snapshot: not implemented yet")
		},
	}
}
