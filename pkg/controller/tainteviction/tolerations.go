package tainteviction

import (
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
)

// noExecuteTaints keeps only the NoExecute taints.
func noExecuteTaints(taints []v1.Taint) []v1.Taint {
	var out []v1.Taint
	for _, t := range taints {
		if t.Effect == v1.TaintEffectNoExecute {
			out = append(out, t)
		}
	}
	return out
}

// usedToleration returns the first toleration in spec order that tolerates
// the taint, or nil.
func usedToleration(logger klog.Logger, taint *v1.Taint, tolerations []v1.Toleration) *v1.Toleration {
	for j := range tolerations {
		// Gt/Lt operators only reach the API when their feature gate is on,
		// so honouring them here is always right.
		if tolerations[j].ToleratesTaint(logger, taint, true) {
			return &tolerations[j]
		}
	}
	return nil
}

// usedTolerations returns, for each taint, the first toleration in spec order
// that tolerates it, and whether every taint is tolerated.
func usedTolerations(logger klog.Logger, taints []v1.Taint, tolerations []v1.Toleration) (bool, []v1.Toleration) {
	if len(taints) == 0 {
		return true, nil
	}
	used := make([]v1.Toleration, 0, len(taints))
	for i := range taints {
		t := usedToleration(logger, &taints[i], tolerations)
		if t == nil {
			return false, nil
		}
		used = append(used, *t)
	}
	return true, used
}

// forever means the taints are tolerated indefinitely.
const forever = time.Duration(-1)

// minTolerationTime is how long a pod may stay: the smallest
// tolerationSeconds among the used tolerations; zero or negative seconds mean
// at once, and no seconds at all mean forever. No used tolerations: at once.
func minTolerationTime(used []v1.Toleration) time.Duration {
	if len(used) == 0 {
		return 0
	}
	min := forever
	for _, t := range used {
		if t.TolerationSeconds == nil {
			continue
		}
		s := *t.TolerationSeconds
		if s <= 0 {
			return 0
		}
		d := time.Duration(s) * time.Second
		if min < 0 || d < min {
			min = d
		}
	}
	return min
}
