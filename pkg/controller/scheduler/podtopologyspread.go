package scheduler

import (
	"math"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/selection"
	appslisters "k8s.io/client-go/listers/apps/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/klog/v2"
)

// PodTopologySpread as kube-scheduler's plugin of that name: a filter for
// the pod's DoNotSchedule constraints and a score (weight 2) for its
// ScheduleAnyway ones; pods without constraints get the cluster's default
// constraints (--default-pod-topology-spread).
const (
	reasonSpread        = "node(s) didn't match pod topology spread constraints"
	reasonSpreadLabel   = "node(s) didn't match pod topology spread constraints (missing required label)"
	weightSpread        = 2
	spreadEventPodAdd   = "AssignedPodAdd"
	spreadEventPodLabel = "AssignedPodUpdate"
)

// spreadConstraint is one constraint resolved for the pod being scheduled.
type spreadConstraint struct {
	maxSkew    int
	key        string
	selector   labels.Selector
	minDomains int
	// honorAffinity and honorTaints are nodeAffinityPolicy and
	// nodeTaintsPolicy: whether nodes the pod cannot use count as domains.
	honorAffinity, honorTaints bool
	// selfMatch is 1 when the pod matches its own selector: placing it
	// raises its domain's count.
	selfMatch int
}

// spreadEnv is what the scheduler knows beyond the pod: the default
// constraints and the owners that give a pod without constraints its
// selector.
type spreadEnv struct {
	defaults spreadDefaults
	services corelisters.ServiceLister
	rcs      corelisters.ReplicationControllerLister
	rss      appslisters.ReplicaSetLister
	sss      appslisters.StatefulSetLister
}

// defaultSelector is kube-scheduler's selector for default constraints:
// the selectors of the Services selecting the pod and of its controller
// (ReplicationController, ReplicaSet, StatefulSet), merged.
func (e *spreadEnv) defaultSelector(pod *v1.Pod) labels.Selector {
	set := labels.Set{}
	if e.services != nil {
		svcs, _ := e.services.Services(pod.Namespace).List(labels.Everything())
		for _, svc := range svcs {
			if svc.Spec.Selector != nil && labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(pod.Labels)) {
				set = labels.Merge(set, svc.Spec.Selector)
			}
		}
	}
	sel := labels.SelectorFromSet(set)
	owner := metav1.GetControllerOfNoCopy(pod)
	if owner == nil {
		return sel
	}
	gv, _ := schema.ParseGroupVersion(owner.APIVersion)
	var ls *metav1.LabelSelector
	switch gv.WithKind(owner.Kind) {
	case v1.SchemeGroupVersion.WithKind("ReplicationController"):
		if e.rcs != nil {
			if rc, err := e.rcs.ReplicationControllers(pod.Namespace).Get(owner.Name); err == nil {
				set = labels.Merge(set, rc.Spec.Selector)
				sel = labels.SelectorFromSet(set)
			}
		}
	case schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "ReplicaSet"}:
		if e.rss != nil {
			if rs, err := e.rss.ReplicaSets(pod.Namespace).Get(owner.Name); err == nil {
				ls = rs.Spec.Selector
			}
		}
	case schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "StatefulSet"}:
		if e.sss != nil {
			if ss, err := e.sss.StatefulSets(pod.Namespace).Get(owner.Name); err == nil {
				ls = ss.Spec.Selector
			}
		}
	}
	if ls != nil {
		if other, err := metav1.LabelSelectorAsSelector(ls); err == nil {
			if reqs, ok := other.Requirements(); ok {
				sel = sel.Add(reqs...)
			}
		}
	}
	return sel
}

