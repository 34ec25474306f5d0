package explain

import (
	"fmt"

	"github.com/spf13/cobra"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/nodeshepherd/nodeshepherd/pkg/cli"
	"github.com/nodeshepherd/nodeshepherd/pkg/controller/scheduler"
	"github.com/nodeshepherd/nodeshepherd/pkg/explain"
)

func newPodCommand(o *options) *cobra.Command {
	var namespace string
	sched := scheduler.DefaultConfig()
	c := &cobra.Command{
		Use:   "pod NAME",
		Short: "Why a pod is Pending: per-node reasons, nominated node, preemption attempts",
		Long: `Why a pod is Pending, evaluated now with nodeshepherd's scheduler filters (kube-scheduler's rules):
every node's reasons, summarised as kube-scheduler words them ("0/5 nodes are available: 2 Insufficient
cpu, 3 node(s) had untolerated taint(s). preemption: ..."), next to the PodScheduled message the scheduler
last wrote; the nominated node, what preemption would do now, the pods preempted for this one, and the
scheduling events about the pod (repeats merged). A pod that is not Pending is reported as bound (exit 0).

It judges with kube-scheduler's default settings unless told the scheduler's own: the same
--node-resources-fit-ignored-resources, --node-resources-fit-ignored-resource-groups,
--kube-scheduler-config (its profile for the pod's spec.schedulerName), --default-pod-topology-spread
and --min-candidate-nodes-* as 'nodeshepherd run' takes; a node that fits only by an ignored
resource fits here too.

It reads the cluster with your kubeconfig (get and list only), needs no leader and writes nothing.`,
		Example: `  nodeshepherd explain pod -n shop web-7d9c-xk2lp
  kubectl shepherd explain pod -n shop web-7d9c-xk2lp -o yaml`,
		Args: cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			cs, err := o.client()
			if err != nil {
				return err
			}
			// With a file, the profile depends on the pod: explain.Pod
			// validates then.
			if sched.KubeSchedulerConfig == "" {
				if err := sched.Validate(); err != nil {
					return cli.Usagef("%v", err)
				}
			}
			if !c.Flags().Changed("namespace") {
				if namespace, err = o.contextNamespace(); err != nil {
					return err
				}
			}
			e, err := explain.Pod(c.Context(), cs, namespace, args[0], sched)
			if err != nil {
				return err
			}
			return explain.Write(c.OutOrStdout(), o.output, e)
		},
	}
	c.Flags().StringVarP(&namespace, "namespace", "n", "", "The pod's namespace; by default the kubeconfig context's, as kubectl does.")
	sched.AddExplainFlags(c.Flags())
	return c
}

// contextNamespace is the namespace of the kubeconfig context (or of the
// in-cluster service account), "default" when it names none.
func (o *options) contextNamespace() (string, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = o.kube.Kubeconfig
	ns, _, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules,
		&clientcmd.ConfigOverrides{CurrentContext: o.kube.Context}).Namespace()
	if err != nil {
		return "", fmt.Errorf("reading the namespace of the kubeconfig context: %w (pass -n/--namespace)", err)
	}
	return ns, nil
}
