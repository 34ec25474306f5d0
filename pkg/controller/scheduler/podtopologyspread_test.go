package scheduler

import (
	"context"
	"fmt"
	"math/rand"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	appslisters "k8s.io/client-go/listers/apps/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
)

const zoneKey = v1.LabelTopologyZone

// zoned is a node in zone z ("" for no zone label).
func zoned(name, z string, opts ...func(*v1.Node)) *v1.Node {
	n := node(name, 4000, 110)
	if z != "" {
		n.Labels[zoneKey] = z
	}
	for _, o := range opts {
		o(n)
	}
	return n
}

func nodeLabel(k, v string) func(*v1.Node) { return func(n *v1.Node) { n.Labels[k] = v } }
func tainted(n *v1.Node) {
	n.Spec.Taints = append(n.Spec.Taints, v1.Taint{Key: "dedicated", Value: "x", Effect: v1.TaintEffectNoSchedule})
}

func labels2(kv ...string) podOpt {
	return func(p *v1.Pod) {
		if p.Labels == nil {
			p.Labels = map[string]string{}
		}
		for i := 0; i < len(kv); i += 2 {
			p.Labels[kv[i]] = kv[i+1]
		}
	}
}

// webPods are n pods labelled app=web on node.
func webPods(prefix, node string, n int, opts ...podOpt) []*v1.Pod {
	var out []*v1.Pod
	for i := range n {
		out = append(out, pod(fmt.Sprintf("%s%d", prefix, i), 0, 100, append([]podOpt{onNode(node), labels2("app", "web")}, opts...)...))
	}
	return out
}

type tsc func(*v1.TopologySpreadConstraint)

func spreadOn(key string, maxSkew int32, when v1.UnsatisfiableConstraintAction, opts ...tsc) podOpt {
	return func(p *v1.Pod) {
		c := v1.TopologySpreadConstraint{MaxSkew: maxSkew, TopologyKey: key, WhenUnsatisfiable: when,
			LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}}
		for _, o := range opts {
			o(&c)
		}
		p.Spec.TopologySpreadConstraints = append(p.Spec.TopologySpreadConstraints, c)
	}
}

// spreadQuery is query with PodTopologySpread's state from c.
func spreadQuery(e *spreadEnv, c *cache, p *v1.Pod) *podQuery {
	q := query(p)
	q.spread = newSpreadState(e, q, c)
	return q
}

