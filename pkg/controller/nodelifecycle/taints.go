package nodelifecycle

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"strings"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/component-helpers/node/topology"
	"k8s.io/klog/v2"

	"github.com/nodeshepherd/nodeshepherd/pkg/controllerutil"
	"github.com/nodeshepherd/nodeshepherd/pkg/kube"
	"github.com/nodeshepherd/nodeshepherd/pkg/owner"
)

// The NoExecute taints this controller owns.
var (
	UnreachableTaint = v1.Taint{Key: v1.TaintNodeUnreachable, Effect: v1.TaintEffectNoExecute}
	NotReadyTaint    = v1.Taint{Key: v1.TaintNodeNotReady, Effect: v1.TaintEffectNoExecute}
)

// conditionTaints maps node conditions to the NoSchedule taint each status
// implies ("taint nodes by condition").
var conditionTaints = map[v1.NodeConditionType]map[v1.ConditionStatus]string{
	v1.NodeReady:              {v1.ConditionFalse: v1.TaintNodeNotReady, v1.ConditionUnknown: v1.TaintNodeUnreachable},
	v1.NodeMemoryPressure:     {v1.ConditionTrue: v1.TaintNodeMemoryPressure},
	v1.NodeDiskPressure:       {v1.ConditionTrue: v1.TaintNodeDiskPressure},
	v1.NodeNetworkUnavailable: {v1.ConditionTrue: v1.TaintNodeNetworkUnavailable},
	v1.NodePIDPressure:        {v1.ConditionTrue: v1.TaintNodePIDPressure},
}

// ownedNoScheduleKeys are the NoSchedule taint keys this controller manages;
// every other NoSchedule taint belongs to someone else and is left alone.
var ownedNoScheduleKeys = func() map[string]bool {
	m := map[string]bool{v1.TaintNodeUnschedulable: true}
	for _, byStatus := range conditionTaints {
		for _, key := range byStatus {
			m[key] = true
		}
	}
	return m
}()

func hasTaint(n *v1.Node, t v1.Taint) bool { return kube.FindTaint(n, t) != nil }

// decideTaint queues a not-ready or unreachable node for its NoExecute taint,
// swaps the two taints at once when the kind of failure changes, and clears
// both from a Ready node.
func (c *Controller) decideTaint(ctx context.Context, node *v1.Node, ready *v1.NodeCondition) {
	logger := klog.FromContext(ctx)
	switch ready.Status {
	case v1.ConditionFalse:
		if hasTaint(node, UnreachableTaint) {
			if err := c.swapTaints(ctx, node.Name, NotReadyTaint, UnreachableTaint, ""); err != nil {
				logger.Error(err, "Failed to swap the unreachable taint for the not-ready taint", "node", klog.KObj(node))
			}
			return
		}
		c.markForTainting(node, NotReadyTaint)
	case v1.ConditionUnknown:
		if hasTaint(node, NotReadyTaint) {
			if err := c.swapTaints(ctx, node.Name, UnreachableTaint, NotReadyTaint, ""); err != nil {
				logger.Error(err, "Failed to swap the not-ready taint for the unreachable taint", "node", klog.KObj(node))
			}
			return
		}
		c.markForTainting(node, UnreachableTaint)
	case v1.ConditionTrue:
		if err := c.markReachable(ctx, node.Name); err != nil {
			logger.Error(err, "Failed to remove NoExecute taints", "node", klog.KObj(node))
		}
	}
}

// markForTainting adds the node to its zone's queue; if the taint it needs is
// missing (for instance removed by hand) it is re-armed first.
func (c *Controller) markForTainting(node *v1.Node, want v1.Taint) {
	now := c.clock.Now()
	zone := topology.GetZoneKey(node)
	c.mu.Lock()
	q := c.zoneQueueLocked(zone, now)
	c.mu.Unlock()
	if !hasTaint(node, want) {
		q.Remove(node.Name)
		q.Add(node.Name, node.UID, now)
		return
	}
	// Tainted already (by this leader, or one before it): nothing to write,
	// no token of the zone's rate to spend.
	q.Done(node.Name)
}

