// Package nodetopology is what several controllers need to know about where
// pods and nodes sit: pods indexed by node, and the disruption state of each
// zone computed from its nodes' Ready conditions. It lives outside
// pkg/controller so that no controller imports another.
package nodetopology

import (
	v1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/component-helpers/node/topology"

	"github.com/nodeshepherd/nodeshepherd/pkg/kube"
)

// ByNodeIndex is the name of the pod informer index on spec.nodeName.
const ByNodeIndex = "nodeName"

// AddPodNodeNameIndexer indexes pods by node, unless already done by another
// controller sharing the informer.
func AddPodNodeNameIndexer(inf cache.SharedIndexInformer) error {
	if _, ok := inf.GetIndexer().GetIndexers()[ByNodeIndex]; ok {
		return nil
	}
	return inf.AddIndexers(cache.Indexers{ByNodeIndex: func(obj any) ([]string, error) {
		pod, ok := obj.(*v1.Pod)
		if !ok || pod.Spec.NodeName == "" {
			return nil, nil
		}
		return []string{pod.Spec.NodeName}, nil
	}})
}

// ZoneState is the disruption state of a zone, with upstream's strings.
type ZoneState string

// Zone states.
const (
	StateInitial           ZoneState = "Initial"
	StateNormal            ZoneState = "Normal"
	StatePartialDisruption ZoneState = "PartialDisruption"
	StateFullDisruption    ZoneState = "FullDisruption"
)

// ExcludeDisruptionLabel keeps a node out of zone-state computation (its
// presence counts, whatever its value). The node is still tainted.
const ExcludeDisruptionLabel = "node.kubernetes.io/exclude-disruption"

// ExcludedFromDisruption says whether the node carries the exclusion label.
func ExcludedFromDisruption(n *v1.Node) bool {
	_, ok := n.Labels[ExcludeDisruptionLabel]
	return ok
}

// ComputeZoneState classifies a zone from its nodes' Ready conditions. A nil
// condition (a node that never reported) counts as not ready. Partial
// disruption needs at least three not-ready nodes and a not-ready fraction of
// at least the threshold; full disruption needs no ready node at all.
func ComputeZoneState(conditions []*v1.NodeCondition, unhealthyThreshold float32) (notReady int, state ZoneState) {
	ready := 0
	for _, c := range conditions {
		if c != nil && c.Status == v1.ConditionTrue {
			ready++
		} else {
			notReady++
		}
	}
	switch {
	case ready == 0 && notReady > 0:
		return notReady, StateFullDisruption
	case notReady > 2 && float32(notReady)/float32(notReady+ready) >= unhealthyThreshold:
		return notReady, StatePartialDisruption
	default:
		return notReady, StateNormal
	}
}

// DisruptedZones classifies zones from their nodes' Ready conditions exactly
// as the node lifecycle controller does and returns those in
// PartialDisruption or FullDisruption, so that other controllers (drain) hold
// back during the incidents the node lifecycle controller slows down for.
func DisruptedZones(nodes []*v1.Node, unhealthyThreshold float32) map[string]ZoneState {
	byZone := map[string][]*v1.NodeCondition{}
	for _, n := range nodes {
		if !ExcludedFromDisruption(n) {
			zone := topology.GetZoneKey(n)
			byZone[zone] = append(byZone[zone], kube.NodeCondition(n, v1.NodeReady))
		}
	}
	out := map[string]ZoneState{}
	for zone, conds := range byZone {
		if _, state := ComputeZoneState(conds, unhealthyThreshold); state != StateNormal {
			out[zone] = state
		}
	}
	return out
}