func TestSpreadFilter(t *testing.T) {
	three := []*v1.Node{zoned("a1", "a"), zoned("a2", "a"), zoned("b1", "b"), zoned("c1", "c")}
	join := func(groups ...[]*v1.Pod) []*v1.Pod { return slices.Concat(groups...) }
	honor, ignore := v1.NodeInclusionPolicyHonor, v1.NodeInclusionPolicyIgnore
	tests := []struct {
		name  string
		nodes []*v1.Node
		pods  []*v1.Pod
		p     *v1.Pod
		// want maps node → reason ("" fits).
		want map[string]string
	}{
		{"skew against the global minimum", three, join(webPods("a", "a1", 2), webPods("b", "b1", 1)),
			pod("p", 0, 100, labels2("app", "web"), spreadOn(zoneKey, 1, v1.DoNotSchedule)),
			map[string]string{"a1": reasonSpread, "a2": reasonSpread, "b1": reasonSpread, "c1": ""}},
		{"maxSkew 2 admits the zone one above the minimum", three, join(webPods("a", "a1", 3), webPods("b", "b1", 1), webPods("c", "c1", 1)),
			pod("p", 0, 100, labels2("app", "web"), spreadOn(zoneKey, 2, v1.DoNotSchedule)),
			map[string]string{"a1": reasonSpread, "a2": reasonSpread, "b1": "", "c1": ""}},
		{"a pod that does not match its selector does not count itself", three, join(webPods("a", "a1", 1)),
			pod("p", 0, 100, labels2("app", "other"), spreadOn(zoneKey, 1, v1.DoNotSchedule)),
			map[string]string{"a1": "", "a2": "", "b1": "", "c1": ""}},
		{"minDomains above the domain count makes the minimum 0", []*v1.Node{zoned("a1", "a"), zoned("b1", "b")},
			join(webPods("a", "a1", 1), webPods("b", "b1", 1)),
			pod("p", 0, 100, labels2("app", "web"), spreadOn(zoneKey, 1, v1.DoNotSchedule, func(c *v1.TopologySpreadConstraint) { c.MinDomains = ptr.To[int32](3) })),
			map[string]string{"a1": reasonSpread, "b1": reasonSpread}},
		{"minDomains met keeps the global minimum", []*v1.Node{zoned("a1", "a"), zoned("b1", "b")},
			join(webPods("a", "a1", 1), webPods("b", "b1", 1)),
			pod("p", 0, 100, labels2("app", "web"), spreadOn(zoneKey, 1, v1.DoNotSchedule, func(c *v1.TopologySpreadConstraint) { c.MinDomains = ptr.To[int32](2) })),
			map[string]string{"a1": "", "b1": ""}},
		{"nodeAffinityPolicy Honor: a zone the pod cannot use is no domain", []*v1.Node{zoned("a1", "a", nodeLabel("pool", "x")), zoned("b1", "b", nodeLabel("pool", "x")), zoned("c1", "c")},
			join(webPods("a", "a1", 1), webPods("b", "b1", 1)),
			pod("p", 0, 100, labels2("app", "web"), spreadOn(zoneKey, 1, v1.DoNotSchedule), func(p *v1.Pod) { p.Spec.NodeSelector = map[string]string{"pool": "x"} }),
			map[string]string{"a1": "", "b1": "", "c1": reasonAffinity}},
		{"nodeAffinityPolicy Ignore: it counts with 0 pods", []*v1.Node{zoned("a1", "a", nodeLabel("pool", "x")), zoned("b1", "b", nodeLabel("pool", "x")), zoned("c1", "c")},
			join(webPods("a", "a1", 1), webPods("b", "b1", 1)),
			pod("p", 0, 100, labels2("app", "web"), spreadOn(zoneKey, 1, v1.DoNotSchedule, func(c *v1.TopologySpreadConstraint) { c.NodeAffinityPolicy = &ignore }),
				func(p *v1.Pod) { p.Spec.NodeSelector = map[string]string{"pool": "x"} }),
			map[string]string{"a1": reasonSpread, "b1": reasonSpread, "c1": reasonAffinity}},
		{"nodeTaintsPolicy Ignore (default): a tainted zone counts", []*v1.Node{zoned("a1", "a"), zoned("b1", "b"), zoned("c1", "c", tainted)},
			join(webPods("a", "a1", 1), webPods("b", "b1", 1)),
			pod("p", 0, 100, labels2("app", "web"), spreadOn(zoneKey, 1, v1.DoNotSchedule)),
			map[string]string{"a1": reasonSpread, "b1": reasonSpread, "c1": reasonTaint}},
		{"nodeTaintsPolicy Honor: an untolerated tainted zone is no domain", []*v1.Node{zoned("a1", "a"), zoned("b1", "b"), zoned("c1", "c", tainted)},
			join(webPods("a", "a1", 1), webPods("b", "b1", 1)),
			pod("p", 0, 100, labels2("app", "web"), spreadOn(zoneKey, 1, v1.DoNotSchedule, func(c *v1.TopologySpreadConstraint) { c.NodeTaintsPolicy = &honor })),
			map[string]string{"a1": "", "b1": "", "c1": reasonTaint}},
		{"matchLabelKeys counts only the incoming pod's revision", three,
			join(webPods("a", "a1", 3, labels2("rev", "1")), webPods("b", "b1", 1, labels2("rev", "2"))),
			pod("p", 0, 100, labels2("app", "web", "rev", "2"), spreadOn(zoneKey, 1, v1.DoNotSchedule, func(c *v1.TopologySpreadConstraint) { c.MatchLabelKeys = []string{"rev"} })),
			map[string]string{"a1": "", "a2": "", "b1": reasonSpread, "c1": ""}},
		{"terminating pods and other namespaces do not count", three,
			join(webPods("a", "a1", 2, func(p *v1.Pod) { p.DeletionTimestamp = ptr.To(metav1.NewTime(epoch)) }), webPods("b", "b1", 2, func(p *v1.Pod) { p.Namespace = "other" })),
			pod("p", 0, 100, labels2("app", "web"), spreadOn(zoneKey, 1, v1.DoNotSchedule)),
			map[string]string{"a1": "", "a2": "", "b1": "", "c1": ""}},
		{"a node without the topology key is rejected for good", []*v1.Node{zoned("a1", "a"), zoned("x", "")}, nil,
			pod("p", 0, 100, labels2("app", "web"), spreadOn(zoneKey, 1, v1.DoNotSchedule)),
			map[string]string{"a1": "", "x": reasonSpreadLabel}},
		{"hostname and zone together", three, join(webPods("a", "a1", 1)),
			pod("p", 0, 100, labels2("app", "web"), spreadOn(zoneKey, 1, v1.DoNotSchedule), spreadOn(v1.LabelHostname, 1, v1.DoNotSchedule)),
			map[string]string{"a1": reasonSpread, "a2": reasonSpread, "b1": "", "c1": ""}},
		{"hostname only", three, join(webPods("a", "a1", 1)),
			pod("p", 0, 100, labels2("app", "web"), spreadOn(v1.LabelHostname, 1, v1.DoNotSchedule)),
			map[string]string{"a1": reasonSpread, "a2": "", "b1": "", "c1": ""}},
		{"ScheduleAnyway does not filter", three, join(webPods("a", "a1", 5)),
			pod("p", 0, 100, labels2("app", "web"), spreadOn(zoneKey, 1, v1.ScheduleAnyway)),
			map[string]string{"a1": "", "a2": "", "b1": "", "c1": ""}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := world(tc.nodes, tc.pods...)
			q := spreadQuery(nil, c, tc.p)
			for name, want := range tc.want {
				st := filter(q, c.nodes[name])
				got := strings.Join(st.reasons, ",")
				if got != want {
					t.Errorf("node %s: %q, want %q", name, got, want)
				}
				wantCode := success
				switch want {
				case reasonSpread:
					wantCode = unschedulable
				case reasonSpreadLabel, reasonAffinity, reasonTaint:
					wantCode = unresolvable
				}
				if st.code != wantCode {
					t.Errorf("node %s: code %d, want %d", name, st.code, wantCode)
				}
			}
		})
	}
}

