package nodelifecycle

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	coordinationv1 "k8s.io/api/coordination/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	testingclock "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/nodeshepherd/nodeshepherd/pkg/controllerutil"
	"github.com/nodeshepherd/nodeshepherd/pkg/kube"
	"github.com/nodeshepherd/nodeshepherd/pkg/nodetopology"
)

// cluster drives the controller's monitor loop step by step on a fake clock:
// nodes renew their Leases every renew until they fall silent, and each
// step runs what the loop runs (health pass when due, then tainting pass).
type cluster struct {
	t        *testing.T
	c        *Controller
	clk      *testingclock.FakeClock
	leases   cache.Store
	nodeSt   cache.Store
	pods     cache.Store
	nodes    []string
	zone     map[string]string
	silentAt map[string]time.Time // zero: heartbeating
	phase    map[string]time.Duration
	lastRnw  map[string]time.Time
	renew    time.Duration
	step     time.Duration // clock step of run
	nextPass time.Time
	tainted  map[string]time.Time // first NoExecute taint seen
	marked   map[string]bool      // nodes whose pods were queued for marking
	client   *fake.Clientset
	// stalled: renewals reach the API (the fake client, which fresh reads
	// list) but not the informer, as with a stalled Lease watch.
	stalled bool
	reg     *prometheus.Registry
}

const testZoneKey = "r:\x00:"

func newCluster(t *testing.T, cfg Config, zones map[string]int) *cluster {
	t.Helper()
	clk := testingclock.NewFakeClock(time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC))
	// NewSimpleClientset, not NewClientset: the field-managed tracker builds a
	// type converter costing ~1 s per test binary under -race, and nothing here
	// uses server-side apply.
	client := fake.NewSimpleClientset()
	cl := &cluster{t: t, clk: clk, zone: map[string]string{},
		silentAt: map[string]time.Time{}, phase: map[string]time.Duration{}, lastRnw: map[string]time.Time{},
		renew: 2 * time.Second, step: 100 * time.Millisecond, tainted: map[string]time.Time{}, marked: map[string]bool{},
		client: client}
	cl.startController(cfg, client)
	nodeStore := cl.nodeSt
	now := metav1.NewTime(clk.Now())
	i := 0
	for _, z := range slices.Sorted(maps.Keys(zones)) {
		for j := 0; j < zones[z]; j++ {
			name := fmt.Sprintf("%s-%02d", z, j)
			n := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, ResourceVersion: "1", UID: types.UID("uid-" + name),
				CreationTimestamp: metav1.NewTime(clk.Now().Add(-time.Hour)),
				Labels:            map[string]string{v1.LabelTopologyRegion: "r", v1.LabelTopologyZone: z}},
				Status: v1.NodeStatus{Conditions: []v1.NodeCondition{{Type: v1.NodeReady, Status: v1.ConditionTrue, LastHeartbeatTime: now, LastTransitionTime: now}}}}
			if err := nodeStore.Add(n); err != nil {
				t.Fatal(err)
			}
			if _, err := client.CoreV1().Nodes().Create(context.Background(), n, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			cl.nodes = append(cl.nodes, name)
			cl.zone[name] = z
			// Renewals spread over the interval, as real kubelets' are.
			cl.phase[name] = time.Duration(i*337) * time.Millisecond % cl.renew
			i++
		}
	}
	return cl
}

// startController builds a controller whose informers' stores the cluster
// fills by hand, as the informers would; it starts with what the previous
// controller's stores held (the API server's state), and no memory.
func (cl *cluster) startController(cfg Config, client kubernetes.Interface) {
	factory := informers.NewSharedInformerFactory(client, 0)
	cl.reg = prometheus.NewRegistry()
	c, err := New(cfg, Deps{Client: client, Nodes: factory.Core().V1().Nodes(), Pods: factory.Core().V1().Pods(),
		Leases: factory.Coordination().V1().Leases(), Registry: cl.reg, Clock: cl.clk,
		Ping: func(context.Context) error { return nil }})
	if err != nil {
		cl.t.Fatal(err)
	}
	nodes, leases, pods := factory.Core().V1().Nodes().Informer().GetStore(), factory.Coordination().V1().Leases().Informer().GetStore(),
		factory.Core().V1().Pods().Informer().GetIndexer()
	if cl.c != nil {
		list, err := client.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{})
		if err != nil {
			cl.t.Fatal(err)
		}
		for i := range list.Items {
			if err := nodes.Add(&list.Items[i]); err != nil {
				cl.t.Fatal(err)
			}
		}
		for _, from := range []struct{ src, dst cache.Store }{{cl.leases, leases}, {cl.pods, pods}} {
			for _, o := range from.src.List() {
				if err := from.dst.Add(o); err != nil {
					cl.t.Fatal(err)
				}
			}
		}
	}
	cl.c, cl.nodeSt, cl.leases, cl.pods, cl.nextPass = c, nodes, leases, pods, cl.clk.Now()
}

