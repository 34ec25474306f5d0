package integration

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/utils/ptr"
)

// diffChecker knows the cluster as the scheduler should see it (the nodes,
// the pods placed so far and the free volumes) and says, independently of
// either scheduler, which nodes satisfy a pod's hard constraints. It
// evaluates a pod in two steps: what does not depend on the node (which
// pods its terms match, the spread counts) once, then each node, so that a
// seed of 500 nodes and hundreds of pods stays quick.
type diffChecker struct {
	nodes  []*v1.Node
	byName map[string]*v1.Node
	pods   map[string][]*v1.Pod // by node
	// freeVolumes counts the zonal volumes no claim is bound to, per zone;
	// claimed holds the pods (namespace/name) whose claim took one, so that
	// a pod put back after a preemption does not take a second.
	freeVolumes map[string]int
	claimed     map[string]bool
	// devices: the GPUs of each node with a pool (deviceViolation).
	devices map[string]int
	// capacity: the CSI class's GiB on each node (capacityViolation).
	capacity map[string]int64
}

func newDiffChecker(nodes []*v1.Node, volumes []*v1.PersistentVolume) *diffChecker {
	c := &diffChecker{nodes: nodes, byName: map[string]*v1.Node{}, pods: map[string][]*v1.Pod{},
		freeVolumes: map[string]int{}, claimed: map[string]bool{}}
	for _, n := range nodes {
		c.byName[n.Name] = n
	}
	for _, pv := range volumes {
		c.freeVolumes[pv.Labels[zoneKey]]++
	}
	return c
}

func diffKey(p *v1.Pod) string { return p.Namespace + "/" + p.Name }

func (c *diffChecker) place(p *v1.Pod, node string) {
	c.pods[node] = append(c.pods[node], p)
	if diffClaim(p) != nil && !c.claimed[diffKey(p)] {
		c.claimed[diffKey(p)] = true
		c.freeVolumes[c.byName[node].Labels[zoneKey]]--
	}
}

// placed finds a pod by namespace/name, with its node.
func (c *diffChecker) placed(key string) (*v1.Pod, string) {
	for node, ps := range c.pods {
		for _, p := range ps {
			if diffKey(p) == key {
				return p, node
			}
		}
	}
	return nil, ""
}

// without is the cluster after the pods (namespace/name) are removed, as
// preemption removes its victims; their claims stay bound.
func (c *diffChecker) without(keys []string) *diffChecker {
	out := *c
	out.pods = make(map[string][]*v1.Pod, len(c.pods))
	for node, ps := range c.pods {
		out.pods[node] = slices.DeleteFunc(slices.Clone(ps), func(p *v1.Pod) bool { return slices.Contains(keys, diffKey(p)) })
	}
	return &out
}

// verify checks a decision: a placement must be on a node that satisfies
// every constraint, and a pod is left pending only when no node does.
func (c *diffChecker) verify(t *testing.T, who string, p *v1.Pod, node string) {
	t.Helper()
	e := c.evaluate(p)
	var fits []string
	for _, n := range c.nodes {
		why := e.violations(n)
		if n.Name == node && len(why) > 0 {
			t.Errorf("%s: placed on %s, which breaks %s\n pod: %s", who, node, strings.Join(why, "; "), diffDescribe(p))
		}
		if len(why) == 0 {
			fits = append(fits, n.Name)
		}
	}
	if node == "" && len(fits) > 0 {
		t.Errorf("%s: left pending, but %v satisfy every constraint\n pod: %s", who, fits, diffDescribe(p))
	}
}

// domains is a topology key and the values of it where something is.
type domains struct {
	key    string
	values map[string]bool
}

func (d domains) has(n *v1.Node) bool {
	v, ok := n.Labels[d.key]
	return ok && d.values[v]
}

// podEval is what the hard constraints of one pod make of the cluster.
type podEval struct {
	c *diffChecker
	p *v1.Pod
	// spread: each DoNotSchedule constraint with its domain counts.
	spread []spreadEval
	// affinity: per required affinity term, the domains of the pods that
	// match every term; affinityAnywhere: such a pod runs on a node with
	// every key; selfMatch: the pod matches its own terms.
	affinity         []domains
	affinityAnywhere bool
	selfMatch        bool
	// anti: per required anti-affinity term of the pod, the domains of the
	// pods it matches; forbidden: the domains of placed pods whose
	// anti-affinity matches the pod, with the pod's name.
	anti      []domains
	forbidden []forbiddenDomain
}