func TestSpreadScore(t *testing.T) {
	tests := []struct {
		name  string
		nodes []*v1.Node
		pods  []*v1.Pod
		p     *v1.Pod
		env   *spreadEnv
		want  []int64 // spread's weighted contribution, per node in order
	}{
		// zone a 0 pods, zone b 2: raw 0 and round(2·ln 4)=3; normalised
		// 100·(3+0−raw)/3.
		{"fewer matching pods score higher", []*v1.Node{zoned("a1", "a"), zoned("b1", "b"), zoned("b2", "b")},
			webPods("b", "b1", 2), pod("p", 0, 100, labels2("app", "web"), spreadOn(zoneKey, 1, v1.ScheduleAnyway)), nil,
			[]int64{2 * 100, 0, 0}},
		{"equal counts score the maximum", []*v1.Node{zoned("a1", "a"), zoned("b1", "b")},
			nil, pod("p", 0, 100, labels2("app", "web"), spreadOn(zoneKey, 1, v1.ScheduleAnyway)), nil,
			[]int64{2 * 100, 2 * 100}},
		// maxSkew 3 adds 2 to every node: raws 2 and round(1·ln 4 + 2)=3 →
		// 100·(3+2−2)/3=100 and 100·(3+2−3)/3=66.
		{"maxSkew shifts before normalising", []*v1.Node{zoned("a1", "a"), zoned("b1", "b")},
			webPods("b", "b1", 1), pod("p", 0, 100, labels2("app", "web"), spreadOn(zoneKey, 3, v1.ScheduleAnyway)), nil,
			[]int64{2 * 100, 2 * 66}},
		{"a node without the key scores 0 with the pod's own constraints", []*v1.Node{zoned("a1", "a"), zoned("x", "")},
			webPods("a", "a1", 1), pod("p", 0, 100, labels2("app", "web"), spreadOn(zoneKey, 1, v1.ScheduleAnyway)), nil,
			[]int64{2 * 100, 0}},
		// System defaults: hostname counts per node (weight ln(2+2)); zone
		// is skipped on the node without it, which is still scored, but
		// its missing zone is a domain in the zone's weight, as
		// kube-scheduler counts it: two domains, ln(2+2), not ln(1+2)
		// (the differential test's seeds 100, 500 and 1500 had a pod each
		// go to another node for it).
		{"system defaults score nodes without a zone on hostname", []*v1.Node{zoned("a1", "a"), zoned("x", "")},
			webPods("a", "a1", 2), pod("p", 0, 100, labels2("app", "web"), ownedBy("ReplicaSet", "web")), testEnv(t, SpreadDefaultsSystem),
			// a1: 2·ln4 + 2 + 2·ln4 + 4 = 11.55 → 12; x: 0 + 2 = 2;
			// 100·(12+2−12)/12 = 16 and 100.
			[]int64{2 * 16, 2 * 100}},
		// Every node has a zone: one domain, ln(1+2).
		{"system defaults without a zoneless node", []*v1.Node{zoned("a1", "a"), zoned("a2", "a")},
			webPods("a", "a1", 2), pod("p", 0, 100, labels2("app", "web"), ownedBy("ReplicaSet", "web")), testEnv(t, SpreadDefaultsSystem),
			// a1: 2·ln4 + 2 + 2·ln3 + 4 = 10.97 → 11; a2: 0 + 2 + 2·ln3 + 4 = 8.2 → 8;
			// 100·(11+8−11)/11 = 72 and 100·(11+8−8)/11 = 100.
			[]int64{2 * 72, 2 * 100}},
		{"no defaults with none", []*v1.Node{zoned("a1", "a"), zoned("b1", "b")},
			webPods("a", "a1", 2), pod("p", 0, 100, labels2("app", "web"), ownedBy("ReplicaSet", "web")), testEnv(t, SpreadDefaultsNone),
			[]int64{0, 0}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := world(tc.nodes, tc.pods...)
			q := spreadQuery(tc.env, c, tc.p)
			feasible := make([]*nodeInfo, len(tc.nodes))
			for i, n := range tc.nodes {
				feasible[i] = c.nodes[n.Name]
			}
			got := make([]int64, len(feasible))
			q.spread.score(feasible, got)
			if !slices.Equal(got, tc.want) {
				t.Errorf("scores %v, want %v", got, tc.want)
			}
		})
	}
}

