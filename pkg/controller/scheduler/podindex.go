package scheduler

import (
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
)

// labelKey is a pod label in a namespace.
type labelKey struct{ namespace, key, value string }

// labelPods are the pods with one label, and how many of them that are not
// terminating each node holds (what a spread constraint counts).
type labelPods struct {
	pods map[*podInfo]struct{}
	live map[string]int
}

// Kinds of an existing pod's terms in the index.
const (
	kindRequiredAnti = iota
	kindRequired
	kindPreferred
	kindPreferredAnti
)

// termRef is one of an existing pod's affinity terms.
type termRef struct {
	p          *podInfo
	kind, term int
}

func (r termRef) terms() []affinityTerm {
	switch r.kind {
	case kindRequiredAnti:
		return r.p.affinity.requiredAnti
	case kindRequired:
		return r.p.affinity.required
	case kindPreferred:
		return r.p.affinity.preferred
	}
	return r.p.affinity.preferredAnti
}

func (r termRef) get() *affinityTerm { return &r.terms()[r.term] }

// podIndex finds the assigned pods that a label selector can match, and the
// existing pods' affinity terms that can match a pod, by one
// label, so that a cycle visits those instead of every pod in the cluster
// (10,000 selector matches per cycle at 10,000 pods). Selectors without an
// equality or set-inclusion requirement are checked against every pod. The
// cache keeps it under its lock.
type podIndex struct {
	pods    map[types.UID]*podInfo
	byLabel map[labelKey]*labelPods
	// termsBy holds terms by one label they require (namespace left to
	// the term's check); termsAny the terms without such a requirement.
	termsBy  map[labelKey]map[termRef]struct{}
	termsAny map[termRef]struct{}
}

func newPodIndex() *podIndex {
	return &podIndex{pods: map[types.UID]*podInfo{}, byLabel: map[labelKey]*labelPods{},
		termsBy: map[labelKey]map[termRef]struct{}{}, termsAny: map[termRef]struct{}{}}
}

// indexable returns a requirement of sel that only a label among a few
// values satisfies: its key and values, each once (a selector may repeat a
// value; a pod visited twice would count twice).
func indexable(sel labels.Selector) (string, []string, bool) {
	reqs, ok := sel.Requirements()
	if !ok {
		return "", nil, false
	}
	for _, r := range reqs {
		switch r.Operator() {
		case selection.Equals, selection.DoubleEquals, selection.In:
			return r.Key(), r.Values().UnsortedList(), true
		}
	}
	return "", nil, false
}

func (x *podIndex) add(p *podInfo) {
	x.remove(p.pod.UID)
	x.pods[p.pod.UID] = p
	for k, v := range p.pod.Labels {
		lk := labelKey{p.pod.Namespace, k, v}
		m := x.byLabel[lk]
		if m == nil {
			m = &labelPods{pods: map[*podInfo]struct{}{}, live: map[string]int{}}
			x.byLabel[lk] = m
		}
		m.pods[p] = struct{}{}
		if p.pod.DeletionTimestamp == nil {
			m.live[p.pod.Spec.NodeName]++
		}
	}
	if p.affinity == nil {
		return
	}
	forTerms(p, func(ref termRef) {
		key, values, ok := indexable(ref.get().selector)
		if !ok {
			x.termsAny[ref] = struct{}{}
			return
		}
		for _, v := range values {
			lk := labelKey{"", key, v}
			m := x.termsBy[lk]
			if m == nil {
				m = map[termRef]struct{}{}
				x.termsBy[lk] = m
			}
			m[ref] = struct{}{}
		}
	})
}

// forTerms calls fn with each of p's affinity terms.
func forTerms(p *podInfo, fn func(termRef)) {
	pa := p.affinity
	for kind, terms := range [][]affinityTerm{pa.requiredAnti, pa.required, pa.preferred, pa.preferredAnti} {
		for i := range terms {
			fn(termRef{p, kind, i})
		}
	}
}

func (x *podIndex) remove(uid types.UID) {
	p, ok := x.pods[uid]
	if !ok {
		return
	}
	delete(x.pods, uid)
	for k, v := range p.pod.Labels {
		lk := labelKey{p.pod.Namespace, k, v}
		m := x.byLabel[lk]
		if m == nil {
			continue
		}
		delete(m.pods, p)
		if p.pod.DeletionTimestamp == nil {
			if m.live[p.pod.Spec.NodeName]--; m.live[p.pod.Spec.NodeName] <= 0 {
				delete(m.live, p.pod.Spec.NodeName)
			}
		}
		if len(m.pods) == 0 {
			delete(x.byLabel, lk)
		}
	}
	if p.affinity == nil {
		return
	}
	forTerms(p, func(ref termRef) {
		delete(x.termsAny, ref)
		if key, values, ok := indexable(ref.get().selector); ok {
			for _, v := range values {
				lk := labelKey{"", key, v}
				if m := x.termsBy[lk]; m != nil {
					delete(m, ref)
					if len(m) == 0 {
						delete(x.termsBy, lk)
					}
				}
			}
		}
	})
}

// selecting calls fn with every indexed pod in one of namespaces that sel
// may match (a superset: fn checks); every pod when namespaces is nil.
func (x *podIndex) selecting(sel labels.Selector, namespaces sets.Set[string], fn func(*podInfo)) {
	key, values, ok := indexable(sel)
	if !ok || namespaces == nil {
		for _, p := range x.pods {
			fn(p)
		}
		return
	}
	for ns := range namespaces {
		for _, v := range values {
			if m := x.byLabel[labelKey{ns, key, v}]; m != nil {
				for p := range m.pods {
					fn(p)
				}
			}
		}
	}
}

// liveMatching counts per node name the pods in namespace ns that sel
// matches and that are not terminating. A selector of one equality or
// set-inclusion requirement (a Deployment's, usually) is answered from the
// per-label counts without visiting pods.
func (x *podIndex) liveMatching(ns string, sel labels.Selector) map[string]int {
	out := map[string]int{}
	key, values, ok := indexable(sel)
	if reqs, _ := sel.Requirements(); ok && len(reqs) == 1 {
		for _, v := range values {
			if m := x.byLabel[labelKey{ns, key, v}]; m != nil {
				for node, n := range m.live {
					out[node] += n
				}
			}
		}
		return out
	}
	x.selecting(sel, sets.New(ns), func(p *podInfo) {
		if p.pod.Namespace == ns && p.pod.DeletionTimestamp == nil && sel.Matches(labels.Set(p.pod.Labels)) {
			out[p.pod.Spec.NodeName]++
		}
	})
	return out
}

// termsSelecting calls fn with every existing pod's term that may select
// pod (a superset: fn checks).
func (x *podIndex) termsSelecting(pod *v1.Pod, fn func(termRef)) {
	for ref := range x.termsAny {
		fn(ref)
	}
	for k, v := range pod.Labels {
		for ref := range x.termsBy[labelKey{"", k, v}] {
			fn(ref)
		}
	}
}

// assignedNode is the node p is counted on, nil if the node is unknown.
func (c *cache) assignedNode(p *podInfo) *v1.Node {
	if n := c.nodes[p.pod.Spec.NodeName]; n != nil {
		return n.node
	}
	return nil
}
