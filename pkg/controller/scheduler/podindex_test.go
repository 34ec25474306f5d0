package scheduler

import (
	"fmt"
	"maps"
	"math/rand"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
)

// randomSelector is one of the selector shapes the index handles
// differently: equality, set inclusion, two requirements, exists, not-in,
// and empty (every pod).
func randomSelector(r *rand.Rand) *metav1.LabelSelector {
	app := func() string { return fmt.Sprintf("a%d", r.Intn(4)) }
	switch r.Intn(6) {
	case 0:
		return &metav1.LabelSelector{MatchLabels: map[string]string{"app": app()}}
	case 1:
		return &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "app", Operator: metav1.LabelSelectorOpIn, Values: []string{app(), app()}}}}
	case 2:
		return &metav1.LabelSelector{MatchLabels: map[string]string{"app": app(), "tier": "t0"}}
	case 3:
		return &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "tier", Operator: metav1.LabelSelectorOpExists}}}
	case 4:
		return &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "app", Operator: metav1.LabelSelectorOpNotIn, Values: []string{app()}}}}
	}
	return &metav1.LabelSelector{}
}

// randomAffinityPod has random labels, namespace and affinity terms of
// every kind.
func randomAffinityPod(r *rand.Rand, name, node string) *v1.Pod {
	p := pod(name, 0, 10, labels2("app", fmt.Sprintf("a%d", r.Intn(4))))
	if r.Intn(2) == 0 {
		p.Labels["tier"] = fmt.Sprintf("t%d", r.Intn(2))
	}
	if r.Intn(4) == 0 {
		p.Namespace = "other"
	}
	p.Spec.NodeName = node
	if r.Intn(5) == 0 {
		now := metav1.Now()
		p.DeletionTimestamp = &now
	}
	t := func() v1.PodAffinityTerm {
		key := []string{"zone", v1.LabelHostname}[r.Intn(2)]
		return v1.PodAffinityTerm{TopologyKey: key, LabelSelector: randomSelector(r)}
	}
	w := func() v1.WeightedPodAffinityTerm {
		return v1.WeightedPodAffinityTerm{Weight: int32(1 + r.Intn(10)), PodAffinityTerm: t()}
	}
	switch r.Intn(3) {
	case 0:
	case 1:
		p.Spec.Affinity = &v1.Affinity{PodAntiAffinity: &v1.PodAntiAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []v1.PodAffinityTerm{t()},
			PreferredDuringSchedulingIgnoredDuringExecution: []v1.WeightedPodAffinityTerm{w()}}}
	case 2:
		p.Spec.Affinity = &v1.Affinity{PodAffinity: &v1.PodAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []v1.PodAffinityTerm{t(), t()},
			PreferredDuringSchedulingIgnoredDuringExecution: []v1.WeightedPodAffinityTerm{w()}}}
	}
	return p
}

// The index gives the same inter-pod affinity state and scores, and the
// same spread counts, as visiting every pod, while pods come, change
// (labels, terminating) and go.
func TestPodIndexMatchesScan(t *testing.T) {
	r := rand.New(rand.NewSource(7))
	c := world(zonedNodes(12, 4))
	var names []string
	for step := range 300 {
		switch {
		case len(names) > 0 && r.Intn(4) == 0:
			i := r.Intn(len(names))
			c.removePod(types.UID(names[i]))
			names = append(names[:i], names[i+1:]...)
		case len(names) > 0 && r.Intn(3) == 0: // an update of an existing pod
			name := names[r.Intn(len(names))]
			c.setPod(randomAffinityPod(r, name, fmt.Sprintf("node%d", 1+r.Intn(12))))
		default:
			name := fmt.Sprintf("p%d", step)
			names = append(names, name)
			c.setPod(randomAffinityPod(r, name, fmt.Sprintf("node%d", 1+r.Intn(12))))
		}
		if step%10 != 0 {
			continue
		}
		incoming := newPodInfo(randomAffinityPod(r, "incoming", ""))
		c.mu.RLock()
		checkAffinityState(t, c, incoming, step)
		if got, want := affinityScores(c, incoming, nil), scanAffinityScores(c, incoming); !equalScores(got, want) {
			t.Errorf("step %d: affinity scores %v, scanning gives %v", step, got, want)
		}
		for range 3 {
			ls := randomSelector(r)
			sel, err := metav1.LabelSelectorAsSelector(ls)
			if err != nil {
				t.Fatal(err)
			}
			for _, ns := range []string{"default", "other"} {
				if got, want := c.index.liveMatching(ns, sel), scanLive(c, ns, sel); !maps.Equal(got, want) {
					t.Errorf("step %d: live pods matching %v in %s: %v, scanning gives %v", step, ls, ns, got, want)
				}
			}
		}
		c.mu.RUnlock()
	}
}

