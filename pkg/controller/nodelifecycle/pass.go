package nodelifecycle

import (
	"context"
	"fmt"
	"sort"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/component-helpers/node/topology"
	"k8s.io/klog/v2"

	"github.com/nodeshepherd/nodeshepherd/pkg/controllerutil"
	"github.com/nodeshepherd/nodeshepherd/pkg/kube"
	"github.com/nodeshepherd/nodeshepherd/pkg/nodetopology"
)

// Upstream's retry of one node's health update.
const (
	nodeHealthUpdateRetry = 5
	retrySleepTime        = 20 * time.Millisecond
)

// nodeResult is what one node contributes to the zone computation.
type nodeResult struct {
	name     string
	zone     string
	current  *v1.NodeCondition
	counted  bool      // false: excluded or skipped
	overdue  bool      // Ready, but silent for longer than its heartbeats are apart
	suspect  bool      // silent on the informers' view, not yet confirmed by a fresh read
	expired  time.Time // a suspect past its grace period: when it expired
	markPods bool      // just stopped being Ready: its pods are to be marked NotReady
	deadline time.Time
}

// zoneCondition is what the zone state counts for a node: its Ready
// condition, or Unknown for an overdue node, which is failing with the
// others but not yet marked.
func (r nodeResult) zoneCondition() *v1.NodeCondition {
	if r.overdue && r.current != nil && r.current.Status == v1.ConditionTrue {
		return overdueCondition
	}
	return r.current
}

var overdueCondition = &v1.NodeCondition{Type: v1.NodeReady, Status: v1.ConditionUnknown, Reason: "HeartbeatOverdue"}

// allFullCountingSuspects says whether every zone would be in
// FullDisruption with every unconfirmed suspect counted as silent (a
// suspect whose health update failed too, though it is left out of its
// zone's count otherwise).
func allFullCountingSuspects(results []nodeResult, threshold float32) bool {
	zones := map[string][]*v1.NodeCondition{}
	for _, r := range results {
		switch {
		case r.suspect && r.zone != "" && (r.counted || r.current == nil):
			zones[r.zone] = append(zones[r.zone], overdueCondition)
		case r.counted:
			zones[r.zone] = append(zones[r.zone], r.zoneCondition())
		}
	}
	for _, conds := range zones {
		if _, state := nodetopology.ComputeZoneState(conds, threshold); state != nodetopology.StateFullDisruption {
			return false
		}
	}
	return len(zones) > 0
}

