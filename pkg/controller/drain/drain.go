package drain

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/klog/v2"

	"github.com/nodeshepherd/nodeshepherd/pkg/controllerutil"
	"github.com/nodeshepherd/nodeshepherd/pkg/kube"
	"github.com/nodeshepherd/nodeshepherd/pkg/nodetopology"
)

const (
	// pollInterval is how often a drain looks at its pods (in the informer
	// cache: no API calls) while waiting for evictions and deletions.
	pollInterval = 500 * time.Millisecond
	// evictionBackoff and maxEvictionBackoff space retries of one pod's
	// refused eviction (429 from a PodDisruptionBudget, or an error).
	evictionBackoff    = time.Second
	maxEvictionBackoff = 10 * time.Second
	// parallelEvictions bounds eviction requests in flight per drain.
	parallelEvictions = 8
)

// podEviction is one pod's progress within a drain.
type podEviction struct {
	pod     *v1.Pod
	evicted bool
	next    time.Time
	backoff time.Duration
	lastErr string
	// refused: the last eviction was refused by a PodDisruptionBudget (429).
	refused bool
	// force: delete the pod instead of evicting it (force-after is due);
	// forced, at forcedAt: it was.
	force, forced bool
	forcedAt      time.Time
	// blockedSince: since when every eviction of the pod has been refused by
	// a PodDisruptionBudget, without a break (zero when the last was not).
	blockedSince time.Time
	// moving: its Deployment makes its replacement first (move-before-evict);
	// no eviction is sent meanwhile.
	moving bool
	// replacement: a pod its owner put back on this node after this drain
	// evicted one of its pods (or created after the drain started); left alone.
	replacement bool
	// unanswered: the last eviction failed without a refusal (a timeout, a
	// 5xx): it may have taken effect. If the pod then terminates or goes,
	// the drain counts it as evicted and never sends another.
	unanswered bool
}

// podsOn returns the pods bound to the node, from the informer.
func (c *Controller) podsOn(node string) []*v1.Pod {
	objs, _ := c.pods.ByIndex(nodetopology.ByNodeIndex, node)
	out := make([]*v1.Pod, 0, len(objs))
	for _, o := range objs {
		out = append(out, o.(*v1.Pod))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Namespace+"/"+out[i].Name < out[j].Namespace+"/"+out[j].Name })
	return out
}

// unschedulableTaint is what a cordon means to the scheduler; a pod that
// tolerates it can be put back on the cordoned node.
var unschedulableTaint = &v1.Taint{Key: v1.TaintNodeUnschedulable, Effect: v1.TaintEffectNoSchedule}

// returningOwner is the UID of the controller that would recreate the pod on
// this same node: a DaemonSet, or any controller whose pods tolerate the
// cordon. "" for every other pod.
func returningOwner(p *v1.Pod) types.UID {
	owner := metav1.GetControllerOf(p)
	if owner == nil {
		return ""
	}
	if owner.Kind == "DaemonSet" || corev1helpers.TolerationsTolerateTaint(klog.Background(), p.Spec.Tolerations, unschedulableTaint, false) {
		return owner.UID
	}
	return ""
}