type spreadEval struct {
	sc     v1.TopologySpreadConstraint
	counts map[string]int
	low    int
	self   int
}

type forbiddenDomain struct {
	domains
	by string
}

func (c *diffChecker) evaluate(p *v1.Pod) *podEval {
	e := &podEval{c: c, p: p}
	e.spread = c.spreadCounts(p)
	var affinity, anti []v1.PodAffinityTerm
	if a := p.Spec.Affinity; a != nil && a.PodAffinity != nil {
		affinity = a.PodAffinity.RequiredDuringSchedulingIgnoredDuringExecution
	}
	if a := p.Spec.Affinity; a != nil && a.PodAntiAffinity != nil {
		anti = a.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution
	}
	// A pod counts for the affinity when it matches every term; when none
	// does anywhere, a pod that matches its own terms may start the group
	// on any node that has the keys.
	matchesAll := func(q *v1.Pod) bool {
		return !slices.ContainsFunc(affinity, func(term v1.PodAffinityTerm) bool { return !termSelects(term, p, q) })
	}
	for _, term := range affinity {
		e.affinity = append(e.affinity, domains{key: term.TopologyKey, values: map[string]bool{}})
	}
	for _, term := range anti {
		e.anti = append(e.anti, domains{key: term.TopologyKey, values: map[string]bool{}})
	}
	for node, qs := range c.pods {
		n := c.byName[node]
		for _, q := range qs {
			if len(affinity) > 0 && matchesAll(q) {
				for i, term := range affinity {
					if v, ok := n.Labels[term.TopologyKey]; ok {
						e.affinity[i].values[v] = true
					}
				}
				if hasKeys(n, affinity) {
					e.affinityAnywhere = true
				}
			}
			for i, term := range anti {
				if v, ok := n.Labels[term.TopologyKey]; ok && termSelects(term, p, q) {
					e.anti[i].values[v] = true
				}
			}
			if q.Spec.Affinity == nil || q.Spec.Affinity.PodAntiAffinity == nil {
				continue
			}
			for _, term := range q.Spec.Affinity.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution {
				if v, ok := n.Labels[term.TopologyKey]; ok && termSelects(term, q, p) {
					e.forbidden = append(e.forbidden, forbiddenDomain{domains{key: term.TopologyKey, values: map[string]bool{v: true}}, q.Name})
				}
			}
		}
	}
	e.selfMatch = len(affinity) > 0 && matchesAll(p)
	return e
}

func hasKeys(n *v1.Node, terms []v1.PodAffinityTerm) bool {
	return !slices.ContainsFunc(terms, func(term v1.PodAffinityTerm) bool { _, has := n.Labels[term.TopologyKey]; return !has })
}

// violations lists the hard constraints the pod breaks on node n.
func (e *podEval) violations(n *v1.Node) []string {
	p := e.p
	var why []string
	if n.Spec.Unschedulable && !tolerates(p.Spec.Tolerations, v1.Taint{Key: v1.TaintNodeUnschedulable, Effect: v1.TaintEffectNoSchedule}) {
		why = append(why, "cordoned")
	}
	for _, taint := range n.Spec.Taints {
		if taint.Effect != v1.TaintEffectPreferNoSchedule && !tolerates(p.Spec.Tolerations, taint) {
			why = append(why, "taint "+taint.Key)
		}
	}
	if !nodeSelected(p, n) {
		why = append(why, "node selector/affinity")
	}
	if diffNeedsFeature(p) && !slices.Contains(n.Status.DeclaredFeatures, parityFeature) {
		why = append(why, "feature "+parityFeature+" not declared")
	}
	why = append(why, e.c.resources(p, n)...)
	why = append(why, e.c.deviceViolation(p, n)...)
	why = append(why, e.c.capacityViolation(p, n)...)
	if diffClaim(p) != nil {
		if zone, ok := n.Labels[zoneKey]; !ok || e.c.freeVolumes[zone] <= 0 {
			why = append(why, "no free volume in the node's zone")
		}
	}
	for _, s := range e.spread {
		value, ok := n.Labels[s.sc.TopologyKey]
		if !ok {
			why = append(why, "spread: no "+s.sc.TopologyKey)
			continue
		}
		if s.counts[value]+s.self-s.low > int(s.sc.MaxSkew) {
			why = append(why, fmt.Sprintf("spread on %s: %d+%d-%d > %d", s.sc.TopologyKey, s.counts[value], s.self, s.low, s.sc.MaxSkew))
		}
	}
	if len(e.affinity) > 0 {
		ok := !slices.ContainsFunc(e.affinity, func(d domains) bool { return !d.has(n) })
		keys := !slices.ContainsFunc(e.affinity, func(d domains) bool { _, has := n.Labels[d.key]; return !has })
		if !ok && !(keys && !e.affinityAnywhere && e.selfMatch) {
			why = append(why, "pod affinity")
		}
	}
	for _, d := range e.anti {
		if d.has(n) {
			why = append(why, "pod anti-affinity on "+d.key)
		}
	}
	for _, f := range e.forbidden {
		if f.has(n) {
			why = append(why, "existing pod "+f.by+"'s anti-affinity")
		}
	}
	return why
}