// leaderless advances the clock for d with no controller running: the
// leader died and its Lease has not expired yet. Nodes go on renewing.
func (cl *cluster) leaderless(d time.Duration) {
	dead := cl.c
	cl.c = nil
	for end := cl.clk.Now().Add(d); cl.clk.Now().Before(end); cl.clk.Step(cl.step) {
		cl.renewLeases()
	}
	cl.c = dead
}

// takeover replaces the controller by a standby that just won the leader
// election: it starts its informers now and remembers no heartbeat.
func (cl *cluster) takeover() {
	cl.startController(cl.c.cfg, cl.c.client)
}

// register adds a node the way a kubelet joins: its Lease first (renewed
// now), then the Node, Ready unless ready is false (it reports later, see
// postReady). A node silent from now on never renews after that.
func (cl *cluster) register(name, zone string, ready bool) {
	now := cl.clk.Now()
	n := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, ResourceVersion: "1", UID: types.UID("uid-" + name),
		CreationTimestamp: metav1.NewTime(now.Truncate(time.Second)),
		Labels:            map[string]string{v1.LabelTopologyRegion: "r", v1.LabelTopologyZone: zone}}}
	if ready {
		hb := metav1.NewTime(now)
		n.Status.Conditions = []v1.NodeCondition{{Type: v1.NodeReady, Status: v1.ConditionTrue, LastHeartbeatTime: hb, LastTransitionTime: hb}}
	}
	cl.nodes = append(cl.nodes, name)
	cl.zone[name] = zone
	cl.renewLease(name)
	if _, err := cl.c.client.CoreV1().Nodes().Create(context.Background(), n, metav1.CreateOptions{}); err != nil {
		cl.t.Fatal(err)
	}
	if err := cl.nodeSt.Add(n); err != nil {
		cl.t.Fatal(err)
	}
	cl.c.onNode(n)
}

// postReady is a registered node's first Ready status.
func (cl *cluster) postReady(name string) {
	n, err := cl.c.client.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		cl.t.Fatal(err)
	}
	hb := metav1.NewTime(cl.clk.Now())
	n.ResourceVersion = "2"
	n.Status.Conditions = []v1.NodeCondition{{Type: v1.NodeReady, Status: v1.ConditionTrue, LastHeartbeatTime: hb, LastTransitionTime: hb}}
	if _, err := cl.c.client.CoreV1().Nodes().UpdateStatus(context.Background(), n, metav1.UpdateOptions{}); err != nil {
		cl.t.Fatal(err)
	}
	cl.updateNode(n)
}

// updateNode stores a node as the informer would deliver it.
func (cl *cluster) updateNode(n *v1.Node) {
	if err := cl.nodeSt.Update(n); err != nil {
		cl.t.Fatal(err)
	}
	cl.c.onNode(n)
}

// renewLeases renews the lease of every heartbeating node whose renewal is due.
func (cl *cluster) renewLeases() {
	now := cl.clk.Now()
	for _, n := range cl.nodes {
		if s := cl.silentAt[n]; !s.IsZero() && !now.Before(s) {
			continue
		}
		last, ok := cl.lastRnw[n]
		due := last.Add(cl.renew)
		if !ok {
			due = now.Add(-cl.renew).Truncate(cl.renew).Add(cl.phase[n])
		}
		if now.Before(due) {
			continue
		}
		cl.renewLease(n)
	}
}

// renewLease renews a node's Lease now. Its duration is four renewals, as
// a kubelet's (40 s, renewed every 10 s). The renewal reaches the API (the
// fake client, which fresh reads list) and, unless the watch is stalled,
// the informer.
func (cl *cluster) renewLease(n string) {
	now := cl.clk.Now()
	cl.lastRnw[n] = now
	l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: n, Namespace: v1.NamespaceNodeLease},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(n), RenewTime: ptr.To(metav1.NewMicroTime(now)),
			LeaseDurationSeconds: ptr.To(int32(max(4*cl.renew/time.Second, 1)))}}
	leases := cl.client.CoordinationV1().Leases(v1.NamespaceNodeLease)
	if _, err := leases.Update(context.Background(), l, metav1.UpdateOptions{}); err != nil {
		if _, err := leases.Create(context.Background(), l, metav1.CreateOptions{}); err != nil {
			cl.t.Fatal(err)
		}
	}
	if cl.stalled {
		return
	}
	if err := cl.leases.Update(l); err != nil {
		cl.t.Fatal(err)
	}
	if cl.c != nil {
		cl.c.onLease(l)
	}
}

