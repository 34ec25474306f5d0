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
	"k8s.io/utils/ptr"

	"github.com/nodeshepherd/nodeshepherd/pkg/controller/nodelifecycle"
	"github.com/nodeshepherd/nodeshepherd/pkg/controller/tainteviction"
	"github.com/nodeshepherd/nodeshepherd/pkg/controlplane"
	"github.com/nodeshepherd/nodeshepherd/pkg/fakenode"
	"github.com/nodeshepherd/nodeshepherd/pkg/kube"
	"github.com/nodeshepherd/nodeshepherd/pkg/manager"
	"github.com/nodeshepherd/nodeshepherd/test/framework"
)

// stalledViewCluster is a control plane (API server and etcd), fake nodes in
// two zones renewing their Leases every 500ms, and nodeshepherd's controllers
// (3s grace, 1s monitor period) talking to the API server through a fault
// proxy; the fake nodes and the test talk to it directly.
func stalledViewCluster(t *testing.T, cpc controlplane.Config, ctrls ...string) (kubernetes.Interface, *fakenode.Manager, *framework.FaultProxy, *framework.NodeShepherd) {
	cp := framework.StartControlPlane(t, cpc)
	client := framework.Client(t, cp)
	m := framework.StartFakeNodes(t, zonedNodes(client, "zone-a=2,zone-b=2", false))
	proxy := framework.StartFaultProxy(t, cp.RESTConfig())
	ns := framework.StartNodeShepherd(t, proxy.RESTConfig(cp.RESTConfig()), fastLifecycle(100), func(o *manager.Options) { o.Controllers = ctrls })
	waitNodesReady(t, client, m.NodeNames()...)
	return client, m, proxy, ns
}

// stallLeaseWatch holds every Lease watch of the controllers open without
// events from now on (the one open now is cut, so that its successor is
// held), and waits until a held watch is in place.
func stallLeaseWatch(t *testing.T, proxy *framework.FaultProxy) {
	t.Helper()
	proxy.Inject(framework.FaultRule{Name: "stall-lease-watch", Resource: "leases", Watch: true, Kind: framework.FaultStall})
	proxy.DropWatches()
	framework.Eventually(t, 60*time.Second, "the controllers' Lease watch held open without events", func(context.Context) (bool, string, error) {
		n := proxy.Injected("stall-lease-watch")
		return n >= 1, fmt.Sprintf("%d Lease watches held (%s)", n, proxy), nil
	})
}

// freshLeaseReads counts the fresh reads of node Leases sent through the
// proxy: LISTs of kube-node-lease (not watches), and GETs of one node's
// Lease (the point reads of a few suspects).
func freshLeaseReads(proxy *framework.FaultProxy, since time.Time) (lists, gets int) {
	read := func(e framework.ProxiedRequest) bool {
		return !e.At.Before(since) && e.Resource == "leases" && !e.Watch && e.Method == http.MethodGet &&
			strings.Contains(e.Path, "/namespaces/"+v1.NamespaceNodeLease+"/")
	}
	lists = proxy.Count(func(e framework.ProxiedRequest) bool { return read(e) && e.Name == "" })
	gets = proxy.Count(func(e framework.ProxiedRequest) bool { return read(e) && e.Name != "" })
	return lists, gets
}

