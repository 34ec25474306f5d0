// Package hollownodes implements `nodeshepherd hollownodes`: kubemark's
// hollow nodes (the real kubelet code with a fake container runtime)
// against any cluster, beside or instead of `nodeshepherd fakenodes`.
package hollownodes

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/nodeshepherd/nodeshepherd/pkg/cli"
	fakecloud "github.com/nodeshepherd/nodeshepherd/pkg/cloudprovider/fake"
	"github.com/nodeshepherd/nodeshepherd/pkg/controlplane"
	"github.com/nodeshepherd/nodeshepherd/pkg/hollownode"
)

type options struct {
	kube    cli.KubeFlags
	cfg     hollownode.Config
	zones   string
	labels  map[string]string
	dir     string
	timeout time.Duration
}

// NewCommand returns `nodeshepherd hollownodes`.
func NewCommand() *cobra.Command {
	o := &options{}
	c := &cobra.Command{
		Use:   "hollownodes",
		Short: "Run N kubemark hollow nodes (the real kubelet code, a fake container runtime) against a cluster",
		Long: `Start N of kubemark's hollow nodes against a cluster: each is the kubelet of Kubernetes
v1.37.1 (built by 'make controlplane' as bin/kubemark, the version of the local control plane)
with a fake container runtime, in a process of its own. It registers its Node, renews its
Lease, posts its status and runs the pods bound to it as a kubelet does, so a rehearsal on
hollow nodes shows what the real kubelet code does where the fake nodes of 'nodeshepherd
fakenodes' show what they were written to do.

Each node reaches the API server through a proxy of its own on a loopback port (TLS passes
through: the kubelet verifies the API server's certificate), which can cut it off the way a
network partition does. Names are --name-prefix0000, ..., zones round robin from --zones
(topology.kubernetes.io/zone), with topology.kubernetes.io/region and --node-labels.
Each hollow node's kubeconfig, log and kubelet directory are under --dir/NAME.

The nodes' machines answer the fake cloud provider (--cloud-provider=fake) as the fake nodes'
do, and carry out its repair requests: a reboot (off for --reboot-downtime, then a new boot ID
and a fresh kubelet), a replacement (the Node, its Lease and its pods deleted, and after
--replace-downtime a new machine whose kubelet registers the Node anew) and a power-off.

When every node is Ready the command prints what they cost (resident memory, CPU), runs until
Ctrl-C or SIGTERM, then prints their CPU time and stops them.`,
		Example: `  nodeshepherd controlplane up --scheduler &   # prints the kubeconfig to use
  nodeshepherd hollownodes --kubeconfig=/tmp/.../admin.kubeconfig --nodes=3 --zones=zone-a,zone-b,zone-c`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.complete(); err != nil {
				return err
			}
			return o.run(cmd.Context(), cmd)
		},
	}
	f := c.Flags()
	o.kube.AddFlags(f, 50, 100)
	f.IntVar(&o.cfg.Nodes, "nodes", 3, "Number of hollow nodes.")
	f.StringVar(&o.cfg.NamePrefix, "name-prefix", hollownode.DefaultNamePrefix, "Node name prefix; names are PREFIX0000, PREFIX0001, ...")
	f.StringVar(&o.zones, "zones", "zone-a,zone-b,zone-c", "Zones to spread the nodes over, round robin (topology.kubernetes.io/zone); empty: no zone label.")
	f.StringVar(&o.cfg.Region, "region", hollownode.DefaultRegion, "Value of the topology.kubernetes.io/region label.")
	f.StringToStringVar(&o.labels, "node-labels", nil, "Extra labels for every node, e.g. pool=blue.")
	f.IntVar(&o.cfg.MaxPods, "max-pods", hollownode.DefaultMaxPods, "Each kubelet's --max-pods.")
	f.StringVar(&o.cfg.Binary, "kubemark", "", "The kubemark binary (default: kubemark in the control plane's bin directory: $NODESHEPHERD_BIN_DIR, the executable's directory, or ./bin).")
	f.StringVar(&o.dir, "dir", "", "Directory for each node's kubeconfig, log and kubelet files (default: a temporary directory removed on exit).")
	f.DurationVar(&o.timeout, "ready-timeout", 2*time.Minute, "How long to wait for every node to register and report Ready.")
	f.IntVar(&o.cfg.Verbosity, "kubelet-v", 0, "Log verbosity of the kubelets (their -v).")
	f.DurationVar(&o.cfg.RebootDowntime, "reboot-downtime", fakecloud.DefaultRebootDowntime, "How long a machine the fake cloud provider reboots (--cloud-provider=fake) is off before it boots again, with a new boot ID.")
	f.DurationVar(&o.cfg.ReplaceDowntime, "replace-downtime", fakecloud.DefaultReplaceDowntime, "How long a machine the fake cloud provider replaces is gone (its Node, Lease and pods deleted) before the new machine starts and its kubelet registers the Node anew.")
	return c
}