// drain evicts every evictable pod of the node and waits until they are
// gone, or until the drain timeout (counted from the schedule, so a resumed
// drain keeps its deadline). Pods that appear during the drain are evicted
// too, except those an owner puts back on this node (DaemonSet pods, pods
// tolerating the cordon): such an owner's pods are evicted once per drain
// and their replacements neither evicted nor waited for, so the drain ends.
// Pods already terminating are only waited for, never evicted twice.
func (c *Controller) drain(parent context.Context, n *v1.Node, scheduled time.Time) {
	logger := klog.FromContext(parent).WithValues("node", n.Name)
	start := c.clock.Now()
	deadline := scheduled.Add(c.cfg.DrainTimeout)
	// The drain's own deadline: its calls are cut deadlineSlack after it
	// (or after its start, for a drain resumed late, so that its first look
	// can tell whether force-after keeps it going), so that a call that does
	// not return cannot hold the drain and its budget slot past its timeout.
	// The drain then fails as at its timeout; its end is written with parent.
	ctx, cut := context.WithCancelCause(parent)
	defer cut(nil)
	dog := newWatchdog(c.clock, latestOf(deadline, start).Add(deadlineSlack), func() { cut(errDrainTimedOut) })
	defer dog.stop()
	toEvict, skipped := 0, map[string]int{}
	for _, p := range c.podsOn(n.Name) {
		if why := c.cfg.skipReason(p); why != "" {
			skipped[why]++
		} else {
			toEvict++
		}
	}
	starting := fmt.Sprintf("Draining node: %d pods to evict%s", toEvict, describeSkipped(skipped))
	c.eventOnce(n, EventDrainStarting, starting, starting)
	logger.Info("Draining node", "pods", toEvict, "skipped", skipped, "deadline", deadline)

	prior := readBlocked(n, scheduled)
	moves := map[types.UID]*moveState{}
	tracked := map[types.UID]*podEviction{}
	blockedSaid := "" // the blockers said in DrainBlocked
	evictedOwners := map[types.UID]bool{}
	evicted, forced, started := 0, 0, false
	ticker := c.clock.NewTicker(pollInterval)
	defer ticker.Stop()
	for {
		now := c.clock.Now()
		node := n
		if cur, err := c.nodes.Get(n.Name); err == nil {
			node = c.view(cur)
		}
		forceAfter := c.forceAfter(node)
		// A kubelet that cannot be reached never confirms deletions: there an
		// evicted pod counts as gone once terminating (its controller has
		// already replaced it).
		unreachable := !kube.NodeReady(node)
		var due []*podEviction
		var waiting []*podEviction
		seen := map[types.UID]bool{}
		blockChanged := false
		onNode := c.podsOn(n.Name)
		for _, p := range onNode {
			if c.cfg.skipReason(p) != "" {
				continue
			}
			seen[p.UID] = true
			e := tracked[p.UID]
			if e == nil {
				e = &podEviction{pod: p, backoff: evictionBackoff, blockedSince: prior[p.UID]}
				// creationTimestamp has one-second precision: a pod is surely
				// newer than the drain only from the next second on.
				if owner := returningOwner(p); owner != "" && (evictedOwners[owner] || p.CreationTimestamp.After(scheduled)) {
					e.replacement = true
					logger.V(2).Info("Leaving a pod its owner put back on the node", "pod", klog.KObj(p))
				}
				tracked[p.UID] = e
			}
			e.pod = p
			if !e.replacement && p.DeletionTimestamp == nil && !e.evicted && (e.refused || e.moving) {
				// Refused by a budget: its workload may make the replacement first.
				var why string
				if e.moving, why = c.moveStep(ctx, node, e, moves, onNode, now); e.moving {
					e.lastErr = why
					if !e.blockedSince.IsZero() {
						e.blockedSince, blockChanged = time.Time{}, true // moving, not stuck
					}
				}
			}
			switch {
			case e.replacement:
			case (p.DeletionTimestamp != nil || e.evicted) && (unreachable || c.dryRun.Enabled()):
				// as good as gone
			case p.DeletionTimestamp != nil || e.evicted:
				e.lastErr, e.refused, e.moving = "terminating", false, false
				waiting = append(waiting, e)
			case e.moving:
				waiting = append(waiting, e)
			case now.Before(e.next) && !forceFallsDue(e, forceAfter, now):
				// (force-after does not wait for the eviction backoff)
				waiting = append(waiting, e)
			default:
				force, moving := c.forceDue(ctx, e, forceAfter, now)
				if moving != "" {
					// Short of budget only while its workload moves: not stuck.
					e.blockedSince, blockChanged = now, true
					logger.Info("Not forcing a pod whose workload is rolling out; force-after counts again", "pod", klog.KObj(p), "why", moving)
				}
				e.force = force
				due = append(due, e)
			}
		}
		for uid, e := range tracked {
			if !seen[uid] && !e.blockedSince.IsZero() {
				e.blockedSince, blockChanged = time.Time{}, true // gone
			}
			if e.unanswered && !e.evicted && (!seen[uid] || e.pod.DeletionTimestamp != nil) {
				// The eviction whose answer was lost took effect.
				e.evicted, e.unanswered = true, false
				evicted++
				if owner := returningOwner(e.pod); owner != "" {
					evictedOwners[owner] = true
				}
				logger.V(2).Info("An eviction whose answer was lost took effect", "pod", klog.KObj(e.pod))
			}
		}
		if len(due) > 0 {
			first := !started
			if first {
				started = true
				c.mu.Lock()
				c.lastStart = c.clock.Now()
				c.mu.Unlock()
			}
			evicted += c.evictAll(ctx, due, now, forceAfter)
			if first {
				c.markStarted(ctx, n)
			}
			for _, e := range due {
				if updateBlockage(e, now) {
					blockChanged = true
				}
			}
			if restartCounts(tracked, due, now) {
				blockChanged = true
			}
			for _, e := range due {
				switch {
				case e.forced:
					forced++
					e.lastErr = "terminating (deleted by force-after)"
					if !unreachable && !c.dryRun.Enabled() {
						waiting = append(waiting, e)
					}
				case !e.evicted && e.lastErr != "":
					waiting = append(waiting, e)
				case e.evicted:
					if owner := returningOwner(e.pod); owner != "" {
						evictedOwners[owner] = true
					}
					if !unreachable && !c.dryRun.Enabled() {
						e.lastErr = "terminating"
						waiting = append(waiting, e)
					}
				}
			}
		}
		if blockChanged && ctx.Err() == nil {
			c.recordBlocked(ctx, n, scheduled, tracked)
		}
		if parent.Err() != nil {
			c.aborted(parent, n, onNode)
			return
		}
		// Cut at its deadline: the drain fails now, whatever was in flight.
		timedOut := ctx.Err() != nil
		if timedOut {
			now = c.clock.Now()
		}
		if len(waiting) == 0 {
			msg := fmt.Sprintf("Drained node: evicted %d pods in %s", evicted, c.clock.Since(start).Round(time.Second))
			if forced > 0 {
				msg += fmt.Sprintf("; deleted %d pods by force-after", forced)
			}
			c.finish(parent, n, scheduled, true, msg, "", start, "")
			return
		}
		pending, pendingUntil := forcePending(waiting, forceAfter, deadline)
		if !timedOut && !now.Before(deadline) && pending && now.Before(pendingUntil) {
			dog.extend(pendingUntil.Add(deadlineSlack))
			// Only force-after can end this drain: it goes on (at most
			// force-after past its timeout, and the forced pods' grace)
			// instead of failing and starting a new count on the retry. Said
			// once per set of blockers.
			var blocked []*podEviction
			for _, e := range waiting {
				if e.refused && !e.blockedSince.IsZero() {
					blocked = append(blocked, e)
				}
			}
			if key := waitingKey(blocked); len(blocked) > 0 && key != blockedSaid {
				blockedSaid = key
				blockers := c.describeBlockers(ctx, blocked)
				c.eventOnce(n, EventDrainBlocked, "blocked: "+formatBlockers(blockers, 0), fmt.Sprintf(
					"Drain blocked past --drain-timeout=%s: %s; force-after=%s deletes a pod once every eviction of it has been refused for that long (the first at %s), unless its workload is rolling out",
					c.cfg.DrainTimeout, formatBlockers(blockers, maxBlockersInEvent), forceAfter, formatTime(firstForce(blocked, forceAfter))))
			}
		} else if !now.Before(deadline) || timedOut {
			blockers := c.describeBlockers(ctx, waiting)
			msg := fmt.Sprintf("Draining node failed: %d pods not gone after --drain-timeout=%s: %s", len(waiting), c.cfg.DrainTimeout, formatBlockers(blockers, maxBlockersInEvent))
			if timedOut {
				msg += " (" + errDrainTimedOut.Error() + ")"
				logger.Info("Drain cut at its deadline", "deadline", deadline)
			}
			c.undoMoves(context.WithoutCancel(parent), n.Name, onNode)
			c.finish(parent, n, scheduled, false, msg, "Blocked: "+formatBlockers(blockers, maxBlockersInCondition), start, formatBlockers(blockers, 0))
			return
		}
		select {
		case <-ctx.Done():
			if parent.Err() != nil {
				c.aborted(parent, n, onNode)
				return
			}
			// Cut at the deadline: the next look fails the drain.
		case <-ticker.C():
		}
	}
}