func ownedBy(kind, name string) podOpt {
	return func(p *v1.Pod) {
		apiVersion := "apps/v1"
		if kind == "ReplicationController" {
			apiVersion = "v1"
		}
		p.OwnerReferences = []metav1.OwnerReference{{APIVersion: apiVersion, Kind: kind, Name: name, UID: "owner", Controller: ptr.To(true)}}
	}
}

// testEnv has a ReplicaSet and a StatefulSet "web" selecting app=web, a
// ReplicationController "rc" selecting app=rc and a Service "svc" selecting
// tier=front.
func testEnv(t testing.TB, defaults string) *spreadEnv {
	t.Helper()
	d, err := parseSpreadDefaults(defaults)
	if err != nil {
		t.Fatal(err)
	}
	idx := func(objs ...any) toolscache.Indexer {
		i := toolscache.NewIndexer(toolscache.MetaNamespaceKeyFunc, toolscache.Indexers{toolscache.NamespaceIndex: toolscache.MetaNamespaceIndexFunc})
		for _, o := range objs {
			if err := i.Add(o); err != nil {
				t.Fatal(err)
			}
		}
		return i
	}
	meta := func(name string) metav1.ObjectMeta { return metav1.ObjectMeta{Name: name, Namespace: "default"} }
	web := &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}
	return &spreadEnv{defaults: d,
		services: corelisters.NewServiceLister(idx(&v1.Service{ObjectMeta: meta("svc"), Spec: v1.ServiceSpec{Selector: map[string]string{"tier": "front"}}})),
		rcs:      corelisters.NewReplicationControllerLister(idx(&v1.ReplicationController{ObjectMeta: meta("rc"), Spec: v1.ReplicationControllerSpec{Selector: map[string]string{"app": "rc"}}})),
		rss:      appslisters.NewReplicaSetLister(idx(&appsv1.ReplicaSet{ObjectMeta: meta("web"), Spec: appsv1.ReplicaSetSpec{Selector: web}})),
		sss:      appslisters.NewStatefulSetLister(idx(&appsv1.StatefulSet{ObjectMeta: meta("web"), Spec: appsv1.StatefulSetSpec{Selector: web}})),
	}
}

