package scheduler

import (
	"fmt"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/sets"
	corelisters "k8s.io/client-go/listers/core/v1"
)

// InterPodAffinity, as kube-scheduler's plugin of that name: reasons,
// codes, the score's hard affinity weight.
const (
	reasonPodAffinity                = "node(s) didn't match pod affinity rules"
	reasonPodAntiAffinity            = "node(s) didn't match pod anti-affinity rules"
	reasonExistingAntiAffinity       = "node(s) didn't satisfy existing pods anti-affinity rules"
	weightInterPodAffinity           = 2
	hardPodAffinityWeight      int64 = 1
)

// affinityTerm is a parsed PodAffinityTerm. The API server has already
// merged matchLabelKeys and mismatchLabelKeys into the label selector when
// the pod was created (KEP-3633), so the selector is used as it is.
type affinityTerm struct {
	namespaces  sets.Set[string]
	nsSelector  labels.Selector // nil: none
	selector    labels.Selector
	topologyKey string
	weight      int64
}

// matches is true when pod, in a namespace labelled nsLabels, is selected
// by the term.
// The label selector is checked first: across a cluster's pods it is the
// test that usually fails, and the cheaper one.
func (t *affinityTerm) matches(pod *v1.Pod, nsLabels labels.Set) bool {
	if !t.selector.Matches(labels.Set(pod.Labels)) {
		return false
	}
	return t.namespaces.Has(pod.Namespace) || (t.nsSelector != nil && t.nsSelector.Matches(nsLabels))
}

// podAffinity holds a pod's parsed pod affinity and anti-affinity terms.
type podAffinity struct {
	required, requiredAnti   []affinityTerm
	preferred, preferredAnti []affinityTerm
	err                      error
}

func parseTerm(pod *v1.Pod, t *v1.PodAffinityTerm, weight int32, where string) (affinityTerm, error) {
	sel, err := metav1.LabelSelectorAsSelector(t.LabelSelector)
	if err != nil {
		return affinityTerm{}, fmt.Errorf("%s.labelSelector: %w", where, err)
	}
	out := affinityTerm{namespaces: sets.New(t.Namespaces...), selector: sel, topologyKey: t.TopologyKey, weight: int64(weight)}
	if t.NamespaceSelector != nil {
		if out.nsSelector, err = metav1.LabelSelectorAsSelector(t.NamespaceSelector); err != nil {
			return affinityTerm{}, fmt.Errorf("%s.namespaceSelector: %w", where, err)
		}
	} else if len(t.Namespaces) == 0 {
		out.namespaces.Insert(pod.Namespace) // default: the pod's own namespace
	}
	return out, nil
}

// parsePodAffinity returns nil for a pod without pod (anti-)affinity terms.
func parsePodAffinity(pod *v1.Pod) *podAffinity {
	a := pod.Spec.Affinity
	if a == nil || (a.PodAffinity == nil && a.PodAntiAffinity == nil) {
		return nil
	}
	pa := &podAffinity{}
	add := func(dst *[]affinityTerm, t *v1.PodAffinityTerm, w int32, where string) {
		term, err := parseTerm(pod, t, w, where)
		if err != nil {
			if pa.err == nil {
				pa.err = err
			}
			return
		}
		*dst = append(*dst, term)
	}
	if x := a.PodAffinity; x != nil {
		for i := range x.RequiredDuringSchedulingIgnoredDuringExecution {
			add(&pa.required, &x.RequiredDuringSchedulingIgnoredDuringExecution[i], 0, fmt.Sprintf("podAffinity.required[%d]", i))
		}
		for i := range x.PreferredDuringSchedulingIgnoredDuringExecution {
			w := &x.PreferredDuringSchedulingIgnoredDuringExecution[i]
			add(&pa.preferred, &w.PodAffinityTerm, w.Weight, fmt.Sprintf("podAffinity.preferred[%d]", i))
		}
	}
	if x := a.PodAntiAffinity; x != nil {
		for i := range x.RequiredDuringSchedulingIgnoredDuringExecution {
			add(&pa.requiredAnti, &x.RequiredDuringSchedulingIgnoredDuringExecution[i], 0, fmt.Sprintf("podAntiAffinity.required[%d]", i))
		}
		for i := range x.PreferredDuringSchedulingIgnoredDuringExecution {
			w := &x.PreferredDuringSchedulingIgnoredDuringExecution[i]
			add(&pa.preferredAnti, &w.PodAffinityTerm, w.Weight, fmt.Sprintf("podAntiAffinity.preferred[%d]", i))
		}
	}
	if len(pa.required)+len(pa.requiredAnti)+len(pa.preferred)+len(pa.preferredAnti) == 0 && pa.err == nil {
		return nil
	}
	return pa
}

