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
	"k8s.io/klog/v2"

	"github.com/nodeshepherd/nodeshepherd/pkg/controller/nodelifecycle"
	"github.com/nodeshepherd/nodeshepherd/pkg/kube"
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
}

// podsOn returns the pods bound to the node, from the informer.
func (c *Controller) podsOn(node string) []*v1.Pod {
	objs, _ := c.pods.ByIndex(nodelifecycle.ByNodeIndex, node)
	out := make([]*v1.Pod, 0, len(objs))
	for _, o := range objs {
		out = append(out, o.(*v1.Pod))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Namespace+"/"+out[i].Name < out[j].Namespace+"/"+out[j].Name })
	return out
}

// drain evicts every evictable pod of the node and waits until they are
// gone, or until the drain timeout (counted from the schedule, so a resumed
// drain keeps its deadline). Pods that appear during the drain are evicted
// too; pods already terminating are only waited for, never evicted twice.
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

	tracked := map[types.UID]*podEviction{}
	evicted := 0
	ticker := c.clock.NewTicker(pollInterval)
	defer ticker.Stop()
	for {
		now := c.clock.Now()
		node := n
		if cur, err := c.nodes.Get(n.Name); err == nil {
			node = cur
		}
		// A kubelet that cannot be reached never confirms deletions: there an
		// evicted pod counts as gone once terminating (its controller has
		// already replaced it).
		unreachable := !kube.NodeReady(node)
		var due []*podEviction
		var waiting []string
		for _, p := range c.podsOn(n.Name) {
			if c.cfg.skipReason(p) != "" {
				continue
			}
			e := tracked[p.UID]
			if e == nil {
				e = &podEviction{pod: p, backoff: evictionBackoff}
				tracked[p.UID] = e
			}
			e.pod = p
			switch {
			case (p.DeletionTimestamp != nil || e.evicted) && (unreachable || c.dryRun.Enabled):
				// as good as gone
			case p.DeletionTimestamp != nil || e.evicted:
				waiting = append(waiting, podKey(p)+" (terminating)")
			case now.Before(e.next):
				waiting = append(waiting, podKey(p)+" ("+e.lastErr+")")
			default:
				due = append(due, e)
			}
		}
		if len(due) > 0 {
			evicted += c.evictAll(ctx, due, now)
			for _, e := range due {
				if !e.evicted && e.lastErr != "" {
					waiting = append(waiting, podKey(e.pod)+" ("+e.lastErr+")")
				} else if e.evicted && !unreachable && !c.dryRun.Enabled {
					waiting = append(waiting, podKey(e.pod)+" (terminating)")
				}
			}
		}
		if ctx.Err() != nil {
			c.aborted(ctx, n)
			return
		}
		if len(waiting) == 0 {
			c.finish(ctx, n, scheduled, true, fmt.Sprintf("Drained node: evicted %d pods in %s", evicted, c.clock.Since(start).Round(time.Second)), start)
			return
		}
		if !now.Before(deadline) {
			sort.Strings(waiting)
			msg := fmt.Sprintf("Draining node failed: %d pods not gone after --drain-timeout=%s: %s", len(waiting), c.cfg.DrainTimeout, strings.Join(firstN(waiting, 5), ", "))
			c.finish(ctx, n, scheduled, false, msg, start)
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

// evictAll sends the evictions that are due, a few at a time; it returns
// how many were accepted.
func (c *Controller) evictAll(ctx context.Context, due []*podEviction, now time.Time) int {
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
			ok := c.evict(ctx, e, now)
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
	if c.dryRun.Enabled {
		c.dryRun.Report(ctx, p, "evict", "evict pod "+podKey(p)+" from node "+p.Spec.NodeName)
		e.evicted = true
		return true
	}
	grace := c.cfg.gracePeriod(p)
	ev := &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace},
		DeleteOptions: &metav1.DeleteOptions{GracePeriodSeconds: &grace, Preconditions: metav1.NewUIDPreconditions(string(p.UID))}}
	err := c.client.PolicyV1().Evictions(p.Namespace).Evict(ctx, ev)
	switch {
	case err == nil:
		e.evicted, e.lastErr = true, ""
		c.metrics.evictions.WithLabelValues("evicted").Inc()
		klog.FromContext(ctx).V(2).Info("Evicted pod", "pod", klog.KObj(p), "gracePeriodSeconds", grace)
		return true
	case apierrors.IsNotFound(err) || isUIDMismatch(err):
		e.evicted, e.lastErr = true, ""
		c.metrics.evictions.WithLabelValues("gone").Inc()
		return false
	case apierrors.IsTooManyRequests(err):
		c.metrics.evictions.WithLabelValues("blocked-by-pdb").Inc()
		c.metrics.blockedByPDB.Inc()
		e.lastErr = "eviction refused: " + err.Error()
	default:
		c.metrics.evictions.WithLabelValues("error").Inc()
		e.lastErr = "eviction failed: " + err.Error()
	}
	e.next = now.Add(e.backoff)
	e.backoff = min(2*e.backoff, maxEvictionBackoff)
	klog.FromContext(ctx).V(2).Info("Eviction not accepted; will retry", "pod", klog.KObj(p), "retryIn", e.next.Sub(now), "err", err)
	return false
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
func (c *Controller) finish(ctx context.Context, n *v1.Node, scheduled time.Time, ok bool, msg string, start time.Time) {
	now := c.clock.Now()
	result := resultSucceeded
	if !ok {
		result = resultFailed
	}
	owned := func(cur *v1.Node) bool { _, o := cur.Annotations[AnnotationConditions]; return o }
	if !ok {
		attempts := readState(n).attempts + 1
		if cur, err := c.nodes.Get(n.Name); err == nil {
			attempts = readState(c.view(cur)).attempts + 1
		}
		if _, err := c.write(ctx, n, false, "count-failure", "count the failed drain", owned,
			func(m *v1.Node) { setAnnotation(m, AnnotationAttempts, strconv.Itoa(attempts)) }); err != nil && !errors.Is(err, errSkip) {
			klog.FromContext(ctx).Error(err, "Recording the failed attempt", "node", n.Name)
		}
		st := readState(n)
		st.attempts, st.finishedAt = attempts, now
		msg += "; retrying at " + st.retryAt(c.cfg.RetryBackoff).UTC().Format(time.RFC3339)
		if n.Annotations[AnnotationRetry] == "true" {
			msg += " (" + AnnotationRetry + "=true)"
		}
	}
	_, err := c.write(ctx, n, true, "finish-drain", "record the drain's end: "+result, owned,
		func(m *v1.Node) { setDrainCondition(m, v1.ConditionFalse, finishedMessage(scheduled, ok, now), now) })
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