// monitorNodeHealth is one health pass over every node.
func (c *Controller) monitorNodeHealth(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	nodes, err := c.nodeLister.List(labels.Everything())
	if err != nil {
		return err
	}
	now := c.clock.Now()

	// Classify added and deleted nodes and create queues for new zones.
	c.mu.Lock()
	var added []*v1.Node
	seen := make(map[string]bool, len(nodes))
	for _, n := range nodes {
		seen[n.Name] = true
		if _, ok := c.known[n.Name]; !ok {
			added = append(added, n)
			c.known[n.Name] = n
		}
		c.ensureZoneLocked(topology.GetZoneKey(n), now)
		c.zoneOfNode[n.Name] = topology.GetZoneKey(n)
	}
	var deleted []*v1.Node
	if len(c.known) != len(nodes) {
		for name, n := range c.known {
			if !seen[name] {
				deleted = append(deleted, n)
				delete(c.known, name)
				delete(c.health, name)
				delete(c.zoneOfNode, name)
				delete(c.restoring, name)
				c.lost.forgetNode(name)
			}
		}
	}
	c.mu.Unlock()

	for _, n := range added {
		logger.V(1).Info("Controller observed a new Node", "node", klog.KObj(n))
		c.recordNodeEvent(n, v1.EventTypeNormal, EventRegisteredNode, fmt.Sprintf("Node %s event: Registered Node %s in Controller", n.Name, n.Name))
		// Upstream strips the NoExecute taints of every node it sees for the
		// first time, so a new leader taints a node still down again with a
		// new timeAdded: its pods' tolerationSeconds start over. Here only a
		// node that is Ready loses them (it recovered while no one led); a
		// node still not Ready keeps its taint and timeAdded, and the health
		// pass below swaps the kind if the failure changed.
		if latest, err := c.latestNode(n.Name); err == nil && !kube.NodeReady(latest) {
			continue
		}
		if err := c.markReachable(ctx, n.Name); err != nil {
			logger.Error(err, "Failed to remove NoExecute taints from a newly seen node", "node", klog.KObj(n))
		}
	}
	for _, n := range deleted {
		logger.V(1).Info("Controller observed a Node deletion", "node", klog.KObj(n))
		c.recordNodeEvent(n, v1.EventTypeNormal, EventRemovingNode, fmt.Sprintf("Node %s event: Removing Node %s from Controller", n.Name, n.Name))
	}

	results := make([]nodeResult, len(nodes))
	workqueue.ParallelizeUntil(ctx, nodeUpdateWorkers, len(nodes), func(i int) {
		results[i] = c.processNodeHealth(ctx, nodes[i].Name)
	})
	retryAt := c.confirmSuspects(ctx, results)

	// The zone states are decided from every node of this pass, overdue ones
	// included, before any NoExecute taint queued in it is applied (the
	// tainting pass runs after this one in the same goroutine) and before
	// any pod is marked NotReady.
	zoneConditions := map[string][]*v1.NodeCondition{}
	var next time.Time
	var toMark []string
	for _, r := range results {
		if !r.deadline.IsZero() && (next.IsZero() || r.deadline.Before(next)) {
			next = r.deadline
		}
		if r.markPods {
			toMark = append(toMark, r.name)
		}
		if !r.counted {
			continue
		}
		zoneConditions[r.zone] = append(zoneConditions[r.zone], r.zoneCondition())
	}
	if !retryAt.IsZero() && (next.IsZero() || retryAt.Before(next)) {
		next = retryAt
	}
	// A zone with unconfirmed suspects taints nothing until a fresh read
	// settles them: its state may be about to change either way.
	unsettled := map[string]bool{}
	for _, r := range results {
		if r.suspect {
			unsettled[r.zone] = true
		}
	}
	// Counted Ready until confirmed, the suspects may also keep every zone
	// from FullDisruption, the all-zones mode that taints nothing: if
	// counting them silent would make every zone fully disrupted, no zone
	// taints until a fresh read settles them (chaos seed 160036: a new
	// leader whose Lease reads failed saw one zone partially disrupted and
	// tainted in the others while every node was down).
	if len(unsettled) > 0 && allFullCountingSuspects(results, c.cfg.UnhealthyZoneThreshold) {
		for _, r := range results {
			if r.zone != "" {
				unsettled[r.zone] = true
			}
		}
	}
	c.mu.Lock()
	c.nextDeadline = next
	c.unsettled = unsettled
	c.mu.Unlock()
	c.handleDisruption(ctx, zoneConditions, nodes)
	c.queueMarks(ctx, toMark)
	return nil
}

// processNodeHealth updates one node's health, decides its NoExecute taint
// and marks its pods NotReady on the Ready→not-Ready edge.
func (c *Controller) processNodeHealth(ctx context.Context, name string) nodeResult {
	logger := klog.FromContext(ctx)
	start := c.clock.Now()
	c.progressed()
	defer func() { c.metrics.updateNodeHealth.Observe(c.clock.Since(start).Seconds()) }()

	// Upstream's retry: up to five attempts 20ms apart, re-reading the node
	// from the API server after a failure. The first attempt allocates no
	// timer, which matters at thousands of nodes per pass.
	var node *v1.Node
	var u healthUpdate
	var err error
	for attempt := 0; attempt < nodeHealthUpdateRetry; attempt++ {
		if attempt > 0 {
			select {
			case <-ctx.Done():
				return nodeResult{}
			case <-c.clock.After(retrySleepTime):
			}
			gctx, cancel := context.WithTimeout(ctx, kube.WriteTimeout)
			node, err = c.client.CoreV1().Nodes().Get(gctx, name, metav1.GetOptions{})
			cancel()
		} else {
			node, err = c.latestNode(name)
		}
		if err != nil {
			logger.Error(err, "Failed to read node", "node", name)
			continue
		}
		if u, err = c.tryUpdateNodeHealth(ctx, node); err == nil {
			break
		}
		logger.V(2).Info("Failed to update node health, retrying", "node", name, "err", err)
	}
	if err != nil || node == nil {
		logger.Error(err, "Skipping node health update: too many retries; its zone taints nothing this pass", "node", name)
		// Not judged this pass: left out of its zone's count, the zone
		// could look healthier than it is (a silent node that could not be
		// marked Unknown counted as absent), so the zone is unsettled, as
		// with an unconfirmed suspect: no NoExecute taint in it.
		c.mu.Lock()
		zone := c.zoneOfNode[name]
		c.mu.Unlock()
		return nodeResult{name: name, zone: zone, suspect: true}
	}
	observed, current := u.observed, u.current
	r := nodeResult{name: name, zone: topology.GetZoneKey(node), current: current, counted: !nodetopology.ExcludedFromDisruption(node),
		overdue: u.overdue, suspect: u.suspect, expired: u.expired, deadline: u.deadline}
	if current == nil {
		return r
	}
	// Upstream decides the taint from the observed (pre-update) condition,
	// which delays the NoExecute taint of a node the controller itself just
	// marked Unknown by one monitor period. Deciding from the current
	// condition queues it in the same pass.
	c.decideTaint(ctx, node, current)
	if current.Status != v1.ConditionTrue && observed.Status == v1.ConditionTrue {
		c.recordNodeEvent(node, v1.EventTypeNormal, EventNodeNotReady, fmt.Sprintf("Node %s status is now: NodeNotReady", node.Name))
		r.markPods = true
	}
	if current.Status == v1.ConditionTrue {
		c.queueRestores(node.Name)
	}
	return r
}