// markReachable removes both NoExecute taints and dequeues the node.
func (c *Controller) markReachable(ctx context.Context, name string) error {
	node, err := c.latestNode(name)
	if err != nil {
		return ignoreNotFound(err)
	}
	if hasTaint(node, UnreachableTaint) || hasTaint(node, NotReadyTaint) {
		if err := c.writeTaints(ctx, name, nil, []v1.Taint{UnreachableTaint, NotReadyTaint}, "remove-noexecute-taints"); err != nil {
			return err
		}
	}
	c.mu.Lock()
	q := c.zoneQueues[topology.GetZoneKey(node)]
	c.mu.Unlock()
	if q != nil {
		q.Remove(name)
	}
	if kube.NodeReady(node) {
		c.forgetRestoring(name)
		c.dropJudged(ctx, node)
	}
	return nil
}

// swapTaints adds one NoExecute taint and removes the other; zone is the
// zone to count an eviction in ("" for an immediate swap, not counted).
func (c *Controller) swapTaints(ctx context.Context, name string, add, remove v1.Taint, zone string) error {
	if err := c.writeTaints(ctx, name, []v1.Taint{add}, []v1.Taint{remove}, "taint-"+strings.TrimPrefix(add.Key, "node.kubernetes.io/")); err != nil {
		return err
	}
	if zone != "" {
		c.metrics.evictions.WithLabelValues(zone).Inc()
	}
	return nil
}

// taintOwner is the owner record of a taint this controller adds: the
// condition it mirrors, since when, and what lifts it (package owner). No
// expiry (owner.Lease): the taint states the node's condition, which stays
// true without this controller, and kube-controller-manager's node
// lifecycle controller, taking over, keeps the same taints.
func taintOwner(n *v1.Node, t v1.Taint) owner.Record {
	rec := owner.Record{Controller: Name}
	if t.Key == v1.TaintNodeUnschedulable {
		rec.Why, rec.Until = "spec.unschedulable is true (the node is cordoned)", "spec.unschedulable is false"
		return rec
	}
	for cond, byStatus := range conditionTaints {
		for status, key := range byStatus {
			if key != t.Key {
				continue
			}
			rec.Why = fmt.Sprintf("%s is %s", cond, status)
			if c := kube.NodeCondition(n, cond); c != nil && c.Status == status {
				rec.Why += " since " + c.LastTransitionTime.UTC().Format(time.RFC3339)
				if c.Reason != "" {
					rec.Why += " (" + c.Reason + ")"
				}
			}
			healthy := v1.ConditionFalse
			if cond == v1.NodeReady {
				healthy = v1.ConditionTrue
			}
			rec.Until = fmt.Sprintf("%s is %s", cond, healthy)
			if t.Effect == v1.TaintEffectNoExecute {
				rec.Until += "; meanwhile pods that do not tolerate it are evicted"
			}
			return rec
		}
	}
	rec.Why = "taint " + owner.TaintKey(t)
	return rec
}