// blocker is a pod a drain waits for, and why.
type blocker struct{ pod, why string }

// How many blocking pods a DrainFailed or DrainBlocked event and the
// DrainScheduled condition name; the rest are counted.
const (
	maxBlockersInEvent     = 20
	maxBlockersInCondition = 100
)

// describeBlockers says, for each pod still there, why: terminating, or
// refused by which PodDisruptionBudget (its healthy counts, and which of its
// pods are not Ready and where), or the eviction's error.
func (c *Controller) describeBlockers(ctx context.Context, waiting []*podEviction) []blocker {
	pdbs := map[string][]policyv1.PodDisruptionBudget{}
	out := make([]blocker, 0, len(waiting))
	for _, e := range waiting {
		p := e.pod
		why := e.lastErr
		if e.refused && !e.evicted {
			list, ok := pdbs[p.Namespace]
			if !ok {
				rctx, cancel := bounded(ctx)
				if l, err := c.client.PolicyV1().PodDisruptionBudgets(p.Namespace).List(rctx, metav1.ListOptions{}); err == nil {
					list = l.Items
				}
				cancel()
				pdbs[p.Namespace] = list
			}
			if d := c.explainPDBs(p, list); d != "" {
				why = d
			}
		}
		out = append(out, blocker{pod: podKey(p), why: why})
	}
	return out
}