// healthUpdate is the outcome of one node's grace-period check.
type healthUpdate struct {
	observed, current *v1.NodeCondition // Ready before and after the check
	deadline          time.Time         // within its grace period: when it expires
	overdue           bool              // within its grace period but silent for longer than usual
	// suspect: overdue or past its grace period on the informers' view,
	// with no fresh read since to confirm it; judged as if within its
	// grace period and not overdue until one does (see freshview.go).
	suspect bool
	expired time.Time // a suspect past its grace period: when it expired
}

// tryUpdateNodeHealth applies the grace-period rules to one node and writes
// its status when Ready changes. node is the cached object: it is copied
// only when it must change, which keeps a healthy pass free of copies.
func (c *Controller) tryUpdateNodeHealth(ctx context.Context, node *v1.Node) (healthUpdate, error) {
	now := c.clock.Now()
	lease, lerr := c.leaseLister.Leases(v1.NamespaceNodeLease).Get(node.Name)
	if lerr != nil {
		lease = nil
	}
	c.mu.Lock()
	rec, grace, observed := c.cfg.observe(c.health[node.Name], node, lease, now)
	c.health[node.Name] = rec
	probe := rec.probe
	expiry := probe.Add(grace)
	overdue := rec.overdue(now, grace, c.cfg.HeartbeatOverdueSlack)
	// Silence on the informers' view counts only once a fresh read sent
	// after the node became overdue (or passed its grace period) confirms
	// it; nodes that would not change (already Unknown, or not Ready
	// anyway for the overdue rule) need no confirmation.
	ready := kube.NodeCondition(node, v1.NodeReady)
	suspect := false
	if overdue && !rec.overdue(c.readSinceLocked(rec), grace, c.cfg.HeartbeatOverdueSlack) {
		overdue = false
		suspect = ready != nil && ready.Status == v1.ConditionTrue
	}
	expired := now.After(expiry)
	var unconfirmed time.Time
	if expired && !c.confirmedAfterLocked(rec, expiry) && (ready == nil || ready.Status != v1.ConditionUnknown) {
		expired, suspect, unconfirmed = false, true, expiry
	}
	c.mu.Unlock()

	if l, ok := peekLost(&c.lost.mu, &c.lost.statuses, node.Name); ok {
		switch {
		case probe.After(l.at):
			// A heartbeat since: the write is moot, landed or not.
			takeLost(&c.lost.mu, &c.lost.statuses, node.Name)
		case ready != nil && ready.Status == v1.ConditionUnknown && !ready.LastTransitionTime.Time.Before(l.at.Truncate(time.Second)):
			// Our Unknown write whose answer was lost has landed (only
			// this controller sets Unknown): finish it as if answered,
			// or the node's Ready→Unknown edge (its pods' marks) is lost.
			takeLost(&c.lost.mu, &c.lost.statuses, node.Name)
			return c.markedUnknown(node, l), nil
		}
	}
	if !expired {
		deadline := expiry.Add(time.Millisecond)
		if !deadline.After(now) {
			deadline = time.Time{} // expired but unconfirmed: the next fresh read decides
		}
		return healthUpdate{observed: observed, current: ready, deadline: deadline, overdue: overdue, suspect: suspect, expired: unconfirmed}, nil
	}
	nowMeta := metav1.NewTime(now)
	node = node.DeepCopy()
	expire(node, nowMeta)
	current := kube.NodeCondition(node, v1.NodeReady)
	if current.Status == observed.Status && current.LastTransitionTime.Equal(&observed.LastTransitionTime) &&
		current.Reason == observed.Reason {
		return healthUpdate{observed: observed, current: current}, nil
	}
	l := lostStatus{at: now, observed: observed, expiry: expiry, basedOn: node.ResourceVersion}
	if c.dryRun.Enabled() {
		c.dryRun.Report(ctx, node, "set-unknown", fmt.Sprintf("node %s: Ready %s -> Unknown (no heartbeat for %s)", node.Name, observed.Status, now.Sub(probe).Round(time.Millisecond)))
	} else {
		// Bounded. The update carries the resourceVersion read, so it never
		// lands twice; one whose answer is lost is remembered (the first
		// such, whose observed condition is the one before any landed), and
		// the retry's fresh read tells whether it landed (above).
		wctx, cancel := context.WithTimeout(ctx, kube.WriteTimeout)
		written, err := c.client.CoreV1().Nodes().UpdateStatus(wctx, node, metav1.UpdateOptions{})
		cancel()
		if lost(err) {
			c.lost.mu.Lock()
			if _, ok := c.lost.statuses[node.Name]; !ok {
				if c.lost.statuses == nil {
					c.lost.statuses = map[string]lostStatus{}
				}
				c.lost.statuses[node.Name] = l
			}
			c.lost.mu.Unlock()
		}
		if err != nil {
			return healthUpdate{}, err
		}
		takeLost(&c.lost.mu, &c.lost.statuses, node.Name)
		node = written
	}
	klog.FromContext(ctx).V(2).Info("Node marked Unknown", "node", klog.KObj(node), "silentFor", now.Sub(probe).Round(time.Millisecond))
	return c.markedUnknown(node, l), nil
}