type topologyPair struct{ key, value string }

// pairCounts counts matching pods per topology domain. Entries never go
// below zero, so "no matching pod anywhere" is total == 0.
type pairCounts struct {
	m     map[topologyPair]int64
	total int64
}

func (c *pairCounts) add(node *v1.Node, key string, d int64) {
	v, ok := node.Labels[key]
	if !ok {
		return
	}
	if c.m == nil {
		c.m = map[topologyPair]int64{}
	}
	c.m[topologyPair{key, v}] += d
	c.total += d
}

// affinityState is kube-scheduler's InterPodAffinity PreFilter state for
// one pod and one scheduling cycle, computed from the cache once: matching
// pods per topology domain. A node whose pods differ from the cache's (the
// pods nominated to it added, preemption victims removed) is evaluated with
// the difference applied, as upstream's AddPod/RemovePod do.
type affinityState struct {
	pod *v1.Pod
	// required and requiredAnti are the pod's terms with namespaceSelector
	// resolved to namespaces.
	required, requiredAnti []affinityTerm
	nsLabels               labels.Set
	// selfMatch: the pod matches all its own required affinity terms.
	selfMatch bool
	// existingAnti: pods whose required anti-affinity matches the pod;
	// affinity: pods matching all the pod's required affinity terms;
	// anti: pods matching one of its required anti-affinity terms (per term).
	existingAnti, affinity, anti pairCounts
	// nodes is the cache's node map, to detect modified copies.
	nodes map[string]*nodeInfo
}

// namespaceLabels returns the labels of namespace ns (nil if unknown).
func namespaceLabels(l corelisters.NamespaceLister, ns string) labels.Set {
	if l == nil {
		return nil
	}
	n, err := l.Get(ns)
	if err != nil {
		return nil
	}
	return n.Labels
}

// resolveTerms turns namespaceSelectors into namespace sets (upstream's
// PreFilter does the same), so that existing pods are matched by namespace
// name only.
func resolveTerms(terms []affinityTerm, l corelisters.NamespaceLister) []affinityTerm {
	out := make([]affinityTerm, len(terms))
	for i, t := range terms {
		out[i] = t
		if t.nsSelector == nil {
			continue
		}
		ns := t.namespaces.Clone()
		if l != nil {
			if list, err := l.List(labels.Everything()); err == nil {
				for _, n := range list {
					if t.nsSelector.Matches(labels.Set(n.Labels)) {
						ns.Insert(n.Name)
					}
				}
			}
		}
		out[i].namespaces, out[i].nsSelector = ns, nil
	}
	return out
}

// newAffinityState builds the state from the cache (read-locked by the
// caller); nil when neither the pod nor any existing pod has required terms
// that concern it.
func newAffinityState(c *cache, pi *podInfo, l corelisters.NamespaceLister) *affinityState {
	s := &affinityState{pod: pi.pod, nodes: c.nodes}
	if pa := pi.affinity; pa != nil {
		s.required = resolveTerms(pa.required, l)
		s.requiredAnti = resolveTerms(pa.requiredAnti, l)
	}
	s.nsLabels = namespaceLabels(l, pi.pod.Namespace)
	s.selfMatch = len(s.required) > 0 && s.matchesAll(pi.pod)
	s.countIndexed(c)
	if len(s.required) == 0 && len(s.requiredAnti) == 0 && s.existingAnti.total == 0 {
		return nil
	}
	return s
}

func (s *affinityState) matchesAll(p *v1.Pod) bool {
	for i := range s.required {
		if !s.required[i].matches(p, nil) {
			return false
		}
	}
	return true
}