// TestStalledLeaseWatchLooksNothingLikeADeadCluster (issue 30, point 2): the
// controller's Lease watch stays open but delivers nothing, while the API
// server answers and every node renews its Lease. For four grace periods
// (12s) after the stall takes hold: no node is Ready≠True, no node carries a
// NoExecute taint, no zone is FullDisruption (zone_state gauge), the stale
// view is counted, and the controller's fresh reads stay within one LIST a
// second and one GET per node per renewal interval. Then a node really fails under the same stall: it is still marked
// Unknown and tainted, and the others stay Ready.
func TestStalledLeaseWatchLooksNothingLikeADeadCluster(t *testing.T) {
	client, m, proxy, ns := stalledViewCluster(t, controlplane.Config{}, nodelifecycle.Name)
	names := m.NodeNames()
	stallLeaseWatch(t, proxy)
	stalled := time.Now()
	window := 4 * testGrace
	framework.Eventually(t, window+60*time.Second, fmt.Sprintf("%v of a stalled Lease watch without a node judged", window), func(ctx context.Context) (bool, string, error) {
		nodes, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, "", err
		}
		for i := range nodes.Items {
			n := &nodes.Items[i]
			if r := kube.NodeCondition(n, v1.NodeReady); r == nil || r.Status != v1.ConditionTrue {
				return false, "", fmt.Errorf("%v into the stall, %s is Ready=%v although it renews its Lease", time.Since(stalled).Round(time.Millisecond), n.Name, r)
			}
			for _, taint := range []v1.Taint{nodelifecycle.UnreachableTaint, nodelifecycle.NotReadyTaint} {
				if kube.FindTaint(n, taint) != nil {
					return false, "", fmt.Errorf("%v into the stall, %s carries %s", time.Since(stalled).Round(time.Millisecond), n.Name, taint.ToString())
				}
			}
		}
		for _, zone := range []string{"zone-a", "zone-b"} {
			if v := ns.Metric(t, "nodeshepherd_nodelifecycle_zone_state", map[string]string{"zone": zone, "state": "FullDisruption"}); v != 0 {
				return false, "", fmt.Errorf("%v into the stall, %s is FullDisruption", time.Since(stalled).Round(time.Millisecond), zone)
			}
		}
		return time.Since(stalled) > window, fmt.Sprintf("%v into the stall", time.Since(stalled).Round(time.Millisecond)), nil
	})
	if v := ns.Metric(t, "nodeshepherd_nodelifecycle_stale_view_confirmations_total", nil); v < 1 {
		t.Errorf("stale_view_confirmations_total = %v after %v of a stalled Lease watch, want at least 1", v, window)
	}
	elapsed := time.Since(stalled)
	lists, gets := freshLeaseReads(proxy, stalled)
	mostLists, mostGets := int(elapsed/time.Second)+2, len(names)*(int(elapsed/(500*time.Millisecond))+2)
	if lists+gets < 1 || lists > mostLists || gets > mostGets {
		t.Errorf("%d fresh Lease LISTs and %d GETs in %v, want at least one read, at most %d LISTs (one a second) and %d GETs (one per node per renewal)",
			lists, gets, elapsed.Round(time.Millisecond), mostLists, mostGets)
	}
	if n := proxy.Injected("stall-lease-watch"); n < 1 {
		t.Fatalf("the Lease watch was not held (%s)", proxy)
	}

	// A real failure under the same stall is still detected.
	dead := names[0]
	partition(t, m, fakenode.Partition, fakenode.Target{Nodes: []string{dead}})
	framework.Eventually(t, 30*time.Second, dead+" Unknown on a stalled view", nodeCondition(client, dead, v1.NodeReady, v1.ConditionUnknown))
	framework.Eventually(t, 30*time.Second, dead+" tainted on a stalled view", nodeTainted(client, dead, nodelifecycle.UnreachableTaint, true))
	for _, n := range names[1:] {
		if ok, state, _ := nodeCondition(client, n, v1.NodeReady, v1.ConditionTrue)(framework.Context(t)); !ok {
			t.Errorf("%s not Ready under the stall: %s", n, state)
		}
	}
}