// spreadConstraintsOf returns the pod's constraints for the filter
// (DoNotSchedule) and for the score (ScheduleAnyway): its own, or the
// defaults when it has none. system is true when the defaults are
// kube-scheduler's system defaults and the pod has no constraints.
func (e *spreadEnv) spreadConstraintsOf(pod *v1.Pod) (hard, soft []spreadConstraint, system bool) {
	own := pod.Spec.TopologySpreadConstraints
	var defaultSel labels.Selector
	if len(own) == 0 {
		if e == nil {
			return nil, nil, false
		}
		own = e.defaults.constraints()
		if len(own) == 0 {
			return nil, nil, false
		}
		defaultSel = e.defaultSelector(pod)
		if defaultSel.Empty() {
			return nil, nil, false
		}
		system = e.defaults.system
	}
	for i := range own {
		c := &own[i]
		sc := spreadConstraint{maxSkew: int(c.MaxSkew), key: c.TopologyKey, minDomains: 1, honorAffinity: true, selector: defaultSel}
		if c.MinDomains != nil {
			sc.minDomains = int(*c.MinDomains)
		}
		if c.NodeAffinityPolicy != nil {
			sc.honorAffinity = *c.NodeAffinityPolicy == v1.NodeInclusionPolicyHonor
		}
		if c.NodeTaintsPolicy != nil {
			sc.honorTaints = *c.NodeTaintsPolicy == v1.NodeInclusionPolicyHonor
		}
		if sc.selector == nil {
			sc.selector = spreadSelector(pod, c)
		}
		if sc.selector.Matches(labels.Set(pod.Labels)) {
			sc.selfMatch = 1
		}
		if c.WhenUnsatisfiable == v1.DoNotSchedule {
			hard = append(hard, sc)
		} else {
			soft = append(soft, sc)
		}
	}
	return hard, soft, system
}

// spreadSelector is the constraint's labelSelector narrowed by matchLabelKeys
// to the incoming pod's values. The API server validates selectors; one that
// still does not parse matches nothing.
func spreadSelector(pod *v1.Pod, c *v1.TopologySpreadConstraint) labels.Selector {
	sel, err := metav1.LabelSelectorAsSelector(c.LabelSelector)
	if err != nil {
		return labels.Nothing()
	}
	for _, k := range c.MatchLabelKeys {
		v, ok := pod.Labels[k]
		if !ok {
			continue
		}
		r, err := labels.NewRequirement(k, selection.In, []string{v})
		if err != nil {
			return labels.Nothing()
		}
		sel = sel.Add(*r)
	}
	return sel
}

// spreadState is PodTopologySpread's per-cycle state for one pod: the domain
// counts of its DoNotSchedule constraints, computed once over all nodes, and
// what scoring needs.
type spreadState struct {
	q    *podQuery
	hard []spreadConstraint
	// counts[i] are constraint i's matching pods per domain (topology
	// value) over the nodes eligible for it, domains with none included.
	counts []map[string]int
	// min1 (in domain min1Of) and min2 are the two lowest counts, so that
	// the minimum is known again after one domain's count changes.
	min1, min2 []int
	min1Of     []string
	// nodes are the nodes as counted; a nodeInfo that is not one of them
	// (preemption's copy without victims, or with nominated pods) is
	// recounted.
	nodes map[string]*nodeInfo

	soft   []spreadConstraint
	system bool
	all    []*nodeInfo
	index  *podIndex
}

// newSpreadState builds the pod's state from the cache (read-locked by the
// caller); nil when the pod has no constraints at all.
func newSpreadState(e *spreadEnv, q *podQuery, c *cache) *spreadState {
	hard, soft, system := e.spreadConstraintsOf(q.pod)
	if len(hard) == 0 && len(soft) == 0 {
		return nil
	}
	s := &spreadState{q: q, hard: hard, soft: soft, system: system, all: c.list, nodes: c.nodes, index: c.index}
	if len(hard) == 0 {
		return s
	}
	s.counts = make([]map[string]int, len(hard))
	perNode := make([]map[string]int, len(hard))
	for i := range hard {
		s.counts[i] = map[string]int{}
		perNode[i] = c.index.liveMatching(q.pod.Namespace, hard[i].selector)
	}
	for _, n := range c.list {
		if !hasKeys(n.node, hard) {
			continue
		}
		for i := range hard {
			if s.eligible(&hard[i], n.node) {
				s.counts[i][n.node.Labels[hard[i].key]] += perNode[i][n.node.Name]
			}
		}
	}
	s.min1, s.min2, s.min1Of = make([]int, len(hard)), make([]int, len(hard)), make([]string, len(hard))
	for i, m := range s.counts {
		s.min1[i], s.min2[i] = math.MaxInt, math.MaxInt
		for d, v := range m {
			switch {
			case v < s.min1[i]:
				s.min2[i], s.min1[i], s.min1Of[i] = s.min1[i], v, d
			case v < s.min2[i]:
				s.min2[i] = v
			}
		}
	}
	return s
}