// countIndexed is the sum of count over the cache's pods, visiting only
// the pods and terms that the index says may match.
func (s *affinityState) countIndexed(c *cache) {
	c.index.termsSelecting(s.pod, func(ref termRef) {
		if ref.kind != kindRequiredAnti {
			return
		}
		t := ref.get()
		if ref.p.pod.UID == s.pod.UID || !t.matches(s.pod, s.nsLabels) {
			return
		}
		if node := c.assignedNode(ref.p); node != nil {
			s.existingAnti.add(node, t.topologyKey, 1)
		}
	})
	if len(s.required) > 0 {
		c.index.selecting(s.required[0].selector, s.required[0].namespaces, func(p *podInfo) {
			if p.pod.UID == s.pod.UID || !s.matchesAll(p.pod) {
				return
			}
			if node := c.assignedNode(p); node != nil {
				for i := range s.required {
					s.affinity.add(node, s.required[i].topologyKey, 1)
				}
			}
		})
	}
	for i := range s.requiredAnti {
		t := &s.requiredAnti[i]
		c.index.selecting(t.selector, t.namespaces, func(p *podInfo) {
			if p.pod.UID == s.pod.UID || !t.matches(p.pod, nil) {
				return
			}
			if node := c.assignedNode(p); node != nil {
				s.anti.add(node, t.topologyKey, 1)
			}
		})
	}
}

// count adds (d = 1) or removes (d = -1) existing pod p on node.
func (s *affinityState) count(node *v1.Node, p *podInfo, d int64) {
	if p.pod.UID == s.pod.UID {
		return
	}
	if pa := p.affinity; pa != nil {
		for i := range pa.requiredAnti {
			if t := &pa.requiredAnti[i]; t.matches(s.pod, s.nsLabels) {
				s.existingAnti.add(node, t.topologyKey, d)
			}
		}
	}
	if len(s.required) > 0 && s.matchesAll(p.pod) {
		for i := range s.required {
			s.affinity.add(node, s.required[i].topologyKey, d)
		}
	}
	for i := range s.requiredAnti {
		if t := &s.requiredAnti[i]; t.matches(p.pod, nil) {
			s.anti.add(node, t.topologyKey, d)
		}
	}
}

// forNode returns the state to evaluate n with: s itself when n holds the
// cache's pods, otherwise a copy with the difference applied.
func (s *affinityState) forNode(n *nodeInfo) *affinityState {
	base := s.nodes[n.name()]
	if base == n || base == nil {
		return s
	}
	inBase := make(map[*podInfo]bool, len(base.pods))
	for _, p := range base.pods {
		inBase[p] = true
	}
	var changed *affinityState
	edit := func(p *podInfo, d int64) {
		if changed == nil {
			c := *s
			c.existingAnti, c.affinity, c.anti = s.existingAnti.clone(), s.affinity.clone(), s.anti.clone()
			changed = &c
		}
		changed.count(n.node, p, d)
	}
	for _, p := range n.pods {
		if inBase[p] {
			delete(inBase, p)
		} else {
			edit(p, 1)
		}
	}
	for p := range inBase {
		edit(p, -1)
	}
	if changed == nil {
		return s
	}
	return changed
}

func (c pairCounts) clone() pairCounts {
	out := pairCounts{total: c.total}
	if c.m != nil {
		out.m = make(map[topologyPair]int64, len(c.m))
		for k, v := range c.m {
			out.m[k] = v
		}
	}
	return out
}

// filterInterPodAffinity is InterPodAffinity's Filter on node n.
func (s *affinityState) filter(n *nodeInfo) status {
	if s == nil {
		return status{}
	}
	st := s.forNode(n)
	node := n.node
	if len(st.required) > 0 {
		ok := true
		for i := range st.required {
			v, has := node.Labels[st.required[i].topologyKey]
			if !has {
				return reject(unresolvable, reasonPodAffinity)
			}
			if st.affinity.m[topologyPair{st.required[i].topologyKey, v}] <= 0 {
				ok = false
			}
		}
		// The first pod of a group that matches its own affinity may go
		// anywhere when no pod matches anywhere.
		if !ok && !(st.affinity.total == 0 && st.selfMatch) {
			return reject(unresolvable, reasonPodAffinity)
		}
	}
	for i := range st.requiredAnti {
		k := st.requiredAnti[i].topologyKey
		if v, has := node.Labels[k]; has && st.anti.m[topologyPair{k, v}] > 0 {
			return reject(unschedulable, reasonPodAntiAffinity)
		}
	}
	if st.existingAnti.total > 0 {
		for k, v := range node.Labels {
			if st.existingAnti.m[topologyPair{k, v}] > 0 {
				return reject(unschedulable, reasonExistingAntiAffinity)
			}
		}
	}
	return status{}
}

