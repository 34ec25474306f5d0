// Package run implements `nodeshepherd run`: the controllers against a cluster.
package run

import (
	"errors"
	"io"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/nodeshepherd/nodeshepherd/pkg/cli"
	"github.com/nodeshepherd/nodeshepherd/pkg/config"
	"github.com/nodeshepherd/nodeshepherd/pkg/controllers"
	"github.com/nodeshepherd/nodeshepherd/pkg/manager"
)

type options struct {
	configFile  string
	kube        cli.KubeFlags
	controllers []string
	leader      manager.LeaderElection
	metricsAddr string
	dryRun      bool
	config      controllers.Config
}

// NewCommand returns `nodeshepherd run`.
func NewCommand() *cobra.Command { return newCommand(newOptions()) }

func newCommand(o *options) *cobra.Command {
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
			if o.configFile != "" {
				if err := config.Apply(o.configFile, cmd.Flags(), defaultSections); err != nil {
					return &cli.UsageError{Err: err}
				}
			}
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
	f.SortFlags = false
	f.StringVar(&o.configFile, "config", "", "A NodeShepherdConfiguration file with any of the settings below ('nodeshepherd config default' prints one); flags given here override it.")
	for _, s := range sections(o) {
		s.Register(f)
	}
	return c
}

// sections are the run command's flags grouped as the configuration file
// has them; the flags of a fresh options are the defaults.
func sections(o *options) []config.Section {
	return []config.Section{
		{Name: "clientConnection", Help: "How to reach the API server.", Register: func(f *pflag.FlagSet) { o.kube.AddFlags(f, 50, 100) }},
		{Name: "manager", Help: "Which controllers run, and the metrics and health server.", Register: func(f *pflag.FlagSet) {
			f.StringSliceVar(&o.controllers, "controllers", []string{"*"}, "Controllers to run: names from "+strings.Join(controllers.Names, ", ")+"; * for all; -name to leave one out.")
			f.StringVar(&o.metricsAddr, "metrics-bind-address", ":8080", "Address of the /metrics, /healthz and /readyz server; 0 turns it off.")
			f.BoolVar(&o.dryRun, "dry-run", false, "Compute everything and report by log, event and metric (nodeshepherd_dry_run_actions_total) what would be written; write nothing else.")
		}},
		{Name: "leaderElection", Help: "Leader election on a Lease, so that replicas take over from each other.", Register: o.leader.AddFlags},
		{Name: "nodeLifecycle", Help: "The nodelifecycle controller (kube-controller-manager's flag names and defaults).", Register: o.config.NodeLifecycle.AddFlags},
		{Name: "nodeIPAM", Help: "The nodeipam controller: pod CIDRs for nodes.", Register: o.config.NodeIPAM.AddFlags},
		{Name: "cloudNodeLifecycle", Help: "The cloudnodelifecycle controller.", Register: o.config.CloudNodeLifecycle.AddFlags},
		{Name: "cloudProvider", Help: "The cloud provider the cloudnodelifecycle controller asks.", Register: o.config.Cloud.AddFlags},
		{Name: "drain", Help: "The drain controller (Draino's flag names where Draino has the setting).", Register: o.config.Drain.AddFlags},
		{Name: "scheduler", Help: "The scheduler (kube-scheduler's names for its settings).", Register: o.config.Scheduler.AddFlags},
	}
}

// defaultSections are the sections bound to a fresh options: their flags
// hold the defaults.
func defaultSections() []config.Section { return sections(newOptions()) }

// WriteDefaultConfig prints the complete default configuration file.
func WriteDefaultConfig(w io.Writer) error {
	return config.WriteDefault(w, defaultSections())
}

func newOptions() *options {
	return &options{leader: manager.DefaultLeaderElection(), config: controllers.Default()}
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