// formatBlockers names the blocking pods grouped by why, "a, b (why); c
// (other why)", at most max pods (0: all) and then how many more.
func formatBlockers(bs []blocker, max int) string {
	byWhy := map[string][]string{}
	for _, b := range bs {
		byWhy[b.why] = append(byWhy[b.why], b.pod)
	}
	whys := make([]string, 0, len(byWhy))
	for why, pods := range byWhy {
		sort.Strings(pods)
		whys = append(whys, why)
	}
	// The largest group first, then by the first pod's name: stable wording.
	sort.Slice(whys, func(i, j int) bool {
		a, b := byWhy[whys[i]], byWhy[whys[j]]
		if len(a) != len(b) {
			return len(a) > len(b)
		}
		return a[0] < b[0]
	})
	var parts []string
	named := 0
	for _, why := range whys {
		pods := byWhy[why]
		if max > 0 && named+len(pods) > max {
			pods = pods[:max-named]
		}
		named += len(pods)
		if len(pods) > 0 {
			parts = append(parts, strings.Join(pods, ", ")+" ("+why+")")
		}
	}
	out := strings.Join(parts, "; ")
	if rest := len(bs) - named; rest > 0 {
		out += fmt.Sprintf("; and %d more pods", rest)
	}
	return out
}

// waitingKey identifies the pods a drain waits for and how each stands.
func waitingKey(waiting []*podEviction) string {
	keys := make([]string, len(waiting))
	for i, e := range waiting {
		keys[i] = fmt.Sprintf("%s/%v/%v", e.pod.UID, e.refused, e.evicted || e.pod.DeletionTimestamp != nil)
	}
	sort.Strings(keys)
	return strings.Join(keys, ",")
}