// affinityScores is InterPodAffinity's PreScore: per topology key and value,
// the summed weights of the preferred terms (the pod's own, and existing
// pods' that match it, with their required affinity at weight 1) over the
// existing pods in that domain. nil when nothing contributes.
func affinityScores(c *cache, pi *podInfo, l corelisters.NamespaceLister) map[string]map[string]int64 {
	var own *podAffinity
	if pa := pi.affinity; pa != nil && len(pa.preferred)+len(pa.preferredAnti) > 0 {
		own = &podAffinity{preferred: resolveTerms(pa.preferred, l), preferredAnti: resolveTerms(pa.preferredAnti, l)}
	}
	var nsLabels labels.Set
	nsLoaded := false
	nsLabelsOf := func() labels.Set {
		if !nsLoaded {
			nsLabels, nsLoaded = namespaceLabels(l, pi.pod.Namespace), true
		}
		return nsLabels
	}
	out := map[string]map[string]int64{}
	add := func(node *v1.Node, key string, w int64) {
		v, ok := node.Labels[key]
		if !ok {
			return
		}
		m := out[key]
		if m == nil {
			m = map[string]int64{}
			out[key] = m
		}
		m[v] += w
	}
	if own != nil {
		for sign, terms := range map[int64][]affinityTerm{1: own.preferred, -1: own.preferredAnti} {
			for i := range terms {
				t := &terms[i]
				c.index.selecting(t.selector, t.namespaces, func(p *podInfo) {
					if p.pod.UID == pi.pod.UID || !t.matches(p.pod, nil) {
						return
					}
					if node := c.assignedNode(p); node != nil {
						add(node, t.topologyKey, sign*t.weight)
					}
				})
			}
		}
	}
	c.index.termsSelecting(pi.pod, func(ref termRef) {
		w, ok := existingTermWeight(ref)
		if !ok || ref.p.pod.UID == pi.pod.UID || !ref.get().matches(pi.pod, nsLabelsOf()) {
			return
		}
		if node := c.assignedNode(ref.p); node != nil {
			add(node, ref.get().topologyKey, w)
		}
	})
	if len(out) == 0 {
		return nil
	}
	return out
}

// existingTermWeight is what an existing pod's term that selects the
// incoming pod adds to its domain's score: required affinity at
// hardPodAffinityWeight, preferred terms their weight (negative for
// anti-affinity); required anti-affinity is the filter's, not the score's.
func existingTermWeight(ref termRef) (int64, bool) {
	switch ref.kind {
	case kindRequired:
		return hardPodAffinityWeight, true
	case kindPreferred:
		return ref.get().weight, true
	case kindPreferredAnti:
		return -ref.get().weight, true
	}
	return 0, false
}

// affinityScore is InterPodAffinity's Score of node (before normalisation).
func affinityScore(scores map[string]map[string]int64, node *v1.Node) int64 {
	var s int64
	for k, m := range scores {
		if v, ok := node.Labels[k]; ok {
			s += m[v]
		}
	}
	return s
}

// normaliseInterPod maps raw scores to 0..100 between the lowest and the
// highest, as upstream's NormalizeScore (all 0 when they are equal).
func normaliseInterPod(raw []int64) []int64 {
	out := make([]int64, len(raw))
	if len(raw) == 0 {
		return out
	}
	lo, hi := raw[0], raw[0]
	for _, v := range raw {
		lo, hi = min(lo, v), max(hi, v)
	}
	if hi == lo {
		return out
	}
	for i, v := range raw {
		out[i] = int64(float64(maxNodeScore) * (float64(v-lo) / float64(hi-lo)))
	}
	return out
}

// affinityRejected is true when some node rejected the pod for inter-pod
// (anti-)affinity: assigned pods' changes may then help it.
func affinityRejected(statuses map[string]status) bool {
	for _, st := range statuses {
		for _, r := range st.reasons {
			if r == reasonPodAffinity || r == reasonPodAntiAffinity || r == reasonExistingAntiAffinity {
				return true
			}
		}
	}
	return false
}
