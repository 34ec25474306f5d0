package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/nodeshepherd/nodeshepherd/pkg/controller/nodelifecycle"
	"github.com/nodeshepherd/nodeshepherd/pkg/controllers"
	"github.com/nodeshepherd/nodeshepherd/pkg/controlplane"
	"github.com/nodeshepherd/nodeshepherd/pkg/fakenode"
	"github.com/nodeshepherd/nodeshepherd/pkg/kube"
	"github.com/nodeshepherd/nodeshepherd/pkg/owner"
	"github.com/nodeshepherd/nodeshepherd/test/framework"
)

// Compressed timings: fake kubelets renew every 500ms; the controller's grace
// period is 3s and its monitor period 1s.
const (
	testGrace        = 3 * time.Second
	testStartupGrace = 5 * time.Second
)

func fastLifecycle(rate float64) controllers.Config {
	c := controllers.Default()
	nl := &c.NodeLifecycle
	c.Shared.NodeMonitorPeriod = time.Second
	nl.NodeMonitorGracePeriod, nl.NodeStartupGracePeriod = testGrace, testStartupGrace
	nl.NodeEvictionRate, nl.PodReadinessRestoreDelay = rate, time.Second
	return c
}

// lifecycleCluster is a control plane whose kube-controller-manager runs
// without the controllers nodeshepherd replaces, plus kube-scheduler.
func lifecycleCluster(t *testing.T) (*rest.Config, kubernetes.Interface) {
	cp := framework.StartControlPlane(t, controlplane.Config{ControllerManager: true, Scheduler: true})
	return cp.RESTConfig(), framework.Client(t, cp)
}

func zonedNodes(client kubernetes.Interface, zones string, stale bool) fakenode.Config {
	cfg := fastNodes(client, 0, stale)
	cfg.Zones, _ = fakenode.ParseZones(zones)
	return cfg
}

// addTaint adds a taint to a node as kubectl taint would, as the client's
// user (framework.UpdateNode).
func addTaint(t *testing.T, client kubernetes.Interface, node string, taint v1.Taint) {
	t.Helper()
	framework.UpdateNode(t, client, node, func(n *v1.Node) { n.Spec.Taints = append(n.Spec.Taints, taint) })
}

func getNode(t *testing.T, client kubernetes.Interface, name string) *v1.Node {
	t.Helper()
	n, err := client.CoreV1().Nodes().Get(framework.Context(t), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// waitNodes waits until the nodes are Ready and free of the taints a node
// lifecycle controller lifts.
func waitNodesReady(t *testing.T, client kubernetes.Interface, names ...string) {
	t.Helper()
	framework.Eventually(t, 60*time.Second, "nodes Ready and untainted", func(ctx context.Context) (bool, string, error) {
		for _, name := range names {
			n, err := client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, "", err
			}
			if !kube.NodeReady(n) || len(n.Spec.Taints) > 0 {
				return false, fmt.Sprintf("%s: ready=%v taints=%v", name, kube.NodeReady(n), n.Spec.Taints), nil
			}
		}
		return true, "", nil
	})
}

func nodeCondition(client kubernetes.Interface, name string, typ v1.NodeConditionType, want v1.ConditionStatus) func(context.Context) (bool, string, error) {
	return func(ctx context.Context) (bool, string, error) {
		n, err := client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		c := kube.NodeCondition(n, typ)
		return c != nil && c.Status == want, fmt.Sprintf("%s %s=%v", name, typ, c), nil
	}
}

func nodeTainted(client kubernetes.Interface, name string, taint v1.Taint, want bool) func(context.Context) (bool, string, error) {
	return func(ctx context.Context) (bool, string, error) {
		n, err := client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		return (kube.FindTaint(n, taint) != nil) == want, fmt.Sprintf("%s taints %v", name, n.Spec.Taints), nil
	}
}

// tolerations returns NoExecute tolerations of both node failure taints;
// seconds nil tolerates forever.
func tolerations(seconds *int64) []v1.Toleration {
	var out []v1.Toleration
	for _, key := range []string{v1.TaintNodeUnreachable, v1.TaintNodeNotReady} {
		out = append(out, v1.Toleration{Key: key, Operator: v1.TolerationOpExists, Effect: v1.TaintEffectNoExecute, TolerationSeconds: seconds})
	}
	return out
}

func createPod(t *testing.T, client kubernetes.Interface, name, node string, tols []v1.Toleration) {
	t.Helper()
	pod := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: v1.PodSpec{NodeName: node, Tolerations: tols,
			Containers: []v1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}}},
	}
	framework.Eventually(t, 30*time.Second, "pod "+name+" created", func(ctx context.Context) (bool, string, error) {
		_, err := client.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{})
		return err == nil || apierrors.IsAlreadyExists(err), fmt.Sprint(err), nil
	})
}

