package nodelifecycle

import (
	"context"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"

	"github.com/nodeshepherd/nodeshepherd/pkg/kube"
)

// Static stability. When every zone is in FullDisruption, no node at all
// heartbeats: the likely cause is the network between the nodes and the
// control plane (or this controller), not the nodes, whose pods may well go
// on serving. Upstream marks every pod NotReady then, which empties every
// Service; with StaticStability nodeshepherd holds those marks until some
// node heartbeats again, and marks the pods of the nodes that are still not
// Ready a fresh grace period later (by then they have had time to report).

// heartbeatsRef is what the hold's events are about: the namespace of the
// node Leases, since the state concerns every node's heartbeats at once.
var heartbeatsRef = &v1.ObjectReference{APIVersion: "v1", Kind: "Namespace", Name: v1.NamespaceNodeLease}

// holdMarks starts holding pod marks on entering master disruption mode.
func (c *Controller) holdMarks(ctx context.Context, anyNode bool) {
	if !c.cfg.StaticStability || !anyNode {
		return
	}
	c.mu.Lock()
	if c.holding {
		c.mu.Unlock()
		return
	}
	c.holding = true
	c.mu.Unlock()
	c.metrics.staticStability.Set(1)
	msg := "Every zone is in FullDisruption: no node heartbeats at all, likely a control-plane network problem; keeping pods Ready (static stability) until a node heartbeats again"
	klog.FromContext(ctx).Info(msg)
	if c.recorder != nil {
		c.recorder.Event(heartbeatsRef, v1.EventTypeWarning, EventAllNodesSilent, msg)
	}
}

// releaseMarks ends the hold when some node heartbeats again.
func (c *Controller) releaseMarks(ctx context.Context, now time.Time) {
	c.mu.Lock()
	if !c.holding {
		c.mu.Unlock()
		return
	}
	c.holding, c.released = false, now
	held := len(c.held)
	c.mu.Unlock()
	c.metrics.staticStability.Set(0)
	msg := "A node heartbeats again: static stability ends; pods of nodes still not Ready after a fresh grace period will be marked NotReady"
	klog.FromContext(ctx).Info(msg, "heldNodes", held, "markAfter", now.Add(c.cfg.NodeMonitorGracePeriod))
	if c.recorder != nil {
		c.recorder.Event(heartbeatsRef, v1.EventTypeNormal, EventNodesHeartbeating, msg)
	}
}

// holdingMarks reports whether pod marks are held, and records that node's
// pods as held if so.
func (c *Controller) holdingMarks(node string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.holding {
		c.held[node] = true
	}
	return c.holding
}

// queueMarks queues the pods of nodes that just stopped being Ready for
// marking, or holds them; after a hold, it queues the held nodes that are
// still not Ready once a fresh grace period has passed.
func (c *Controller) queueMarks(ctx context.Context, names []string) {
	now := c.clock.Now()
	c.mu.Lock()
	if c.holding {
		for _, n := range names {
			c.held[n] = true
		}
		c.mu.Unlock()
		return
	}
	var release []string
	if len(c.held) > 0 && !now.Before(c.released.Add(c.cfg.NodeMonitorGracePeriod)) {
		for n := range c.held {
			release = append(release, n)
		}
		clear(c.held)
	}
	c.mu.Unlock()
	for _, n := range release {
		if node, err := c.latestNode(n); err == nil && !kube.NodeReady(node) {
			klog.FromContext(ctx).V(2).Info("Node still not Ready a grace period after static stability ended; marking its pods", "node", n)
			names = append(names, n)
		}
	}
	for _, n := range names {
		c.markQueue.Add(n)
	}
}