// markedUnknown records that node (as written, or read back after a write
// whose answer was lost) was marked Unknown by the write l describes.
func (c *Controller) markedUnknown(node *v1.Node, l lostStatus) healthUpdate {
	c.overlay.Put(node.Name, l.basedOn, node)
	c.metrics.detectionDelay.Observe(l.at.Sub(l.expiry).Seconds())
	c.mu.Lock()
	if rec := c.health[node.Name]; rec != nil {
		rec.readyTransition = l.at
		if ready := kube.NodeCondition(node, v1.NodeReady); ready != nil {
			rec.heartbeat, rec.transition, rec.hasReady = ready.LastHeartbeatTime, ready.LastTransitionTime, true
		}
	}
	c.mu.Unlock()
	return healthUpdate{observed: l.observed, current: kube.NodeCondition(node, v1.NodeReady)}
}

// ensureZoneLocked creates the state and queue of a zone seen for the first time.
func (c *Controller) ensureZoneLocked(zone string, now time.Time) {
	if _, ok := c.zoneStates[zone]; ok {
		return
	}
	c.zoneStates[zone] = nodetopology.StateInitial
	c.metrics.setZoneState(zone, nodetopology.StateInitial)
	c.zoneQueues[zone] = newZoneQueue(c.cfg.NodeEvictionRate, now)
	c.metrics.evictions.WithLabelValues(zone).Add(0)
}