// run advances the clock in steps (100 ms unless set) for d.
func (cl *cluster) run(d time.Duration) {
	ctx := klog.NewContext(context.Background(), logr.Discard())
	end := cl.clk.Now().Add(d)
	for cl.clk.Now().Before(end) {
		cl.renewLeases()
		cl.c.contact.answered(cl.clk.Now())
		cl.c.monitorStep(ctx, &cl.nextPass)
		for cl.c.markQueue.Len() > 0 {
			n, _ := cl.c.markQueue.Get()
			cl.marked[n] = true
			cl.c.markQueue.Done(n)
		}
		for _, n := range cl.nodes {
			if _, seen := cl.tainted[n]; seen {
				continue
			}
			node, err := cl.c.latestNode(n)
			if err != nil {
				cl.t.Fatal(err)
			}
			if kube.FindTaint(node, UnreachableTaint) != nil || kube.FindTaint(node, NotReadyTaint) != nil {
				cl.tainted[n] = cl.clk.Now()
			}
		}
		cl.clk.Step(cl.step)
	}
}

// silence makes nodes stop heartbeating, spread evenly over spread from now.
func (cl *cluster) silence(names []string, spread time.Duration) {
	for i, n := range names {
		at := cl.clk.Now()
		if len(names) > 1 {
			at = at.Add(spread * time.Duration(i) / time.Duration(len(names)-1))
		}
		cl.silentAt[n] = at
	}
}

func (cl *cluster) inZone(z string) []string {
	var out []string
	for _, n := range cl.nodes {
		if cl.zone[n] == z {
			out = append(out, n)
		}
	}
	return out
}

func correlatedConfig() Config {
	cfg := DefaultConfig()
	cfg.NodeMonitorGracePeriod = 20 * time.Second
	cfg.NodeEvictionRate = 1 // fast enough to taint every node of a Normal zone within the test
	cfg.SecondaryNodeEvictionRate = 0.01
	return cfg
}

// TestCorrelatedSilenceRespectsZoneState: several nodes of one zone fall
// silent 0 to 10 s apart. Whenever the zone rules forbid a taint once every
// silent node is counted, the first node to expire is not tainted either
// (nodeshepherd judges each node at its own expiry, and counts the others,
// already overdue, with it). Zones of 4, 5 and 10 nodes; in a small cluster
// (PartialDisruption stops tainting) and in a large one (the secondary rate
// allows one taint per 100 s).
func TestCorrelatedSilenceRespectsZoneState(t *testing.T) {
	for _, size := range []int{4, 5, 10} {
		partial := 3 // the fewest silent nodes that make the zone PartialDisruption
		for float32(partial)/float32(size) < 0.55 {
			partial++
		}
		for _, large := range []bool{false, true} {
			for _, spread := range []time.Duration{0, 3 * time.Second, 10 * time.Second} {
				t.Run(fmt.Sprintf("zone%d/large=%v/silent%d/spread%s", size, large, partial, spread), func(t *testing.T) {
					cfg := correlatedConfig()
					if large {
						cfg.LargeClusterSizeThreshold = size - 1
					}
					cl := newCluster(t, cfg, map[string]int{"a": size, "b": 4})
					cl.run(10 * time.Second)
					cl.silence(cl.inZone("a")[:partial], spread)
					cl.run(spread + cfg.NodeMonitorGracePeriod + 30*time.Second)
					allowed := 0
					if large {
						allowed = 1 // the secondary rate's first token, as upstream's SwapLimiter
					}
					if len(cl.tainted) > allowed {
						t.Errorf("%d nodes tainted NoExecute, the zone rules allow %d: %v", len(cl.tainted), allowed, cl.tainted)
					}
					if got := cl.c.ZoneStates()[testZoneKey+"a"]; got != nodetopology.StatePartialDisruption {
						t.Errorf("zone a is %s, want PartialDisruption", got)
					}
				})
			}
		}
		// One silent node fewer: the zone stays Normal and every silent node
		// is tainted.
		t.Run(fmt.Sprintf("zone%d/silent%d/normal", size, partial-1), func(t *testing.T) {
			cl := newCluster(t, correlatedConfig(), map[string]int{"a": size, "b": 4})
			cl.run(10 * time.Second)
			cl.silence(cl.inZone("a")[:partial-1], 10*time.Second)
			cl.run(10*time.Second + 20*time.Second + 10*time.Second)
			if len(cl.tainted) != partial-1 {
				t.Errorf("%d nodes tainted, want %d: %v", len(cl.tainted), partial-1, cl.tainted)
			}
		})
	}
}