func hasKeys(node *v1.Node, cs []spreadConstraint) bool {
	for i := range cs {
		if _, ok := node.Labels[cs[i].key]; !ok {
			return false
		}
	}
	return true
}

// eligible is kube-scheduler's node inclusion policies: with Honor, nodes
// that the pod's node affinity/selector excludes, or whose NoSchedule and
// NoExecute taints it does not tolerate, are no domain of the constraint.
func (s *spreadState) eligible(c *spreadConstraint, node *v1.Node) bool {
	if c.honorAffinity {
		if ok, _ := s.q.affinity.Match(node); !ok {
			return false
		}
	}
	if c.honorTaints {
		if _, untolerated := corev1helpers.FindMatchingUntoleratedTaint(klog.Background(), node.Spec.Taints, s.q.tolerations, doNotSchedule, false); untolerated {
			return false
		}
	}
	return true
}

// matching counts the pods on n that the constraint selects: in the pod's
// namespace and not terminating.
func (s *spreadState) matching(c *spreadConstraint, n *nodeInfo) int {
	count := 0
	for _, p := range n.pods {
		if p.pod.Namespace == s.q.pod.Namespace && p.pod.DeletionTimestamp == nil && c.selector.Matches(labels.Set(p.pod.Labels)) {
			count++
		}
	}
	return count
}

// filter is PodTopologySpread's Filter on n. A node without a constraint's
// topology key cannot be helped by preemption; a skew can.
func (s *spreadState) filter(n *nodeInfo) status {
	if s == nil || len(s.hard) == 0 {
		return status{}
	}
	node := n.node
	if !hasKeys(node, s.hard) {
		return reject(unresolvable, reasonSpreadLabel)
	}
	orig := s.nodes[node.Name]
	for i := range s.hard {
		c := &s.hard[i]
		domain := node.Labels[c.key]
		count, low := s.counts[i][domain], s.min1[i]
		if orig != nil && orig != n && s.eligible(c, node) {
			// Victims removed or nominated pods added: only this domain's
			// count moves, and with it possibly the minimum.
			if d := s.matching(c, n) - s.matching(c, orig); d != 0 {
				count += d
				if domain == s.min1Of[i] {
					low = min(count, s.min2[i])
				} else {
					low = min(low, count)
				}
			}
		}
		if len(s.counts[i]) < c.minDomains {
			low = 0
		}
		if count+c.selfMatch-low > c.maxSkew {
			return reject(unschedulable, reasonSpread)
		}
	}
	return status{}
}

