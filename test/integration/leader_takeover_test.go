package integration

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"github.com/nodeshepherd/nodeshepherd/pkg/fakenode"
	"github.com/nodeshepherd/nodeshepherd/pkg/kube"
	"github.com/nodeshepherd/nodeshepherd/test/framework"
)

// takeoverConfig: node lifecycle and taint eviction, a 4 s leader Lease,
// an 8 s grace period, and a tainting rate that taints every node of a
// Normal zone at once: a single misjudged zone shows as a taint.
const takeoverConfig = `apiVersion: nodeshepherd.io/v1alpha1
kind: NodeShepherdConfiguration
manager:
  controllers: [nodelifecycle, tainteviction]
` + fastElection + `shared:
  nodeMonitorPeriod: 1s
nodeLifecycle:
  nodeMonitorGracePeriod: 8s
  nodeStartupGracePeriod: 10s
  nodeEvictionRate: 100
`

// noExecuteWatch records, from before the controllers start, every
// NoExecute taint any node gets and every pod deletion.
type noExecuteWatch struct {
	mu         sync.Mutex
	violations []string
}

func (w *noExecuteWatch) add(node, format string, args ...any) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.violations = append(w.violations, time.Now().Format("15:04:05.000 ")+fmt.Sprintf(format, args...))
}

func (w *noExecuteWatch) seen() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.violations)
}

func watchNoExecute(t *testing.T, client kubernetes.Interface) *noExecuteWatch {
	t.Helper()
	w := &noExecuteWatch{}
	factory := informers.NewSharedInformerFactory(client, 0)
	node := func(obj any) {
		n, ok := obj.(*v1.Node)
		if !ok {
			return
		}
		for _, taint := range n.Spec.Taints {
			if taint.Effect == v1.TaintEffectNoExecute {
				w.add(n.Name, "node %s tainted %s:NoExecute", n.Name, taint.Key)
			}
		}
	}
	pod := func(obj any) {
		if p, ok := obj.(*v1.Pod); ok && p.DeletionTimestamp != nil {
			w.add(p.Spec.NodeName, "pod %s being deleted", p.Name)
		}
	}
	_, _ = factory.Core().V1().Nodes().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: node, UpdateFunc: func(_, obj any) { node(obj) }})
	_, _ = factory.Core().V1().Pods().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: pod, UpdateFunc: func(_, obj any) { pod(obj) },
		DeleteFunc: func(obj any) {
			if p, ok := kube.Untombstone(obj).(*v1.Pod); ok {
				w.add(p.Spec.NodeName, "pod %s deleted", p.Name)
			}
		}})
	// Its own context: Shutdown waits for the informers to stop, and the
	// test's context ends only after this cleanup.
	ctx, cancel := context.WithCancel(framework.Context(t))
	factory.Start(ctx.Done())
	t.Cleanup(func() { cancel(); factory.Shutdown() })
	for typ, ok := range factory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			t.Fatalf("watch of %v did not sync", typ)
		}
	}
	return w
}

