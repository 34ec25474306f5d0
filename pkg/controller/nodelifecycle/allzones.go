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
// with that taint; on leaving, if it is the same node and still not Ready,
// it gets the taint back at once with its original timeAdded (no token of
// the zone's rate: it was spent on the first taint; a swap of the failure
// kind meanwhile gets a new timeAdded, as any swap does), and its probe is
// not reset. Pods whose tolerationSeconds ran out during the mode are then
// evicted at once. The memory is the leader's: a new leader during the mode
// taints such a node anew.

// judgedTaint is the NoExecute taint a node carried when every zone went down.
type judgedTaint struct {
	uid   types.UID
	taint v1.Taint
}

// rememberJudged records the NoExecute taint of a node not Ready, before
// entering the all-zones mode strips it.
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
}

// takeJudged returns the remembered nodes and forgets them.
func (c *Controller) takeJudged() map[string]judgedTaint {
	c.mu.Lock()
	defer c.mu.Unlock()
	j := c.judged
	c.judged = map[string]judgedTaint{}
	return j
}

// restoreJudged gives the remembered nodes still not Ready their NoExecute
// taint back, with its original timeAdded when the kind is the same.
func (c *Controller) restoreJudged(ctx context.Context, judged map[string]judgedTaint) {
	logger := klog.FromContext(ctx)
	for name, j := range judged {
		node, err := c.latestNode(name)
		if err != nil || node.UID != j.uid {
			continue
		}
		ready := kube.NodeCondition(node, v1.NodeReady)
		if ready == nil {
			continue
		}
		add, remove := UnreachableTaint, NotReadyTaint
		switch ready.Status {
		case v1.ConditionTrue:
			continue
		case v1.ConditionFalse:
			add, remove = NotReadyTaint, UnreachableTaint
		}
		if add.Key == j.taint.Key {
			add.TimeAdded = j.taint.TimeAdded.DeepCopy()
		}
		if err := c.writeTaints(ctx, name, []v1.Taint{add}, []v1.Taint{remove}, "restore-noexecute-taint"); err != nil {
			// Left to the normal path: queued at the zone's rate, a new timeAdded.
			logger.Error(err, "Failed to restore the NoExecute taint of a node judged dead before every zone went down", "node", klog.KObj(node))
			continue
		}
		c.mu.Lock()
		q := c.zoneQueueLocked(topology.GetZoneKey(node), c.clock.Now())
		c.mu.Unlock()
		q.Done(name)
		logger.Info("Restored the NoExecute taint of a node judged dead before every zone went down, keeping its timeAdded",
			"node", klog.KObj(node), "taint", add.ToString(), "timeAdded", add.TimeAdded)
	}
}