func podReadyIs(client kubernetes.Interface, name string, want v1.ConditionStatus) func(context.Context) (bool, string, error) {
	return func(ctx context.Context) (bool, string, error) {
		p, err := client.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		c := kube.PodCondition(p, v1.PodReady)
		return c != nil && c.Status == want, fmt.Sprintf("%s Ready=%v", name, c), nil
	}
}

// podEvicted: the pod was deleted by the taint eviction controller. On an
// unreachable node it stays Terminating, since no kubelet confirms.
func podEvicted(client kubernetes.Interface, name string) func(context.Context) (bool, string, error) {
	return func(ctx context.Context) (bool, string, error) {
		p, err := client.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, "", nil
		}
		if err != nil {
			return false, "", err
		}
		if p.DeletionTimestamp == nil {
			return false, name + " not deleted", nil
		}
		c := kube.PodCondition(p, v1.DisruptionTarget)
		if c == nil || c.Reason != "DeletionByTaintManager" || c.Message != "Taint manager: deleting due to NoExecute taint" {
			return false, fmt.Sprintf("%s deleted without the DisruptionTarget condition: %+v", name, c), nil
		}
		return true, "", nil
	}
}

func partition(t *testing.T, m *fakenode.Manager, action fakenode.Action, target fakenode.Target) {
	t.Helper()
	if _, err := m.Apply(framework.Context(t), fakenode.Fault{Action: action, Target: target}); err != nil {
		t.Fatal(err)
	}
}