func tolerates(tols []v1.Toleration, taint v1.Taint) bool {
	for _, tol := range tols {
		if tol.Effect != "" && tol.Effect != taint.Effect {
			continue
		}
		if tol.Key == "" && tol.Operator == v1.TolerationOpExists {
			return true
		}
		if tol.Key != taint.Key {
			continue
		}
		if tol.Operator == v1.TolerationOpExists || tol.Value == taint.Value {
			return true
		}
	}
	return false
}

func untoleratedTaint(p *v1.Pod, n *v1.Node) bool {
	for _, taint := range n.Spec.Taints {
		if taint.Effect != v1.TaintEffectPreferNoSchedule && !tolerates(p.Spec.Tolerations, taint) {
			return true
		}
	}
	return false
}

// nodeSelected: nodeSelector and required node affinity.
func nodeSelected(p *v1.Pod, n *v1.Node) bool {
	for k, v := range p.Spec.NodeSelector {
		if n.Labels[k] != v {
			return false
		}
	}
	if p.Spec.Affinity == nil || p.Spec.Affinity.NodeAffinity == nil || p.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		return true
	}
	for _, term := range p.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
		if termMatches(term, n.Labels) && fieldsMatch(term, n) && len(term.MatchExpressions)+len(term.MatchFields) > 0 {
			return true
		}
	}
	return false
}

func termMatches(term v1.NodeSelectorTerm, l map[string]string) bool {
	for _, req := range term.MatchExpressions {
		v, ok := l[req.Key]
		var match bool
		switch req.Operator {
		case v1.NodeSelectorOpIn:
			match = ok && slices.Contains(req.Values, v)
		case v1.NodeSelectorOpNotIn:
			match = !ok || !slices.Contains(req.Values, v)
		case v1.NodeSelectorOpExists:
			match = ok
		case v1.NodeSelectorOpDoesNotExist:
			match = !ok
		case v1.NodeSelectorOpGt, v1.NodeSelectorOpLt:
			var have, want int64
			_, err1 := fmt.Sscan(v, &have)
			_, err2 := fmt.Sscan(req.Values[0], &want)
			match = ok && err1 == nil && err2 == nil && (req.Operator == v1.NodeSelectorOpGt && have > want || req.Operator == v1.NodeSelectorOpLt && have < want)
		}
		if !match {
			return false
		}
	}
	return true // an empty term: nodeSelected
}

func (c *diffChecker) resources(p *v1.Pod, n *v1.Node) []string {
	var why []string
	on := c.pods[n.Name]
	if int64(len(on))+1 > n.Status.Allocatable.Pods().Value() {
		why = append(why, "too many pods")
	}
	for _, res := range []v1.ResourceName{v1.ResourceCPU, v1.ResourceMemory} {
		used := p.Spec.Containers[0].Resources.Requests[res].DeepCopy()
		for _, q := range on {
			used.Add(diffRequest(q, res))
		}
		if alloc := n.Status.Allocatable[res]; used.Cmp(alloc) > 0 {
			why = append(why, "insufficient "+string(res))
		}
	}
	return why
}

