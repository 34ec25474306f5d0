package integration

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/nodeshepherd/nodeshepherd/pkg/companion"
	"github.com/nodeshepherd/nodeshepherd/pkg/controller/nodelifecycle"
	"github.com/nodeshepherd/nodeshepherd/pkg/controller/readinessrestore"
	"github.com/nodeshepherd/nodeshepherd/pkg/controllers"
	"github.com/nodeshepherd/nodeshepherd/pkg/controlplane"
	"github.com/nodeshepherd/nodeshepherd/pkg/fakenode"
	"github.com/nodeshepherd/nodeshepherd/pkg/manager"
	"github.com/nodeshepherd/nodeshepherd/test/framework"
)

// managedCluster is a control plane whose kube-controller-manager runs all
// its controllers, node lifecycle and taint eviction among them, as on a
// managed cluster, judging the fast fake nodes' heartbeats on their scale.
func managedCluster(t *testing.T) (*rest.Config, kubernetes.Interface) {
	cp := framework.StartControlPlane(t, controlplane.Config{ControllerManager: true, Controllers: "*",
		ControllerManagerArgs: []string{"--node-monitor-period=1s", "--node-monitor-grace-period=" + testGrace.String()}})
	return cp.RESTConfig(), framework.Client(t, cp)
}

// TestCompanionReadinessRestore is seed 002 on a managed cluster:
// kube-controller-manager marks the pods of a silent node NotReady, the 1.15
// kubelet never re-posts them, and readinessrestore, the only controller
// nodeshepherd runs, gives their readiness back once the node is Ready again.
func TestCompanionReadinessRestore(t *testing.T) {
	asServiceAccount(t)
	cfg, client := managedCluster(t)
	m := framework.StartFakeNodes(t, fastNodes(client, 2, true))
	ctrl := controllers.Default()
	ctrl.ReadinessRestore.Delay = time.Second
	ns := framework.StartNodeShepherd(t, cfg, ctrl, func(o *manager.Options) { o.Controllers = []string{readinessrestore.Name} })
	node := m.NodeNames()[0]
	waitNodesReady(t, client, m.NodeNames()...)
	createPod(t, client, "app", node, tolerations(nil))
	framework.Eventually(t, time.Minute, "pod Ready", podReadyIs(client, "app", v1.ConditionTrue))

	partition(t, m, fakenode.Partition, fakenode.Target{Nodes: []string{node}})
	framework.Eventually(t, 30*time.Second, "pod marked NotReady by kube-controller-manager", func(ctx context.Context) (bool, string, error) {
		p, err := client.CoreV1().Pods("default").Get(ctx, "app", metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		w, _ := companion.LastWriter(p, companion.ConditionPath(string(v1.PodReady), "status"))
		ok, state, err := podReadyIs(client, "app", v1.ConditionFalse)(ctx)
		return ok && w == companion.KubeControllerManager, fmt.Sprintf("%s, Ready written by %q", state, w), err
	})
	partition(t, m, fakenode.Heal, fakenode.Target{Nodes: []string{node}})
	framework.Eventually(t, 30*time.Second, "node Ready again", nodeCondition(client, node, v1.NodeReady, v1.ConditionTrue))
	framework.Eventually(t, 30*time.Second, "readiness restored", podReadyIs(client, "app", v1.ConditionTrue))
	framework.WaitEvents(t, client, "reason="+readinessrestore.EventReadinessRestored, 1)
	if v := ns.Metric(t, "nodeshepherd_readinessrestore_pod_readiness_restored_total", nil); v != 1 {
		t.Errorf("pod_readiness_restored_total = %v", v)
	}
}

// runUntilError runs nodeshepherd's manager and returns its error, failing
// the test if it runs on for longer than within.
func runUntilError(t *testing.T, cfg *rest.Config, ctrl controllers.Config, names []string, within time.Duration) error {
	t.Helper()
	ctx, cancel := context.WithCancel(framework.Context(t))
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- manager.Run(ctx, cfg, manager.Options{Controllers: names, Constructors: controllers.Constructors(ctrl), MetricsBindAddress: "0"})
	}()
	select {
	case err := <-done:
		return err
	case <-time.After(within):
		cancel()
		<-done
		t.Fatalf("nodeshepherd still runs %v after the check should have stopped it", within)
		return nil
	}
}

