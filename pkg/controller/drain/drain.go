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
	"k8s.io/apimachinery/pkg/labels"
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
	// force: delete the pod instead of evicting it (force-after is due).
	force, forced bool
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
func (c *Controller) drain(ctx context.Context, n *v1.Node, scheduled time.Time) {
	logger := klog.FromContext(ctx).WithValues("node", n.Name)
	start := c.clock.Now()
	deadline := scheduled.Add(c.cfg.DrainTimeout)
	toEvict, skipped := 0, map[string]int{}
	for _, p := range c.podsOn(n.Name) {
		if why := c.cfg.skipReason(p); why != "" {
			skipped[why]++
		} else {
			toEvict++
		}
	}
	c.event(n, EventDrainStarting, fmt.Sprintf("Draining node: %d pods to evict%s", toEvict, describeSkipped(skipped)))
	logger.Info("Draining node", "pods", toEvict, "skipped", skipped, "deadline", deadline)

	blockedSince := readState(n).blockedSince
	tracked := map[types.UID]*podEviction{}
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
		for _, p := range c.podsOn(n.Name) {
			if c.cfg.skipReason(p) != "" {
				continue
			}
			seen[p.UID] = true
			e := tracked[p.UID]
			if e == nil {
				e = &podEviction{pod: p, backoff: evictionBackoff}
				// creationTimestamp has one-second precision: a pod is surely
				// newer than the drain only from the next second on.
				if owner := returningOwner(p); owner != "" && (evictedOwners[owner] || p.CreationTimestamp.After(scheduled)) {
					e.replacement = true
					logger.V(2).Info("Leaving a pod its owner put back on the node", "pod", klog.KObj(p))
				}
				tracked[p.UID] = e
			}
			e.pod = p
			switch {
			case e.replacement:
			case (p.DeletionTimestamp != nil || e.evicted) && (unreachable || c.dryRun.Enabled()):
				// as good as gone
			case p.DeletionTimestamp != nil || e.evicted:
				e.lastErr, e.refused = "terminating", false
				waiting = append(waiting, e)
			case now.Before(e.next):
				waiting = append(waiting, e)
			default:
				e.force = e.refused && forceAfter > 0 && !blockedSince.IsZero() && !now.Before(blockedSince.Add(forceAfter))
				due = append(due, e)
			}
		}
		for uid, e := range tracked {
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
			if !started {
				started = true
				c.mu.Lock()
				c.lastStart = c.clock.Now()
				c.mu.Unlock()
			}
			evicted += c.evictAll(ctx, due, now, blockedSince, forceAfter)
			refused := false
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
					refused = refused || e.refused
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
			if refused && blockedSince.IsZero() {
				blockedSince = now
				c.recordBlocked(ctx, n, now)
			}
		}
		if ctx.Err() != nil {
			c.aborted(ctx, n)
			return
		}
		if len(waiting) == 0 {
			msg := fmt.Sprintf("Drained node: evicted %d pods in %s", evicted, c.clock.Since(start).Round(time.Second))
			if forced > 0 {
				msg += fmt.Sprintf("; deleted %d pods by force-after", forced)
			}
			c.finish(ctx, n, scheduled, true, msg, "", start)
			return
		}
		if !now.Before(deadline) {
			blockers := c.describeBlockers(ctx, waiting)
			msg := fmt.Sprintf("Draining node failed: %d pods not gone after --drain-timeout=%s: %s", len(waiting), c.cfg.DrainTimeout, strings.Join(firstN(blockers, 5), "; "))
			if forceAfter > 0 && !blockedSince.IsZero() {
				msg += fmt.Sprintf("; force-after=%s deletes PDB-blocked pods from %s", forceAfter, formatTime(blockedSince.Add(forceAfter)))
			}
			c.finish(ctx, n, scheduled, false, msg, "Blocked: "+strings.Join(firstN(blockers, 5), "; "), start)
			return
		}
		select {
		case <-ctx.Done():
			c.aborted(ctx, n)
			return
		case <-ticker.C():
		}
	}
}