// TestFullySilentZoneTaintedAtNormalRate: a whole zone falls silent while
// another zone is healthy: FullDisruption keeps the normal rate (upstream).
func TestFullySilentZoneTaintedAtNormalRate(t *testing.T) {
	for _, spread := range []time.Duration{0, 10 * time.Second} {
		t.Run(spread.String(), func(t *testing.T) {
			cfg := correlatedConfig()
			cl := newCluster(t, cfg, map[string]int{"a": 5, "b": 4})
			cl.run(10 * time.Second)
			cl.silence(cl.inZone("a"), spread)
			cl.run(spread + cfg.NodeMonitorGracePeriod + 15*time.Second)
			if len(cl.tainted) != 5 {
				t.Errorf("%d nodes tainted, want the 5 of the silent zone: %v", len(cl.tainted), cl.tainted)
			}
			for n, at := range cl.tainted {
				if expiry := cl.lastRnw[n].Add(cfg.NodeMonitorGracePeriod); at.Before(expiry) {
					t.Errorf("%s tainted %v before its grace period ended", n, expiry.Sub(at))
				}
			}
			if got := cl.c.ZoneStates()[testZoneKey+"a"]; got != nodetopology.StateFullDisruption {
				t.Errorf("zone a is %s, want FullDisruption", got)
			}
		})
	}
}

// TestSingleSilentNodeTaintedAtGraceExpiry: fast detection is kept for a
// lone failure in a healthy zone: Unknown and tainted within 1 s of expiry.
func TestSingleSilentNodeTaintedAtGraceExpiry(t *testing.T) {
	cfg := correlatedConfig()
	cfg.NodeEvictionRate = 0.1
	cl := newCluster(t, cfg, map[string]int{"a": 4, "b": 4})
	cl.run(10 * time.Second)
	n := cl.inZone("a")[0]
	cl.silence([]string{n}, 0)
	lastHeard := cl.lastRnw[n]
	cl.run(cfg.NodeMonitorGracePeriod + 5*time.Second)
	at, ok := cl.tainted[n]
	if !ok {
		t.Fatalf("%s not tainted", n)
	}
	if late := at.Sub(lastHeard.Add(cfg.NodeMonitorGracePeriod)); late < 0 || late > time.Second {
		t.Errorf("tainted %v after its grace period ended, want within 1 s", late)
	}
	if len(cl.tainted) != 1 {
		t.Errorf("tainted %v, want only %s", cl.tainted, n)
	}
}

// TestOverdueRule covers the overdue rule itself: the measured interval
// once two heartbeats were seen, the assumed one before.
func TestOverdueRule(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	h := &nodeHealth{hasReady: true}
	h.heard(t0)
	// No interval measured: a quarter of the 2 h grace period (no Lease),
	// plus the slack.
	if h.overdue(t0.Add(30*time.Minute+2*time.Second), 2*time.Hour, 2*time.Second) {
		t.Error("overdue before the assumed interval plus slack")
	}
	if !h.overdue(t0.Add(30*time.Minute+2100*time.Millisecond), 2*time.Hour, 2*time.Second) {
		t.Error("not overdue after the assumed interval plus slack")
	}
	h.heard(t0.Add(2 * time.Second))
	h.heard(t0.Add(2500 * time.Millisecond)) // a status update between two renewals
	// interval: the larger of the last two gaps (2 s), plus 2 s slack.
	for _, c := range []struct {
		silent time.Duration
		want   bool
	}{{3 * time.Second, false}, {4 * time.Second, false}, {4100 * time.Millisecond, true}} {
		if got := h.overdue(t0.Add(2500*time.Millisecond+c.silent), 40*time.Second, 2*time.Second); got != c.want {
			t.Errorf("silent %v: overdue=%v, want %v", c.silent, got, c.want)
		}
	}
	if h.overdue(t0.Add(time.Hour), 40*time.Second, 0) {
		t.Error("slack 0 turns the rule off")
	}
}

// takeoverGap is how long the cluster runs without a leader: the dead
// leader's Lease has yet to expire.
const takeoverGap = 4 * time.Second

