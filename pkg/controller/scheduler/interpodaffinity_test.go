package scheduler

import (
	"context"
	"fmt"
	"math/rand"
	"slices"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	toolscache "k8s.io/client-go/tools/cache"

	corelisters "k8s.io/client-go/listers/core/v1"
)

// zoned returns nodes node1..node<n> with zone z<i/perZone>.
func zonedNodes(n, perZone int) []*v1.Node {
	out := nodes(n, 4000, 110)
	for i, nd := range out {
		nd.Labels["zone"] = fmt.Sprintf("z%d", i/perZone)
	}
	return out
}

func nsLister(nss ...*v1.Namespace) corelisters.NamespaceLister {
	idx := toolscache.NewIndexer(toolscache.MetaNamespaceKeyFunc, toolscache.Indexers{})
	for _, ns := range nss {
		_ = idx.Add(ns)
	}
	return corelisters.NewNamespaceLister(idx)
}

func namespace(name string, labels map[string]string) *v1.Namespace {
	return &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
}

func sel(k, v string) *metav1.LabelSelector {
	return &metav1.LabelSelector{MatchLabels: map[string]string{k: v}}
}

func term(key string, s *metav1.LabelSelector) v1.PodAffinityTerm {
	return v1.PodAffinityTerm{TopologyKey: key, LabelSelector: s}
}

func affinityTo(terms ...v1.PodAffinityTerm) podOpt {
	return func(p *v1.Pod) {
		if p.Spec.Affinity == nil {
			p.Spec.Affinity = &v1.Affinity{}
		}
		p.Spec.Affinity.PodAffinity = &v1.PodAffinity{RequiredDuringSchedulingIgnoredDuringExecution: terms}
	}
}

func antiAffinityTo(terms ...v1.PodAffinityTerm) podOpt {
	return func(p *v1.Pod) {
		if p.Spec.Affinity == nil {
			p.Spec.Affinity = &v1.Affinity{}
		}
		p.Spec.Affinity.PodAntiAffinity = &v1.PodAntiAffinity{RequiredDuringSchedulingIgnoredDuringExecution: terms}
	}
}

func inNamespace(ns string) podOpt { return func(p *v1.Pod) { p.Namespace = ns } }

// affinityQuery is the pod's query with the cycle's InterPodAffinity state,
// as scheduleOne builds it.
func affinityQuery(c *cache, p *v1.Pod, l corelisters.NamespaceLister) *podQuery {
	q := query(p)
	q.interPod = newAffinityState(c, q.podInfo, l)
	return q
}

// verdicts filters p on every node and returns node -> reason ("" fits).
func verdicts(c *cache, p *v1.Pod, l corelisters.NamespaceLister) map[string]string {
	q := affinityQuery(c, p, l)
	out := map[string]string{}
	for name, n := range c.nodes {
		st := c.filterWithNominated(q, n)
		switch {
		case st.ok():
			out[name] = ""
		case st.code == unresolvable:
			out[name] = "unresolvable: " + st.reasons[0]
		default:
			out[name] = st.reasons[0]
		}
	}
	return out
}