func TestSpreadDefaults(t *testing.T) {
	tests := []struct {
		name     string
		defaults string
		p        *v1.Pod
		// want is the soft constraints as key:maxSkew and the selector.
		want     []string
		wantSel  string
		wantHard int
	}{
		{"ReplicaSet pod gets the system defaults", SpreadDefaultsSystem, pod("p", 0, 0, labels2("app", "web"), ownedBy("ReplicaSet", "web")),
			[]string{"kubernetes.io/hostname:3", "topology.kubernetes.io/zone:5"}, "app=web", 0},
		{"StatefulSet pod", SpreadDefaultsSystem, pod("p", 0, 0, labels2("app", "web"), ownedBy("StatefulSet", "web")),
			[]string{"kubernetes.io/hostname:3", "topology.kubernetes.io/zone:5"}, "app=web", 0},
		{"ReplicationController and Service selectors merge", SpreadDefaultsSystem, pod("p", 0, 0, labels2("app", "rc", "tier", "front"), ownedBy("ReplicationController", "rc")),
			[]string{"kubernetes.io/hostname:3", "topology.kubernetes.io/zone:5"}, "app=rc,tier=front", 0},
		{"a Service alone is enough", SpreadDefaultsSystem, pod("p", 0, 0, labels2("tier", "front")),
			[]string{"kubernetes.io/hostname:3", "topology.kubernetes.io/zone:5"}, "tier=front", 0},
		{"a bare pod gets none", SpreadDefaultsSystem, pod("p", 0, 0, labels2("app", "web")), nil, "", 0},
		{"a missing owner gets none", SpreadDefaultsSystem, pod("p", 0, 0, labels2("app", "web"), ownedBy("ReplicaSet", "gone")), nil, "", 0},
		{"none", SpreadDefaultsNone, pod("p", 0, 0, labels2("app", "web"), ownedBy("ReplicaSet", "web")), nil, "", 0},
		{"a list, DoNotSchedule ones filter", "topology.kubernetes.io/zone:1:DoNotSchedule,rack:2", pod("p", 0, 0, labels2("app", "web"), ownedBy("ReplicaSet", "web")),
			[]string{"rack:2"}, "app=web", 1},
		{"the pod's own constraints win", SpreadDefaultsSystem, pod("p", 0, 0, labels2("app", "web"), ownedBy("ReplicaSet", "web"), spreadOn("rack", 4, v1.ScheduleAnyway)),
			[]string{"rack:4"}, "app=web", 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			hard, soft, _ := testEnv(t, tc.defaults).spreadConstraintsOf(tc.p)
			var got []string
			for _, c := range soft {
				got = append(got, fmt.Sprintf("%s:%d", c.key, c.maxSkew))
				if c.selector.String() != tc.wantSel {
					t.Errorf("selector %q, want %q", c.selector, tc.wantSel)
				}
			}
			if !slices.Equal(got, tc.want) || len(hard) != tc.wantHard {
				t.Errorf("soft %v, hard %d; want %v, %d", got, len(hard), tc.want, tc.wantHard)
			}
		})
	}
}

func TestParseSpreadDefaults(t *testing.T) {
	tests := []struct {
		in, wantErr string
		want        int
	}{
		{"system", "", 2},
		{"none", "", 0},
		{"topology.kubernetes.io/zone:5", "", 1},
		{"topology.kubernetes.io/zone:1:DoNotSchedule,kubernetes.io/hostname:3:ScheduleAnyway", "", 2},
		{"", "got an empty value", 0},
		{"zone", `item 1 ("zone"): want <topologyKey>:<maxSkew>`, 0},
		{"zone:0", `maxSkew "0" must be a whole number of at least 1`, 0},
		{"zone:x", `maxSkew "x"`, 0},
		{"zone:1:Maybe", `whenUnsatisfiable "Maybe" must be ScheduleAnyway or DoNotSchedule`, 0},
		{"bad key!:1", `topology key "bad key!" is not a valid label key`, 0},
		{"zone:1,zone:2", `item 2 ("zone:2"): a constraint on zone with ScheduleAnyway is already listed`, 0},
		{"zone:1,zone:2:DoNotSchedule", "", 2},
	}
	for _, tc := range tests {
		d, err := parseSpreadDefaults(tc.in)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !strings.Contains(err.Error(), "--default-pod-topology-spread") {
				t.Errorf("%q: error %v, want one containing %q", tc.in, err, tc.wantErr)
			}
			continue
		}
		if err != nil || len(d.constraints()) != tc.want {
			t.Errorf("%q: %d constraints, err %v; want %d", tc.in, len(d.constraints()), err, tc.want)
		}
	}
	cfg := DefaultConfig()
	cfg.DefaultPodTopologySpread = "zone:0"
	if err := cfg.Validate(); err == nil {
		t.Error("Validate accepts a bad --default-pod-topology-spread")
	}
}

