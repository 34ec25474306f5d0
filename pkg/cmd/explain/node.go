package explain

import (
	"github.com/spf13/cobra"

	"github.com/nodeshepherd/nodeshepherd/pkg/explain"
)

func newNodeCommand(o *options) *cobra.Command {
	return &cobra.Command{
		Use:   "node NAME",
		Short: "Why a node is (or is not) tainted, cordoned, drained or out of service",
		Args:  cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			cs, err := o.client()
			if err != nil {
				return err
			}
			e, err := explain.Node(c.Context(), cs, args[0], explain.NodeOptions{})
			if err != nil {
				return err
			}
			return explain.Write(c.OutOrStdout(), o.output, e)
		},
	}
}
