package scheduler

import (
	"fmt"
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	ndf "k8s.io/component-helpers/nodedeclaredfeatures"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	"k8s.io/klog/v2"
)

// Reasons in kube-scheduler's words, so that FailedScheduling messages read
// (and alert) the same.
const (
	reasonUnschedulable = "node(s) were unschedulable"
	reasonNodeName      = "node(s) didn't match the requested node name"
	reasonTaint         = "node(s) had untolerated taint(s)"
	reasonAffinity      = "node(s) didn't match Pod's node affinity/selector"
	reasonPorts         = "node(s) didn't have free ports for the requested pod ports"
	reasonTooManyPods   = "Too many pods"
	reasonNoVictims     = "No preemption victims found for incoming pod"
	reasonNotHelpful    = "Preemption is not helpful for scheduling"
	reasonFeatures      = "node(s) didn't match Pod's required features"
	// reasonNotNamed: the nodes left out by a required node affinity that
	// names its nodes (matchFields metadata.name, as a DaemonSet's pods
	// do). kube-scheduler drops them before any filter runs (NodeAffinity's
	// PreFilter narrows the nodes) and says so in these words.
	reasonNotNamed = "node(s) didn't satisfy plugin(s) [NodeAffinity]"
	// reasonTermsConflict: every term names nodes, and none in common.
	reasonTermsConflict = "pod affinity terms conflict"
)

// code says whether preemption could change a filter's answer.
type code int

const (
	success code = iota
	// unschedulable: removing pods from the node may help (resources, ports).
	unschedulable
	// unresolvable: no preemption helps (taints, affinity, cordon, too big).
	unresolvable
)

type status struct {
	code    code
	reasons []string
	// devices marks DynamicResources' rejection of a node for want of
	// devices. Its code is unresolvable, as kube-scheduler 1.37 has it
	// (that plugin does not preempt for devices); nodeshepherd's
	// preemption still tries victims whose claims free devices there, and
	// reports a node where none do as kube-scheduler does (not helpful).
	devices bool
}

func (s status) ok() bool { return s.code == success }

func reject(c code, reasons ...string) status { return status{code: c, reasons: reasons} }

// podQuery is what the filters need from the pod being scheduled, computed
// once per scheduling cycle.
type podQuery struct {
	*podInfo
	affinity    nodeaffinity.RequiredNodeAffinity
	tolerations []v1.Toleration
	// spread is PodTopologySpread's state; nil without constraints.
	spread *spreadState
	// interPod is InterPodAffinity's state for this cycle; nil when no
	// required term concerns the pod.
	interPod *affinityState
	// volumes is the volume plugins' state; nil without claims.
	volumes *volumeState
	// dra is DynamicResources' state; nil without resource claims.
	dra *draState
	// features are the node features the pod requires
	// (NodeDeclaredFeatures); empty: none.
	features ndf.FeatureSet
	// named are the only nodes the pod's required node affinity can match
	// (namedNodes); nil: any node.
	named sets.Set[string]
	// fit is NodeResourcesFit's configuration.
	fit *fitArgs
}

// namedNodes is what a required node affinity narrows the nodes to before
// filtering, as kube-scheduler's NodeAffinity PreFilter does: when every
// term (terms are ORed) has a matchFields metadata.name In requirement, the
// union over the terms of the names each allows (a term's requirements are
// ANDed, so several such requirements allow their intersection). nil when
// some term names no node (any node may match it); an empty set when the
// terms leave no name.
func namedNodes(pod *v1.Pod) sets.Set[string] {
	a := pod.Spec.Affinity
	if a == nil || a.NodeAffinity == nil || a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		return nil
	}
	terms := a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
	if len(terms) == 0 {
		return nil
	}
	out := sets.New[string]()
	for _, term := range terms {
		var allowed sets.Set[string]
		for _, r := range term.MatchFields {
			if r.Key != metav1.ObjectNameField || r.Operator != v1.NodeSelectorOpIn {
				continue
			}
			if allowed == nil {
				allowed = sets.New(r.Values...)
			} else {
				allowed = allowed.Intersection(sets.New(r.Values...))
			}
		}
		if allowed == nil {
			return nil
		}
		out = out.Union(allowed)
	}
	return out
}

// prefilterNamed is the message of a pod whose terms name no node in
// common ("" otherwise): a PreFilter rejection, on every node.
func (q *podQuery) prefilterNamed() string {
	if q.named != nil && q.named.Len() == 0 {
		return reasonTermsConflict
	}
	return ""
}

// outside reports whether the pod's required node affinity leaves the node
// out before filtering.
func (q *podQuery) outside(name string) bool {
	return q.named != nil && !q.named.Has(name)
}

var unschedulableTaint = v1.Taint{Key: v1.TaintNodeUnschedulable, Effect: v1.TaintEffectNoSchedule}

