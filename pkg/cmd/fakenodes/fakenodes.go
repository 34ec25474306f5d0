// Package fakenodes implements `nodeshepherd fakenodes` and its fault commands.
package fakenodes

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/nodeshepherd/nodeshepherd/pkg/cli"
	"github.com/nodeshepherd/nodeshepherd/pkg/fakecsi"
	"github.com/nodeshepherd/nodeshepherd/pkg/fakenode"
)

type options struct {
	kube          cli.KubeFlags
	nodes         int
	zones         string
	cpu, memory   string
	labels        map[string]string
	taints        []string
	images        string
	devices       []string
	controlSocket string
	cfg           fakenode.Config
}

// NewCommand returns `nodeshepherd fakenodes`.
func NewCommand() *cobra.Command {
	o := &options{}
	c := &cobra.Command{
		Use:   "fakenodes",
		Short: "Simulate N kubelets against a cluster: nodes, leases, node status and pods",
		Long: `Register N fake nodes and behave like their kubelets: renew a Lease in kube-node-lease
every --node-lease-renew-interval, post NodeStatus on change or every
--node-status-report-frequency, run the pods bound to the nodes (Running and Ready after
--pod-start-delay) and finish their graceful deletion.

The fake kubelet writes back any pod status the API server holds that differs from its own
(the upstream fix of the seed 002 incident) at its status sync, every
--node-status-update-frequency at a phase of each node's own, as the kubelet's status manager
does; --emulate-stale-pod-status reproduces the 1.15 kubelet that never did.

With --csi-driver (default fake.csi.nodeshepherd.io; empty turns it off) the process also runs a fake CSI
driver: a CSIDriver (attachRequired) and a StorageClass fake-csi (WaitForFirstConsumer), a CSINode per
node, an attacher that attaches and detaches the VolumeAttachments of its nodes (with external-attacher's
finalizer) and a provisioner that creates PersistentVolumes in the selected node's zone. The fake kubelet
reports the driver's volumes in node.status.volumesInUse and starts a pod only once its volumes are
attached; kube-controller-manager's attach-detach and PV binder controllers do the rest.
A powered-off node (fault machine-shutdown) posts nothing more: its pods stay Terminating and its last
volumesInUse stays.

--images gives the container images every node reports in node.status.images, as NAME=SIZE
(what kube-scheduler's ImageLocality score reads): like a kubelet, a node reports the largest first
and at most --node-status-max-images of them, with its full status (at registration, after a kubelet
restart or a machine's boot), never with a heartbeat. The list is fixed: running a pod adds no image
to it.

--devices gives fake Dynamic Resource Allocation devices, as DRIVER=COUNT[,model=MODEL]
[,memory=QUANTITY][,class=NAME] (repeatable, one driver each): every node publishes one
ResourceSlice per driver (pool: the node's name; devices PREFIX-0..PREFIX-(COUNT-1), PREFIX the
driver name's first label, with the attributes model and index and the capacity memory), owned by
its Node, and the process creates a DeviceClass (named after the driver, or class=) selecting
device.driver == DRIVER unless one of that name exists. The fake kubelet starts a pod with
resource claims only once each claim exists, is allocated and is reserved for the pod (otherwise
it records the event FailedPrepareDynamicResources), and reports the devices of its drivers
prepared in the claim's status.devices (condition Ready).

Faults are injected into the running process with 'nodeshepherd fakenodes fault'.`,
		Example: `  nodeshepherd fakenodes --kubeconfig=$KUBECONFIG --nodes=50 --zones=zone-a,zone-b,zone-c
  nodeshepherd fakenodes --nodes=30 --zones=zone-a=20,zone-b=10 --register-with-taints=dedicated=infra:NoSchedule
  nodeshepherd fakenodes --nodes=10 --images=registry.k8s.io/pause:3.10=750kB,docker.io/library/nginx:1.27=70MB
  nodeshepherd fakenodes --nodes=4 --devices=gpu.fake.nodeshepherd.io=8,model=a100,memory=80Gi`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.complete(cmd); err != nil {
				return err
			}
			return o.run(cmd.Context())
		},
	}
	f := c.Flags()
	o.kube.AddFlags(f, 1000, 2000)
	f.IntVar(&o.nodes, "nodes", fakenode.DefaultNodes, "Number of nodes to simulate (with zone counts in --zones, their sum when not set).")
	f.StringVar(&o.cfg.NamePrefix, "name-prefix", fakenode.DefaultNamePrefix, "Node name prefix; names are PREFIX0000, PREFIX0001, ...")
	f.StringVar(&o.cfg.Region, "region", fakenode.DefaultRegion, "Value of the topology.kubernetes.io/region label.")
	f.StringVar(&o.zones, "zones", fakenode.DefaultZones, "Zones to spread nodes over: zone-a,zone-b (round-robin) or zone-a=20,zone-b=10 (counts).")
	f.StringToStringVar(&o.labels, "node-labels", nil, "Extra labels for every node, e.g. pool=blue,team=infra.")
	f.StringSliceVar(&o.taints, "register-with-taints", nil, "Taints to register nodes with, as key=value:Effect or key:Effect (repeatable).")
	f.StringVar(&o.cpu, "cpu", "32", "CPU capacity of each node.")
	f.StringVar(&o.memory, "memory", "256Gi", "Memory capacity of each node.")
	f.IntVar(&o.cfg.MaxPods, "max-pods", fakenode.DefaultMaxPods, "Pod capacity of each node.")
	f.StringVar(&o.images, "images", "", "Container images every node reports in node.status.images, as NAME=SIZE,... e.g. registry.k8s.io/pause:3.10=750kB,nginx:1.27=70MB; "+
		"SIZE in bytes, or with a unit: kB, MB, GB, TB (powers of 1000) or KiB, MiB, GiB, TiB (powers of 1024), the B optional.")
	f.StringArrayVar(&o.devices, "devices", nil, "Fake DRA devices every node publishes, as DRIVER=COUNT[,model=MODEL][,memory=QUANTITY][,class=NAME], e.g. gpu.fake.nodeshepherd.io=4,model=a100,memory=80Gi; "+
		"repeat the flag for another driver. COUNT: 1 to 128.")
	f.IntVar(&o.cfg.NodeStatusMaxImages, "node-status-max-images", fakenode.DefaultNodeStatusMaxImages, "How many of --images a node reports at most, the largest first; -1: all (kubelet: 50).")
	f.DurationVar(&o.cfg.LeaseDuration, "node-lease-duration", fakenode.DefaultLeaseDuration, "Lease duration written into each node's Lease (kubelet: 40s).")
	f.DurationVar(&o.cfg.LeaseRenewInterval, "node-lease-renew-interval", fakenode.DefaultLeaseRenewInterval, "How often each Lease is renewed (kubelet: 10s).")
	f.DurationVar(&o.cfg.NodeStatusUpdateFrequency, "node-status-update-frequency", fakenode.DefaultNodeStatusUpdateFrequency, "How often node status is computed and compared with the API server's (kubelet: 10s).")
	f.DurationVar(&o.cfg.NodeStatusReportFrequency, "node-status-report-frequency", fakenode.DefaultNodeStatusReportFrequency, "How often node status is posted when nothing changed (kubelet: 5m).")
	f.DurationVar(&o.cfg.PodStartDelay, "pod-start-delay", fakenode.DefaultPodStartDelay, "Time from a pod's binding to Running and Ready.")
	f.BoolVar(&o.cfg.EmulateStalePodStatus, "emulate-stale-pod-status", false, "Reproduce the kubelet 1.15 bug: never re-post a pod status that someone else changed.")
	f.StringVar(&o.cfg.CSIDriver, "csi-driver", fakecsi.DefaultDriverName, "Name of the fake CSI driver to run for these nodes (CSIDriver, StorageClass "+fakecsi.DefaultStorageClassName+", attacher, provisioner); empty: none.")
	f.DurationVar(&o.cfg.VolumeAttachDelay, "volume-attach-delay", 0, "How long the fake CSI driver takes to attach or detach a volume.")
	f.DurationVar(&o.cfg.RebootDowntime, "reboot-downtime", fakenode.DefaultRebootDowntime, "How long a machine the fake cloud provider reboots (--cloud-provider=fake) is off before it boots again, with a new boot ID.")
	f.DurationVar(&o.cfg.ReplaceDowntime, "replace-downtime", fakenode.DefaultReplaceDowntime, "How long a machine the fake cloud provider replaces is gone (its Node, Lease and pods deleted) before the new machine registers the Node anew.")
	f.IntVar(&o.cfg.Workers, "workers", fakenode.DefaultWorkers, "Goroutines writing to the API server.")
	f.StringVar(&o.controlSocket, "control-socket", fakenode.DefaultControlSocket(), "Unix socket on which fault commands are accepted.")
	c.AddCommand(newFaultCommand(), newStatusCommand())
	return c
}