// handleDisruption computes zone states and switches between the normal,
// per-zone mode and "master disruption mode" (every zone fully disrupted).
func (c *Controller) handleDisruption(ctx context.Context, zoneConditions map[string][]*v1.NodeCondition, nodes []*v1.Node) {
	logger := klog.FromContext(ctx)
	now := c.clock.Now()
	newStates := map[string]nodetopology.ZoneState{}
	allNowFull := true
	c.mu.Lock()
	for zone, conds := range zoneConditions {
		notReady, state := nodetopology.ComputeZoneState(conds, c.cfg.UnhealthyZoneThreshold)
		size := len(conds)
		c.metrics.zoneSize.WithLabelValues(zone).Set(float64(size))
		c.metrics.zoneHealth.WithLabelValues(zone).Set(100 * float64(size-notReady) / float64(size))
		c.metrics.unhealthyNodes.WithLabelValues(zone).Set(float64(notReady))
		newStates[zone] = state
		if state != nodetopology.StateFullDisruption {
			allNowFull = false
		}
		if _, ok := c.zoneStates[zone]; !ok {
			logger.Error(nil, "Setting initial state for unseen zone", "zone", zone)
			c.zoneStates[zone] = nodetopology.StateInitial
			c.metrics.setZoneState(zone, nodetopology.StateInitial)
		}
	}
	allWereFull := true
	for zone, state := range c.zoneStates {
		if _, ok := zoneConditions[zone]; !ok {
			// A zone that lost all its (counted) nodes.
			delete(c.zoneStates, zone)
			c.metrics.zoneSize.WithLabelValues(zone).Set(0)
			c.metrics.zoneHealth.WithLabelValues(zone).Set(100)
			c.metrics.unhealthyNodes.WithLabelValues(zone).Set(0)
			c.metrics.zoneState.DeletePartialMatch(map[string]string{"zone": zone})
			continue
		}
		if state != nodetopology.StateFullDisruption {
			allWereFull = false
		}
	}
	c.mu.Unlock()

	switch {
	case allNowFull && allWereFull:
		// Nothing changes (also the case without any zone).
	case allNowFull && !allWereFull:
		logger.Info("Controller detected that all Nodes are not-Ready. Entering master disruption mode")
		c.holdMarks(ctx, len(nodes) > 0)
		c.takeJudged()
		for _, n := range nodes {
			c.rememberJudged(ctx, n.Name)
			if err := c.markReachable(ctx, n.Name); err != nil {
				logger.Error(err, "Failed to remove NoExecute taints", "node", klog.KObj(n))
			}
		}
		c.mu.Lock()
		for zone := range newStates {
			c.zoneQueueLocked(zone, now).SwapLimiter(0, now)
			c.zoneStates[zone] = nodetopology.StateFullDisruption
			c.metrics.setZoneState(zone, nodetopology.StateFullDisruption)
		}
		c.mu.Unlock()
	case !allNowFull && allWereFull:
		logger.Info("Controller detected that some Nodes are Ready. Exiting master disruption mode")
		// Nodes judged dead before the mode keep their countdown (allzones.go).
		judged := c.takeJudged()
		c.resetAllProbes(now, judged)
		c.releaseMarks(ctx, now)
		c.mu.Lock()
		for zone, state := range newStates {
			c.zoneQueueLocked(zone, now).SwapLimiter(c.cfg.rateFor(state, len(zoneConditions[zone])), now)
			c.zoneStates[zone] = state
			c.metrics.setZoneState(zone, state)
		}
		c.mu.Unlock()
		// Only now, with every zone's state and rate set: restored taints go
		// through the zone queues at their rate, as any other.
		c.restoreJudged(ctx, judged)
	default:
		c.mu.Lock()
		zones := make([]string, 0, len(newStates))
		for z := range newStates {
			zones = append(zones, z)
		}
		sort.Strings(zones)
		for _, zone := range zones {
			state := newStates[zone]
			if c.zoneStates[zone] == state {
				continue
			}
			logger.Info("Zone state changed", "zone", zone, "from", c.zoneStates[zone], "to", state)
			c.zoneQueueLocked(zone, now).SwapLimiter(c.cfg.rateFor(state, len(zoneConditions[zone])), now)
			c.zoneStates[zone] = state
			c.metrics.setZoneState(zone, state)
		}
		c.mu.Unlock()
	}
}

func (c *Controller) zoneQueueLocked(zone string, now time.Time) *zoneQueue {
	q := c.zoneQueues[zone]
	if q == nil {
		q = newZoneQueue(c.cfg.NodeEvictionRate, now)
		c.zoneQueues[zone] = q
	}
	return q
}

// ZoneStates returns a copy of the zone states, keyed by zone key.
func (c *Controller) ZoneStates() map[string]nodetopology.ZoneState {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]nodetopology.ZoneState, len(c.zoneStates))
	for k, v := range c.zoneStates {
		out[k] = v
	}
	return out
}

func (c *Controller) recordNodeEvent(n *v1.Node, typ, reason, msg string) {
	controllerutil.NodeEvent(c.recorder, n, typ, reason, msg)
}

func ignoreNotFound(err error) error {
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}
