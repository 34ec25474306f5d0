package explain

import (
	"github.com/spf13/cobra"

	"github.com/nodeshepherd/nodeshepherd/pkg/explain"
)

func newPodCommand(o *options) *cobra.Command {
	var namespace string
	c := &cobra.Command{
		Use:   "pod NAME",
		Short: "Why a pod is Pending: per-node reasons, nominated node, preemption attempts",
		Args:  cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			cs, err := o.client()
			if err != nil {
				return err
			}
			e, err := explain.Pod(c.Context(), cs, namespace, args[0])
			if err != nil {
				return err
			}
			return explain.Write(c.OutOrStdout(), o.output, e)
		},
	}
	c.Flags().StringVarP(&namespace, "namespace", "n", "default", "The pod's namespace.")
	return c
}