// writeTaints changes a node's taints, or reports the change in dry run.
// Every write also brings the owned NoSchedule taints in line with the
// node's conditions, so a failing node gets its NoSchedule and NoExecute
// taints in one write. Writes to one node are serialized and start from the
// freshest view (this controller's own last write included), so the health
// pass and the node workers never race each other into conflicts.
func (c *Controller) writeTaints(ctx context.Context, name string, add, remove []v1.Taint, action string) error {
	lock := c.nodeLock(name)
	lock.Lock()
	defer lock.Unlock()
	node, err := c.latestNode(name)
	if err != nil {
		return ignoreNotFound(err)
	}
	now := c.clock.Now()
	change := func(n *v1.Node) ([]v1.Taint, []v1.Taint) {
		nsAdd, nsRemove := noScheduleDiff(n)
		return append(append([]v1.Taint(nil), add...), nsAdd...), append(append([]v1.Taint(nil), remove...), nsRemove...)
	}
	if c.dryRun.Enabled() {
		a, r := change(node)
		taints, changed := controllerutil.ChangeTaints(node.Spec.Taints, a, r, now)
		if !changed {
			return nil
		}
		c.dryRun.Report(ctx, node, action, fmt.Sprintf("node %s: taints %s -> %s", node.Name, taintList(node.Spec.Taints), taintList(taints)))
		copy := node.DeepCopy()
		copy.Spec.Taints = taints
		c.overlay.Put(node.Name, node.ResourceVersion, copy)
		return nil
	}
	// Bounded (kube.WriteTimeout). After a write whose answer was lost the
	// next one starts from the node as the API server has it, not from this
	// controller's view: that write may have landed, and is then neither
	// sent again nor undone (a taint keeps its timeAdded).
	wctx, cancel := context.WithTimeout(ctx, kube.WriteTimeout)
	defer cancel()
	get := func() (*v1.Node, error) { return node, nil }
	var read *v1.Node
	if _, unsure := peekLost(&c.lost.mu, &c.lost.taints, name); unsure {
		get = func() (*v1.Node, error) {
			n, err := c.client.CoreV1().Nodes().Get(wctx, name, metav1.GetOptions{})
			read = n
			return n, err
		}
	}
	written, err := controllerutil.PatchTaints(wctx, c.client, node.Name, get, change, now, taintOwner)
	if lost(err) {
		setLost(&c.lost.mu, &c.lost.taints, name, true)
		return fmt.Errorf("%w (no answer: the next write re-reads the node first)", err)
	}
	if err != nil {
		return err
	}
	takeLost(&c.lost.mu, &c.lost.taints, name)
	if written == nil && read != nil {
		// The lost write had landed: the view must show it, or the node
		// would be queued for its taint again.
		written = read
	}
	if written != nil {
		c.overlay.Put(node.Name, node.ResourceVersion, written)
		klog.FromContext(ctx).V(2).Info("Node taints updated", "node", node.Name, "action", action, "taints", taintList(written.Spec.Taints))
	}
	return nil
}

// nodeLock returns the lock serializing writes to a node (striped by name).
func (c *Controller) nodeLock(name string) *sync.Mutex {
	h := fnv.New32a()
	_, _ = h.Write([]byte(name))
	return &c.nodeLocks[h.Sum32()%uint32(len(c.nodeLocks))]
}

func taintList(ts []v1.Taint) string {
	if len(ts) == 0 {
		return "[]"
	}
	s := make([]string, len(ts))
	for i := range ts {
		s[i] = ts[i].ToString()
	}
	return "[" + strings.Join(s, ",") + "]"
}

// doNoExecuteTaintingPass applies queued NoExecute taints as each zone's
// token bucket allows.
func (c *Controller) doNoExecuteTaintingPass(ctx context.Context) {
	logger := klog.FromContext(ctx)
	c.mu.Lock()
	zones := make(map[string]*zoneQueue, len(c.zoneQueues))
	for z, q := range c.zoneQueues {
		if !c.unsettled[z] { // see monitorNodeHealth
			zones[z] = q
		}
	}
	c.mu.Unlock()
	for zone, q := range zones {
		if q.Len() == 0 {
			continue
		}
		q.Try(c.clock.Now(), func(v timedValue) (bool, time.Duration) {
			c.progressed()
			node, err := c.latestNode(v.value)
			if apierrors.IsNotFound(err) {
				return true, 0
			}
			if err != nil {
				return false, 50 * time.Millisecond
			}
			ready := kube.NodeCondition(node, v1.NodeReady)
			if ready == nil {
				return false, 50 * time.Millisecond
			}
			add, remove := UnreachableTaint, NotReadyTaint
			switch ready.Status {
			case v1.ConditionFalse:
				add, remove = NotReadyTaint, UnreachableTaint
			case v1.ConditionUnknown:
				heard := c.heardWithinGrace(node.Name)
				if !heard {
					// Before acting on silence, make sure it is real: the
					// Lease read from the API server, not only as the
					// informer delivered it (chaos seed 210003: a new leader
					// restored a judged taint 0.6 s after the node came back,
					// its renewal not yet delivered).
					renewed, err := c.renewedUnseen(ctx, node.Name, ready.LastTransitionTime.Time)
					if err != nil {
						logger.V(2).Info("Could not read the Lease of a node to taint on its Unknown mark; trying again", "node", v.value, "err", err)
						return false, 500 * time.Millisecond
					}
					heard = renewed.back
					if renewed.afterMark && !heard {
						// Back after its mark, silent again since: a new
						// silence, so no stripped taint's old timeAdded.
						c.forgetRestoring(node.Name)
						if c.dropJudged(ctx, node) != nil {
							return false, 500 * time.Millisecond
						}
						node = node.DeepCopy() // the informer's copy stays as it is
						delete(node.Annotations, AnnotationJudged)
					}
				}
				if heard {
					// The silence it was marked Unknown for is over (its
					// Lease renewed); its Node may read Unknown here only
					// because the kubelet's Ready=True is not delivered yet
					// (a stalled node watch). Tainting it, or restoring a
					// taint judged before every zone went down, would evict
					// from a live node (chaos seed 170020). A new silence is
					// judged afresh by the health pass, from now: the record
					// of a taint stripped by the all-zones mode goes too, or
					// that judgement would restore its old timeAdded.
					logger.V(2).Info("Node was heard within its grace period: not tainting it on its Unknown mark", "node", v.value)
					c.forgetRestoring(node.Name)
					if c.dropJudged(ctx, node) != nil {
						return false, 500 * time.Millisecond
					}
					return true, 0
				}
			default:
				logger.V(2).Info("Node is ready now. Ignoring taint request", "node", v.value)
				return true, 0
			}
			add, restored := c.restoredTaint(node, add)
			if err := c.swapTaints(ctx, node.Name, add, remove, zone); err != nil {
				logger.Error(err, "Failed to apply NoExecute taint", "node", v.value)
				return false, 0
			}
			c.forgetRestoring(node.Name)
			c.dropJudged(ctx, node)
			if restored {
				logger.Info("Restored the NoExecute taint of a node judged dead before every zone went down, keeping its timeAdded",
					"node", klog.KObj(node), "taint", add.ToString(), "timeAdded", add.TimeAdded)
			}
			return true, 0
		})
	}
}

