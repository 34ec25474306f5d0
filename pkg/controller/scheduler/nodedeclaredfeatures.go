package scheduler

import (
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/version"
	ndf "k8s.io/component-helpers/nodedeclaredfeatures"
	ndftypes "k8s.io/component-helpers/nodedeclaredfeatures/types"
)

// matchedVersion is the kube-scheduler version whose decisions the
// scheduler makes: NodeDeclaredFeatures stops requiring a feature once the
// target version is past the feature's MaxVersion.
var matchedVersion = version.MustParse("v1.37.1")

// requiredFeatures are the node features the pod needs (NodeDeclaredFeatures'
// PreFilter, GA and always on in 1.37), inferred from its spec only, as
// upstream does. The in-place-resize exemption of upstream's PreFilter
// (InPlacePodVerticalScalingSchedulerPreemption) is alpha and off in 1.37,
// so it does not apply.
func requiredFeatures(pod *v1.Pod) ndf.FeatureSet {
	reqs, err := ndf.DefaultFramework.InferForPodScheduling(&ndftypes.PodInfo{Spec: &pod.Spec}, matchedVersion)
	if err != nil {
		// Only a nil version fails.
		return ndf.FeatureSet{}
	}
	return reqs
}

// featuresFilter is NodeDeclaredFeatures' Filter, last of the default
// filters: the node's status.declaredFeatures must include every feature
// the pod requires. A node cannot gain features by losing pods, so
// preemption cannot help.
func featuresFilter(q *podQuery, n *nodeInfo) status {
	if q.features.IsEmpty() {
		return status{}
	}
	if ok, err := q.features.IsSubset(n.declared); err != nil || !ok {
		return reject(unresolvable, reasonFeatures)
	}
	return status{}
}

// featuresRejected is true when some node lacked a feature the pod requires.
func featuresRejected(statuses map[string]status) bool {
	for _, st := range statuses {
		for _, r := range st.reasons {
			if r == reasonFeatures {
				return true
			}
		}
	}
	return false
}
