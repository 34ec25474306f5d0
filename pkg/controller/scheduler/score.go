package scheduler

import (
	"math"

	v1 "k8s.io/api/core/v1"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	"k8s.io/klog/v2"
)

// Score weights of kube-scheduler's default profile for the scores
// nodeshepherd implements.
const (
	weightTaint    = 3
	weightAffinity = 2
	weightFit      = 1
	weightBalanced = 1
	weightImage    = 1
	weightVolume   = 1 // VolumeBinding: no weight in the default list, so 1
	maxNodeScore   = 100
)

// scorer scores the feasible nodes of one pod. Scores that kube-scheduler
// normalises over all feasible nodes (affinity, taints) are raw here and
// normalised in scoreNodes.
type scorer struct {
	pod        *podInfo
	preferred  *nodeaffinity.PreferredSchedulingTerms
	bestEffort bool
	// nonZero is the pod's request with the defaults of every container
	// that sets none (the node's count uses podInfo.nonZero).
	nonZero resources
	// interPod is InterPodAffinity's PreScore (nil: all nodes score 0).
	interPod map[string]map[string]int64
	// images is ImageLocality's view: the pod's images and the cluster's
	// node count.
	images imageQuery
	// volumes is VolumeBinding's state; nil without claims.
	volumes *volumeState
	// fit is NodeResourcesFit's configuration (its scoring strategy).
	fit *fitArgs
}

func newScorer(pi *podInfo) *scorer {
	s := &scorer{pod: pi, fit: defaultFitArgs, bestEffort: pi.request.milliCPU == 0 && pi.request.memory == 0, nonZero: incomingNonZero(pi.pod)}
	if a := pi.pod.Spec.Affinity; a != nil && a.NodeAffinity != nil {
		// Validated in newPodQuery.
		s.preferred, _ = nodeaffinity.NewPreferredSchedulingTerms(a.NodeAffinity.PreferredDuringSchedulingIgnoredDuringExecution)
	}
	return s
}

type rawScore struct {
	fit, balanced   int64
	affinity, taint int64
	interPod        int64
	image, volume   int64
}

func preferNoSchedule(t *v1.Taint) bool { return t.Effect == v1.TaintEffectPreferNoSchedule }

func (s *scorer) raw(n *nodeInfo) rawScore {
	var r rawScore
	r.fit = s.fit.score(s, n)
	if !s.bestEffort {
		balance := func(cpu, mem int64) int64 {
			fc, fm := fraction(cpu, n.allocatable.milliCPU), fraction(mem, n.allocatable.memory)
			return int64((1 - math.Abs(fc-fm)/2) * maxNodeScore)
		}
		with := balance(n.requested.milliCPU+s.pod.request.milliCPU, n.requested.memory+s.pod.request.memory)
		without := balance(n.requested.milliCPU, n.requested.memory)
		r.balanced = maxNodeScore/2 + (maxNodeScore/2+with-without)/2
	}
	if s.preferred != nil {
		r.affinity = s.preferred.Score(n.node)
	}
	r.interPod = affinityScore(s.interPod, n.node)
	for i := range n.node.Spec.Taints {
		t := &n.node.Spec.Taints[i]
		if preferNoSchedule(t) && !corev1helpers.TolerationsTolerateTaint(klog.Background(), s.pod.pod.Spec.Tolerations, t, false) {
			r.taint++
		}
	}
	r.image = s.images.score(n)
	r.volume = s.volumes.score(n)
	return r
}

func leastRequested(requested, capacity int64) int64 {
	if capacity == 0 || requested > capacity {
		return 0
	}
	return (capacity - requested) * maxNodeScore / capacity
}

func fraction(requested, capacity int64) float64 {
	if capacity == 0 {
		return 1
	}
	return min(float64(requested)/float64(capacity), 1)
}

// total combines raw scores with kube-scheduler's normalisation: preferred
// affinity scaled to the best node, PreferNoSchedule taints inverted against
// the worst node.
func total(raws []rawScore) []int64 {
	var maxAff, maxTaint int64
	for _, r := range raws {
		maxAff, maxTaint = max(maxAff, r.affinity), max(maxTaint, r.taint)
	}
	interPod := make([]int64, len(raws))
	for i, r := range raws {
		interPod[i] = r.interPod
	}
	interPod = normaliseInterPod(interPod)
	out := make([]int64, len(raws))
	for i, r := range raws {
		aff := int64(0)
		if maxAff > 0 {
			aff = r.affinity * maxNodeScore / maxAff
		}
		taint := int64(maxNodeScore)
		if maxTaint > 0 {
			taint = maxNodeScore - r.taint*maxNodeScore/maxTaint
		}
		out[i] = weightFit*r.fit + weightBalanced*r.balanced + weightAffinity*aff + weightTaint*taint + weightInterPodAffinity*interPod[i] +
			weightImage*r.image + weightVolume*r.volume
	}
	return out
}