// TestNodeFailureEvictionAndRecovery: a partitioned node turns Unknown, is
// tainted, its pods are marked NotReady and evicted after their
// tolerationSeconds (0, 3s, never), DaemonSet pods stay, replacements run
// elsewhere; healing lifts the taints.
func TestNodeFailureEvictionAndRecovery(t *testing.T) {
	asServiceAccount(t)
	cfg, client := lifecycleCluster(t)
	m := framework.StartFakeNodes(t, zonedNodes(client, "zone-a=3,zone-b=3", false))
	framework.StartNodeShepherd(t, cfg, fastLifecycle(100), nil)
	names := m.NodeNames()
	waitNodesReady(t, client, names...)
	victim := names[0]
	ctx := framework.Context(t)

	ds := &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: "agent", Namespace: "default"},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "agent"}},
			Template: v1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "agent"}},
				Spec: v1.PodSpec{Containers: []v1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}}}},
		},
	}
	if _, err := client.AppsV1().DaemonSets("default").Create(ctx, ds, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	dep := deployment("web", 2)
	dep.Spec.Template.Spec.Tolerations = tolerations(ptr.To[int64](1))
	dep.Spec.Template.Spec.Affinity = &v1.Affinity{NodeAffinity: &v1.NodeAffinity{PreferredDuringSchedulingIgnoredDuringExecution: []v1.PreferredSchedulingTerm{{
		Weight: 100, Preference: v1.NodeSelectorTerm{MatchExpressions: []v1.NodeSelectorRequirement{{Key: "kubernetes.io/hostname", Operator: v1.NodeSelectorOpIn, Values: []string{victim}}}},
	}}}}
	if _, err := client.AppsV1().Deployments("default").Create(ctx, dep, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	createPod(t, client, "toleration-0", victim, tolerations(ptr.To[int64](0)))
	createPod(t, client, "toleration-3", victim, tolerations(ptr.To[int64](3)))
	createPod(t, client, "toleration-forever", victim, tolerations(nil))
	var dsPod string
	framework.Eventually(t, 60*time.Second, "all pods Running", func(ctx context.Context) (bool, string, error) {
		pods, err := client.CoreV1().Pods("default").List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, "", err
		}
		running := 0
		for _, p := range pods.Items {
			if kube.PodReady(&p) {
				running++
			}
			if p.Labels["app"] == "agent" && p.Spec.NodeName == victim {
				dsPod = p.Name
			}
		}
		return running == 6+2+3, fmt.Sprintf("%d of 11 pods ready", running), nil
	})

	partition(t, m, fakenode.Partition, fakenode.Target{Nodes: []string{victim}})
	framework.Eventually(t, time.Minute, "victim Unknown", nodeCondition(client, victim, v1.NodeReady, v1.ConditionUnknown))
	framework.Eventually(t, time.Minute, "unreachable NoExecute taint", nodeTainted(client, victim, nodelifecycle.UnreachableTaint, true))
	tainted := kube.FindTaint(getNode(t, client, victim), nodelifecycle.UnreachableTaint).TimeAdded.Time
	framework.Eventually(t, time.Minute, "unreachable NoSchedule taint", nodeTainted(client, victim, v1.Taint{Key: v1.TaintNodeUnreachable, Effect: v1.TaintEffectNoSchedule}, true))
	framework.Eventually(t, time.Minute, "pods NotReady", podReadyIs(client, "toleration-forever", v1.ConditionFalse))
	framework.Eventually(t, time.Minute, "tolerationSeconds 0 evicted at once", podEvicted(client, "toleration-0"))
	framework.Eventually(t, time.Minute, "tolerationSeconds 3 evicted", podEvicted(client, "toleration-3"))
	if d := time.Since(tainted); d < 2*time.Second {
		t.Errorf("pod with tolerationSeconds=3 gone %v after the taint", d)
	}
	framework.Eventually(t, 60*time.Second, "web replacements Running elsewhere", func(ctx context.Context) (bool, string, error) {
		pods, err := client.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=web"})
		if err != nil {
			return false, "", err
		}
		ok := 0
		for _, p := range pods.Items {
			if p.Spec.NodeName != victim && kube.PodReady(&p) && p.DeletionTimestamp == nil {
				ok++
			}
		}
		return ok == 2, fmt.Sprintf("%d of 2 web pods Ready off the victim", ok), nil
	})
	for _, name := range []string{"toleration-forever", dsPod} {
		if _, err := client.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{}); err != nil {
			t.Errorf("pod %s should stay on the failed node: %v", name, err)
		}
	}
	framework.WaitEvents(t, client, "reason=TaintManagerEviction", 1)

	partition(t, m, fakenode.Heal, fakenode.Target{Nodes: []string{victim}})
	framework.Eventually(t, time.Minute, "victim Ready again", nodeCondition(client, victim, v1.NodeReady, v1.ConditionTrue))
	framework.Eventually(t, time.Minute, "taints lifted", func(ctx context.Context) (bool, string, error) {
		n, err := client.CoreV1().Nodes().Get(ctx, victim, metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		return len(n.Spec.Taints) == 0, fmt.Sprint(n.Spec.Taints), nil
	})
	framework.Eventually(t, time.Minute, "kubelet re-posted readiness", podReadyIs(client, "toleration-forever", v1.ConditionTrue))
}

func TestEvictionRateLimitPerZone(t *testing.T) {
	cfg, client := lifecycleCluster(t)
	m := framework.StartFakeNodes(t, zonedNodes(client, "zone-a=6,zone-b=2", false))
	framework.StartNodeShepherd(t, cfg, fastLifecycle(0.1), nil)
	names := m.NodeNames()
	waitNodesReady(t, client, names...)
	victims := names[:2] // zone-a: 2 of 6 down stays Normal, rate 0.1/s
	partition(t, m, fakenode.Partition, fakenode.Target{Nodes: victims})
	var times []time.Time
	for _, v := range victims {
		framework.Eventually(t, 30*time.Second, "taint on "+v, nodeTainted(client, v, nodelifecycle.UnreachableTaint, true))
		times = append(times, kube.FindTaint(getNode(t, client, v), nodelifecycle.UnreachableTaint).TimeAdded.Time)
	}
	gap := times[1].Sub(times[0])
	if gap < 0 {
		gap = -gap
	}
	// timeAdded has whole seconds: 0.1 nodes/s means at least 10s - 1s
	// between taints. Only the limit is asserted: a busy machine may taint
	// the second node later, never sooner; the wait's deadline above fails
	// a rate far too slow.
	t.Logf("taints %v apart", gap)
	if gap < 9*time.Second {
		t.Errorf("taints %v apart, want at least 10s at --node-eviction-rate=0.1", gap)
	}
}

