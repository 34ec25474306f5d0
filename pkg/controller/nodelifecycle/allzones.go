package nodelifecycle

import (
	"context"
	"encoding/json"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
// evicted at once. The remembered taint is also written on the node
// (AnnotationJudged) before the strip, so that a new leader gives the same
// timeAdded back (chaos seed 70019: the leader that stripped it was killed,
// and the next one tainted the node from now): it counts while the node's
// Ready condition has not changed since (its lastTransitionTime is in the
// record), and goes when the node gets a NoExecute taint back or is Ready.

// judgedTaint is the NoExecute taint a node carried when every zone went down.
type judgedTaint struct {
	uid   types.UID
	taint v1.Taint
}

// AnnotationJudged records on a node the NoExecute taint the all-zones mode
// stripped from it, for the leader that restores it (JSON: judgedRecord).
const AnnotationJudged = "nodeshepherd.io/noexecute-before-all-zones"

// judgedRecord is AnnotationJudged's value.
type judgedRecord struct {
	Key       string      `json:"key"`
	TimeAdded metav1.Time `json:"timeAdded"`
	// NotReadySince is the Ready condition's lastTransitionTime when the
	// taint was stripped: the record counts only while it is unchanged.
	NotReadySince metav1.Time `json:"notReadySince"`
}

// judgedOnNode is the taint AnnotationJudged records on node, if the node has
// stayed not Ready since it was written.
func judgedOnNode(node *v1.Node) (v1.Taint, bool) {
	raw, ok := node.Annotations[AnnotationJudged]
	if !ok {
		return v1.Taint{}, false
	}
	var r judgedRecord
	ready := kube.NodeCondition(node, v1.NodeReady)
	if err := json.Unmarshal([]byte(raw), &r); err != nil || ready == nil || ready.Status == v1.ConditionTrue ||
		ready.LastTransitionTime.Unix() != r.NotReadySince.Unix() || r.TimeAdded.IsZero() {
		return v1.Taint{}, false
	}
	for _, t := range []v1.Taint{UnreachableTaint, NotReadyTaint} {
		if t.Key == r.Key {
			t.TimeAdded = r.TimeAdded.DeepCopy()
			return t, true
		}
	}
	return v1.Taint{}, false
}

// rememberJudged records the NoExecute taint of a node not Ready, before
// entering the all-zones mode strips it, in memory and on the node; a taint
// still waiting to be restored from an earlier mode, or recorded on the
// node by an earlier leader, is remembered as it was.
func (c *Controller) rememberJudged(ctx context.Context, name string) {
	node, err := c.latestNode(name)
	if err != nil || kube.NodeReady(node) {
		return
	}
	for _, want := range []v1.Taint{UnreachableTaint, NotReadyTaint} {
		if t := kube.FindTaint(node, want); t != nil && t.TimeAdded != nil {
			c.mu.Lock()
			c.judged[name] = judgedTaint{uid: node.UID, taint: *t.DeepCopy()}
			c.mu.Unlock()
			if err := c.writeJudged(ctx, node, t); err != nil {
				// The strip goes on: no pod may be evicted now. Only a
				// new leader would then taint the node anew.
				klog.FromContext(ctx).Error(err, "Failed to record on the node the NoExecute taint stripped on entering the all-zones mode", "node", klog.KObj(node))
			}
			return
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if j, ok := c.restoring[name]; ok && j.uid == node.UID {
		c.judged[name] = j
	} else if t, found := judgedOnNode(node); found {
		c.judged[name] = judgedTaint{uid: node.UID, taint: t}
	}
}

// writeJudged records t on node (AnnotationJudged), bounded.
func (c *Controller) writeJudged(ctx context.Context, node *v1.Node, t *v1.Taint) error {
	ready := kube.NodeCondition(node, v1.NodeReady)
	if ready == nil || c.dryRun.Enabled() {
		return nil
	}
	rec, err := json.Marshal(judgedRecord{Key: t.Key, TimeAdded: *t.TimeAdded, NotReadySince: ready.LastTransitionTime})
	if err != nil {
		return err
	}
	written, err := c.patchJudged(ctx, node.Name, string(rec))
	if written != nil {
		// The strip that follows starts from this version, not a conflict.
		c.overlay.Put(node.Name, node.ResourceVersion, written)
	}
	return err
}

// dropJudged removes AnnotationJudged from node, if it carries it: its
// taint is back, or the node is Ready or heard again. A failure is logged
// and returned: the record no longer counts once the node's Ready condition
// changes, but a node heard only through its Lease keeps that condition.
func (c *Controller) dropJudged(ctx context.Context, node *v1.Node) error {
	if _, ok := node.Annotations[AnnotationJudged]; !ok || c.dryRun.Enabled() {
		return nil
	}
	if _, err := c.patchJudged(ctx, node.Name, nil); err != nil {
		klog.FromContext(ctx).Error(err, "Failed to remove the record of a NoExecute taint stripped by the all-zones mode", "node", klog.KObj(node))
		return err
	}
	return nil
}

func (c *Controller) patchJudged(ctx context.Context, name string, value any) (*v1.Node, error) {
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{AnnotationJudged: value}}})
	if err != nil {
		return nil, err
	}
	wctx, cancel := context.WithTimeout(ctx, kube.WriteTimeout)
	defer cancel()
	n, err := c.client.CoreV1().Nodes().Patch(wctx, name, types.MergePatchType, patch, metav1.PatchOptions{})
	if err != nil {
		return nil, ignoreNotFound(err)
	}
	return n, nil
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
	if !ok || j.uid != node.UID {
		// Recorded on the node by the leader that stripped it (chaos seed
		// 90012: a new leader after the exit, its restore still queued).
		if t, found := judgedOnNode(node); found {
			j, ok = judgedTaint{uid: node.UID, taint: t}, true
		}
	}
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