// score adds PodTopologySpread's weighted, normalised score of the feasible
// nodes to scores. Each constraint adds count×log(domains+2) + maxSkew−1 for
// the node's domain; fewer matching pods score higher after normalisation.
func (s *spreadState) score(feasible []*nodeInfo, scores []int64) {
	if s == nil || len(s.soft) == 0 {
		return
	}
	requireAll := !s.system
	ignored := make([]bool, len(feasible))
	numIgnored := 0
	counts := make([]map[string]int, len(s.soft))
	for i := range counts {
		counts[i] = map[string]int{}
	}
	for j, n := range feasible {
		if requireAll && !hasKeys(n.node, s.soft) {
			ignored[j] = true
			numIgnored++
			continue
		}
		// With the system defaults a node without the key is kept, and
		// kube-scheduler counts its missing value ("") as one more domain
		// in the weight (log(domains+2)), though no node scores it.
		for i := range s.soft {
			if s.soft[i].key != v1.LabelHostname {
				counts[i][n.node.Labels[s.soft[i].key]] = 0
			}
		}
	}
	perNode := make([]map[string]int, len(s.soft))
	for i := range s.soft {
		perNode[i] = s.index.liveMatching(s.q.pod.Namespace, s.soft[i].selector)
	}
	weights := make([]float64, len(s.soft))
	for i := range s.soft {
		size := len(counts[i])
		if s.soft[i].key == v1.LabelHostname {
			size = len(feasible) - numIgnored
		}
		weights[i] = math.Log(float64(size + 2))
	}
	// Domains are those of the feasible nodes; their pods are counted on
	// every node of the domain (hostname domains are single nodes: no pass).
	zonal := false
	for i := range s.soft {
		zonal = zonal || s.soft[i].key != v1.LabelHostname
	}
	for _, n := range s.all {
		if !zonal {
			break
		}
		if requireAll && !hasKeys(n.node, s.soft) {
			continue
		}
		for i := range s.soft {
			c := &s.soft[i]
			if c.key == v1.LabelHostname {
				continue
			}
			v := n.node.Labels[c.key] // "" is a domain too (above)
			if _, isDomain := counts[i][v]; !isDomain || !s.eligible(c, n.node) {
				continue
			}
			counts[i][v] += perNode[i][n.node.Name]
		}
	}
	raw := make([]int64, len(feasible))
	minRaw, maxRaw := int64(math.MaxInt64), int64(0)
	for j, n := range feasible {
		if ignored[j] {
			continue
		}
		var f float64
		for i := range s.soft {
			c := &s.soft[i]
			v, ok := n.node.Labels[c.key]
			if !ok {
				continue
			}
			cnt := counts[i][v]
			if c.key == v1.LabelHostname {
				cnt = perNode[i][n.node.Name]
			}
			f += float64(cnt)*weights[i] + float64(c.maxSkew-1)
		}
		raw[j] = int64(math.Round(f))
		minRaw, maxRaw = min(minRaw, raw[j]), max(maxRaw, raw[j])
	}
	for j := range feasible {
		var norm int64
		switch {
		case ignored[j]:
		case maxRaw == 0:
			norm = maxNodeScore
		default:
			norm = maxNodeScore * (maxRaw + minRaw - raw[j]) / maxRaw
		}
		scores[j] += weightSpread * norm
	}
}

// spreadRejected is true when some node rejected the pod for its spread
// (not for a missing label): pods arriving or changing labels may help it.
func spreadRejected(statuses map[string]status) bool {
	for _, st := range statuses {
		for _, r := range st.reasons {
			if r == reasonSpread {
				return true
			}
		}
	}
	return false
}

// spreadMayHelp says whether an assigned pod that appeared or changed its
// labels can change a spread-blocked pod's verdict: it must be in the pod's
// namespace and match one of its DoNotSchedule selectors (before or after
// the change).
func spreadMayHelp(e *spreadEnv, blocked *v1.Pod, assigned ...*v1.Pod) bool {
	hard, _, _ := e.spreadConstraintsOf(blocked)
	for _, a := range assigned {
		if a == nil || a.Namespace != blocked.Namespace {
			continue
		}
		for i := range hard {
			if hard[i].selector.Matches(labels.Set(a.Labels)) {
				return true
			}
		}
	}
	return false
}

// wakeSpreadBlocked moves the spread-blocked pods that an assigned pod's
// arrival (or binding) or label change can help, as kube-scheduler's
// AssignedPodAdd and AssignedPodUpdate events do for PodTopologySpread.
func (s *Scheduler) wakeSpreadBlocked(old, pod *v1.Pod) {
	event := spreadEventPodAdd
	switch {
	case old == nil || old.Spec.NodeName == "":
	case !labels.Equals(old.Labels, pod.Labels):
		event = spreadEventPodLabel
	default:
		return
	}
	s.queue.MoveAll(event, func(p *queuedPod) bool {
		return p.spreadBound && spreadMayHelp(s.spread, p.info.pod, old, pod)
	})
}
