package explain

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/nodeshepherd/nodeshepherd/pkg/cli"
	nscloud "github.com/nodeshepherd/nodeshepherd/pkg/cloudprovider"
	"github.com/nodeshepherd/nodeshepherd/pkg/cloudprovider/providers"
	"github.com/nodeshepherd/nodeshepherd/pkg/cmd/run"
	"github.com/nodeshepherd/nodeshepherd/pkg/controller/drain"
	"github.com/nodeshepherd/nodeshepherd/pkg/controller/nodelifecycle"
	"github.com/nodeshepherd/nodeshepherd/pkg/explain"
)

func newNodeCommand(o *options) *cobra.Command {
	var configFile string
	c := &cobra.Command{
		Use:   "node NAME",
		Short: "Why a node is (or is not) tainted, cordoned, drained, out of service or repaired",
		Long: `Say what nodeshepherd sees about a node, reading the cluster with your credentials
(it needs no leader and writes nothing): its heartbeats (NodeStatus and Lease) against
the grace period, the health judgment and its zone's state, each taint with who set it,
why and since when, when each pod on it is evicted by NoExecute taints, the drain state
(rule matched, who cordoned it, the budget that lets the drain run or blocks it, the
pods a PodDisruptionBudget keeps), the out-of-service state and its remediation ladder
(the RemediationPolicy that selects it, its health under the policy, each step of the
ladder with the current one, and the decision now, with the brake that holds it back).

The node is judged against the settings of --config (the file 'nodeshepherd run --config'
takes) or, without it, the defaults; the output says which. Reboot and Replace steps
depend on the file's --cloud-provider: without --config it is unknown.`,
		Example: `  nodeshepherd explain node worker-3
  nodeshepherd explain node worker-3 --config /etc/nodeshepherd/config.yaml -o json
  kubectl shepherd explain node worker-3     # as a kubectl plugin (bin/kubectl-shepherd on $PATH)`,
		Args: cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			opts, err := nodeOptions(configFile)
			if err != nil {
				return err
			}
			cs, err := o.client()
			if err != nil {
				return err
			}
			e, err := explain.Node(c.Context(), cs, args[0], opts)
			if err != nil {
				return err
			}
			return explain.Write(c.OutOrStdout(), o.output, e)
		},
	}
	c.Flags().StringVar(&configFile, "config", "", "The NodeShepherdConfiguration file nodeshepherd runs with ('nodeshepherd run --config'); the node is judged against its settings instead of the defaults.")
	return c
}

// nodeOptions reads the settings the node is judged against, completed
// with the shared settings as the controllers see them.
func nodeOptions(file string) (explain.NodeOptions, error) {
	cfg, err := run.ReadConfig(file)
	if err != nil {
		return explain.NodeOptions{}, &cli.UsageError{Err: err}
	}
	o := explain.NodeOptions{Source: "defaults"}
	if file != "" {
		o.Source = "file " + file
	}
	var errs [2]error
	o.NodeLifecycle, errs[0] = nodelifecycle.Descriptor.Complete(&cfg.NodeLifecycle, &cfg.Shared)
	o.Drain, errs[1] = drain.Descriptor.Complete(&cfg.Drain, &cfg.Shared)
	if err := errors.Join(errs[:]...); err != nil {
		return o, &cli.UsageError{Err: err}
	}
	if err := o.NodeLifecycle.Validate(); err != nil {
		return o, &cli.UsageError{Err: err}
	}
	if o.Drain.Configured() {
		if err := o.Drain.Validate(); err != nil {
			return o, &cli.UsageError{Err: err}
		}
	}
	if file != "" {
		o.Cloud = cloudProvider(cfg.CloudNodeLifecycle.Cloud, cfg.OutOfService.Fencing.URL)
	}
	return o, nil
}

// cloudProvider says whether the configuration's --cloud-provider reboots
// and replaces machines, and fences them (with the fencing endpoint at
// fencingURL, if any, to confirm), as the remediation controller finds out:
// by building it. A provider that cannot be built here (its --cloud-config or
// CA file is on the controller's machine, not this one) is taken to repair,
// with a note: nodeshepherd would not start with one it cannot build.
func cloudProvider(c providers.Options, fencingURL string) explain.CloudProvider {
	cp := explain.CloudProvider{Known: true, Name: c.Name}
	if c.Name == "" {
		return cp
	}
	cloud, err := c.Build(nil)
	if err != nil {
		cp.Repairs, cp.Fences, cp.Note = true, true, fmt.Sprintf("cannot tell here whether it reboots, replaces and powers off machines (%v): assumed it does", err)
		return cp
	}
	_, cp.Repairs = nscloud.RepairerOf(cloud)
	_, powersOff := cloud.(nscloud.Fencer)
	_, _, confirms := nscloud.FencerOf(cloud)
	cp.Fences = confirms || powersOff && fencingURL != "" // the endpoint confirms instead
	return cp
}