// conflictEvent waits for the ConflictingWriter event on the node that
// names the controller and what happened to it.
func conflictEvent(t *testing.T, client kubernetes.Interface, node, want string) {
	t.Helper()
	framework.Eventually(t, time.Minute, "ConflictingWriter event on "+node, func(ctx context.Context) (bool, string, error) {
		evs, err := client.CoreV1().Events("").List(ctx, metav1.ListOptions{FieldSelector: "reason=" + companion.EventConflictingWriter + ",involvedObject.name=" + node})
		if err != nil {
			return false, "", err
		}
		var msgs []string
		for _, e := range evs.Items {
			if e.Type == v1.EventTypeWarning && strings.Contains(e.Message, want) {
				return true, "", nil
			}
			msgs = append(msgs, e.Message)
		}
		return false, fmt.Sprint(msgs), nil
	})
}

// TestCompanionConflictingWriterDetected: next to kube-controller-manager's
// node lifecycle, nodeshepherd's nodelifecycle is stopped when
// kube-controller-manager's taints appear while it runs, refused at start
// while they are there, and runs with --allow-conflicting-writers.
func TestCompanionConflictingWriterDetected(t *testing.T) {
	cfg, client := managedCluster(t)
	m := framework.StartFakeNodes(t, fastNodes(client, 2, false))
	names := m.NodeNames()
	waitNodesReady(t, client, names...) // kube-controller-manager lifted the registration taints
	ctrl := controllers.Default()
	// Slower than kube-controller-manager, so that its writes come first.
	ctrl.NodeLifecycle.NodeMonitorGracePeriod = time.Minute

	// While running: nothing to see at start; the node falls silent,
	// kube-controller-manager taints it, and nodelifecycle is stopped.
	ctx, cancel := context.WithCancel(framework.Context(t))
	defer cancel()
	done, addr := make(chan error, 1), make(chan string, 1)
	go func() {
		done <- manager.Run(ctx, cfg, manager.Options{Controllers: []string{nodelifecycle.Name}, Constructors: controllers.Constructors(ctrl),
			MetricsBindAddress: "127.0.0.1:0", OnServing: func(a string) { addr <- a }})
	}()
	// Ready once the start check has passed and the informers synced.
	serving := <-addr
	framework.Eventually(t, 30*time.Second, "nodelifecycle running", func(ctx context.Context) (bool, string, error) {
		select {
		case err := <-done:
			t.Fatalf("nodeshepherd stopped at start: %v", err)
		default:
		}
		resp, err := http.Get("http://" + serving + "/readyz")
		if err != nil {
			return false, err.Error(), nil
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, resp.Status, nil
	})
	partition(t, m, fakenode.Partition, fakenode.Target{Nodes: names[:1]})
	var err error
	select {
	case err = <-done:
	case <-time.After(60 * time.Second):
		t.Fatal("nodelifecycle still runs 60s after the node fell silent next to kube-controller-manager's node lifecycle")
	}
	for _, want := range []string{"stopped controller nodelifecycle: kube-controller-manager writes what it owns: node " + names[0], "last written by kube-controller-manager",
		"--allow-conflicting-writers=nodelifecycle"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v lacks %q", err, want)
		}
	}

	// At start: refused, with the evidence and the flag that overrides.
	framework.Eventually(t, 30*time.Second, "kube-controller-manager's unreachable taint", nodeTainted(client, names[0],
		v1.Taint{Key: v1.TaintNodeUnreachable, Effect: v1.TaintEffectNoExecute}, true))
	err = runUntilError(t, cfg, ctrl, []string{nodelifecycle.Name}, 30*time.Second)
	for _, want := range []string{"starting controller nodelifecycle: refusing to run controller nodelifecycle: kube-controller-manager writes what it owns: node " + names[0] + ": taints node.kubernetes.io/unreachable",
		"no leader Lease kube-system/kube-controller-manager is visible", "--controllers=*,-nodelifecycle", "--allow-conflicting-writers=nodelifecycle to run it anyway"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v lacks %q", err, want)
		}
	}
	conflictEvent(t, client, names[0], "nodeshepherd's nodelifecycle controller not started: kube-controller-manager last wrote taints node.kubernetes.io/unreachable")
	conflictEvent(t, client, names[0], "nodeshepherd's nodelifecycle controller stopped")
	// Companions run: nothing they write is kube-controller-manager's.
	companions := controllers.Default()
	framework.StartNodeShepherd(t, cfg, companions, func(o *manager.Options) { o.Controllers = []string{readinessrestore.Name} }).Stop()

	// Overridden: it runs.
	ctrl.Companion.AllowConflictingWriters = []string{nodelifecycle.Name}
	framework.StartNodeShepherd(t, cfg, ctrl, func(o *manager.Options) { o.Controllers = []string{nodelifecycle.Name} })
}