// explainPDBs describes the budgets that select the pod.
func (c *Controller) explainPDBs(p *v1.Pod, pdbs []policyv1.PodDisruptionBudget) string {
	var parts []string
	for i := range pdbs {
		b := &pdbs[i]
		if !kube.PDBSelects(b, p) {
			continue
		}
		s := fmt.Sprintf("PodDisruptionBudget %s refuses: %d disruptions allowed, currentHealthy %d, desiredHealthy %d, expectedPods %d",
			b.Name, b.Status.DisruptionsAllowed, b.Status.CurrentHealthy, b.Status.DesiredHealthy, b.Status.ExpectedPods)
		if b.Spec.MaxUnavailable != nil {
			s += ", maxUnavailable " + b.Spec.MaxUnavailable.String()
		}
		if b.Spec.MinAvailable != nil {
			s += ", minAvailable " + b.Spec.MinAvailable.String()
		}
		var notReady []string
		for _, o := range c.pods.List() {
			q := o.(*v1.Pod)
			if !kube.PDBSelects(b, q) || q.DeletionTimestamp != nil || kube.PodReady(q) {
				continue
			}
			where := q.Spec.NodeName
			if where == "" {
				where = "no node (Pending)"
			}
			notReady = append(notReady, q.Name+" on "+where)
		}
		if len(notReady) > 0 {
			sort.Strings(notReady)
			s += "; not Ready: " + strings.Join(firstN(notReady, 3), ", ")
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, "; ")
}

// evictAll sends the evictions that are due, a few at a time; it returns
// how many were accepted.
func (c *Controller) evictAll(ctx context.Context, due []*podEviction, now time.Time, forceAfter time.Duration) int {
	sem := make(chan struct{}, parallelEvictions)
	var wg sync.WaitGroup
	var mu sync.Mutex
	accepted := 0
	for _, e := range due {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			var ok bool
			// A request that never answers must not hold the whole drain.
			wctx, cancel := bounded(ctx)
			defer cancel()
			if e.force {
				c.forceDelete(wctx, e, forceAfter)
			} else {
				ok = c.evict(wctx, e, now)
			}
			mu.Lock()
			if ok {
				accepted++
			}
			mu.Unlock()
		}()
	}
	wg.Wait()
	return accepted
}

// evict sends one eviction through the Eviction API (so PDBs hold).
func (c *Controller) evict(ctx context.Context, e *podEviction, now time.Time) bool {
	p := e.pod
	grace := c.cfg.gracePeriod(p)
	ev := &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace},
		DeleteOptions: &metav1.DeleteOptions{GracePeriodSeconds: &grace, Preconditions: metav1.NewUIDPreconditions(string(p.UID))}}
	if c.dryRun.Enabled() {
		// A server-side dry run: nothing is evicted, but the answer (a
		// PodDisruptionBudget's refusal) is the real one.
		ev.DeleteOptions.DryRun = []string{metav1.DryRunAll}
		err := c.client.PolicyV1().Evictions(p.Namespace).Evict(ctx, ev)
		switch {
		case err == nil || apierrors.IsNotFound(err) || isUIDMismatch(err):
			c.dryRun.Report(ctx, p, "evict", "evict pod "+podKey(p)+" from node "+p.Spec.NodeName)
			e.evicted, e.lastErr, e.refused = true, "", false
			return true
		case refusedByBudget(err):
			e.lastErr, e.refused = "eviction refused: "+err.Error(), true
		default:
			e.lastErr, e.refused = "eviction failed: "+err.Error(), false
		}
		e.next = now.Add(e.backoff)
		e.backoff = min(2*e.backoff, maxEvictionBackoff)
		return false
	}
	err := c.client.PolicyV1().Evictions(p.Namespace).Evict(ctx, ev)
	e.unanswered = false
	switch {
	case err == nil:
		e.evicted, e.lastErr, e.refused = true, "", false
		c.metrics.evictions.WithLabelValues("evicted").Inc()
		klog.FromContext(ctx).V(2).Info("Evicted pod", "pod", klog.KObj(p), "gracePeriodSeconds", grace)
		return true
	case apierrors.IsNotFound(err) || isUIDMismatch(err):
		e.evicted, e.lastErr = true, ""
		c.metrics.evictions.WithLabelValues("gone").Inc()
		return false
	case refusedByBudget(err):
		c.metrics.evictions.WithLabelValues("blocked-by-pdb").Inc()
		c.metrics.blockedByPDB.Inc()
		e.lastErr, e.refused = "eviction refused: "+err.Error(), true
	default:
		c.metrics.evictions.WithLabelValues("error").Inc()
		e.lastErr, e.refused, e.unanswered = "eviction failed: "+err.Error(), false, true
	}
	e.next = now.Add(e.backoff)
	e.backoff = min(2*e.backoff, maxEvictionBackoff)
	klog.FromContext(ctx).V(2).Info("Eviction not accepted; will retry", "pod", klog.KObj(p), "retryIn", e.next.Sub(now), "err", err)
	return false
}

