package tainteviction

import (
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
)

// Deadline is when the pod must leave a node with these taints, as the
// controller decides it from the API alone (for `nodeshepherd explain`):
// must is false when the pod tolerates every NoExecute taint for ever;
// cause is the taint whose toleration runs out first (nil: at once, an
// untolerated taint or tolerationSeconds <= 0). A NoExecute taint without
// timeAdded counts from now, as for a controller that sees it first now.
func Deadline(pod *v1.Pod, taints []v1.Taint, now time.Time) (must bool, due time.Time, cause *v1.Taint) {
	nt := &nodeTaints{taints: noExecuteTaints(taints), seen: map[taintID]time.Time{}}
	if len(nt.taints) == 0 {
		return false, time.Time{}, nil
	}
	for _, t := range nt.taints {
		if t.TimeAdded == nil {
			nt.seen[taintID{t.Key, t.Value}] = now
		}
	}
	// A controller with no history: decide reads only the pod and the taints.
	d := (&Controller{}).decide(klog.Background(), pod, nt, now)
	return d.must, d.due, d.cause
}