func (o *options) complete(cmd *cobra.Command) error {
	var errs []error
	if err := o.kube.Validate(); err != nil {
		errs = append(errs, err)
	}
	zones, err := fakenode.ParseZones(o.zones)
	if err != nil {
		errs = append(errs, fmt.Errorf("--zones: %w", err))
	}
	o.cfg.Zones = zones
	if o.nodes < 1 {
		errs = append(errs, fmt.Errorf("--nodes must be at least 1, got %d", o.nodes))
	}
	o.cfg.Nodes = o.nodes
	if !cmd.Flags().Changed("nodes") && len(zones) > 0 && zones[0].Count > 0 {
		o.cfg.Nodes = 0 // the sum of the zone counts
	}
	if o.cfg.CPU, err = resource.ParseQuantity(o.cpu); err != nil || o.cfg.CPU.Sign() <= 0 {
		errs = append(errs, fmt.Errorf("--cpu %q is not a positive quantity such as 32 or 8500m", o.cpu))
	}
	if o.cfg.Memory, err = resource.ParseQuantity(o.memory); err != nil || o.cfg.Memory.Sign() <= 0 {
		errs = append(errs, fmt.Errorf("--memory %q is not a positive quantity such as 256Gi", o.memory))
	}
	for k, v := range o.labels {
		if msgs := append(validation.IsQualifiedName(k), validation.IsValidLabelValue(v)...); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("--node-labels %s=%s: %s", k, v, strings.Join(msgs, "; ")))
		}
	}
	o.cfg.Labels = o.labels
	if o.cfg.Images, err = fakenode.ParseImages(o.images); err != nil {
		errs = append(errs, fmt.Errorf("--images: %w", err))
	}
	if n := o.cfg.NodeStatusMaxImages; n == 0 || n < -1 {
		errs = append(errs, fmt.Errorf("--node-status-max-images must be -1 (every image) or at least 1, got %d; to report no images, leave out --images", n))
	}
	for _, d := range o.devices {
		set, err := fakenode.ParseDeviceSet(d)
		if err != nil {
			errs = append(errs, fmt.Errorf("--devices: %w", err))
			continue
		}
		o.cfg.Devices = append(o.cfg.Devices, set)
	}
	for _, t := range o.taints {
		taint, err := ParseTaint(t)
		if err != nil {
			errs = append(errs, fmt.Errorf("--register-with-taints: %w", err))
			continue
		}
		o.cfg.Taints = append(o.cfg.Taints, taint)
	}
	if len(errs) == 0 {
		// Checks that need the parsed values (durations, counts), without a client yet.
		probe := o.cfg
		probe.Client = &kubernetes.Clientset{}
		probe.Complete()
		if err := probe.Validate(); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return &cli.UsageError{Err: errors.Join(errs...)}
	}
	return nil
}