// forceDelete deletes a pod whose every eviction a PodDisruptionBudget
// refused for force-after, with the pod's own grace period, and says so in
// a Warning event naming the pod and the last refusal. With --dry-run it is
// only reported.
func (c *Controller) forceDelete(ctx context.Context, e *podEviction, forceAfter time.Duration) {
	p := e.pod
	blockedSince := e.blockedSince
	msg := fmt.Sprintf("Deleting pod %s despite its PodDisruptionBudget (own grace period): every eviction refused since %s (%s), force-after=%s",
		podKey(p), formatTime(blockedSince), e.lastErr, forceAfter)
	if c.dryRun.Enabled() {
		c.dryRun.Report(ctx, p, "force-delete", "delete pod "+podKey(p)+" despite its PodDisruptionBudget (force-after="+forceAfter.String()+")")
		e.evicted, e.forced, e.forcedAt = true, true, c.clock.Now()
		return
	}
	err := c.client.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{Preconditions: metav1.NewUIDPreconditions(string(p.UID))})
	switch {
	case err == nil:
		c.metrics.forceDeleted.Inc()
		e.evicted, e.forced, e.refused, e.forcedAt = true, true, false, c.clock.Now()
		if n, gerr := c.nodes.Get(p.Spec.NodeName); gerr == nil {
			controllerutil.NodeEvent(c.recorder, n, v1.EventTypeWarning, EventDrainForceDeleted, msg)
		}
		klog.FromContext(ctx).Info("Deleted pod by force-after", "pod", klog.KObj(p), "blockedSince", blockedSince, "forceAfter", forceAfter)
	case apierrors.IsNotFound(err) || isUIDMismatch(err):
		e.evicted, e.lastErr = true, ""
	default:
		e.lastErr = "force-after deletion failed: " + err.Error()
		e.next = c.clock.Now().Add(e.backoff)
		e.backoff = min(2*e.backoff, maxEvictionBackoff)
	}
}

// refusedByBudget says whether an eviction was refused by a
// PodDisruptionBudget: a 429 that names the budget as its cause. A 429
// without it is the API server throttling (API Priority and Fairness, max
// in-flight): an error to retry, which neither counts as blocked by a budget
// nor starts force-after's countdown.
func refusedByBudget(err error) bool {
	return apierrors.IsTooManyRequests(err) && apierrors.HasStatusCause(err, policyv1.DisruptionBudgetCause)
}

// isUIDMismatch: the pod was replaced by one of the same name, so the one
// being drained is gone.
func isUIDMismatch(err error) bool {
	return apierrors.IsConflict(err) && strings.Contains(err.Error(), "UID")
}