// selects: the selector, narrowed by matchLabelKeys to the owner's values
// of those keys (as the API server stores it), matches l.
func selects(sel *metav1.LabelSelector, keys []string, owner *v1.Pod, l map[string]string) bool {
	sel = sel.DeepCopy()
	for _, k := range keys {
		if v, ok := owner.Labels[k]; ok {
			sel.MatchExpressions = append(sel.MatchExpressions, metav1.LabelSelectorRequirement{Key: k, Operator: metav1.LabelSelectorOpIn, Values: []string{v}})
		}
	}
	s, err := metav1.LabelSelectorAsSelector(sel)
	return err == nil && s.Matches(labels.Set(l))
}

// spreadCounts: every DoNotSchedule constraint. Domains are counted over
// the nodes that have every such constraint's key and, per the
// constraint's policies, match the pod's node selection and have no taint
// it does not tolerate; fewer domains than minDomains make the lowest
// count 0. Pods count in the pod's own namespace only.
func (c *diffChecker) spreadCounts(p *v1.Pod) []spreadEval {
	var hard []v1.TopologySpreadConstraint
	for _, sc := range p.Spec.TopologySpreadConstraints {
		if sc.WhenUnsatisfiable == v1.DoNotSchedule {
			hard = append(hard, sc)
		}
	}
	var out []spreadEval
	for _, sc := range hard {
		counts := map[string]int{}
		for _, m := range c.nodes {
			if slices.ContainsFunc(hard, func(o v1.TopologySpreadConstraint) bool { _, ok := m.Labels[o.TopologyKey]; return !ok }) {
				continue
			}
			if ptr.Deref(sc.NodeAffinityPolicy, v1.NodeInclusionPolicyHonor) == v1.NodeInclusionPolicyHonor && !nodeSelected(p, m) {
				continue
			}
			if ptr.Deref(sc.NodeTaintsPolicy, v1.NodeInclusionPolicyIgnore) == v1.NodeInclusionPolicyHonor && untoleratedTaint(p, m) {
				continue
			}
			d := m.Labels[sc.TopologyKey]
			counts[d] += 0
			for _, q := range c.pods[m.Name] {
				if q.Namespace == p.Namespace && selects(sc.LabelSelector, sc.MatchLabelKeys, p, q.Labels) {
					counts[d]++
				}
			}
		}
		low := -1
		for _, k := range counts {
			if low < 0 || k < low {
				low = k
			}
		}
		if low < 0 || len(counts) < int(ptr.Deref(sc.MinDomains, 1)) {
			low = 0
		}
		self := 0
		if selects(sc.LabelSelector, sc.MatchLabelKeys, p, p.Labels) {
			self = 1
		}
		out = append(out, spreadEval{sc: sc, counts: counts, low: low, self: self})
	}
	return out
}

// termSelects: an affinity term of owner selects q: q is in one of the
// term's namespaces (its list, the namespaces its namespaceSelector
// matches, or else owner's own) and matches its label selector.
func termSelects(term v1.PodAffinityTerm, owner, q *v1.Pod) bool {
	return termNamespace(term, owner.Namespace, q.Namespace) && selects(term.LabelSelector, term.MatchLabelKeys, owner, q.Labels)
}

func termNamespace(term v1.PodAffinityTerm, ownerNS, ns string) bool {
	if len(term.Namespaces) == 0 && term.NamespaceSelector == nil {
		return ns == ownerNS
	}
	if slices.Contains(term.Namespaces, ns) {
		return true
	}
	if term.NamespaceSelector == nil {
		return false
	}
	s, err := metav1.LabelSelectorAsSelector(term.NamespaceSelector)
	return err == nil && s.Matches(diffNamespaceLabels(ns))
}

// diffNamespaceLabels are a namespace's labels as the API server keeps
// them (with kubernetes.io/metadata.name).
func diffNamespaceLabels(ns string) labels.Set {
	l := labels.Set{v1.LabelMetadataName: ns}
	maps.Copy(l, diffNamespaces[ns])
	return l
}

func diffDescribe(p *v1.Pod) string {
	b, _ := json.Marshal(struct {
		Namespace string
		Labels    map[string]string
		Spec      v1.PodSpec
	}{p.Namespace, p.Labels, p.Spec})
	return string(b)
}
