package scheduler

import (
	"sync"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// cache is the scheduler's view of the cluster: nodes with the pods assigned
// to them, including pods assumed on a node while their binding is in flight,
// and the nominations made by preemption. The scheduling cycle reads it under
// the read lock; informer handlers write it under the write lock.
type cache struct {
	mu    sync.RWMutex
	nodes map[string]*nodeInfo
	// list holds the nodes that exist (not only pods that name them), in a
	// stable order for round-robin starts.
	list    []*nodeInfo
	podNode map[types.UID]string
	assumed map[types.UID]bool
	// nominated pods per node; nominatedTo is the reverse index.
	nominated   map[string][]*podInfo
	nominatedTo map[types.UID]string
	// doomed are victims the scheduler has decided to delete, before the
	// informer shows them terminating.
	doomed map[types.UID]bool
	// index finds assigned pods by label for inter-pod affinity and spread.
	index *podIndex
	// images counts per image name the nodes that have it (ImageLocality).
	images map[string]*imageState
}

func newCache() *cache {
	return &cache{nodes: map[string]*nodeInfo{}, podNode: map[types.UID]string{}, assumed: map[types.UID]bool{},
		nominated: map[string][]*podInfo{}, nominatedTo: map[types.UID]string{}, doomed: map[types.UID]bool{},
		index: newPodIndex(), images: map[string]*imageState{}}
}

func (c *cache) rebuildList() {
	c.list = c.list[:0]
	for _, n := range c.nodes {
		if n.node != nil {
			c.list = append(c.list, n)
		}
	}
}

func (c *cache) setNode(node *v1.Node) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n, ok := c.nodes[node.Name]
	if !ok {
		n = newNodeInfo(nil)
		c.nodes[node.Name] = n
	}
	added := n.node == nil
	if !added {
		c.removeNodeImages(n)
	}
	c.addNodeImages(n, node)
	n.setNode(node)
	if added {
		c.rebuildList()
	}
}

func (c *cache) removeNode(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n, ok := c.nodes[name]
	if !ok {
		return
	}
	c.removeNodeImages(n)
	if len(n.pods) == 0 {
		delete(c.nodes, name)
	} else {
		n.node = nil // its pods are still counted until they go
	}
	c.rebuildList()
}

// setPod records an assigned pod (a new one, an update, or the informer's
// confirmation of an assumed pod). It returns what was counted for the pod
// before (nil if nothing) and what is counted now.
func (c *cache) setPod(pod *v1.Pod) (prev, cur *podInfo) {
	c.mu.Lock()
	defer c.mu.Unlock()
	prev = c.index.pods[pod.UID]
	c.removePodLocked(pod.UID)
	delete(c.assumed, pod.UID)
	n, ok := c.nodes[pod.Spec.NodeName]
	if !ok {
		n = newNodeInfo(nil)
		c.nodes[pod.Spec.NodeName] = n
	}
	pi := newPodInfo(pod)
	n.addPod(pi)
	c.index.add(pi)
	c.podNode[pod.UID] = pod.Spec.NodeName
	c.unnominateLocked(pod.UID)
	return prev, pi
}

func (c *cache) removePod(uid types.UID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.removePodLocked(uid)
	delete(c.assumed, uid)
	delete(c.doomed, uid)
}

func (c *cache) removePodLocked(uid types.UID) {
	name, ok := c.podNode[uid]
	if !ok {
		return
	}
	delete(c.podNode, uid)
	c.index.remove(uid)
	if n := c.nodes[name]; n != nil {
		n.removePod(uid)
		if n.node == nil && len(n.pods) == 0 {
			delete(c.nodes, name)
		}
	}
}

// assume counts a pod on a node before its binding is confirmed, so that the
// next cycle does not give its room away.
func (c *cache) assume(pi *podInfo, node string) {
	pod := pi.pod.DeepCopy()
	pod.Spec.NodeName = node
	c.setPod(pod)
	c.mu.Lock()
	c.assumed[pod.UID] = true
	c.mu.Unlock()
}

// isAssigned is true for pods counted on a node, assumed or bound.
func (c *cache) isAssigned(uid types.UID) bool {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.assumed[uid] || c.podNode[uid] != ""
}

// forget drops an assumed pod whose binding failed.
func (c *cache) forget(uid types.UID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.assumed[uid] {
		c.removePodLocked(uid)
		delete(c.assumed, uid)
	}
}

// nominate records that pi may use node (empty: no nomination).
func (c *cache) nominate(pi *podInfo, node string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.nominateLocked(pi, node)
}

func (c *cache) nominateLocked(pi *podInfo, node string) {
	c.unnominateLocked(pi.pod.UID)
	if node == "" {
		return
	}
	c.nominated[node] = append(c.nominated[node], pi)
	c.nominatedTo[pi.pod.UID] = node
}

func (c *cache) unnominateLocked(uid types.UID) {
	node, ok := c.nominatedTo[uid]
	if !ok {
		return
	}
	delete(c.nominatedTo, uid)
	list := c.nominated[node]
	for i, p := range list {
		if p.pod.UID == uid {
			list = append(list[:i:i], list[i+1:]...)
			break
		}
	}
	if len(list) == 0 {
		delete(c.nominated, node)
	} else {
		c.nominated[node] = list
	}
}

// withNominated returns n with the pods nominated to it that are at least as
// important as pi (other than pi) added: their reservation. n itself is
// returned when there are none.
func (c *cache) withNominated(pi *podInfo, n *nodeInfo) *nodeInfo {
	list := c.nominated[n.name()]
	var out *nodeInfo
	for _, p := range list {
		if p.pod.UID == pi.pod.UID || p.priority < pi.priority {
			continue
		}
		if out == nil {
			out = n.clone()
		}
		out.addPod(p)
	}
	if out == nil {
		return n
	}
	return out
}

// filterWithNominated is kube-scheduler's RunFilterPluginsWithNominatedPods:
// when pods at least as important as the pod are nominated to the node, the
// node must pass the filters both with them counted there and without them
// (a nominated pod may be what satisfies the pod's required affinity or
// spread, and it may end up elsewhere). The second pass is skipped when
// there are none or the first pass fails; the last pass's status is the
// answer. Callers hold the cache's read lock.
func (c *cache) filterWithNominated(q *podQuery, n *nodeInfo) status {
	with := c.withNominated(q.podInfo, n)
	st := filter(q, with)
	if with == n || !st.ok() {
		return st
	}
	return filter(q, n)
}

func (c *cache) unnominate(uid types.UID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.unnominateLocked(uid)
}

// nominatedNode is the pod's nomination. The in-memory one is
// authoritative: it is loaded from status.nominatedNodeName when the pod is
// first seen and changed by preemption before the API write lands.
func (c *cache) nominatedNode(pod *v1.Pod) string {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.nominatedTo[pod.UID]
}

// anyLive is true if one of the pods is still counted on a node and not
// terminating.
func (c *cache) anyLive(uids []types.UID) bool {
	c.mu.RLock()
	defer c.mu.RUnlock()
	for _, uid := range uids {
		n := c.nodes[c.podNode[uid]]
		if n == nil {
			continue
		}
		for _, p := range n.pods {
			if p.pod.UID == uid && p.pod.DeletionTimestamp == nil {
				return true
			}
		}
	}
	return false
}

// isBound is true once the informer has confirmed the pod on a node.
func (c *cache) isBound(uid types.UID) bool {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.podNode[uid] != "" && !c.assumed[uid]
}

// undoom forgets a victim whose deletion failed.
func (c *cache) undoom(uid types.UID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.doomed, uid)
}