// TestNewLeaderJudgesCorrelatedSilence: the leader dies, a standby takes
// over 4 s later with no memory of any heartbeat, and 3 of the 5 nodes of
// zone a fall silent 0.3 s apart at a moment around the takeover: long
// before it (while the old leader still ran), while no one leads, across
// the standby's first pass, and during the first renewals it sees (renewals
// every 2 s: before it has measured any node's interval). Whatever the
// moment, the zone is PartialDisruption when the first silent node's grace
// ends, and nothing is tainted (a zone of 5 nodes: rate 0).
func TestNewLeaderJudgesCorrelatedSilence(t *testing.T) {
	for _, at := range []time.Duration{-12 * time.Second, -2 * time.Second, -300 * time.Millisecond, 0,
		500 * time.Millisecond, time.Second, 1700 * time.Millisecond, 2500 * time.Millisecond, 4 * time.Second, 7 * time.Second} {
		t.Run(fmt.Sprintf("silent%v", at), func(t *testing.T) {
			cfg := correlatedConfig()
			cl := newCluster(t, cfg, map[string]int{"a": 5, "b": 4})
			cl.run(10 * time.Second)
			takeover := cl.clk.Now().Add(12*time.Second + takeoverGap)
			for i, n := range cl.inZone("a")[:3] {
				cl.silentAt[n] = takeover.Add(at + time.Duration(i)*300*time.Millisecond)
			}
			cl.run(12 * time.Second) // the old leader
			cl.leaderless(takeoverGap)
			cl.takeover()
			cl.run(max(at, 0) + cfg.NodeMonitorGracePeriod + 15*time.Second)
			checkNoTaint(t, cl, "a", 3)
		})
	}
}

// TestNewLeaderJudgesNodesFirstSeenLater: after the takeover a node joins
// zone a (4 nodes, now 5) and falls silent at once, never renewing after
// its registration; two old nodes of the zone fell silent 0.6 and 0.3 s
// before. The new node is first seen at a later pass than the others, so
// it expires seconds after them: when they expire it must be counted
// already, with the interval assumed from its Lease. Also a node that was
// registered before the takeover and reports Ready only after it.
func TestNewLeaderJudgesNodesFirstSeenLater(t *testing.T) {
	for _, after := range []time.Duration{500 * time.Millisecond, 2 * time.Second, 4900 * time.Millisecond, 8 * time.Second} {
		for _, readyLater := range []bool{false, true} {
			t.Run(fmt.Sprintf("after%v/readyLater=%v", after, readyLater), func(t *testing.T) {
				cfg := correlatedConfig()
				cl := newCluster(t, cfg, map[string]int{"a": 4, "b": 4})
				cl.run(10 * time.Second)
				if readyLater {
					cl.register("a-new", "a", false)
					cl.silentAt["a-new"] = cl.clk.Now().Add(time.Hour) // renews until it reports
				}
				cl.leaderless(takeoverGap)
				cl.takeover()
				joins := cl.clk.Now().Add(after)
				old := cl.inZone("a")[:2]
				cl.silentAt[old[0]], cl.silentAt[old[1]] = joins.Add(-600*time.Millisecond), joins.Add(-300*time.Millisecond)
				cl.run(after)
				if readyLater {
					cl.postReady("a-new")
				} else {
					cl.register("a-new", "a", true)
				}
				cl.silentAt["a-new"] = cl.clk.Now()
				cl.run(cfg.NodeMonitorGracePeriod + cfg.NodeMonitorPeriod + 15*time.Second)
				checkNoTaint(t, cl, "a", 3)
			})
		}
	}
}

// checkNoTaint checks that no node was tainted, that the silent nodes of
// zone z are Unknown and that z is PartialDisruption.
func checkNoTaint(t *testing.T, cl *cluster, z string, silent int) {
	t.Helper()
	if len(cl.tainted) > 0 {
		t.Errorf("%d nodes tainted NoExecute, the zone rules allow none: %v", len(cl.tainted), cl.tainted)
	}
	unknown := 0
	for _, n := range cl.inZone(z) {
		if node, err := cl.c.latestNode(n); err == nil && !kube.NodeReady(node) {
			unknown++
		}
	}
	if unknown != silent {
		t.Errorf("%d nodes of zone %s not Ready, want the %d silent ones", unknown, z, silent)
	}
	if got := cl.c.ZoneStates()[testZoneKey+z]; got != nodetopology.StatePartialDisruption {
		t.Errorf("zone %s is %s, want PartialDisruption", z, got)
	}
}