// ParseTaint parses key=value:Effect or key:Effect.
func ParseTaint(s string) (v1.Taint, error) {
	kv, effect, ok := strings.Cut(s, ":")
	if !ok {
		return v1.Taint{}, fmt.Errorf("taint %q: expected key=value:Effect or key:Effect", s)
	}
	key, value, _ := strings.Cut(kv, "=")
	t := v1.Taint{Key: key, Value: value, Effect: v1.TaintEffect(effect)}
	switch t.Effect {
	case v1.TaintEffectNoSchedule, v1.TaintEffectPreferNoSchedule, v1.TaintEffectNoExecute:
	default:
		return v1.Taint{}, fmt.Errorf("taint %q: effect %q must be NoSchedule, PreferNoSchedule or NoExecute", s, effect)
	}
	if msgs := validation.IsQualifiedName(key); len(msgs) > 0 {
		return v1.Taint{}, fmt.Errorf("taint %q: key: %s", s, strings.Join(msgs, "; "))
	}
	if msgs := validation.IsValidLabelValue(value); len(msgs) > 0 {
		return v1.Taint{}, fmt.Errorf("taint %q: value: %s", s, strings.Join(msgs, "; "))
	}
	return t, nil
}

func (o *options) run(ctx context.Context) error {
	restCfg, err := o.kube.RESTConfig("nodeshepherd-fakenodes")
	if err != nil {
		return err
	}
	// Protobuf halves the CPU of thousands of lease renewals a second.
	restCfg.ContentType = "application/vnd.kubernetes.protobuf"
	restCfg.AcceptContentTypes = "application/vnd.kubernetes.protobuf,application/json"
	o.cfg.Client, err = kubernetes.NewForConfig(restCfg)
	if err != nil {
		return err
	}
	m, err := fakenode.New(o.cfg)
	if err != nil {
		return &cli.UsageError{Err: err}
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, 2)
	go func() { errc <- m.Run(ctx) }()
	go func() { errc <- fakenode.ServeControl(ctx, m, o.controlSocket) }()
	klog.FromContext(ctx).Info("Accepting fault commands", "controlSocket", o.controlSocket)
	err = <-errc
	cancel()
	if err2 := <-errc; err == nil {
		err = err2
	}
	return err
}

func newStatusCommand() *cobra.Command {
	var socket string
	c := &cobra.Command{
		Use:   "status",
		Short: "Show the fault state of the nodes of a running fakenodes process",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := context.WithTimeout(cmd.Context(), 30*time.Second)
			defer cancel()
			states, err := fakenode.NewControlClient(socket).States(ctx)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "%-24s %-12s %-20s %s\n", "NODE", "ZONE", "KUBELET", "CONDITIONS")
			for _, s := range states {
				state := "running"
				switch {
				case s.Partitioned && s.KubeletStopped:
					state = "partitioned,stopped"
				case s.Partitioned:
					state = "partitioned"
				case s.KubeletStopped:
					state = "stopped"
				case s.Reconnecting:
					state = "reconnecting"
				}
				if s.Machine != "" {
					state = "machine " + s.Machine
				}
				var conds []string
				for t, st := range s.Conditions {
					conds = append(conds, t+"="+st)
				}
				fmt.Fprintf(out, "%-24s %-12s %-20s %s\n", s.Name, s.Zone, state, strings.Join(conds, ","))
			}
			return nil
		},
	}
	c.Flags().StringVar(&socket, "control-socket", fakenode.DefaultControlSocket(), "Control socket of the fakenodes process.")
	return c
}