// recordBlocked writes when evictions were first refused by a
// PodDisruptionBudget since the cordon, so that force-after counts across
// retries and restarts.
func (c *Controller) recordBlocked(ctx context.Context, n *v1.Node, now time.Time) {
	owned := func(cur *v1.Node) bool {
		_, o := cur.Annotations[AnnotationConditions]
		_, set := cur.Annotations[AnnotationBlockedSince]
		return o && !set
	}
	if _, err := c.write(ctx, n, false, "record-blocked", "record when a PodDisruptionBudget first refused an eviction", owned,
		func(m *v1.Node) { setAnnotation(m, AnnotationBlockedSince, formatTime(now)) }); err != nil && !errors.Is(err, errSkip) {
		klog.FromContext(ctx).Error(err, "Recording when evictions were first refused", "node", n.Name)
	}
}

// describeBlockers says, for each pod still there, why: terminating, or
// refused by which PodDisruptionBudget (its healthy counts, and which of its
// pods are not Ready and where), or the eviction's error.
func (c *Controller) describeBlockers(ctx context.Context, waiting []*podEviction) []string {
	pdbs := map[string][]policyv1.PodDisruptionBudget{}
	out := make([]string, 0, len(waiting))
	for _, e := range waiting {
		p := e.pod
		why := e.lastErr
		if e.refused && !e.evicted {
			list, ok := pdbs[p.Namespace]
			if !ok {
				if l, err := c.client.PolicyV1().PodDisruptionBudgets(p.Namespace).List(ctx, metav1.ListOptions{}); err == nil {
					list = l.Items
				}
				pdbs[p.Namespace] = list
			}
			if d := c.explainPDBs(p, list); d != "" {
				why = d
			}
		}
		out = append(out, podKey(p)+" ("+why+")")
	}
	sort.Strings(out)
	return out
}

// explainPDBs describes the budgets that select the pod.
func (c *Controller) explainPDBs(p *v1.Pod, pdbs []policyv1.PodDisruptionBudget) string {
	var parts []string
	for i := range pdbs {
		b := &pdbs[i]
		sel, err := metav1.LabelSelectorAsSelector(b.Spec.Selector)
		if err != nil || sel.Empty() || !sel.Matches(labels.Set(p.Labels)) {
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
			if q.Namespace != p.Namespace || !sel.Matches(labels.Set(q.Labels)) || q.DeletionTimestamp != nil || kube.PodReady(q) {
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
func (c *Controller) evictAll(ctx context.Context, due []*podEviction, now, blockedSince time.Time, forceAfter time.Duration) int {
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
			wctx, cancel := context.WithTimeout(ctx, kube.WriteTimeout)
			defer cancel()
			if e.force {
				c.forceDelete(wctx, e, blockedSince, forceAfter)
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

// forceDelete deletes a pod whose eviction a PodDisruptionBudget kept
// refusing for force-after, with the pod's own grace period, and says so in
// a Warning event naming the pod. With --dry-run it is only reported.
func (c *Controller) forceDelete(ctx context.Context, e *podEviction, blockedSince time.Time, forceAfter time.Duration) {
	p := e.pod
	msg := fmt.Sprintf("Deleting pod %s despite its PodDisruptionBudget (own grace period): evictions refused since %s, force-after=%s",
		podKey(p), formatTime(blockedSince), forceAfter)
	if c.dryRun.Enabled() {
		c.dryRun.Report(ctx, p, "force-delete", "delete pod "+podKey(p)+" despite its PodDisruptionBudget (force-after="+forceAfter.String()+")")
		e.evicted, e.forced = true, true
		return
	}
	err := c.client.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{Preconditions: metav1.NewUIDPreconditions(string(p.UID))})
	switch {
	case err == nil:
		c.metrics.forceDeleted.Inc()
		e.evicted, e.forced, e.refused = true, true, false
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
func (c *Controller) aborted(ctx context.Context, n *v1.Node) {
	cause := context.Cause(ctx)
	if isStopping(ctx) {
		klog.FromContext(ctx).Info("Drain interrupted; it resumes when the controller (or the next leader) runs again", "node", n.Name)
		return
	}
	c.event(n, EventDrainAborted, "Drain stopped: "+cause.Error())
	klog.FromContext(ctx).Info("Drain stopped", "node", n.Name, "reason", cause.Error())
}

// finish records the result on the node (DrainScheduled=False with
// Draino's "| Completed:" or "| Failed:" suffix) and in events and metrics.
func (c *Controller) finish(ctx context.Context, n *v1.Node, scheduled time.Time, ok bool, msg, detail string, start time.Time) {
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
		msg += "; retrying at " + formatTime(c.retryDue(latest, st))
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
		c.event(n, EventDrainFailed, msg)
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