// TestStaticStabilityHoldsMarks: when every node of every zone falls silent,
// no pod is marked NotReady (and nothing is tainted); when one node comes
// back, the nodes still silent a grace period later get their pods marked.
// With --static-stability=false every node's pods are marked, as upstream.
func TestStaticStabilityHoldsMarks(t *testing.T) {
	for _, on := range []bool{true, false} {
		t.Run(fmt.Sprintf("static-stability=%v", on), func(t *testing.T) {
			cfg := correlatedConfig()
			cfg.StaticStability = on
			cl := newCluster(t, cfg, map[string]int{"a": 3, "b": 3})
			cl.run(10 * time.Second)
			cl.silence(cl.nodes, 5*time.Second)
			cl.run(5*time.Second + cfg.NodeMonitorGracePeriod + 10*time.Second)
			if len(cl.tainted) != 0 {
				t.Errorf("tainted %v while every zone is in FullDisruption", cl.tainted)
			}
			if on && len(cl.marked) != 0 {
				t.Fatalf("pods of %v marked NotReady while every zone is in FullDisruption", cl.marked)
			}
			if !on && len(cl.marked) != len(cl.nodes) {
				t.Fatalf("pods of %d nodes marked, want all %d (upstream's behaviour)", len(cl.marked), len(cl.nodes))
			}
			if !on {
				return
			}
			// One node heartbeats again (its kubelet posts Ready).
			back := cl.nodes[0]
			delete(cl.silentAt, back)
			node, _ := cl.c.latestNode(back)
			node = node.DeepCopy()
			now := metav1.NewTime(cl.clk.Now())
			node.ResourceVersion = "100"
			node.Status.Conditions = []v1.NodeCondition{{Type: v1.NodeReady, Status: v1.ConditionTrue, LastHeartbeatTime: now, LastTransitionTime: now}}
			cl.updateNode(node)
			cl.run(cfg.NodeMonitorGracePeriod / 2)
			if len(cl.marked) != 0 {
				t.Errorf("pods of %v marked before the fresh grace period ended", cl.marked)
			}
			cl.run(cfg.NodeMonitorGracePeriod/2 + 6*time.Second)
			if len(cl.marked) != len(cl.nodes)-1 || cl.marked[back] {
				t.Errorf("marked %v, want every node but %s", cl.marked, back)
			}
		})
	}
}

// TestShortGraceNodesSilentTogether: with a grace period close to interval
// plus slack (3 s grace, 0.5 s renewals, 2 s slack), every node falls silent
// within 0.06 s, and the last renewals are 0.55 s apart (renewals observed
// with jitter are further apart than the interval: 0.507 s in the
// integration run that found this). The first nodes to expire are judged
// with the late one counted, so every zone is FullDisruption at once:
// nothing is tainted and no pod is marked. With overdue only after interval
// plus slack, zone b was still Normal and zone a's nodes were tainted.
func TestShortGraceNodesSilentTogether(t *testing.T) {
	cfg := DefaultConfig()
	cfg.NodeMonitorGracePeriod = 3 * time.Second
	cfg.NodeMonitorPeriod = time.Second
	cfg.NodeEvictionRate = 100
	cl := newCluster(t, cfg, map[string]int{"a": 2, "b": 2})
	cl.renew = 500 * time.Millisecond
	cl.step = 10 * time.Millisecond // each expiry is judged within 10 ms
	late := cl.nodes[3]
	cl.lastRnw[late] = cl.clk.Now().Add(-450 * time.Millisecond) // renews at 0.05, 0.55, ... s
	for _, n := range cl.nodes {
		cl.phase[n] = 0 // the others renew at 0, 0.5, ... s
	}
	cl.run(5 * time.Second)
	cl.silence(cl.nodes[:3], 0)                                 // last renewed at 4.5 s
	cl.silentAt[late] = cl.clk.Now().Add(60 * time.Millisecond) // last renewed at 5.05 s
	cl.run(cfg.NodeMonitorGracePeriod + 5*time.Second)
	if got := cl.lastRnw[late].Sub(cl.lastRnw[cl.nodes[0]]); got != 550*time.Millisecond {
		t.Fatalf("last renewals %v apart, want 550ms", got)
	}
	if len(cl.tainted) != 0 || len(cl.marked) != 0 {
		t.Errorf("tainted %v, pods marked on %v; want none while every zone is silent", cl.tainted, cl.marked)
	}
}

func TestOverdueAfter(t *testing.T) {
	for _, c := range []struct{ interval, grace, slack, want time.Duration }{
		{10 * time.Second, 40 * time.Second, 2 * time.Second, 12 * time.Second},             // a kubelet's default lease
		{2 * time.Second, 40 * time.Second, 2 * time.Second, 4 * time.Second},               // fake nodes
		{500 * time.Millisecond, 3 * time.Second, 2 * time.Second, 2250 * time.Millisecond}, // grace close to interval+slack
		{2 * time.Second, 3 * time.Second, 2 * time.Second, 3 * time.Second},                // grace under 1.5 intervals: the grace
		{time.Second, 3 * time.Second, 2 * time.Second, 1500 * time.Millisecond},            // floor: 1.5 intervals
	} {
		if got := overdueAfter(c.interval, c.grace, c.slack); got != c.want {
			t.Errorf("overdueAfter(%v, %v, %v) = %v, want %v", c.interval, c.grace, c.slack, got, c.want)
		}
	}
}