func TestPartialDisruptionStopsTainting(t *testing.T) {
	cfg, client := lifecycleCluster(t)
	m := framework.StartFakeNodes(t, zonedNodes(client, "zone-a=4,zone-b=4", false))
	ns := framework.StartNodeShepherd(t, cfg, fastLifecycle(0.1), nil)
	names := m.NodeNames()
	waitNodesReady(t, client, names...)
	partition(t, m, fakenode.Partition, fakenode.Target{Nodes: names[:3]}) // 3 of 4 in zone-a
	var since time.Time
	framework.Eventually(t, time.Minute, "zone-a partially disrupted for 12s", func(context.Context) (bool, string, error) {
		partial := ns.Metric(t, "nodeshepherd_nodelifecycle_zone_state", map[string]string{"zone": "zone-a", "state": "PartialDisruption"}) == 1
		if !partial {
			since = time.Time{}
			return false, "not partial", nil
		}
		if since.IsZero() {
			since = time.Now()
		}
		// Long enough for a second taint at the normal 0.1 nodes/s.
		return time.Since(since) > 12*time.Second, "partial since " + since.String(), nil
	})
	tainted := 0
	for _, n := range names[:3] {
		if kube.FindTaint(getNode(t, client, n), nodelifecycle.UnreachableTaint) != nil {
			tainted++
		}
		if c := kube.NodeCondition(getNode(t, client, n), v1.NodeReady); c.Status != v1.ConditionUnknown {
			t.Errorf("%s: Ready %s, want Unknown", n, c.Status)
		}
	}
	// The first node to expire is judged with the two others, already
	// overdue, counted: its zone is partially disrupted (4 nodes ≤ 50: rate
	// 0) from the first decision on, so no node is tainted.
	if tainted > 0 {
		t.Errorf("%d nodes of a partially disrupted small zone got the NoExecute taint, want none", tainted)
	}
	if got := ns.Metric(t, "node_collector_unhealthy_nodes_in_zone", map[string]string{"zone": "zone-a"}); got != 3 {
		t.Errorf("unhealthy_nodes_in_zone = %v, want 3", got)
	}
}