// newPodQuery checks what the API server does not fully validate (node
// affinity terms) so that a bad pod fails with a message, not a panic.
func newPodQuery(pi *podInfo) (*podQuery, error) {
	q := &podQuery{podInfo: pi, affinity: nodeaffinity.GetRequiredNodeAffinity(pi.pod), tolerations: pi.pod.Spec.Tolerations}
	if a := pi.pod.Spec.Affinity; a != nil && a.NodeAffinity != nil {
		if req := a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution; req != nil {
			if _, err := nodeaffinity.NewNodeSelector(req); err != nil {
				return nil, fmt.Errorf("invalid required node affinity: %w", err)
			}
		}
		if _, err := nodeaffinity.NewPreferredSchedulingTerms(a.NodeAffinity.PreferredDuringSchedulingIgnoredDuringExecution); err != nil {
			return nil, fmt.Errorf("invalid preferred node affinity: %w", err)
		}
	}
	if pi.affinity != nil && pi.affinity.err != nil {
		return nil, fmt.Errorf("invalid pod affinity: %w", pi.affinity.err)
	}
	q.features = requiredFeatures(pi.pod)
	q.named = namedNodes(pi.pod)
	q.fit = defaultFitArgs
	return q, nil
}

func doNotSchedule(t *v1.Taint) bool {
	return t.Effect == v1.TaintEffectNoSchedule || t.Effect == v1.TaintEffectNoExecute
}

// filter runs the filters in kube-scheduler's default order and returns the
// first rejection, as kube-scheduler does.
func filter(q *podQuery, n *nodeInfo) status {
	node := n.node
	if node.Spec.Unschedulable && !corev1helpers.TolerationsTolerateTaint(klog.Background(), q.tolerations, &unschedulableTaint, false) {
		return reject(unresolvable, reasonUnschedulable)
	}
	if q.pod.Spec.NodeName != "" && q.pod.Spec.NodeName != node.Name {
		return reject(unresolvable, reasonNodeName)
	}
	if _, untolerated := corev1helpers.FindMatchingUntoleratedTaint(klog.Background(), node.Spec.Taints, q.tolerations, doNotSchedule, false); untolerated {
		return reject(unresolvable, reasonTaint)
	}
	if ok, _ := q.affinity.Match(node); !ok {
		return reject(unresolvable, reasonAffinity)
	}
	for _, p := range q.ports {
		for _, used := range n.ports {
			if p.conflicts(used) {
				return reject(unschedulable, reasonPorts)
			}
		}
	}
	if st := fits(q.podInfo, n, q.fit); !st.ok() {
		return st
	}
	if st := q.volumes.filter(n); !st.ok() {
		return st
	}
	if st := q.spread.filter(n); !st.ok() {
		return st
	}
	if st := q.interPod.filter(n); !st.ok() {
		return st
	}
	if st := q.dra.filter(n); !st.ok() {
		return st
	}
	return featuresFilter(q, n)
}

// fits is the resource filter: pod count, cpu, memory and every other
// requested resource against allocatable minus what assigned pods request.
// A request larger than the node's whole allocatable cannot be helped by
// preemption.
func fits(pi *podInfo, n *nodeInfo, args *fitArgs) status {
	var reasons []string
	c := unschedulable
	if len(n.pods)+1 > n.allowedPods {
		reasons = append(reasons, reasonTooManyPods)
	}
	r := &pi.request
	if r.milliCPU > 0 && r.milliCPU > n.allocatable.milliCPU-n.requested.milliCPU {
		reasons = append(reasons, "Insufficient cpu")
		if r.milliCPU > n.allocatable.milliCPU {
			c = unresolvable
		}
	}
	if r.memory > 0 && r.memory > n.allocatable.memory-n.requested.memory {
		reasons = append(reasons, "Insufficient memory")
		if r.memory > n.allocatable.memory {
			c = unresolvable
		}
	}
	if len(r.scalar) > 0 {
		names := make([]v1.ResourceName, 0, len(r.scalar))
		for name := range r.scalar {
			names = append(names, name)
		}
		slices.Sort(names)
		for _, name := range names {
			if args.ignores(name) {
				continue
			}
			want, alloc := r.scalar[name], n.allocatable.scalar[name]
			if want > 0 && want > alloc-n.requested.scalar[name] {
				reasons = append(reasons, "Insufficient "+string(name))
				if want > alloc {
					c = unresolvable
				}
			}
		}
	}
	if len(reasons) == 0 {
		return status{}
	}
	return reject(c, reasons...)
}

// fitError builds kube-scheduler's message: "0/N nodes are available:
// <count> <reason>, ...." with the reasons counted over nodes and sorted as
// strings; absent nodes count under absentReason.
func fitError(numNodes int, statuses map[string]status, absentReason string) string {
	counts := map[string]int{}
	for _, s := range statuses {
		for _, r := range s.reasons {
			counts[r]++
		}
	}
	if absentReason != "" && len(statuses) < numNodes {
		counts[absentReason] += numNodes - len(statuses)
	}
	parts := make([]string, 0, len(counts))
	for r, c := range counts {
		parts = append(parts, fmt.Sprintf("%d %s", c, r))
	}
	slices.Sort(parts)
	msg := fmt.Sprintf("0/%d nodes are available:", numNodes)
	if len(parts) > 0 {
		msg += " " + strings.Join(parts, ", ") + "."
	}
	return msg
}