// TestHealthyReportsAStuckMonitorLoop: the loop turning keeps the controller
// healthy; a loop that has not turned for a monitor period plus the progress
// timeout is reported, so the manager gives up leadership.
func TestHealthyReportsAStuckMonitorLoop(t *testing.T) {
	cl := newCluster(t, DefaultConfig(), map[string]int{"a": 1})
	cl.run(time.Second)
	if err := cl.c.Healthy(cl.clk.Now()); err != nil {
		t.Fatalf("healthy loop reported: %v", err)
	}
	bound := DefaultConfig().NodeMonitorPeriod + controllerutil.DefaultProgressTimeout
	cl.clk.Step(bound - time.Second) // the loop does not turn
	if err := cl.c.Healthy(cl.clk.Now()); err != nil {
		t.Fatalf("within the bound: %v", err)
	}
	cl.clk.Step(2 * time.Second)
	want := fmt.Sprintf("(bound %v)", bound)
	if err := cl.c.Healthy(cl.clk.Now()); err == nil || !strings.Contains(err.Error(), "the node monitor loop has not turned for") || !strings.Contains(err.Error(), want) {
		t.Fatalf("stuck loop: %v, want it to name the loop and %q", err, want)
	}
	cl.run(100 * time.Millisecond)
	if err := cl.c.Healthy(cl.clk.Now()); err != nil {
		t.Fatalf("the loop turned again but: %v", err)
	}
}

// TestHealthyDuringALongPass: a pass over many nodes whose writes are slow
// (here each status write takes 1 s of the fake clock, 40 nodes failing at
// once) is progress: the controller stays healthy throughout, so a leader
// does not give up in the middle of a mass failure.
func TestHealthyDuringALongPass(t *testing.T) {
	cl := newCluster(t, DefaultConfig(), map[string]int{"a": 20, "b": 20})
	cl.run(10 * time.Second)
	var unhealthy []string
	cl.c.client.(*fake.Clientset).PrependReactor("update", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
		cl.clk.Step(time.Second)
		if err := cl.c.Healthy(cl.clk.Now()); err != nil {
			unhealthy = append(unhealthy, err.Error())
		}
		return false, nil, nil
	})
	cl.silence(cl.nodes, 0)
	cl.run(DefaultConfig().NodeMonitorGracePeriod + 5*time.Second)
	if len(unhealthy) > 0 {
		t.Errorf("unhealthy during the pass: %v", unhealthy[0])
	}
	if err := cl.c.Healthy(cl.clk.Now()); err != nil {
		t.Errorf("after the pass: %v", err)
	}
}

// TestNewLeaderCountsNodesSilentBeforeTakeover: nodes A, B and C of a zone
// of 4 fall silent 4 and 1 s apart; the old leader marks A Unknown when its grace
// ends and holds its taint, B and C being overdue, then dies before B
// expires. The standby takes over with no memory of any heartbeat: B and C
// must count as failing from their first pass (the silence taken from their
// Leases' renewTime, confirmed by a fresh read), so A is not tainted; B and
// C are then marked Unknown a fresh grace period after the takeover
// (upstream's restart), and the zone stays PartialDisruption (4 nodes: rate
// 0). Before, the standby counted B and C healthy from first sight, read the
// zone Normal and tainted A at once.
func TestNewLeaderCountsNodesSilentBeforeTakeover(t *testing.T) {
	for _, gap := range []time.Duration{100 * time.Millisecond, takeoverGap} {
		t.Run(fmt.Sprintf("leaderless%v", gap), func(t *testing.T) {
			cfg := correlatedConfig()
			cl := newCluster(t, cfg, map[string]int{"a": 4, "b": 4})
			cl.run(10 * time.Second)
			abc := cl.inZone("a")[:3]
			// Further apart than the renewals (2 s), so that B and C expire
			// after A, but overdue when A does.
			t0 := cl.clk.Now()
			cl.silentAt[abc[0]], cl.silentAt[abc[1]], cl.silentAt[abc[2]] = t0, t0.Add(4*time.Second), t0.Add(5*time.Second)
			// The old leader runs until A is Unknown, and a little more.
			cl.run(cfg.NodeMonitorGracePeriod + time.Second)
			if node, _ := cl.c.latestNode(abc[0]); kube.NodeReady(node) {
				t.Fatalf("the old leader did not mark %s Unknown", abc[0])
			}
			for _, n := range abc[1:] {
				if node, _ := cl.c.latestNode(n); !kube.NodeReady(node) {
					t.Fatalf("the old leader marked %s Unknown before the takeover: the case needs it Ready", n)
				}
			}
			if len(cl.tainted) > 0 {
				t.Fatalf("the old leader tainted %v", cl.tainted)
			}
			cl.leaderless(gap)
			cl.takeover()
			cl.run(cfg.NodeMonitorGracePeriod + 10*time.Second)
			checkNoTaint(t, cl, "a", 3)
		})
	}
}

