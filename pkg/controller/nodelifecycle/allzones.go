package nodelifecycle

import (
	"context"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/component-helpers/node/topology"
	"k8s.io/klog/v2"

	"github.com/nodeshepherd/nodeshepherd/pkg/kube"
)

// The all-zones mode ("master disruption mode") and nodes already judged
// dead. Entering the mode strips every NoExecute taint, as upstream, so that
// no pod is evicted while every zone is down; leaving it gives every node a
// fresh grace period. Upstream then taints a node that was dead before the
// mode began again with a new timeAdded, which restarts the
// tolerationSeconds of its pods (the taint eviction controller counts from
// timeAdded), and its grace period: an outage of the whole cluster would
// postpone the eviction of pods from a node that died before it. So a node
// that carries a NoExecute taint and is not Ready on entering is remembered
// with that taint, and its probe is not reset on leaving. On leaving, once
// the zone states are computed and the zone rates set, such a node, if it
// is the same node and still not Ready, is queued in its zone's tainting
// queue like any other node (upstream queues it too): it gets its taint back
// when the zone's rate allows, with its original timeAdded (a swap of the
// failure kind meanwhile gets a new timeAdded, as any swap does). A zone
// that is PartialDisruption at the exit (rate 0 in a small zone) taints it
// only when its state allows. Pods whose tolerationSeconds ran out are then
// evicted at once. The memory is the leader's: a new leader during the mode
// taints such a node anew.

// judgedTaint is the NoExecute taint a node carried when every zone went down.
type judgedTaint struct {
	uid   types.UID
	taint v1.Taint
}

// rememberJudged records the NoExecute taint of a node not Ready, before
// entering the all-zones mode strips it; a taint still waiting to be
// restored from an earlier mode is remembered as it was.
func (c *Controller) rememberJudged(name string) {
	node, err := c.latestNode(name)
	if err != nil || kube.NodeReady(node) {
		return
	}
	for _, want := range []v1.Taint{UnreachableTaint, NotReadyTaint} {
		if t := kube.FindTaint(node, want); t != nil && t.TimeAdded != nil {
			c.mu.Lock()
			c.judged[name] = judgedTaint{uid: node.UID, taint: *t.DeepCopy()}
			c.mu.Unlock()
			return
		}
	}
	c.mu.Lock()
	if j, ok := c.restoring[name]; ok && j.uid == node.UID {
		c.judged[name] = j
	}
	c.mu.Unlock()
}

// takeJudged returns the remembered nodes and forgets them.
func (c *Controller) takeJudged() map[string]judgedTaint {
	c.mu.Lock()
	defer c.mu.Unlock()
	j := c.judged
	c.judged = map[string]judgedTaint{}
	return j
}

// restoreJudged queues the remembered nodes still not Ready in their
// zone's tainting queue, to get their NoExecute taint back with its
// original timeAdded (restoredTaint) when the zone's rate allows. It runs
// after the zone states and rates of the pass are set.
func (c *Controller) restoreJudged(ctx context.Context, judged map[string]judgedTaint) {
	logger := klog.FromContext(ctx)
	for name, j := range judged {
		node, err := c.latestNode(name)
		if err != nil || node.UID != j.uid {
			continue
		}
		if ready := kube.NodeCondition(node, v1.NodeReady); ready == nil || ready.Status == v1.ConditionTrue {
			continue
		}
		now := c.clock.Now()
		c.mu.Lock()
		c.restoring[name] = j
		q := c.zoneQueueLocked(topology.GetZoneKey(node), now)
		c.mu.Unlock()
		q.Add(name, node.UID, now) // usually queued already by this pass
		logger.Info("Queued the NoExecute taint of a node judged dead before every zone went down, to restore with its timeAdded at its zone's rate",
			"node", klog.KObj(node), "taint", j.taint.ToString(), "timeAdded", j.taint.TimeAdded)
	}
}

// restoredTaint is the taint to add to a node from its zone's queue: the
// remembered one with its timeAdded if the node is waiting for it and the
// failure is of the same kind, else want (a new timeAdded).
func (c *Controller) restoredTaint(node *v1.Node, want v1.Taint) (v1.Taint, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	j, ok := c.restoring[node.Name]
	if !ok || j.uid != node.UID || j.taint.Key != want.Key || j.taint.TimeAdded == nil {
		return want, false
	}
	want.TimeAdded = j.taint.TimeAdded.DeepCopy()
	return want, true
}

// forgetRestoring drops a node's remembered taint (applied, or the node
// recovered or is gone).
func (c *Controller) forgetRestoring(name string) {
	c.mu.Lock()
	delete(c.restoring, name)
	c.mu.Unlock()
}
