package nodelifecycle

import (
	v1 "k8s.io/api/core/v1"
	"k8s.io/component-helpers/node/topology"

	"github.com/nodeshepherd/nodeshepherd/pkg/kube"
)

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

// excludedFromDisruption says whether the node carries the exclusion label.
func excludedFromDisruption(n *v1.Node) bool {
	_, ok := n.Labels[ExcludeDisruptionLabel]
	return ok
}

// computeZoneState classifies a zone from its nodes' Ready conditions. A nil
// condition (a node that never reported) counts as not ready. Partial
// disruption needs at least three not-ready nodes and a not-ready fraction of
// at least the threshold; full disruption needs no ready node at all.
func computeZoneState(conditions []*v1.NodeCondition, unhealthyThreshold float32) (notReady int, state ZoneState) {
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

// rateFor is the NoExecute tainting rate of a zone in a state. A fully
// disrupted zone keeps the normal rate while other zones are healthy: the
// all-zones case is handled separately by stopping altogether.
func (c *Config) rateFor(state ZoneState, zoneSize int) float64 {
	switch state {
	case StatePartialDisruption:
		if zoneSize > c.LargeClusterSizeThreshold {
			return c.SecondaryNodeEvictionRate
		}
		return 0
	default:
		return c.NodeEvictionRate
	}
}

// DisruptedZones classifies zones from their nodes' Ready conditions exactly
// as the controller does and returns those in PartialDisruption or
// FullDisruption, so that other controllers (drain) hold back during the
// incidents the node lifecycle controller slows down for.
func DisruptedZones(nodes []*v1.Node, unhealthyThreshold float32) map[string]ZoneState {
	byZone := map[string][]*v1.NodeCondition{}
	for _, n := range nodes {
		if !excludedFromDisruption(n) {
			zone := topology.GetZoneKey(n)
			byZone[zone] = append(byZone[zone], kube.NodeCondition(n, v1.NodeReady))
		}
	}
	out := map[string]ZoneState{}
	for zone, conds := range byZone {
		if _, state := computeZoneState(conds, unhealthyThreshold); state != StateNormal {
			out[zone] = state
		}
	}
	return out
}