func TestInterPodAffinityFilter(t *testing.T) {
	const host, zone = "kubernetes.io/hostname", "zone"
	lister := nsLister(namespace("default", nil), namespace("prod", map[string]string{"env": "prod"}),
		namespace("team-a", map[string]string{"team": "a"}))
	aff, anti, existing := "unresolvable: "+reasonPodAffinity, reasonPodAntiAffinity, reasonExistingAntiAffinity
	tests := []struct {
		name string
		pods []*v1.Pod
		p    *v1.Pod
		want map[string]string // node1, node2 in z0; node3, node4 in z1
	}{
		{"required affinity: the zone of a matching pod",
			[]*v1.Pod{pod("db", 0, 0, onNode("node1"), labelled("app", "db"))},
			pod("p", 0, 0, affinityTo(term(zone, sel("app", "db")))),
			map[string]string{"node1": "", "node2": "", "node3": aff, "node4": aff}},
		{"required affinity by hostname",
			[]*v1.Pod{pod("db", 0, 0, onNode("node3"), labelled("app", "db"))},
			pod("p", 0, 0, affinityTo(term(host, sel("app", "db")))),
			map[string]string{"node1": aff, "node2": aff, "node3": "", "node4": aff}},
		{"no match anywhere, the pod matches itself: anywhere",
			nil, pod("p", 0, 0, labelled("app", "web"), affinityTo(term(zone, sel("app", "web")))),
			map[string]string{"node1": "", "node2": "", "node3": "", "node4": ""}},
		{"no match anywhere, the pod does not match itself: nowhere",
			nil, pod("p", 0, 0, affinityTo(term(zone, sel("app", "db")))),
			map[string]string{"node1": aff, "node2": aff, "node3": aff, "node4": aff}},
		{"a node without the topology key never satisfies affinity",
			[]*v1.Pod{pod("db", 0, 0, onNode("node1"), labelled("app", "db"))},
			pod("p", 0, 0, affinityTo(term("rack", sel("app", "db")))),
			map[string]string{"node1": aff, "node2": aff, "node3": aff, "node4": aff}},
		{"matching pods in another namespace do not count by default",
			[]*v1.Pod{pod("db", 0, 0, onNode("node1"), labelled("app", "db"), inNamespace("prod"))},
			pod("p", 0, 0, affinityTo(term(zone, sel("app", "db")))),
			map[string]string{"node1": aff, "node2": aff, "node3": aff, "node4": aff}},
		{"namespaces list",
			[]*v1.Pod{pod("db", 0, 0, onNode("node3"), labelled("app", "db"), inNamespace("prod"))},
			pod("p", 0, 0, affinityTo(func() v1.PodAffinityTerm {
				t := term(zone, sel("app", "db"))
				t.Namespaces = []string{"prod"}
				return t
			}())),
			map[string]string{"node1": aff, "node2": aff, "node3": "", "node4": ""}},
		{"namespaceSelector",
			[]*v1.Pod{pod("db", 0, 0, onNode("node3"), labelled("app", "db"), inNamespace("prod")),
				pod("db2", 0, 0, onNode("node1"), labelled("app", "db"), inNamespace("team-a"))},
			pod("p", 0, 0, affinityTo(func() v1.PodAffinityTerm {
				t := term(zone, sel("app", "db"))
				t.NamespaceSelector = sel("env", "prod")
				return t
			}())),
			map[string]string{"node1": aff, "node2": aff, "node3": "", "node4": ""}},
		{"empty namespaceSelector: every namespace",
			[]*v1.Pod{pod("db", 0, 0, onNode("node3"), labelled("app", "db"), inNamespace("team-a"))},
			pod("p", 0, 0, affinityTo(func() v1.PodAffinityTerm {
				t := term(zone, sel("app", "db"))
				t.NamespaceSelector = &metav1.LabelSelector{}
				return t
			}())),
			map[string]string{"node1": aff, "node2": aff, "node3": "", "node4": ""}},
		{"all affinity terms must match the same pod",
			[]*v1.Pod{pod("db", 0, 0, onNode("node1"), labelled("app", "db")), pod("cache", 0, 0, onNode("node3"), labelled("tier", "cache"))},
			pod("p", 0, 0, affinityTo(term(zone, sel("app", "db")), term(zone, sel("tier", "cache")))),
			map[string]string{"node1": aff, "node2": aff, "node3": aff, "node4": aff}},
		{"required anti-affinity by hostname",
			[]*v1.Pod{pod("w1", 0, 0, onNode("node1"), labelled("app", "web"))},
			pod("p", 0, 0, labelled("app", "web"), antiAffinityTo(term(host, sel("app", "web")))),
			map[string]string{"node1": anti, "node2": "", "node3": "", "node4": ""}},
		{"required anti-affinity by zone",
			[]*v1.Pod{pod("w1", 0, 0, onNode("node1"), labelled("app", "web"))},
			pod("p", 0, 0, labelled("app", "web"), antiAffinityTo(term(zone, sel("app", "web")))),
			map[string]string{"node1": anti, "node2": anti, "node3": "", "node4": ""}},
		{"symmetry: an existing pod's anti-affinity forbids its zone",
			[]*v1.Pod{pod("loner", 0, 0, onNode("node4"), antiAffinityTo(term(zone, sel("app", "web"))))},
			pod("p", 0, 0, labelled("app", "web")),
			map[string]string{"node1": "", "node2": "", "node3": existing, "node4": existing}},
		{"symmetry: the existing pod's term uses its own namespace",
			[]*v1.Pod{pod("loner", 0, 0, onNode("node4"), inNamespace("prod"), antiAffinityTo(term(zone, sel("app", "web"))))},
			pod("p", 0, 0, labelled("app", "web")),
			map[string]string{"node1": "", "node2": "", "node3": "", "node4": ""}},
		{"symmetry: the existing pod's namespaceSelector is matched against the pod's namespace labels",
			[]*v1.Pod{pod("loner", 0, 0, onNode("node1"), inNamespace("prod"), antiAffinityTo(func() v1.PodAffinityTerm {
				t := term(host, sel("app", "web"))
				t.NamespaceSelector = sel("team", "a")
				return t
			}()))},
			pod("p", 0, 0, labelled("app", "web"), inNamespace("team-a")),
			map[string]string{"node1": existing, "node2": "", "node3": "", "node4": ""}},
		{"the first failing filter wins: affinity before anti-affinity",
			[]*v1.Pod{pod("db", 0, 0, onNode("node1"), labelled("app", "db")), pod("w", 0, 0, onNode("node2"), labelled("app", "web"))},
			pod("p", 0, 0, affinityTo(term(zone, sel("app", "db"))), func(p *v1.Pod) {
				p.Spec.Affinity.PodAntiAffinity = &v1.PodAntiAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []v1.PodAffinityTerm{term(host, sel("app", "web"))}}
			}),
			map[string]string{"node1": "", "node2": anti, "node3": aff, "node4": aff}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := verdicts(world(zonedNodes(4, 2), tc.pods...), tc.p, lister)
			for n, want := range tc.want {
				if got[n] != want {
					t.Errorf("%s: %q, want %q", n, got[n], want)
				}
			}
		})
	}
}