func TestAllZonesDownStopsEvictions(t *testing.T) {
	cfg, client := lifecycleCluster(t)
	m := framework.StartFakeNodes(t, zonedNodes(client, "zone-a=2,zone-b=2", false))
	ns := framework.StartNodeShepherd(t, cfg, fastLifecycle(100), nil)
	names := m.NodeNames()
	waitNodesReady(t, client, names...)
	for _, n := range names {
		createPod(t, client, "p-"+n, n, tolerations(ptr.To[int64](5)))
	}
	for _, n := range names {
		framework.Eventually(t, time.Minute, "pod ready", podReadyIs(client, "p-"+n, v1.ConditionTrue))
	}
	partition(t, m, fakenode.Partition, fakenode.Target{All: true})
	full := func(zone string) func(context.Context) (bool, string, error) {
		return func(context.Context) (bool, string, error) {
			v := ns.Metric(t, "nodeshepherd_nodelifecycle_zone_state", map[string]string{"zone": zone, "state": "FullDisruption"})
			return v == 1, fmt.Sprintf("%s full=%v", zone, v), nil
		}
	}
	framework.Eventually(t, time.Minute, "zone-a fully disrupted", full("zone-a"))
	framework.Eventually(t, time.Minute, "zone-b fully disrupted", full("zone-b"))
	for _, n := range names {
		framework.Eventually(t, time.Minute, "no NoExecute taint in master disruption mode", nodeTainted(client, n, nodelifecycle.UnreachableTaint, false))
	}
	// Longer than the pods' 5s tolerations: nothing is evicted.
	entered := time.Now()
	framework.Eventually(t, 20*time.Second, "7s in master disruption mode", func(context.Context) (bool, string, error) {
		return time.Since(entered) > 7*time.Second, "", nil
	})
	for _, n := range names {
		if ok, state, _ := podEvicted(client, "p-"+n)(framework.Context(t)); ok {
			t.Errorf("pod on %s evicted while every zone was down (%s)", n, state)
		}
		if kube.FindTaint(getNode(t, client, n), nodelifecycle.UnreachableTaint) != nil {
			t.Errorf("%s tainted while every zone was down", n)
		}
		// Static stability: the pods keep serving, so they stay Ready.
		if ok, state, _ := podReadyIs(client, "p-"+n, v1.ConditionTrue)(framework.Context(t)); !ok {
			t.Errorf("pod on %s marked NotReady while every zone was down: %s", n, state)
		}
	}
	if v := ns.Metric(t, "nodeshepherd_nodelifecycle_static_stability_active", nil); v != 1 {
		t.Errorf("static_stability_active = %v while every zone is down, want 1", v)
	}
	if n, msgs := framework.WaitEvents(t, client, "reason="+nodelifecycle.EventAllNodesSilent, 1); n != 1 {
		t.Errorf("%d %s events, want one for the one change of state: %v", n, nodelifecycle.EventAllNodesSilent, msgs)
	}

	// zone-a comes back: the mode ends, zone-b (still fully disrupted while
	// another zone is healthy) is tainted at the normal rate again and its pods
	// are evicted after their tolerations; zone-a's pods stay.
	partition(t, m, fakenode.Heal, fakenode.Target{Zone: "zone-a"})
	framework.Eventually(t, time.Minute, "zone-a Normal again", func(context.Context) (bool, string, error) {
		v := ns.Metric(t, "nodeshepherd_nodelifecycle_zone_state", map[string]string{"zone": "zone-a", "state": "Normal"})
		return v == 1, fmt.Sprintf("normal=%v", v), nil
	})
	framework.WaitEvents(t, client, "reason="+nodelifecycle.EventNodesHeartbeating, 1)
	if v := ns.Metric(t, "nodeshepherd_nodelifecycle_static_stability_active", nil); v != 0 {
		t.Errorf("static_stability_active = %v after zone-a came back, want 0", v)
	}
	for _, n := range names {
		if m.Zone(n) == "zone-b" {
			framework.Eventually(t, time.Minute, "zone-b node tainted after the mode ends", nodeTainted(client, n, nodelifecycle.UnreachableTaint, true))
			framework.Eventually(t, time.Minute, "zone-b pod evicted", podEvicted(client, "p-"+n))
		}
	}
	for _, n := range names {
		if m.Zone(n) == "zone-a" {
			if ok, _, _ := podEvicted(client, "p-"+n)(framework.Context(t)); ok {
				t.Errorf("pod on recovered node %s evicted", n)
			}
		}
	}
}