func FuzzParseSpreadDefaults(f *testing.F) {
	for _, s := range []string{"system", "none", "zone:1", "a/b:2:DoNotSchedule,c:3", ":", "x:1:2:3", ",,"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := parseSpreadDefaults(s)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "--default-pod-topology-spread") {
				t.Fatalf("error does not name the flag: %v", err)
			}
			return
		}
		for _, c := range d.constraints() {
			if c.MaxSkew < 1 || c.TopologyKey == "" || (c.WhenUnsatisfiable != v1.ScheduleAnyway && c.WhenUnsatisfiable != v1.DoNotSchedule) {
				t.Fatalf("%q parsed into an invalid constraint %+v", s, c)
			}
		}
	})
}

// Preemption removes victims from the zone's count: in zone a (2 web pods
// of priority 0) against zone b (1 web pod, node full with a pod of higher
// priority), removing one web pod of zone a lets the preemptor in; the
// more important one (started earlier) is reprieved.
func TestPreemptionForSpread(t *testing.T) {
	nodes := []*v1.Node{zoned("a1", "a"), zoned("b1", "b")}
	pods := []*v1.Pod{
		pod("w1", 0, 100, onNode("a1"), labels2("app", "web"), started(0)),
		pod("w2", 0, 100, onNode("a1"), labels2("app", "web"), started(1)),
		pod("w3", 100, 100, onNode("b1"), labels2("app", "web")),
		pod("big", 100, 3900, onNode("b1")),
	}
	c := world(nodes, pods...)
	p := pod("p", 50, 100, labels2("app", "web"), spreadOn(zoneKey, 1, v1.DoNotSchedule))
	q := spreadQuery(nil, c, p)
	st := map[string]status{}
	for _, n := range c.list {
		st[n.name()] = filter(q, c.nodes[n.name()])
	}
	if got := fitError(2, st, ""); got != "0/2 nodes are available: 1 Insufficient cpu, 1 node(s) didn't match pod topology spread constraints." {
		t.Fatalf("filter: %s", got)
	}
	out := newTestPreemptor(c).preempt(context.Background(), q, st, 2)
	if out.chosen == nil || out.chosen.node != "a1" || !slices.Equal(names(out.chosen.victims), []string{"w2"}) {
		t.Fatalf("outcome %+v, want victim w2 on a1", out)
	}
	// A node missing the zone label is not a candidate.
	c = world(append(nodes, zoned("x", "")), pods...)
	q = spreadQuery(nil, c, p)
	if s := filter(q, c.nodes["x"]); s.code != unresolvable {
		t.Errorf("missing label: %+v, want unresolvable", s)
	}
}

// Nominated pods of at least the pod's priority count in their node's
// domain, as kube-scheduler adds them before filtering.
func TestSpreadCountsNominatedPods(t *testing.T) {
	c := world([]*v1.Node{zoned("a1", "a"), zoned("b1", "b")})
	c.nominate(newPodInfo(pod("n", 10, 100, labels2("app", "web"))), "a1")
	q := spreadQuery(nil, c, pod("p", 0, 100, labels2("app", "web"), spreadOn(zoneKey, 1, v1.DoNotSchedule)))
	if s := c.filterWithNominated(q, c.nodes["a1"]); !slices.Equal(s.reasons, []string{reasonSpread}) {
		t.Errorf("a1 with a nominated web pod: %+v", s)
	}
	if s := c.filterWithNominated(q, c.nodes["b1"]); !s.ok() {
		t.Errorf("b1: %+v", s)
	}
}