func checkAffinityState(t *testing.T, c *cache, pi *podInfo, step int) {
	t.Helper()
	got := newAffinityState(c, pi, nil)
	want := &affinityState{pod: pi.pod, nodes: c.nodes}
	if pa := pi.affinity; pa != nil {
		want.required, want.requiredAnti = resolveTerms(pa.required, nil), resolveTerms(pa.requiredAnti, nil)
	}
	for _, n := range c.list {
		for _, p := range n.pods {
			want.count(n.node, p, 1)
		}
	}
	if got == nil {
		if len(want.required)+len(want.requiredAnti) > 0 || want.existingAnti.total != 0 {
			t.Errorf("step %d: no state, scanning finds existing anti-affinity %v", step, want.existingAnti)
		}
		return
	}
	for what, pair := range map[string][2]pairCounts{"existing anti-affinity": {got.existingAnti, want.existingAnti},
		"affinity": {got.affinity, want.affinity}, "anti-affinity": {got.anti, want.anti}} {
		if !equalCounts(pair[0], pair[1]) {
			t.Errorf("step %d: %s counts %v, scanning gives %v", step, what, pair[0], pair[1])
		}
	}
}

// equalCounts ignores domains at zero (a scan that adds and removes leaves
// them; the index never visits them).
func equalCounts(a, b pairCounts) bool {
	if a.total != b.total {
		return false
	}
	nonZero := func(m map[topologyPair]int64) map[topologyPair]int64 {
		out := map[topologyPair]int64{}
		for k, v := range m {
			if v != 0 {
				out[k] = v
			}
		}
		return out
	}
	return maps.Equal(nonZero(a.m), nonZero(b.m))
}

func equalScores(a, b map[string]map[string]int64) bool {
	return maps.EqualFunc(a, b, func(x, y map[string]int64) bool { return maps.Equal(x, y) })
}

// scanAffinityScores is affinityScores by visiting every pod.
func scanAffinityScores(c *cache, pi *podInfo) map[string]map[string]int64 {
	out := map[string]map[string]int64{}
	add := func(node *v1.Node, key string, w int64) {
		if v, ok := node.Labels[key]; ok {
			if out[key] == nil {
				out[key] = map[string]int64{}
			}
			out[key][v] += w
		}
	}
	for _, n := range c.list {
		for _, p := range n.pods {
			if p.pod.UID == pi.pod.UID {
				continue
			}
			if pa := pi.affinity; pa != nil {
				for _, t := range pa.preferred {
					if t.matches(p.pod, nil) {
						add(n.node, t.topologyKey, t.weight)
					}
				}
				for _, t := range pa.preferredAnti {
					if t.matches(p.pod, nil) {
						add(n.node, t.topologyKey, -t.weight)
					}
				}
			}
			if p.affinity != nil {
				forTerms(p, func(ref termRef) {
					if w, ok := existingTermWeight(ref); ok && ref.get().matches(pi.pod, nil) {
						add(n.node, ref.get().topologyKey, w)
					}
				})
			}
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

func scanLive(c *cache, ns string, sel labels.Selector) map[string]int {
	out := map[string]int{}
	for _, n := range c.nodes {
		for _, p := range n.pods {
			if p.pod.Namespace == ns && p.pod.DeletionTimestamp == nil && sel.Matches(labels.Set(p.pod.Labels)) {
				out[p.pod.Spec.NodeName]++
			}
		}
	}
	return out
}