// A node whose health update keeps failing (its Unknown mark refused) is
// not left out of its zone's count: the zone taints nothing while it is
// not judged. Left out, zone a below would be 2 of 3 not Ready, Normal, and
// its first silent node tainted while 3 of its 4 nodes are silent.
func TestFailedHealthUpdateUnsettlesItsZone(t *testing.T) {
	cl := newCluster(t, correlatedConfig(), map[string]int{"a": 4, "b": 4})
	cl.client.PrependReactor("update", "nodes", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if u, ok := a.(k8stesting.UpdateAction); ok && a.GetSubresource() == "status" && u.GetObject().(*v1.Node).Name == "a-02" {
			return true, nil, fmt.Errorf("the status write of a-02 fails")
		}
		return false, nil, nil
	})
	cl.run(10 * time.Second)
	cl.silence(cl.inZone("a")[:3], 3*time.Second)
	cl.runRetrying(3*time.Second + 20*time.Second + 30*time.Second)
	if len(cl.tainted) != 0 {
		t.Errorf("%d nodes tainted NoExecute while a-02 could not be judged (3 of zone a's 4 silent): %v", len(cl.tainted), cl.tainted)
	}
}

// TestKubeletTimingsShortGraceNoFalseDisruption: real kubelet timings (a
// 40 s Lease renewed every 10 s) under a 20 s grace period, a fleet started
// together (renewals 0.2 to 2.4 s after the controller's start), the
// controller measuring no interval yet: after its start, and again after a
// takeover. While every node is alive, every zone stays Normal and nothing
// is tainted. With the assumed interval capped at grace/4 (5 s) every
// unmeasured node counted as overdue 7 s after each renewal, so the zones
// read as disrupted (hollow nodes: all zones in full disruption), and a
// node silent meanwhile got a fresh grace period when the all-zones mode
// ended: tainted 14.7 s late (34.7 s after its last renewal; hollow nodes:
// 29-34 s). A node that falls silent while unmeasured is tainted within 1 s
// of its grace period's end.
func TestKubeletTimingsShortGraceNoFalseDisruption(t *testing.T) {
	start := func(t *testing.T) *cluster {
		cfg := correlatedConfig()
		cl := newCluster(t, cfg, map[string]int{"a": 4, "b": 4, "c": 4})
		cl.renew = 10 * time.Second
		now := cl.clk.Now()
		for i, n := range cl.nodes {
			cl.renewLease(n) // every node has its Lease when the controller starts
			cl.lastRnw[n] = now.Add(-cl.renew + time.Duration(i+1)*200*time.Millisecond)
		}
		return cl
	}
	// runNormal runs for d, checking after every step that every zone is
	// Normal and nothing is tainted.
	runNormal := func(t *testing.T, cl *cluster, d time.Duration) {
		t.Helper()
		for end := cl.clk.Now().Add(d); cl.clk.Now().Before(end); {
			cl.run(cl.step)
			for z, s := range cl.c.ZoneStates() {
				if s != nodetopology.StateNormal {
					t.Fatalf("at %s: zone %q is %s while every node renews every 10 s", cl.clk.Now().Format("15:04:05.0"), z, s)
				}
			}
			if len(cl.tainted) > 0 {
				t.Fatalf("tainted %v while every node renews every 10 s", cl.tainted)
			}
		}
	}
	t.Run("all alive", func(t *testing.T) {
		cl := start(t)
		runNormal(t, cl, 60*time.Second)
		cl.leaderless(takeoverGap)
		cl.takeover()
		runNormal(t, cl, 40*time.Second)
	})
	t.Run("one silent", func(t *testing.T) {
		cl := start(t)
		cfg := cl.c.cfg
		victim := cl.inZone("a")[1]
		// Silent after its first renewal the controller hears (0.4 s after
		// the start): it is never measured.
		cl.silentAt[victim] = cl.clk.Now().Add(cl.renew)
		cl.run(cl.renew + cfg.NodeMonitorGracePeriod + 30*time.Second)
		at, ok := cl.tainted[victim]
		if !ok {
			t.Fatalf("%s not tainted", victim)
		}
		if late := at.Sub(cl.lastRnw[victim].Add(cfg.NodeMonitorGracePeriod)); late < 0 || late > time.Second {
			t.Errorf("tainted %v after its grace period ended, want within 1 s", late)
		}
		if len(cl.tainted) != 1 {
			t.Errorf("tainted %v, want only %s", cl.tainted, victim)
		}
	})
}
