package scheduler

import (
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	ndf "k8s.io/component-helpers/nodedeclaredfeatures"
)

// nodeInfo is a node with the pods assigned to it (bound or assumed) and
// their summed requests.
type nodeInfo struct {
	node        *v1.Node
	allocatable resources
	allowedPods int
	pods        []*podInfo
	requested   resources
	nonZero     resources
	ports       []portKey
	// affinityPods counts pods with pod (anti-)affinity terms, so that
	// pods without any can skip the nodes that have none.
	affinityPods int
	// images are the node's image names, sharing the cache's per-name
	// counts (ImageLocality); the cache maintains them.
	images map[string]*imageState
	// declared is status.declaredFeatures (NodeDeclaredFeatures); features
	// this version does not know are left out, as upstream does.
	declared ndf.FeatureSet
}

func newNodeInfo(node *v1.Node) *nodeInfo {
	n := &nodeInfo{}
	n.setNode(node)
	return n
}

func (n *nodeInfo) setNode(node *v1.Node) {
	n.node = node
	if node == nil {
		return
	}
	n.allocatable = fromList(node.Status.Allocatable)
	n.allowedPods = int(node.Status.Allocatable.Pods().Value())
	n.declared = ndf.DefaultFramework.TryMap(node.Status.DeclaredFeatures)
}

func (n *nodeInfo) name() string {
	if n.node == nil {
		return ""
	}
	return n.node.Name
}

func (n *nodeInfo) addPod(p *podInfo) {
	n.pods = append(n.pods, p)
	n.requested.add(&p.request, 1)
	n.nonZero.add(&p.nonZero, 1)
	n.ports = append(n.ports, p.ports...)
	if p.affinity != nil {
		n.affinityPods++
	}
}

// removePod removes the pod with uid; false if it was not there.
func (n *nodeInfo) removePod(uid types.UID) bool {
	for i, p := range n.pods {
		if p.pod.UID != uid {
			continue
		}
		last := len(n.pods) - 1
		n.pods[i] = n.pods[last]
		n.pods[last] = nil
		n.pods = n.pods[:last]
		n.requested.add(&p.request, -1)
		n.nonZero.add(&p.nonZero, -1)
		if p.affinity != nil {
			n.affinityPods--
		}
		if len(p.ports) > 0 {
			n.ports = n.ports[:0]
			for _, q := range n.pods {
				n.ports = append(n.ports, q.ports...)
			}
		}
		return true
	}
	return false
}

// clone is a copy that can take and lose pods without touching n.
func (n *nodeInfo) clone() *nodeInfo {
	c := *n
	c.pods = append([]*podInfo(nil), n.pods...)
	c.requested = n.requested.clone()
	c.nonZero = n.nonZero.clone()
	c.ports = append([]portKey(nil), n.ports...)
	return &c
}