// registerSilentNode is a node that joins zone and whose kubelet falls
// silent at once: its Lease (renewed at renewed, 4 s like the fake nodes'),
// then its Node, Ready at that time; nothing is renewed after that. The
// time is the caller's, so that its silence is where the schedule puts it
// however late a busy machine makes the writes.
func registerSilentNode(t *testing.T, client kubernetes.Interface, name, zone string, renewed time.Time) {
	t.Helper()
	ctx := framework.Context(t)
	now := metav1.NewMicroTime(renewed)
	if _, err := client.CoordinationV1().Leases(v1.NamespaceNodeLease).Create(ctx, &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: v1.NamespaceNodeLease},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: ptr.To(name), LeaseDurationSeconds: ptr.To[int32](4), RenewTime: &now},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	hb := metav1.NewTime(now.Time)
	n, err := client.CoreV1().Nodes().Create(ctx, &v1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{v1.LabelTopologyRegion: "region-1", v1.LabelTopologyZone: zone}},
		Status: v1.NodeStatus{Conditions: []v1.NodeCondition{{Type: v1.NodeReady, Status: v1.ConditionTrue, Reason: "KubeletReady",
			LastHeartbeatTime: hb, LastTransitionTime: hb}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if kube.NodeCondition(n, v1.NodeReady) == nil { // the API server dropped the status on create
		n.Status.Conditions = []v1.NodeCondition{{Type: v1.NodeReady, Status: v1.ConditionTrue, Reason: "KubeletReady", LastHeartbeatTime: hb, LastTransitionTime: hb}}
		if _, err := client.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
}

// TestNewLeaderJudgesCorrelatedSilence: two `nodeshepherd run` processes;
// the leader is SIGKILLed, and in each of six zones of five nodes three nodes
// go silent together (their last renewals as their kubelets' phases left
// them, up to a renew interval, 0.5 s, apart; one partition of the three,
// so that no wall-time pause between them can stretch on a busy machine and
// make the zone's first node rightly expire alone), each zone at another
// moment around the standby's
// takeover: just before the kill, while no one leads, the moment the
// standby leads (around its first health pass), 0.5 s and 1.5 s later
// (before or after the first renewals it sees), and, in zone-f, two nodes
// just before a fifth node registers and falls silent at once: first seen
// a pass after the others, it expires after them, and must be counted when
// they do. A seventh zone stays healthy. Every silent node goes Unknown;
// every one of those zones is PartialDisruption (3 of 5: rate 0); no node
// ever gets a NoExecute taint and no pod is deleted.
func TestNewLeaderJudgesCorrelatedSilence(t *testing.T) {
	cp, client := teCluster(t) // no kube-controller-manager; the default ServiceAccount for the pods
	ctx := framework.Context(t)
	nodes := fastNodes(client, 0, false)
	nodes.Zones, _ = fakenode.ParseZones("zone-a=5,zone-b=5,zone-c=5,zone-d=5,zone-e=5,zone-f=4,zone-h=3")
	m := framework.StartFakeNodes(t, nodes)
	silent := map[string][]string{} // zone → the nodes that fall silent, in order
	for _, n := range m.NodeNames() {
		want := 3
		switch m.Zone(n) {
		case "zone-h":
			want = 0
		case "zone-f":
			want = 2 // and the node that joins
		}
		if z := m.Zone(n); len(silent[z]) < want {
			silent[z] = append(silent[z], n)
		}
	}
	// A pod on every node to fall silent, evicted at once by a NoExecute taint.
	for _, z := range slices.Sorted(maps.Keys(silent)) {
		for _, n := range silent[z] {
			createPod(t, client, "p-"+n, n, tolerations(ptr.To[int64](0)))
		}
	}
	for _, ns := range silent {
		for _, n := range ns {
			framework.Eventually(t, 60*time.Second, "pod Ready", podReadyIs(client, "p-"+n, v1.ConditionTrue))
		}
	}
	watch := watchNoExecute(t, client)
	rs := startReplicas(t, cp, takeoverConfig, 2)
	old := rs.waitLeader(30 * time.Second)
	waitNodesReady(t, client, m.NodeNames()...)

	// Each zone's nodes fall silent in one partition: a busy machine can
	// delay a zone as a whole (the moments around the takeover move), never
	// spread its nodes' silence apart.
	goSilent := func(zone string) time.Time {
		at := time.Now()
		partition(t, m, fakenode.Partition, fakenode.Target{Nodes: silent[zone]})
		t.Logf("%s: %v silent", zone, silent[zone])
		return at
	}
	goSilent("zone-a")
	killed := rs.kill(old)
	t.Logf("killed leader %s", old.name)
	time.Sleep(time.Until(killed.Add(2 * time.Second)))
	goSilent("zone-b") // no one leads
	standby := rs.list[0]
	framework.Eventually(t, 30*time.Second, "standby leads", func(context.Context) (bool, string, error) {
		return standby.ns.Metric(t, "nodeshepherd_leader", nil) == 1, "", nil
	})
	leading := time.Now()
	t.Logf("standby %s leads %v after the kill", standby.name, leading.Sub(killed).Round(time.Millisecond))
	goSilent("zone-c")
	time.Sleep(time.Until(leading.Add(500 * time.Millisecond)))
	goSilent("zone-d")
	time.Sleep(time.Until(leading.Add(1500 * time.Millisecond)))
	goSilent("zone-e")
	time.Sleep(time.Until(leading.Add(2500 * time.Millisecond)))
	fSilent := goSilent("zone-f")
	// Its last renewal 0.2 s after the others' silence, whenever the writes land.
	joined := fSilent.Add(200 * time.Millisecond)
	time.Sleep(time.Until(joined))
	registerSilentNode(t, client, "joined-f", "zone-f", joined)
	silent["zone-f"] = append(silent["zone-f"], "joined-f")
	t.Logf("zone-f: joined-f registered and silent")

	// Every silent node is judged (a grace period after its silence), then
	// three more passes of the leader, and the taint eviction controller
	// has had time to act on any taint.
	for _, z := range slices.Sorted(maps.Keys(silent)) {
		for _, n := range silent[z] {
			framework.Eventually(t, 60*time.Second, n+" Unknown", nodeCondition(client, n, v1.NodeReady, v1.ConditionUnknown))
		}
	}
	passesAfter(t, standby.ns, 3)
	framework.Eventually(t, 10*time.Second, "pods of silent nodes marked NotReady", func(context.Context) (bool, string, error) {
		for _, ns := range silent {
			for _, n := range ns {
				if n == "joined-f" {
					continue
				}
				if ok, s, err := podReadyIs(client, "p-"+n, v1.ConditionFalse)(ctx); !ok || err != nil {
					return false, s, err
				}
			}
		}
		return true, "", nil
	})
	for _, z := range slices.Sorted(maps.Keys(silent)) {
		if v := standby.ns.Metric(t, "nodeshepherd_nodelifecycle_zone_state", map[string]string{"zone": z, "state": "PartialDisruption"}); v != 1 {
			t.Errorf("%s not PartialDisruption", z)
		}
	}
	if v := standby.ns.Metric(t, "nodeshepherd_nodelifecycle_zone_state", map[string]string{"zone": "zone-h", "state": "Normal"}); v != 1 {
		t.Errorf("zone-h not Normal")
	}
	if got := watch.seen(); len(got) > 0 {
		t.Errorf("a zone was judged without its silent nodes: %d NoExecute taints or pod deletions:\n%s", len(got), strings.Join(got, "\n"))
	}
}
