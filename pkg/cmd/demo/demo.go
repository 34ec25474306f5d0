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
	"k8s.io/utils/ptr"

	"github.com/nodeshepherd/nodeshepherd/pkg/cli"
	"github.com/nodeshepherd/nodeshepherd/pkg/controller/nodeipam"
	"github.com/nodeshepherd/nodeshepherd/pkg/controllers"
	"github.com/nodeshepherd/nodeshepherd/pkg/controlplane"
	"github.com/nodeshepherd/nodeshepherd/pkg/fakenode"
	"github.com/nodeshepherd/nodeshepherd/pkg/kube"
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

func (o *options) run(ctx context.Context, out io.Writer) error {
	zones, err := fakenode.ParseZones(o.zones)
	if err != nil {
		return &cli.UsageError{Err: fmt.Errorf("--zones: %w", err)}
	}
	start := time.Now()
	fmt.Fprintln(out, "Starting etcd, kube-apiserver, kube-controller-manager and kube-scheduler ...")
	// kube-controller-manager runs without the controllers nodeshepherd replaces.
	plane, err := controlplane.Start(ctx, controlplane.Config{BinDir: o.binDir, ControllerManager: true, Scheduler: true})
	if err != nil {
		return err
	}
	defer plane.Stop()
	fmt.Fprintf(out, "Control plane ready in %s: export KUBECONFIG=%s\n", time.Since(start).Round(100*time.Millisecond), plane.KubeconfigPath())

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ctrl := controllers.Default()
	ctrl.NodeIPAM = nodeipam.Config{AllocateNodeCIDRs: true, ClusterCIDR: "10.244.0.0/16", ServiceClusterIPRange: controlplane.ServiceClusterIPRange}
	names := ctrl.Select(controllers.Names, nil)
	errc := make(chan error, 2)
	go func() {
		errc <- manager.Run(ctx, kube.Fast(plane.RESTConfig()), manager.Options{
			Controllers: names, Constructors: controllers.Constructors(ctrl), MetricsBindAddress: "0"})
	}()
	fmt.Fprintf(out, "Running nodeshepherd's controllers: %s\n", strings.Join(names, ", "))

	client, err := kubernetes.NewForConfig(kube.Fast(plane.RESTConfig()))
	if err != nil {
		return err
	}
	m, err := fakenode.New(fakenode.Config{Client: client, Nodes: o.nodes, Zones: zones})
	if err != nil {
		return &cli.UsageError{Err: err}
	}
	go func() { errc <- m.Run(ctx) }()
	select {
	case <-m.Ready():
	case err := <-errc:
		return err
	}
	fmt.Fprintf(out, "Registered %d fake nodes over %d zones\n", o.nodes, len(zones))

	dep := demoDeployment(int32(o.replicas))
	if _, err := client.AppsV1().Deployments(metav1.NamespaceDefault).Create(ctx, dep, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating the demo Deployment: %w", err)
	}
	fmt.Fprintf(out, "Created Deployment default/%s with %d replicas\n", dep.Name, o.replicas)

	deadline := time.After(o.timeout)
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	last := ""
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case err := <-errc:
			return fmt.Errorf("fake nodes or controllers stopped: %w", err)
		case <-deadline:
			return fmt.Errorf("the Deployment was not ready after %s (last: %s); logs are in %s/logs", o.timeout, last, plane.Dir())
		case <-tick.C:
		}
		nodes, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			continue
		}
		pods, err := client.CoreV1().Pods(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{LabelSelector: "app=demo"})
		if err != nil {
			continue
		}
		readyNodes, scheduled, running, ready := 0, 0, 0, 0
		for i := range nodes.Items {
			if kube.NodeReady(&nodes.Items[i]) && !kube.HasTaint(&nodes.Items[i], v1.TaintNodeNotReady) && len(nodes.Items[i].Spec.PodCIDRs) > 0 {
				readyNodes++
			}
		}
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
		last = fmt.Sprintf("nodes ready with pod CIDRs %d/%d, pods scheduled %d, running %d, ready %d/%d", readyNodes, o.nodes, scheduled, running, ready, o.replicas)
		fmt.Fprintf(out, "[%5.1fs] %s\n", time.Since(start).Seconds(), last)
		if ready == o.replicas {
			break
		}
	}
	fmt.Fprintf(out, "All %d replicas Running and Ready on fake nodes, %s after start.\n", o.replicas, time.Since(start).Round(100*time.Millisecond))
	if !o.keepRunning {
		return nil
	}
	fmt.Fprintf(out, "Cluster kept running; try:\n  export KUBECONFIG=%s\n  kubectl get nodes -L topology.kubernetes.io/zone\nPress Ctrl-C to stop.\n", plane.KubeconfigPath())
	select {
	case <-ctx.Done():
		return nil
	case err := <-errc:
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