func TestExcludedNodeIsTaintedButNotCounted(t *testing.T) {
	cfg, client := lifecycleCluster(t)
	m := framework.StartFakeNodes(t, zonedNodes(client, "zone-a=3,zone-b=3", false))
	names := m.NodeNames()
	excluded := names[0]
	ctx := framework.Context(t)
	patch := []byte(`{"metadata":{"labels":{"node.kubernetes.io/exclude-disruption":""}}}`)
	if _, err := client.CoreV1().Nodes().Patch(ctx, excluded, "application/merge-patch+json", patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	ns := framework.StartNodeShepherd(t, cfg, fastLifecycle(100), nil)
	waitNodesReady(t, client, names...)
	framework.Eventually(t, time.Minute, "zone-a counts 2 nodes", func(context.Context) (bool, string, error) {
		v := ns.Metric(t, "node_collector_zone_size", map[string]string{"zone": "zone-a"})
		return v == 2, fmt.Sprintf("zone_size %v", v), nil
	})
	partition(t, m, fakenode.Partition, fakenode.Target{Nodes: []string{excluded}})
	framework.Eventually(t, time.Minute, "excluded node still tainted", nodeTainted(client, excluded, nodelifecycle.UnreachableTaint, true))
	if v := ns.Metric(t, "node_collector_unhealthy_nodes_in_zone", map[string]string{"zone": "zone-a"}); v != 0 {
		t.Errorf("excluded node counted as unhealthy: %v", v)
	}
}

func TestLeaseOnlyHeartbeatsKeepNodeHealthy(t *testing.T) {
	cfg, client := lifecycleCluster(t)
	nodes := fastNodes(client, 2, false)
	nodes.NodeStatusReportFrequency = time.Hour // status posted once, then only leases
	m := framework.StartFakeNodes(t, nodes)
	framework.StartNodeShepherd(t, cfg, fastLifecycle(100), nil)
	names := m.NodeNames()
	waitNodesReady(t, client, names...)
	// 20 renewals at 500ms is over three grace periods without NodeStatus.
	waitRenewals(t, client, names[0], 20)
	for _, n := range names {
		node := getNode(t, client, n)
		if !kube.NodeReady(node) || len(node.Spec.Taints) > 0 {
			t.Errorf("%s with a renewed lease: ready=%v taints=%v", n, kube.NodeReady(node), node.Spec.Taints)
		}
		if hb := kube.NodeCondition(node, v1.NodeReady).LastHeartbeatTime; time.Since(hb.Time) < 2*testGrace {
			t.Errorf("%s: NodeStatus heartbeat %v ago; the test needs a stale one", n, time.Since(hb.Time))
		}
	}
}

func TestStartupGraceForNodeWithoutReady(t *testing.T) {
	cfg, client := lifecycleCluster(t)
	framework.StartNodeShepherd(t, cfg, fastLifecycle(100), nil)
	ctx := framework.Context(t)
	// creationTimestamp is truncated to the second: create the node late in
	// a second, where a grace period measured from the stamp would end up
	// to 0.9 s early.
	now := time.Now()
	<-time.After(now.Truncate(time.Second).Add(1900 * time.Millisecond).Sub(now))
	callStart := time.Now()
	node, err := client.CoreV1().Nodes().Create(ctx, &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "silent"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// Just before the startup grace period can have ended (the node was
	// created after callStart), it must not be Unknown yet.
	<-time.After(time.Until(callStart.Add(testStartupGrace - 100*time.Millisecond)))
	if c := kube.NodeCondition(getNode(t, client, "silent"), v1.NodeReady); c != nil && c.Status == v1.ConditionUnknown {
		t.Errorf("marked Unknown before --node-startup-grace-period (%v) passed since its creation", testStartupGrace)
	}
	framework.Eventually(t, time.Minute, "conditions NeverUpdated", nodeCondition(client, "silent", v1.NodeReady, v1.ConditionUnknown))
	n := getNode(t, client, "silent")
	for _, typ := range []v1.NodeConditionType{v1.NodeReady, v1.NodeMemoryPressure, v1.NodeDiskPressure, v1.NodePIDPressure} {
		c := kube.NodeCondition(n, typ)
		if c == nil || c.Reason != "NodeStatusNeverUpdated" || c.Message != "Kubelet never posted node status." {
			t.Errorf("%s: %+v", typ, c)
		}
	}
	after := kube.NodeCondition(n, v1.NodeReady).LastTransitionTime.Sub(node.CreationTimestamp.Time)
	// Whole-second timestamps: the startup grace (5s), not the grace (3s).
	if after < testStartupGrace-time.Second {
		t.Errorf("marked Unknown %v after creation, before the startup grace period %v", after, testStartupGrace)
	}
}

func TestConditionAndUnschedulableNoScheduleTaints(t *testing.T) {
	cfg, client := lifecycleCluster(t)
	m := framework.StartFakeNodes(t, fastNodes(client, 2, false))
	framework.StartNodeShepherd(t, cfg, fastLifecycle(100), nil)
	node := m.NodeNames()[0]
	waitNodesReady(t, client, m.NodeNames()...)
	ctx := framework.Context(t)
	foreign := v1.Taint{Key: "example.com/dedicated", Value: "infra", Effect: v1.TaintEffectNoSchedule}
	addTaint(t, client, node, foreign)
	memory := v1.Taint{Key: v1.TaintNodeMemoryPressure, Effect: v1.TaintEffectNoSchedule}
	if _, err := m.Apply(ctx, fakenode.Fault{Action: fakenode.SetCondition, Target: fakenode.Target{Nodes: []string{node}},
		Condition: &fakenode.Condition{Type: v1.NodeMemoryPressure, Status: v1.ConditionTrue}}); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, time.Minute, "memory-pressure taint", nodeTainted(client, node, memory, true))
	if rec, ok := owner.Of(getNode(t, client, node), owner.TaintKey(memory)); !ok || rec.Controller != nodelifecycle.Name ||
		!strings.HasPrefix(rec.Why, "MemoryPressure is True since ") || rec.Until != "MemoryPressure is False" {
		t.Errorf("owner record of the memory-pressure taint: %+v, %v", rec, ok)
	}
	if _, ok := owner.Of(getNode(t, client, node), owner.TaintKey(foreign)); ok {
		t.Errorf("someone else's taint got an owner record")
	}
	cordon := []byte(`{"spec":{"unschedulable":true}}`)
	if _, err := client.CoreV1().Nodes().Patch(ctx, node, "application/merge-patch+json", cordon, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	unschedulable := v1.Taint{Key: v1.TaintNodeUnschedulable, Effect: v1.TaintEffectNoSchedule}
	framework.Eventually(t, time.Minute, "unschedulable taint", nodeTainted(client, node, unschedulable, true))

	if _, err := m.Apply(ctx, fakenode.Fault{Action: fakenode.ClearCondition, Target: fakenode.Target{Nodes: []string{node}},
		Condition: &fakenode.Condition{Type: v1.NodeMemoryPressure}}); err != nil {
		t.Fatal(err)
	}
	uncordon := []byte(`{"spec":{"unschedulable":false}}`)
	if _, err := client.CoreV1().Nodes().Patch(ctx, node, "application/merge-patch+json", uncordon, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, time.Minute, "owned taints lifted, foreign kept", func(ctx context.Context) (bool, string, error) {
		n, err := client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		_, recs := n.Annotations[owner.Annotation]
		return len(n.Spec.Taints) == 1 && n.Spec.Taints[0].Key == foreign.Key && !recs, fmt.Sprint(n.Spec.Taints, n.Annotations[owner.Annotation]), nil
	})
	if got := getNode(t, client, node).Labels["beta.kubernetes.io/os"]; got != "linux" {
		t.Errorf("beta os label = %q, want it reconciled to linux", got)
	}
}

// TestTaintSwapAndCancelledEviction: an unreachable node whose kubelet comes
// back reporting NotReady gets the not-ready taint in place of the
// unreachable one at once; when the node is Ready again, the pending
// eviction of a pod that tolerated the taint for a while is cancelled.
func TestTaintSwapAndCancelledEviction(t *testing.T) {
	cfg, client := lifecycleCluster(t)
	m := framework.StartFakeNodes(t, fastNodes(client, 4, false))
	framework.StartNodeShepherd(t, cfg, fastLifecycle(100), nil)
	names := m.NodeNames()
	node := names[0]
	waitNodesReady(t, client, names...)
	createPod(t, client, "patient", node, tolerations(ptr.To[int64](600)))
	framework.Eventually(t, time.Minute, "pod Ready", podReadyIs(client, "patient", v1.ConditionTrue))

	target := fakenode.Target{Nodes: []string{node}}
	partition(t, m, fakenode.Partition, target)
	framework.Eventually(t, time.Minute, "unreachable taint", nodeTainted(client, node, nodelifecycle.UnreachableTaint, true))
	// The kubelet comes back but reports Ready=False.
	if _, err := m.Apply(framework.Context(t), fakenode.Fault{Action: fakenode.SetCondition, Target: target,
		Condition: &fakenode.Condition{Type: v1.NodeReady, Status: v1.ConditionFalse}}); err != nil {
		t.Fatal(err)
	}
	partition(t, m, fakenode.Heal, target)
	framework.Eventually(t, time.Minute, "not-ready taint in place of unreachable", func(ctx context.Context) (bool, string, error) {
		n, err := client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		return kube.FindTaint(n, nodelifecycle.NotReadyTaint) != nil && kube.FindTaint(n, nodelifecycle.UnreachableTaint) == nil, fmt.Sprint(n.Spec.Taints), nil
	})
	if _, err := m.Apply(framework.Context(t), fakenode.Fault{Action: fakenode.ClearCondition, Target: target,
		Condition: &fakenode.Condition{Type: v1.NodeReady}}); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, time.Minute, "not-ready taint lifted", nodeTainted(client, node, nodelifecycle.NotReadyTaint, false))
	framework.Eventually(t, time.Minute, "pending eviction cancelled", func(ctx context.Context) (bool, string, error) {
		evs, err := client.CoreV1().Events("default").List(ctx, metav1.ListOptions{FieldSelector: "reason=TaintManagerEviction,involvedObject.name=patient"})
		if err != nil {
			return false, "", err
		}
		for _, e := range evs.Items {
			if e.Message == "Cancelling deletion of Pod default/patient" {
				return true, "", nil
			}
		}
		return false, fmt.Sprintf("%d events", len(evs.Items)), nil
	})
	if ok, _, _ := podEvicted(client, "patient")(framework.Context(t)); ok {
		t.Error("patient pod evicted")
	}
}

// TestAllZonesDownWithoutStaticStability: --static-stability=false restores
// upstream's behaviour: every pod is marked NotReady when every zone is down.
func TestAllZonesDownWithoutStaticStability(t *testing.T) {
	cfg, client := lifecycleCluster(t)
	m := framework.StartFakeNodes(t, zonedNodes(client, "zone-a=2,zone-b=2", false))
	ctrl := fastLifecycle(100)
	ctrl.NodeLifecycle.StaticStability = false
	ns := framework.StartNodeShepherd(t, cfg, ctrl, nil)
	names := m.NodeNames()
	waitNodesReady(t, client, names...)
	for _, n := range names {
		createPod(t, client, "p-"+n, n, tolerations(nil))
	}
	for _, n := range names {
		framework.Eventually(t, time.Minute, "pod ready", podReadyIs(client, "p-"+n, v1.ConditionTrue))
	}
	partition(t, m, fakenode.Partition, fakenode.Target{All: true})
	for _, n := range names {
		framework.Eventually(t, time.Minute, "pod marked NotReady", podReadyIs(client, "p-"+n, v1.ConditionFalse))
	}
	if v := ns.Metric(t, "nodeshepherd_nodelifecycle_static_stability_active", nil); v != 0 {
		t.Errorf("static_stability_active = %v with --static-stability=false", v)
	}
}

// TestCorrelatedSilenceSpreadOverSeconds: three of five nodes of a zone fall
// silent about 2 s apart. Judged each at its own expiry, the first would
// find its zone Normal; counted with the two others, already overdue, the
// zone is PartialDisruption from the first decision on, and nothing is
// tainted. The grace period is long next to the spread: on a busy machine
// the 2 s (measured in a healthy node's renewals) stretch, and a node
// silent for less than its heartbeat interval plus --heartbeat-overdue-slack
// when the first expires rightly does not count yet (a loaded run saw 6 s).
func TestCorrelatedSilenceSpreadOverSeconds(t *testing.T) {
	cfg, client := lifecycleCluster(t)
	m := framework.StartFakeNodes(t, zonedNodes(client, "zone-a=5,zone-b=3", false))
	ctrl := fastLifecycle(100)
	ctrl.NodeLifecycle.NodeMonitorGracePeriod = 20 * time.Second
	ns := framework.StartNodeShepherd(t, cfg, ctrl, nil)
	names := m.NodeNames()
	waitNodesReady(t, client, names...)
	var silent []string
	for _, n := range names {
		if m.Zone(n) == "zone-a" && len(silent) < 3 {
			silent = append(silent, n)
		}
	}
	for i, n := range silent {
		if i > 0 {
			waitRenewals(t, client, names[len(names)-1], 4) // 2 s of renewals of a healthy node
		}
		partition(t, m, fakenode.Partition, fakenode.Target{Nodes: []string{n}})
	}
	for _, n := range silent {
		framework.Eventually(t, 90*time.Second, n+" Unknown", nodeCondition(client, n, v1.NodeReady, v1.ConditionUnknown))
	}
	passesAfter(t, ns, 3)
	for _, n := range silent {
		if kube.FindTaint(getNode(t, client, n), nodelifecycle.UnreachableTaint) != nil {
			t.Errorf("%s tainted NoExecute although its zone is partially disrupted once every silent node is counted", n)
		}
	}
	if v := ns.Metric(t, "nodeshepherd_nodelifecycle_zone_state", map[string]string{"zone": "zone-a", "state": "PartialDisruption"}); v != 1 {
		t.Errorf("zone-a not in PartialDisruption")
	}
	if v := ns.Metric(t, "node_collector_evictions_total", map[string]string{"zone": "zone-a"}); v != 0 {
		t.Errorf("node_collector_evictions_total{zone-a} = %v, want 0", v)
	}
}
