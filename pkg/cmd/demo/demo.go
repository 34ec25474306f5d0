// Package demo implements `nodeshepherd demo`: the embedded default, a local
// control plane with fake nodes and a Deployment that ends up Running on them.
package demo

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"
	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/nodeshepherd/nodeshepherd/pkg/cli"
	"github.com/nodeshepherd/nodeshepherd/pkg/controller/nodeipam"
	"github.com/nodeshepherd/nodeshepherd/pkg/controllers"
	"github.com/nodeshepherd/nodeshepherd/pkg/controlplane"
	"github.com/nodeshepherd/nodeshepherd/pkg/fakenode"
	"github.com/nodeshepherd/nodeshepherd/pkg/kube"
	"github.com/nodeshepherd/nodeshepherd/pkg/localcluster"
	"github.com/nodeshepherd/nodeshepherd/pkg/manager"
)

type options struct {
	nodes, replicas int
	zones           string
	timeout         time.Duration
	keepRunning     bool
	binDir          string
}

// NewCommand returns `nodeshepherd demo`.
func NewCommand() *cobra.Command {
	o := &options{}
	c := &cobra.Command{
		Use:   "demo",
		Short: "Start a local control plane with fake nodes and watch a Deployment become Running on them",
		Long: `Start etcd, kube-apiserver, kube-controller-manager (without the controllers nodeshepherd
replaces) and kube-scheduler locally, run nodeshepherd's controllers against them, register
fake nodes over three zones, create a Deployment and show its pods being scheduled and
started until every replica is Running and Ready. No cluster is needed: the binaries come
from 'make controlplane'.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.nodes < 1 || o.replicas < 1 || o.timeout <= 0 {
				return cli.Usagef("--nodes and --replicas must be at least 1 and --timeout positive")
			}
			logPath := filepath.Join(os.TempDir(), "nodeshepherd-demo.log")
			toFile, restore, err := cli.LogsToFile(cmd, logPath)
			if err != nil {
				return err
			}
			defer restore()
			if toFile {
				fmt.Fprintf(cmd.OutOrStdout(), "Logs: %s (-v=2 shows them here)\n", logPath)
			}
			return o.run(cmd.Context(), cmd.OutOrStdout())
		},
	}
	f := c.Flags()
	f.IntVar(&o.nodes, "nodes", 10, "Number of fake nodes.")
	f.StringVar(&o.zones, "zones", fakenode.DefaultZones, "Zones to spread the nodes over.")
	f.IntVar(&o.replicas, "replicas", 30, "Replicas of the demo Deployment.")
	f.DurationVar(&o.timeout, "timeout", 3*time.Minute, "Give up if the Deployment is not ready by then.")
	f.BoolVar(&o.keepRunning, "keep-running", false, "Keep the cluster running after the demo, for kubectl, until Ctrl-C.")
	f.StringVar(&o.binDir, "bin-dir", "", "Directory holding the control-plane binaries (default: see 'controlplane up --help').")
	return c
}

// run is the demo: bring the cluster up, create the Deployment, watch it
// become Ready, and keep the cluster on request.
func (o *options) run(ctx context.Context, out io.Writer) error {
	d := &demo{options: o, out: out, start: time.Now()}
	cfg, err := d.clusterConfig()
	if err != nil {
		return err
	}
	fmt.Fprintln(out, "Starting etcd, kube-apiserver, kube-controller-manager and kube-scheduler ...")
	cluster, err := localcluster.Start(ctx, cfg)
	if err != nil {
		return err
	}
	defer cluster.Stop()
	if err := d.createDeployment(ctx, cluster.Client()); err != nil {
		return err
	}
	if err := d.waitDeployment(ctx, cluster); err != nil {
		return err
	}
	fmt.Fprintf(out, "All %d replicas Running and Ready on fake nodes, %s after start.\n", o.replicas, time.Since(d.start).Round(100*time.Millisecond))
	if !o.keepRunning {
		return nil
	}
	return d.keepRunning(ctx, cluster)
}

// demo is one run of the demo.
type demo struct {
	*options
	out   io.Writer
	start time.Time
}

// clusterConfig is the demo's cluster: kube-controller-manager without the
// controllers nodeshepherd replaces, kube-scheduler, nodeshepherd's
// controllers with node IPAM on, and the fake nodes; its progress callback
// prints the bring-up lines.
func (d *demo) clusterConfig() (localcluster.Config, error) {
	zones, err := fakenode.ParseZones(d.zones)
	if err != nil {
		return localcluster.Config{}, &cli.UsageError{Err: fmt.Errorf("--zones: %w", err)}
	}
	ctrl := controllers.Default()
	ctrl.NodeIPAM = nodeipam.Config{AllocateNodeCIDRs: true, ClusterCIDR: "10.244.0.0/16", ServiceClusterIPRange: controlplane.ServiceClusterIPRange}
	names := ctrl.Select(controllers.Names, nil)
	cfg := localcluster.Config{
		ControlPlane: controlplane.Config{BinDir: d.binDir, ControllerManager: true, Scheduler: true},
		Controllers: func(ctx context.Context, rc *rest.Config) error {
			return manager.Run(ctx, kube.Fast(rc), manager.Options{
				Controllers: names, Constructors: controllers.Constructors(ctrl), MetricsBindAddress: "0"})
		},
		FakeNodes: &fakenode.Config{Nodes: d.nodes, Zones: zones},
		Progress: func(s localcluster.Step, c *localcluster.Cluster) {
			switch s {
			case localcluster.ControlPlaneReady:
				fmt.Fprintf(d.out, "Control plane ready in %s: export KUBECONFIG=%s\n", time.Since(d.start).Round(100*time.Millisecond), c.KubeconfigPath())
			case localcluster.ControllersStarted:
				fmt.Fprintf(d.out, "Running nodeshepherd's controllers: %s\n", strings.Join(names, ", "))
			case localcluster.NodesRegistered:
				fmt.Fprintf(d.out, "Registered %d fake nodes over %d zones\n", d.nodes, len(zones))
			}
		},
	}
	if err := cfg.Validate(); err != nil {
		return cfg, &cli.UsageError{Err: fmt.Errorf("--nodes and --zones: %w", err)}
	}
	return cfg, nil
}

func (d *demo) createDeployment(ctx context.Context, client kubernetes.Interface) error {
	dep := demoDeployment(int32(d.replicas))
	if _, err := client.AppsV1().Deployments(metav1.NamespaceDefault).Create(ctx, dep, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating the demo Deployment: %w", err)
	}
	fmt.Fprintf(d.out, "Created Deployment default/%s with %d replicas\n", dep.Name, d.replicas)
	return nil
}

// waitDeployment prints the state every second until every replica is Ready.
func (d *demo) waitDeployment(ctx context.Context, cluster *localcluster.Cluster) error {
	deadline := time.After(d.timeout)
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	last := ""
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case err := <-cluster.Failed():
			return err
		case <-deadline:
			return fmt.Errorf("the Deployment was not ready after %s (last: %s); logs are in %s", d.timeout, last, cluster.LogDir())
		case <-tick.C:
		}
		status, ready, err := d.status(ctx, cluster.Client())
		if err != nil {
			continue
		}
		last = status
		fmt.Fprintf(d.out, "[%5.1fs] %s\n", time.Since(d.start).Seconds(), last)
		if ready {
			return nil
		}
	}
}

// status describes the nodes and the demo's pods, and says whether every
// replica is Ready.
func (d *demo) status(ctx context.Context, client kubernetes.Interface) (string, bool, error) {
	nodes, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return "", false, err
	}
	pods, err := client.CoreV1().Pods(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{LabelSelector: "app=demo"})
	if err != nil {
		return "", false, err
	}
	readyNodes := localcluster.CountNodes(nodes.Items, func(n *v1.Node) bool {
		return localcluster.ReadyWithoutNotReadyTaint(n) && len(n.Spec.PodCIDRs) > 0
	})
	scheduled, running, ready := 0, 0, 0
	for i := range pods.Items {
		p := &pods.Items[i]
		if p.Spec.NodeName != "" {
			scheduled++
		}
		if p.Status.Phase == v1.PodRunning {
			running++
		}
		if kube.PodReady(p) {
			ready++
		}
	}
	return fmt.Sprintf("nodes ready with pod CIDRs %d/%d, pods scheduled %d, running %d, ready %d/%d",
		readyNodes, d.nodes, scheduled, running, ready, d.replicas), ready == d.replicas, nil
}

// keepRunning keeps the cluster up for kubectl until Ctrl-C.
func (d *demo) keepRunning(ctx context.Context, cluster *localcluster.Cluster) error {
	fmt.Fprintf(d.out, "Cluster kept running; try:\n  export KUBECONFIG=%s\n  kubectl get nodes -L topology.kubernetes.io/zone\nPress Ctrl-C to stop.\n", cluster.KubeconfigPath())
	select {
	case <-ctx.Done():
		return nil
	case err := <-cluster.Failed():
		return err
	}
}

func demoDeployment(replicas int32) *appsv1.Deployment {
	labels := map[string]string{"app": "demo"}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "demo", Namespace: metav1.NamespaceDefault, Labels: labels},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(replicas),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: v1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: v1.PodSpec{Containers: []v1.Container{{
					Name: "app", Image: "registry.k8s.io/pause:3.10",
					Resources: v1.ResourceRequirements{Requests: v1.ResourceList{
						v1.ResourceCPU: resource.MustParse("100m"), v1.ResourceMemory: resource.MustParse("64Mi")}},
				}}},
			},
		},
	}
}