func (o *options) complete() error {
	var errs []error
	if err := o.kube.Validate(); err != nil {
		errs = append(errs, err)
	}
	if o.cfg.Nodes < 1 {
		errs = append(errs, fmt.Errorf("--nodes must be at least 1, got %d", o.cfg.Nodes))
	}
	if o.cfg.MaxPods < 1 {
		errs = append(errs, fmt.Errorf("--max-pods must be at least 1, got %d", o.cfg.MaxPods))
	}
	if msgs := validation.IsDNS1123Subdomain(o.cfg.NamePrefix + "0"); len(msgs) > 0 {
		errs = append(errs, fmt.Errorf("--name-prefix %q does not make valid node names: %s", o.cfg.NamePrefix, strings.Join(msgs, "; ")))
	}
	o.cfg.Zones = nil
	for _, z := range strings.Split(o.zones, ",") {
		if z = strings.TrimSpace(z); z == "" {
			continue
		}
		if msgs := validation.IsValidLabelValue(z); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("--zones %q: %s", z, strings.Join(msgs, "; ")))
		}
		o.cfg.Zones = append(o.cfg.Zones, z)
	}
	for k, v := range o.labels {
		if msgs := append(validation.IsQualifiedName(k), validation.IsValidLabelValue(v)...); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("--node-labels %s=%s: %s", k, v, strings.Join(msgs, "; ")))
		}
	}
	o.cfg.Labels = o.labels
	if o.cfg.RebootDowntime <= 0 || o.cfg.ReplaceDowntime <= 0 {
		errs = append(errs, fmt.Errorf("--reboot-downtime and --replace-downtime must be positive, got %v and %v", o.cfg.RebootDowntime, o.cfg.ReplaceDowntime))
	}
	if o.timeout <= 0 {
		errs = append(errs, fmt.Errorf("--ready-timeout must be positive, got %v", o.timeout))
	}
	if len(errs) > 0 {
		return &cli.UsageError{Err: errors.Join(errs...)}
	}
	if o.cfg.Binary == "" {
		o.cfg.Binary = filepath.Join(controlplane.FindBinDir(), hollownode.Binary)
	}
	return nil
}

func (o *options) run(ctx context.Context, cmd *cobra.Command) error {
	out := cmd.OutOrStdout()
	restCfg, err := o.kube.RESTConfig("nodeshepherd-hollownodes")
	if err != nil {
		return err
	}
	o.cfg.Server = restCfg
	o.cfg.Dir = o.dir
	if o.cfg.Dir == "" {
		d, err := os.MkdirTemp("", "nodeshepherd-hollownodes-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(d)
		o.cfg.Dir = d
	}
	start := time.Now()
	fmt.Fprintf(out, "hollownodes: starting %d hollow nodes (%s) against %s; logs under %s\n", o.cfg.Nodes, o.cfg.Binary, restCfg.Host, o.cfg.Dir)
	step := max(1, o.cfg.Nodes/10)
	fleet, err := hollownode.Start(ctx, o.cfg, o.timeout, func(ready, total int) {
		if ready%step == 0 || ready == total {
			fmt.Fprintf(out, "hollownodes: %d of %d Ready (%v)\n", ready, total, time.Since(start).Round(time.Second))
		}
	})
	if err != nil {
		return err
	}
	defer fleet.Stop()
	fmt.Fprintf(out, "hollownodes: %d nodes Ready in %v; %s\n", o.cfg.Nodes, time.Since(start).Round(time.Second), summary(fleet.Usage(), time.Since(start)))
	<-ctx.Done()
	fmt.Fprintf(out, "hollownodes: stopping; %s\n", summary(fleet.Usage(), time.Since(start)))
	return nil
}

// summary says what the kubelets cost: resident memory each and in all,
// CPU time each and its share of a core over the run so far.
func summary(us []hollownode.Usage, over time.Duration) string {
	if len(us) == 0 {
		return "no kubelet running"
	}
	var rss int64
	var cpu time.Duration
	for _, u := range us {
		rss += u.RSS
		cpu += u.CPU
	}
	n := int64(len(us))
	return fmt.Sprintf("resident memory %d MiB a node (%d MiB in all), CPU %.2fs a node since start (%.1f%% of a core a node over %v)",
		rss/n>>20, rss>>20, (cpu / time.Duration(n)).Seconds(), 100*(cpu/time.Duration(n)).Seconds()/over.Seconds(), over.Round(time.Second))
}