// Pods nominated to a node count there, as upstream's AddPod does for them.
func TestInterPodAffinityNominatedPods(t *testing.T) {
	c := world(zonedNodes(2, 1))
	web := pod("w1", 100, 0, labelled("app", "web"))
	c.nominate(newPodInfo(web), "node1")
	got := verdicts(c, pod("p", 10, 0, labelled("app", "web"), antiAffinityTo(term("kubernetes.io/hostname", sel("app", "web")))), nil)
	if got["node1"] != reasonPodAntiAffinity || got["node2"] != "" {
		t.Errorf("got %v", got)
	}
}

func TestInterPodAffinityScore(t *testing.T) {
	const zone = "zone"
	pref := func(w int32, anti bool, t v1.PodAffinityTerm) podOpt {
		return func(p *v1.Pod) {
			if p.Spec.Affinity == nil {
				p.Spec.Affinity = &v1.Affinity{}
			}
			wt := []v1.WeightedPodAffinityTerm{{Weight: w, PodAffinityTerm: t}}
			if anti {
				p.Spec.Affinity.PodAntiAffinity = &v1.PodAntiAffinity{PreferredDuringSchedulingIgnoredDuringExecution: wt}
			} else {
				p.Spec.Affinity.PodAffinity = &v1.PodAffinity{PreferredDuringSchedulingIgnoredDuringExecution: wt}
			}
		}
	}
	tests := []struct {
		name string
		pods []*v1.Pod
		p    *v1.Pod
		want []int64 // normalised, node1..node6 (zones z0, z1, z2)
	}{
		{"nothing to score", []*v1.Pod{pod("db", 0, 0, onNode("node1"), labelled("app", "db"))}, pod("p", 0, 0),
			[]int64{0, 0, 0, 0, 0, 0}},
		{"preferred affinity", []*v1.Pod{pod("db", 0, 0, onNode("node1"), labelled("app", "db"))},
			pod("p", 0, 0, pref(10, false, term(zone, sel("app", "db")))), []int64{100, 100, 0, 0, 0, 0}},
		{"preferred anti-affinity, two matches weigh more", []*v1.Pod{pod("w1", 0, 0, onNode("node1"), labelled("app", "web")),
			pod("w2", 0, 0, onNode("node2"), labelled("app", "web")), pod("w3", 0, 0, onNode("node3"), labelled("app", "web"))},
			pod("p", 0, 0, pref(5, true, term(zone, sel("app", "web")))), []int64{0, 0, 50, 50, 100, 100}},
		{"existing pods' terms: preferred and, at weight 1, required affinity", []*v1.Pod{
			pod("fan", 0, 0, onNode("node3"), affinityTo(term(zone, sel("app", "web")))),
			pod("hater", 0, 0, onNode("node5"), pref(3, true, term(zone, sel("app", "web"))))},
			pod("p", 0, 0, labelled("app", "web")), []int64{75, 75, 100, 100, 0, 0}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := world(zonedNodes(6, 2), tc.pods...)
			pi := newPodInfo(tc.p)
			scores := affinityScores(c, pi, nil)
			raw := make([]int64, 6)
			for i := range raw {
				raw[i] = affinityScore(scores, c.nodes[fmt.Sprintf("node%d", i+1)].node)
			}
			if got := normaliseInterPod(raw); !slices.Equal(got, tc.want) {
				t.Errorf("got %v (raw %v), want %v", got, raw, tc.want)
			}
		})
	}
}

