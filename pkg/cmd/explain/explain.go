// Package explain implements `nodeshepherd explain` (and `kubectl shepherd
// explain` when installed as a kubectl plugin): read-only answers to "why is
// this node tainted / cordoned / not drained" and "why is this pod Pending".
package explain

import (
	"github.com/spf13/cobra"
	"k8s.io/client-go/kubernetes"

	"github.com/nodeshepherd/nodeshepherd/pkg/cli"
	"github.com/nodeshepherd/nodeshepherd/pkg/explain"
)

type options struct {
	kube   cli.KubeFlags
	output string
}

// NewCommand returns `nodeshepherd explain`.
func NewCommand() *cobra.Command {
	o := &options{}
	c := cli.Group(&cobra.Command{
		Use:   "explain",
		Short: "Say what nodeshepherd sees about a node or a Pending pod, and why (reads only)",
		Long: `Answer "why is this node tainted, cordoned, not drained, not repaired?" and "why is this pod Pending?"
from the cluster's objects, with your own kubeconfig: no leader needed, nothing written
(get and list requests only).

As a kubectl plugin: put bin/kubectl-shepherd ('make build' links it to this binary) on
$PATH and run 'kubectl shepherd explain ...'.`,
		Example: `  nodeshepherd explain node worker-3
  kubectl shepherd explain pod -n shop web-7d9c-xk2lp -o yaml`,
	})
	o.kube.AddFlags(c.PersistentFlags(), 20, 40)
	c.PersistentFlags().StringVarP(&o.output, "output", "o", "table", "Output format: table, json or yaml.")
	c.AddCommand(newNodeCommand(o), newPodCommand(o))
	return c
}

// client validates the shared flags and returns a clientset.
func (o *options) client() (kubernetes.Interface, error) {
	if !explain.ValidFormat(o.output) {
		return nil, cli.Usagef("--output must be table, json or yaml, got %q", o.output)
	}
	if err := o.kube.Validate(); err != nil {
		return nil, err
	}
	cfg, err := o.kube.RESTConfig("nodeshepherd-explain")
	if err != nil {
		return nil, err
	}
	return kubernetes.NewForConfig(cfg)
}
