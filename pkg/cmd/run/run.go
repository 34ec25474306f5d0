// Package run implements `nodeshepherd run`: the controllers against a cluster.
package run

import (
	"errors"
	"strings"

	"github.com/spf13/cobra"

	"github.com/nodeshepherd/nodeshepherd/pkg/cli"
	"github.com/nodeshepherd/nodeshepherd/pkg/controllers"
	"github.com/nodeshepherd/nodeshepherd/pkg/manager"
)

type options struct {
	kube        cli.KubeFlags
	controllers []string
	leader      manager.LeaderElection
	metricsAddr string
	dryRun      bool
	config      controllers.Config
}

// NewCommand returns `nodeshepherd run`.
func NewCommand() *cobra.Command {
	o := &options{leader: manager.DefaultLeaderElection(), config: controllers.Default()}
	c := &cobra.Command{
		Use:   "run",
		Short: "Run nodeshepherd's controllers against a cluster",
		Long: `Run the selected controllers against a cluster (--kubeconfig, $KUBECONFIG, or in-cluster
credentials), leader-elected on a Lease, with /metrics, /healthz and /readyz on
--metrics-bind-address.

Controllers:
  nodelifecycle   node heartbeats, Unknown conditions, NoSchedule and NoExecute taints with
                  per-zone rate limits and disruption modes, pods marked NotReady, readiness
                  restored after a flap. Replaces kube-controller-manager's nodelifecycle.
  tainteviction   deletes pods that do not tolerate NoExecute taints after their
                  tolerationSeconds. Replaces taint-eviction-controller.
  nodeipam        allocates spec.podCIDRs per IP family from --cluster-cidr (runs only with
                  --allocate-node-cidrs). Replaces nodeipam.
  cloudnodelifecycle
                  asks --cloud-provider about nodes that are not Ready: deletes those whose
                  machine is gone, taints those whose machine is shut down (runs only with
                  --cloud-provider). Like the cloud controller manager's.
  drain           cordons and drains (Eviction API, PDBs honoured) nodes whose conditions match
                  --drain-condition or --drain-rules, within budgets (--max-concurrent-drains,
                  --max-cordoned-nodes, --group-by-label, --drain-buffer) and a circuit breaker
                  (--max-unhealthy-nodes, zone disruption); uncordons only what it cordoned.
                  Like Draino (runs only with --drain-condition or --drain-rules).
  scheduler       schedules the pods whose spec.schedulerName is --scheduler-name (default
                  nodeshepherd-scheduler; default-scheduler replaces kube-scheduler): priority
                  queue, kube-scheduler's filters and scores, binding, preemption with
                  PodDisruptionBudgets as kube-scheduler 1.37 does it.

Run kube-controller-manager with
--controllers=*,-nodelifecycle,-taint-eviction-controller,-nodeipam next to it. Flag names and defaults follow kube-controller-manager.`,
		Example: `  nodeshepherd run --kubeconfig ~/.kube/config --controllers=nodelifecycle,tainteviction
  nodeshepherd run --dry-run --leader-elect=false   # report what would be done, write nothing
  nodeshepherd run --controllers=drain --drain-condition=KernelDeadlock=True,10m \
      --drain-condition=Ready=Unknown,30m --max-concurrent-drains=2 --group-by-label=topology.kubernetes.io/zone
  nodeshepherd run --controllers=scheduler --scheduler-name=default-scheduler   # in place of kube-scheduler`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			opts, err := o.validate()
			if err != nil {
				return err
			}
			cfg, err := o.kube.RESTConfig("nodeshepherd")
			if err != nil {
				return err
			}
			return manager.Run(cmd.Context(), cfg, opts)
		},
	}
	f := c.Flags()
	o.kube.AddFlags(f, 50, 100)
	f.StringSliceVar(&o.controllers, "controllers", []string{"*"}, "Controllers to run: names from "+strings.Join(controllers.Names, ", ")+"; * for all; -name to leave one out.")
	o.leader.AddFlags(f)
	f.StringVar(&o.metricsAddr, "metrics-bind-address", ":8080", "Address of the /metrics, /healthz and /readyz server; 0 turns it off.")
	f.BoolVar(&o.dryRun, "dry-run", false, "Compute everything and report by log, event and metric (nodeshepherd_dry_run_actions_total) what would be written; write nothing else.")
	o.config.AddFlags(f)
	return c
}

func (o *options) validate() (manager.Options, error) {
	var errs []error
	if err := o.kube.Validate(); err != nil {
		errs = append(errs, err)
	}
	names, err := manager.ResolveControllers(o.controllers, controllers.Names)
	if err != nil {
		errs = append(errs, err)
	}
	names = o.config.Select(names, o.controllers)
	if err := o.leader.Validate(); err != nil {
		errs = append(errs, err)
	}
	if err := o.config.Validate(names); err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return manager.Options{}, &cli.UsageError{Err: errors.Join(errs...)}
	}
	return manager.Options{
		Controllers: names, LeaderElection: o.leader, MetricsBindAddress: o.metricsAddr, DryRun: o.dryRun,
		Constructors: controllers.Constructors(o.config),
	}, nil
}