// An existing lower-priority pod whose anti-affinity forbids the preemptor
// is a victim; a higher-priority one makes the node no candidate.
func TestPreemptionWithAntiAffinity(t *testing.T) {
	guard := func(name string, prio int32, n string) *v1.Pod {
		return pod(name, prio, 100, onNode(n), antiAffinityTo(term("kubernetes.io/hostname", sel("app", "web"))))
	}
	c := world(zonedNodes(2, 1), guard("low-guard", 1, "node1"), pod("bystander", 1, 100, onNode("node1")),
		guard("high-guard", 1000, "node2"))
	p := pod("p", 100, 100, labelled("app", "web"))
	q := affinityQuery(c, p, nil)
	st := map[string]status{}
	for name, n := range c.nodes {
		st[name] = filter(q, n)
		if st[name].ok() || st[name].code != unschedulable {
			t.Fatalf("%s: %+v, want an anti-affinity rejection that preemption may resolve", name, st[name])
		}
	}
	out := newTestPreemptor(c).preempt(context.Background(), q, st, 2)
	if out.chosen == nil || out.chosen.node != "node1" || !slices.Equal(names(out.chosen.victims), []string{"low-guard"}) {
		t.Fatalf("got %+v (%s)", out.chosen, out.msg)
	}
	// Affinity failures are unresolvable: no preemption.
	p2 := pod("p2", 100, 100, affinityTo(term("zone", sel("app", "nowhere"))))
	q2 := affinityQuery(c, p2, nil)
	for name, n := range c.nodes {
		st[name] = filter(q2, n)
	}
	if out := newTestPreemptor(c).preempt(context.Background(), q2, st, 2); out.chosen != nil {
		t.Errorf("preempted for an affinity failure: %+v", out.chosen)
	}
}

// The preemptor's own anti-affinity: a lower-priority matching pod is a
// victim, a matching pod in the same zone on another node is not removable.
func TestPreemptionForOwnAntiAffinity(t *testing.T) {
	c := world(zonedNodes(4, 2), pod("w-low", 1, 100, onNode("node1"), labelled("app", "web")),
		pod("w-other", 1, 100, onNode("node3"), labelled("app", "web")), pod("w-high", 1000, 100, onNode("node4"), labelled("app", "web")))
	p := pod("p", 100, 100, labelled("app", "web"), antiAffinityTo(term("zone", sel("app", "web"))))
	q := affinityQuery(c, p, nil)
	st := map[string]status{}
	for name, n := range c.nodes {
		st[name] = filter(q, n)
	}
	out := newTestPreemptor(c).preempt(context.Background(), q, st, 4)
	if out.chosen == nil || !slices.Contains([]string{"node1", "node2"}, out.chosen.node) {
		t.Fatalf("got %+v (%s)", out.chosen, out.msg)
	}
	if out.chosen.node == "node1" && !slices.Equal(names(out.chosen.victims), []string{"w-low"}) {
		t.Errorf("victims %v", names(out.chosen.victims))
	}
}