func TestSpreadWakeUps(t *testing.T) {
	blocked := pod("p", 0, 100, labels2("app", "web"), spreadOn(zoneKey, 1, v1.DoNotSchedule))
	if !spreadMayHelp(nil, blocked, nil, pod("w", 0, 0, labels2("app", "web"))) {
		t.Error("a matching pod must wake a spread-blocked pod")
	}
	if spreadMayHelp(nil, blocked, nil, pod("o", 0, 0, labels2("app", "other"))) {
		t.Error("a pod outside the selector must not wake it")
	}
	if !spreadMayHelp(nil, blocked, pod("w", 0, 0, labels2("app", "web")), pod("w", 0, 0, labels2("app", "other"))) {
		t.Error("a pod leaving the selector must wake it")
	}
	if !spreadRejected(map[string]status{"a": reject(unschedulable, reasonSpread)}) || spreadRejected(map[string]status{"a": reject(unresolvable, reasonSpreadLabel)}) {
		t.Error("spreadRejected")
	}
}

// BenchmarkScheduleOneSpread1000Nodes is one scheduling cycle (filter and
// score) of a pod with a zone DoNotSchedule constraint and ScheduleAnyway
// ones on zone and hostname, on 1,000 nodes in 10 zones holding 10,000 pods (half of
// them the Deployment's).
func BenchmarkScheduleOneSpread1000Nodes(b *testing.B) {
	c := newCache()
	for i := range 1000 {
		name := fmt.Sprintf("node-%d", i)
		c.setNode(zoned(name, fmt.Sprintf("zone-%d", i%10)))
		for j := range 10 {
			app := "web"
			if j%2 == 1 {
				app = "other"
			}
			c.setPod(pod(fmt.Sprintf("p-%d-%d", i, j), 0, 100, onNode(name), labels2("app", app)))
		}
	}
	s := &Scheduler{cfg: DefaultConfig(), cache: c, rand: rand.New(rand.NewSource(1)), spread: testEnv(b, SpreadDefaultsSystem)}
	q := query(pod("p", 0, 100, labels2("app", "web"), spreadOn(zoneKey, 1, v1.DoNotSchedule),
		spreadOn(zoneKey, 5, v1.ScheduleAnyway), spreadOn(v1.LabelHostname, 3, v1.ScheduleAnyway)))
	benchFindNode(b, s, q, nil)
}

// An assigned pod that appears, is bound or changes labels wakes the pods
// rejected for their spread whose selector it matches, and no others.
func TestAssignedPodAddWakesSpreadBlocked(t *testing.T) {
	s := newTestScheduler()
	s.spread = &spreadEnv{}
	s.cache.setNode(zoned("a1", "a"))
	park := func(p *v1.Pod, spreadBound bool) {
		s.queue.Add(p)
		qp, cycle := pop(t, s.queue)
		qp.spreadBound = spreadBound
		s.queue.Requeue(qp, cycle, false)
	}
	parked := func(name string) bool {
		s.queue.mu.Lock()
		defer s.queue.mu.Unlock()
		_, ok := s.queue.parked[types.UID(name)]
		return ok
	}
	park(pod("web-blocked", 0, 100, labels2("app", "web"), spreadOn(zoneKey, 1, v1.DoNotSchedule)), true)
	park(pod("db-blocked", 0, 100, labels2("app", "db"), spreadOn(zoneKey, 1, v1.DoNotSchedule,
		func(c *v1.TopologySpreadConstraint) { c.LabelSelector.MatchLabels = map[string]string{"app": "db"} })), true)
	park(pod("cpu-blocked", 0, 100, labels2("app", "web")), false)

	other := pod("other", 0, 100, onNode("a1"), labels2("app", "other"))
	s.onPod(nil, other)
	if !parked("web-blocked") || !parked("db-blocked") {
		t.Fatal("a pod matching no selector woke a spread-blocked pod")
	}
	relabelled := other.DeepCopy()
	relabelled.Labels = map[string]string{"app": "web"}
	s.onPod(other, relabelled)
	if parked("web-blocked") || !parked("db-blocked") || !parked("cpu-blocked") {
		t.Errorf("after relabelling to app=web: web-blocked parked=%v (want false), db-blocked %v, cpu-blocked %v (want true)",
			parked("web-blocked"), parked("db-blocked"), parked("cpu-blocked"))
	}
	pending := pod("db1", 0, 100, labels2("app", "db"))
	pending.Spec.SchedulerName = "someone-else"
	bound := pending.DeepCopy()
	bound.Spec.NodeName = "a1"
	s.onPod(pending, bound)
	if parked("db-blocked") {
		t.Error("binding a db pod must wake db-blocked")
	}
}