// aborted ends a drain cancelled by a decision (the node was uncordoned, no
// rule matches, the node was deleted) or by the controller stopping, in
// which case nothing is written and the next leader resumes it.
func (c *Controller) aborted(ctx context.Context, n *v1.Node, pods []*v1.Pod) {
	cause := context.Cause(ctx)
	if isStopping(ctx) {
		klog.FromContext(ctx).Info("Drain interrupted; it resumes when the controller (or the next leader) runs again", "node", n.Name)
		return
	}
	c.undoMoves(context.WithoutCancel(ctx), n.Name, pods)
	c.event(n, EventDrainAborted, "Drain stopped: "+cause.Error())
	klog.FromContext(ctx).Info("Drain stopped", "node", n.Name, "reason", cause.Error())
}

// finish records the result on the node (DrainScheduled=False with
// Draino's "| Completed:" or "| Failed:" suffix) and in events and metrics.
// failKey is what the failure is (DrainFailed is said once per change of it).
func (c *Controller) finish(ctx context.Context, n *v1.Node, scheduled time.Time, ok bool, msg, detail string, start time.Time, failKey string) {
	now := c.clock.Now()
	result := resultSucceeded
	if !ok {
		result = resultFailed
	}
	owned := func(cur *v1.Node) bool { _, o := cur.Annotations[AnnotationConditions]; return o }
	if !ok {
		latest := n
		if cur, err := c.nodes.Get(n.Name); err == nil {
			latest = c.view(cur)
		}
		attempts := readState(latest).attempts + 1
		if _, err := c.write(ctx, n, false, "count-failure", "count the failed drain", owned,
			func(m *v1.Node) { setAnnotation(m, AnnotationAttempts, strconv.Itoa(attempts)) }); err != nil && !errors.Is(err, errSkip) {
			klog.FromContext(ctx).Error(err, "Recording the failed attempt", "node", n.Name)
		}
		st := readState(latest)
		st.attempts, st.finishedAt = attempts, now
		msg += "; retrying at " + formatTime(c.retryDue(st))
		if n.Annotations[AnnotationRetry] == "true" {
			msg += " (" + AnnotationRetry + "=true)"
		}
	}
	_, err := c.write(ctx, n, true, "finish-drain", "record the drain's end: "+result, owned,
		func(m *v1.Node) {
			setDrainCondition(m, v1.ConditionFalse, finishedMessage(scheduled, ok, now, detail), now)
		})
	if err != nil && !errors.Is(err, errSkip) {
		// The drain stays True on the node: the next pass resumes it.
		klog.FromContext(ctx).Error(err, "Recording the drain's end; it will be resumed", "node", n.Name)
		return
	}
	c.metrics.drained.WithLabelValues(result).Inc()
	c.metrics.drainDurations.WithLabelValues(result).Observe(now.Sub(start).Seconds())
	if ok {
		c.event(n, EventDrainSucceeded, msg)
		klog.FromContext(ctx).Info("Drained node", "node", n.Name, "duration", now.Sub(start))
	} else {
		c.eventOnce(n, EventDrainFailed, failKey, msg)
		klog.FromContext(ctx).Info("Drain failed", "node", n.Name, "message", msg)
	}
}

func podKey(p *v1.Pod) string { return p.Namespace + "/" + p.Name }

func firstN(s []string, n int) []string {
	if len(s) <= n {
		return s
	}
	return append(s[:n:n], fmt.Sprintf("and %d more", len(s)-n))
}

func describeSkipped(skipped map[string]int) string {
	if len(skipped) == 0 {
		return ""
	}
	parts := make([]string, 0, len(skipped))
	for why, n := range skipped {
		parts = append(parts, fmt.Sprintf("%d %s", n, why))
	}
	sort.Strings(parts)
	return "; left in place: " + strings.Join(parts, ", ")
}