// affinityBenchCluster is 1,000 nodes in 10 zones with 10 pods each, in 100
// apps; every pod keeps its app one per node (required anti-affinity by
// hostname) and prefers its app's zone.
func affinityBenchCluster() *cache {
	c := newCache()
	for i := range 1000 {
		name := fmt.Sprintf("node-%d", i)
		n := node(name, 64000, 110)
		n.Labels["zone"] = fmt.Sprintf("z%d", i%10)
		c.setNode(n)
		for j := range 10 {
			app := fmt.Sprintf("app-%d", (i+j*7)%100)
			c.setPod(pod(fmt.Sprintf("p-%d-%d", i, j), 10, 100, onNode(name), labelled("app", app),
				antiAffinityTo(term("kubernetes.io/hostname", sel("app", app))), func(p *v1.Pod) {
					p.Spec.Affinity.PodAffinity = &v1.PodAffinity{PreferredDuringSchedulingIgnoredDuringExecution: []v1.WeightedPodAffinityTerm{
						{Weight: 10, PodAffinityTerm: term("zone", sel("app", app))}}}
				}))
		}
	}
	return c
}

// BenchmarkInterPodAffinity1000Nodes10000Pods is one scheduling cycle
// (state, filtering, scoring) for a pod with required affinity and
// anti-affinity among 10,000 pods with anti-affinity of their own.
func BenchmarkInterPodAffinity1000Nodes10000Pods(b *testing.B) {
	c := affinityBenchCluster()
	s := &Scheduler{cfg: DefaultConfig(), cache: c, rand: rand.New(rand.NewSource(1))}
	p := pod("new", 10, 100, labelled("app", "app-3"), antiAffinityTo(term("kubernetes.io/hostname", sel("app", "app-3"))),
		func(p *v1.Pod) {
			p.Spec.Affinity.PodAffinity = &v1.PodAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []v1.PodAffinityTerm{term("zone", sel("app", "app-4"))}}
		})
	benchFindNode(b, s, query(p), func(q *podQuery) { q.interPod = newAffinityState(c, q.podInfo, nil) })
}

// BenchmarkPlainPodAmongAffinityPods is the same for a pod without terms
// (only the existing pods' anti-affinity is checked against it).
func BenchmarkPlainPodAmongAffinityPods(b *testing.B) {
	c := affinityBenchCluster()
	s := &Scheduler{cfg: DefaultConfig(), cache: c, rand: rand.New(rand.NewSource(1))}
	p := pod("new", 10, 100, labelled("app", "other"))
	benchFindNode(b, s, query(p), func(q *podQuery) { q.interPod = newAffinityState(c, q.podInfo, nil) })
}

// Assigned-pod changes wake the pods rejected for inter-pod affinity and
// no others; a failure that overlapped such a change goes to backoff.
func TestQueueMoveAffinityBound(t *testing.T) {
	q, _ := newTestQueue()
	q.Add(pod("aff", 1, 0))
	q.Add(pod("room", 1, 0))
	a, ca := pop(t, q)
	r, cr := pop(t, q)
	a.affinityBound, r.resourceBound = true, true
	q.Requeue(a, ca, false)
	q.Requeue(r, cr, false)
	q.MoveAffinityBound("AssignedPodAdd")
	if l := q.Lens(); l[inUnschedulable] != 1 || q.parked[r.info.pod.UID] == nil {
		t.Fatalf("want only the resource-bound pod parked: %v", l)
	}
	q.Add(pod("late", 1, 0))
	l, cl := pop(t, q)
	l.affinityBound = true
	q.MoveAffinityBound("AssignedPodDelete") // during its attempt
	q.Requeue(l, cl, false)
	if l.where != inBackoff {
		t.Errorf("a failure overlapping an assigned-pod change went to %s, want backoff", l.where)
	}
}

// Nodes count their pods with affinity terms, so that a pod without terms
// only visits those; the count follows removals.
func TestAffinityPodsCounted(t *testing.T) {
	loner := pod("loner", 0, 0, onNode("node1"), antiAffinityTo(term("zone", sel("app", "web"))))
	c := world(zonedNodes(2, 1), loner, pod("plain", 0, 0, onNode("node1")))
	web := newPodInfo(pod("p", 0, 0, labelled("app", "web")))
	if n := c.nodes["node1"].affinityPods; n != 1 {
		t.Fatalf("affinityPods %d, want 1", n)
	}
	if s := newAffinityState(c, web, nil); s == nil || s.filter(c.nodes["node1"]).ok() {
		t.Fatal("the loner's anti-affinity was missed")
	}
	c.removePod(loner.UID)
	if n := c.nodes["node1"].affinityPods; n != 0 || newAffinityState(c, web, nil) != nil {
		t.Fatalf("after removal: affinityPods %d", n)
	}
}
