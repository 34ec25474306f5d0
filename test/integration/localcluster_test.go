package integration

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/nodeshepherd/nodeshepherd/pkg/controller/nodelifecycle"
	"github.com/nodeshepherd/nodeshepherd/pkg/controllers"
	"github.com/nodeshepherd/nodeshepherd/pkg/controlplane"
	"github.com/nodeshepherd/nodeshepherd/pkg/fakenode"
	"github.com/nodeshepherd/nodeshepherd/pkg/localcluster"
	"github.com/nodeshepherd/nodeshepherd/pkg/manager"
	"github.com/nodeshepherd/nodeshepherd/test/framework"
)

// TestLocalCluster brings a cluster up with nodeshepherd's node lifecycle
// controller in-process and 3 fake nodes in 2 zones, waits until they are
// Ready and untainted, and tears it down twice: everything stops, nothing is
// reported as failed, no process is left.
func TestLocalCluster(t *testing.T) {
	dir := t.TempDir()
	var steps []localcluster.Step
	ctrl := fastLifecycle(0.1)
	cfg := localcluster.Config{
		ControlPlane: controlplane.Config{Dir: dir},
		Controllers: func(ctx context.Context, rc *rest.Config) error {
			return manager.Run(ctx, rc, manager.Options{Controllers: []string{nodelifecycle.Name},
				Constructors: controllers.Constructors(ctrl), MetricsBindAddress: "0"})
		},
		FakeNodes: &fakenode.Config{Nodes: 3, Zones: []fakenode.Zone{{Name: "zone-a", Count: 2}, {Name: "zone-b", Count: 1}},
			LeaseRenewInterval: 500 * time.Millisecond, LeaseDuration: 2 * time.Second, NodeStatusUpdateFrequency: 500 * time.Millisecond},
		Progress: func(s localcluster.Step, _ *localcluster.Cluster) { steps = append(steps, s) },
	}
	c := framework.StartCluster(t, cfg)
	if want := []localcluster.Step{localcluster.ControlPlaneReady, localcluster.ControllersStarted, localcluster.NodesRegistered}; !slices.Equal(steps, want) {
		t.Errorf("progress steps %v, want %v", steps, want)
	}

	// The kubeconfig works as kubectl would use it.
	kc, err := clientcmd.BuildConfigFromFlags("", c.KubeconfigPath())
	if err != nil {
		t.Fatal(err)
	}
	client := kubernetes.NewForConfigOrDie(kc)
	nodes, err := client.CoreV1().Nodes().List(framework.Context(t), metav1.ListOptions{})
	if err != nil {
		t.Fatalf("listing nodes with %s: %v", c.KubeconfigPath(), err)
	}
	zones := map[string]int{}
	for _, n := range nodes.Items {
		zones[n.Labels["topology.kubernetes.io/zone"]]++
	}
	if len(nodes.Items) != 3 || zones["zone-a"] != 2 || zones["zone-b"] != 1 {
		t.Errorf("nodes %d by zone %v, want 3: zone-a 2, zone-b 1", len(nodes.Items), zones)
	}

	var progress []string
	ctx, cancel := context.WithTimeout(framework.Context(t), time.Minute)
	defer cancel()
	if err := c.WaitNodesReady(ctx, localcluster.WaitOptions{Progress: func(s string, done bool) {
		if done {
			progress = append(progress, s)
		}
	}}); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(progress, []string{"3/3 nodes Ready and untainted"}) {
		t.Errorf("final progress %q", progress)
	}
	for _, log := range []string{"etcd.log", "kube-apiserver.log"} {
		if _, err := os.Stat(filepath.Join(c.LogDir(), log)); err != nil {
			t.Errorf("logs: %v", err)
		}
	}

	c.Stop()
	stopped := make(chan struct{})
	go func() { c.Stop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(30 * time.Second): // at once, but on a busy machine
		t.Fatal("a second Stop did not return at once")
	}
	select {
	case err := <-c.Failed():
		t.Errorf("a part reported as failed after Stop: %v", err)
	default:
	}
	if left, _ := framework.Command("pgrep", "-f", dir).Output(); len(bytes.TrimSpace(left)) > 0 {
		t.Errorf("processes left behind: %s", left)
	}
	if _, err := client.CoreV1().Nodes().List(framework.Context(t), metav1.ListOptions{}); err == nil {
		t.Error("kube-apiserver still answers after Stop")
	}
}

// TestDemo runs `nodeshepherd demo --keep-running` on a small cluster: the
// bring-up lines in order, every replica Ready, then Ctrl-C stops it with
// exit code 0 and leaves no process behind.
func TestDemo(t *testing.T) {
	tmp := t.TempDir() // the demo's control plane lives in a temporary directory
	var out lockedBuffer
	cmd := framework.Command(framework.Binary(t), "demo", "--nodes=3", "--zones=zone-a,zone-b", "--replicas=3", "--timeout=2m", "--keep-running")
	cmd.Env = append(os.Environ(), "TMPDIR="+tmp)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	framework.Eventually(t, 3*time.Minute, "the demo to keep the cluster running", func(context.Context) (bool, string, error) {
		select {
		case err := <-done:
			return false, "", errors.Join(errors.New("demo exited"), err, errors.New(out.String()))
		default:
		}
		return strings.Contains(out.String(), "Press Ctrl-C to stop."), out.String(), nil
	})
	text := out.String()
	t.Logf("output:\n%s", text)
	rest := text
	for _, want := range []string{"Logs: " + filepath.Join(tmp, "nodeshepherd-demo.log"),
		"Starting etcd, kube-apiserver, kube-controller-manager and kube-scheduler ...", "Control plane ready in ",
		"Running nodeshepherd's controllers: nodelifecycle, tainteviction, nodeipam, scheduler",
		"Registered 3 fake nodes over 2 zones", "Created Deployment default/demo with 3 replicas",
		"pods scheduled 3, running 3, ready 3/3",
		"All 3 replicas Running and Ready on fake nodes", "Cluster kept running; try:", "export KUBECONFIG=" + tmp} {
		i := strings.Index(rest, want)
		if i < 0 {
			t.Errorf("output lacks %q after the previous line", want)
			continue
		}
		rest = rest[i+len(want):]
	}
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("exit after Ctrl-C: %v, want 0:\n%s", err, out.String())
		}
	case <-time.After(time.Minute):
		t.Fatalf("demo did not stop within a minute of Ctrl-C:\n%s", out.String())
	}
	if left, _ := framework.Command("pgrep", "-f", tmp).Output(); len(bytes.TrimSpace(left)) > 0 {
		t.Errorf("processes left behind: %s", left)
	}
}