// TestJudgedNodeKeepsItsCountdownAcrossAllZonesOutage (issue 30, point 2):
// a node dies and gets unreachable:NoExecute with timeAdded T0; a pod on it
// tolerates that for 20s. Then every node goes silent: every zone is
// FullDisruption, the taint is stripped (upstream's parity) and the pod is
// not evicted, past T0+20s. When zone-b comes back the mode ends and the
// dead node has its taint back with timeAdded exactly T0 (it is not
// restarted); its Ready condition is still the Unknown of before (same
// lastTransitionTime); and its pod, whose 20s ran out during the outage, is
// evicted less than 20s after the taint is back (with a restarted
// countdown it would stay 20s more).
func TestJudgedNodeKeepsItsCountdownAcrossAllZonesOutage(t *testing.T) {
	const tolerate = 20
	// kube-controller-manager (without the controllers nodeshepherd
	// replaces) creates the default ServiceAccount pods need.
	client, m, _, ns := stalledViewCluster(t, controlplane.Config{ControllerManager: true}, nodelifecycle.Name, tainteviction.Name)
	var dead string
	for _, n := range m.NodeNames() {
		if m.Zone(n) == "zone-a" {
			dead = n
			break
		}
	}
	createPod(t, client, "p-dead", dead, tolerations(ptr.To[int64](tolerate)))
	partition(t, m, fakenode.Partition, fakenode.Target{Nodes: []string{dead}})
	framework.Eventually(t, 30*time.Second, dead+" tainted", nodeTainted(client, dead, nodelifecycle.UnreachableTaint, true))
	first := kube.FindTaint(getNode(t, client, dead), nodelifecycle.UnreachableTaint)
	if first.TimeAdded == nil {
		t.Fatalf("%s: taint %s without timeAdded", dead, first.ToString())
	}
	t0 := *first.TimeAdded
	transition := kube.NodeCondition(getNode(t, client, dead), v1.NodeReady).LastTransitionTime

	partition(t, m, fakenode.Partition, fakenode.Target{All: true})
	for _, zone := range []string{"zone-a", "zone-b"} {
		framework.Eventually(t, 30*time.Second, zone+" FullDisruption", func(context.Context) (bool, string, error) {
			v := ns.Metric(t, "nodeshepherd_nodelifecycle_zone_state", map[string]string{"zone": zone, "state": "FullDisruption"})
			return v == 1, fmt.Sprintf("%s FullDisruption=%v", zone, v), nil
		})
	}
	framework.Eventually(t, 30*time.Second, dead+"'s taint stripped in the all-zones mode", nodeTainted(client, dead, nodelifecycle.UnreachableTaint, false))
	// Stay in the mode until the pod's toleration, counted from T0, has run out.
	framework.Eventually(t, 3*tolerate*time.Second, "the pod's toleration run out during the outage", func(ctx context.Context) (bool, string, error) {
		if ok, _, _ := podEvicted(client, "p-dead")(ctx); ok {
			return false, "", fmt.Errorf("p-dead evicted while every zone was down")
		}
		return time.Since(t0.Time) > (tolerate+2)*time.Second, fmt.Sprintf("%v since T0", time.Since(t0.Time).Round(time.Second)), nil
	})

	partition(t, m, fakenode.Heal, fakenode.Target{Zone: "zone-b"})
	var back time.Time
	framework.Eventually(t, 30*time.Second, dead+"'s taint back after the all-zones mode", func(ctx context.Context) (bool, string, error) {
		n, err := client.CoreV1().Nodes().Get(ctx, dead, metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		taint := kube.FindTaint(n, nodelifecycle.UnreachableTaint)
		if taint == nil {
			return false, fmt.Sprintf("taints %v", n.Spec.Taints), nil
		}
		back = time.Now()
		if taint.TimeAdded == nil || !taint.TimeAdded.Equal(&t0) {
			return false, "", fmt.Errorf("%s's unreachable taint came back with timeAdded %v, want %v (T0, its countdown not restarted)", dead, taint.TimeAdded, t0)
		}
		return true, "", nil
	})
	if r := kube.NodeCondition(getNode(t, client, dead), v1.NodeReady); r.Status != v1.ConditionUnknown || !r.LastTransitionTime.Equal(&transition) {
		t.Errorf("%s Ready=%s since %v after the mode, want Unknown since %v", dead, r.Status, r.LastTransitionTime, transition)
	}
	framework.Eventually(t, 60*time.Second, "p-dead evicted", podEvicted(client, "p-dead"))
	if after := time.Since(back); after >= tolerate*time.Second {
		t.Errorf("p-dead evicted %v after its node's taint came back: its %ds toleration was counted again", after.Round(time.Second), tolerate)
	}
}