// renewal is what a fresh read of a node's Lease says.
type renewal struct {
	// back: a renewal this process has not heard (a heartbeat, heard now),
	// or one after the Unknown mark less than the grace period ago.
	back bool
	// afterMark: renewed after the Unknown mark (markedAt, whole seconds:
	// rounded up), however long ago: the silence the mark was for ended.
	afterMark bool
}

// renewedUnseen reads the node's Lease from the API server (a quorum GET,
// bounded) and says whether it shows the node back. A renewal after the
// Unknown mark is what a process that took over after the node came back
// sees: its first sight already holds the renewal, and a first sight is not
// a heartbeat heard (chaos seed 250015: a new leader restored a judged
// taint, with its old timeAdded, 1.3 s after the node came back). Judged on
// the kubelet's clock against this process's, so a kubelet clock ahead by S
// leaves a silent node untainted S longer, never for good. A node without a
// Lease in the informer is judged by its Ready heartbeat as before (no
// read).
func (c *Controller) renewedUnseen(ctx context.Context, name string, markedAt time.Time) (renewal, error) {
	if _, err := c.leaseLister.Leases(v1.NamespaceNodeLease).Get(name); err != nil {
		return renewal{}, nil
	}
	rctx, cancel := context.WithTimeout(ctx, freshReadTimeout)
	defer cancel()
	l, err := c.client.CoordinationV1().Leases(v1.NamespaceNodeLease).Get(rctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return renewal{}, nil
	}
	if err != nil {
		c.metrics.freshReads.WithLabelValues("error").Inc()
		return renewal{}, fmt.Errorf("reading the Lease of node %s: %w", name, err)
	}
	c.metrics.freshReads.WithLabelValues("ok").Inc()
	if l.Spec.RenewTime == nil {
		return renewal{}, nil
	}
	renewed := l.Spec.RenewTime.Time
	now := c.clock.Now()
	r := renewal{afterMark: renewed.After(markedAt.Add(time.Second))}
	c.mu.Lock()
	defer c.mu.Unlock()
	if rec := c.health[name]; rec != nil && renewed.After(rec.leaseRenew) {
		rec.leaseRenew = renewed
		freshHeartbeat(rec, now)
		rec.lastHeard = now
		r.back = true
		return r, nil
	}
	r.back = r.afterMark && now.Sub(renewed) < c.cfg.NodeMonitorGracePeriod
	return r, nil
}

// heardWithinGrace says whether this process heard the node's heartbeat
// (a Lease renewal or a new Ready heartbeat arriving) less than the grace
// period ago.
func (c *Controller) heardWithinGrace(name string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	rec := c.health[name]
	return rec != nil && !rec.lastHeard.IsZero() && c.clock.Since(rec.lastHeard) < c.cfg.NodeMonitorGracePeriod
}

// processNode keeps a node's NoSchedule taints in line with its conditions
// and spec.unschedulable, and its beta os/arch labels with the stable ones.
func (c *Controller) processNode(ctx context.Context) bool {
	return controllerutil.ProcessNext(ctx, c.nodeQueue, "node", "Failed to update node taints or labels, requeueing",
		func(ctx context.Context, name string) error {
			if err := c.syncNoScheduleTaints(ctx, name); err != nil {
				return err
			}
			return c.reconcileLabels(ctx, name)
		})
}

// desiredNoScheduleTaints derives the NoSchedule taints from the node.
func desiredNoScheduleTaints(node *v1.Node) []v1.Taint {
	var out []v1.Taint
	for _, cond := range node.Status.Conditions {
		if key, ok := conditionTaints[cond.Type][cond.Status]; ok {
			out = append(out, v1.Taint{Key: key, Effect: v1.TaintEffectNoSchedule})
		}
	}
	if node.Spec.Unschedulable {
		out = append(out, v1.Taint{Key: v1.TaintNodeUnschedulable, Effect: v1.TaintEffectNoSchedule})
	}
	return out
}

// noScheduleDiff returns the owned NoSchedule taints to add and to remove.
func noScheduleDiff(node *v1.Node) (add, remove []v1.Taint) {
	desired := desiredNoScheduleTaints(node)
	for _, d := range desired {
		if !hasTaint(node, d) {
			add = append(add, d)
		}
	}
	for _, t := range node.Spec.Taints {
		if t.Effect != v1.TaintEffectNoSchedule || !ownedNoScheduleKeys[t.Key] {
			continue
		}
		found := false
		for _, d := range desired {
			if d.Key == t.Key {
				found = true
			}
		}
		if !found {
			remove = append(remove, v1.Taint{Key: t.Key, Effect: t.Effect})
		}
	}
	return add, remove
}

func (c *Controller) syncNoScheduleTaints(ctx context.Context, name string) error {
	node, err := c.latestNode(name)
	if err != nil {
		return ignoreNotFound(err)
	}
	if add, remove := noScheduleDiff(node); len(add) == 0 && len(remove) == 0 {
		return nil
	}
	return c.writeTaints(ctx, name, nil, nil, "update-noschedule-taints")
}

// labelPairs are the stable labels whose beta twins are kept equal.
var labelPairs = [][2]string{{v1.LabelOSStable, "beta.kubernetes.io/os"}, {v1.LabelArchStable, "beta.kubernetes.io/arch"}}

// labelChanges returns the beta labels to set, or nil.
func labelChanges(node *v1.Node) map[string]string {
	if node.Labels == nil {
		return nil
	}
	var out map[string]string
	for _, p := range labelPairs {
		primary, ok := node.Labels[p[0]]
		if !ok {
			continue
		}
		if cur, ok := node.Labels[p[1]]; !ok || cur != primary {
			if out == nil {
				out = map[string]string{}
			}
			out[p[1]] = primary
		}
	}
	return out
}

func (c *Controller) reconcileLabels(ctx context.Context, name string) error {
	node, err := c.latestNode(name)
	if err != nil {
		return ignoreNotFound(err)
	}
	changes := labelChanges(node)
	if len(changes) == 0 {
		return nil
	}
	if c.dryRun.Enabled() {
		c.dryRun.Report(ctx, node, "reconcile-labels", fmt.Sprintf("node %s: set labels %v", node.Name, changes))
		copy := node.DeepCopy()
		for k, v := range changes {
			copy.Labels[k] = v
		}
		c.overlay.Put(node.Name, node.ResourceVersion, copy)
		return nil
	}
	// Bounded; the labels patch sets values, so sending it again after a lost
	// answer (the queue's retry) is harmless.
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"labels": changes}})
	wctx, cancel := context.WithTimeout(ctx, kube.WriteTimeout)
	defer cancel()
	_, err = c.client.CoreV1().Nodes().Patch(wctx, name, types.StrategicMergePatchType, patch, metav1.PatchOptions{})
	return ignoreNotFound(err)
}
