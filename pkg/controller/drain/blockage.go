package drain

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
)

// force-after deletes a pod past its PodDisruptionBudget only when the
// budget has truly stuck: every eviction of that pod refused by a budget,
// without a break, for the whole period. Anything else (an eviction
// accepted, an error that is not a refusal, a rollout of the pod's workload)
// restarts the count, and a new drain (a retry) starts afresh.

// AnnotationBlocked records, for the drain in flight, each pod whose every
// eviction a PodDisruptionBudget has refused: since when and the last
// refusal (JSON, blockRecord), so that a process that resumes the drain (a
// restart, a new leader) carries on counting. AnnotationBlockedSince holds
// the earliest of those times, for people and `explain node`.
const AnnotationBlocked = "nodeshepherd.io/drain-blocked"

// blockRecord is AnnotationBlocked's value.
type blockRecord struct {
	// Drain is the drain's schedule (formatTime): a record of another drain
	// counts for nothing.
	Drain string `json:"drain"`
	// Pods by UID.
	Pods map[types.UID]blockedPod `json:"pods"`
}

type blockedPod struct {
	Pod    string `json:"pod"`
	Since  string `json:"since"`
	Reason string `json:"reason,omitempty"`
}

// readBlocked returns the blocked pods recorded for the drain scheduled at
// scheduled (nil when none, or when the record is another drain's or does
// not parse: counting then starts afresh, which only delays a force).
func readBlocked(n *v1.Node, scheduled time.Time) map[types.UID]time.Time {
	v, ok := n.Annotations[AnnotationBlocked]
	if !ok {
		return nil
	}
	var rec blockRecord
	if err := json.Unmarshal([]byte(v), &rec); err != nil {
		return nil
	}
	if t, ok := parseTime(rec.Drain); !ok || !t.Equal(scheduled) {
		return nil
	}
	out := map[types.UID]time.Time{}
	for uid, p := range rec.Pods {
		if t, ok := parseTime(p.Since); ok {
			out[uid] = t
		}
	}
	return out
}

// blockAnnotations are the two annotations for the pods blocked now (both
// removed when none is).
func blockAnnotations(scheduled time.Time, blocked []*podEviction) (record, earliest string) {
	if len(blocked) == 0 {
		return "", ""
	}
	rec := blockRecord{Drain: formatTime(scheduled), Pods: map[types.UID]blockedPod{}}
	first := blocked[0].blockedSince
	for _, e := range blocked {
		rec.Pods[e.pod.UID] = blockedPod{Pod: podKey(e.pod), Since: formatTime(e.blockedSince), Reason: e.lastErr}
		if e.blockedSince.Before(first) {
			first = e.blockedSince
		}
	}
	b, _ := json.Marshal(rec)
	return string(b), formatTime(first)
}

// recordBlocked writes the blocked pods of the drain on the node.
func (c *Controller) recordBlocked(ctx context.Context, n *v1.Node, scheduled time.Time, tracked map[types.UID]*podEviction) {
	var blocked []*podEviction
	for _, e := range tracked {
		if !e.blockedSince.IsZero() {
			blocked = append(blocked, e)
		}
	}
	sort.Slice(blocked, func(i, j int) bool { return podKey(blocked[i].pod) < podKey(blocked[j].pod) })
	record, earliest := blockAnnotations(scheduled, blocked)
	owned := func(cur *v1.Node) bool { _, o := cur.Annotations[AnnotationConditions]; return o }
	if _, err := c.write(ctx, n, false, "record-blocked", "record the pods whose evictions a PodDisruptionBudget keeps refusing", owned,
		func(m *v1.Node) {
			if record == "" {
				delete(m.Annotations, AnnotationBlocked)
				delete(m.Annotations, AnnotationBlockedSince)
				return
			}
			setAnnotation(m, AnnotationBlocked, record)
			setAnnotation(m, AnnotationBlockedSince, earliest)
		}); err != nil && !errors.Is(err, errSkip) {
		klog.FromContext(ctx).Error(err, "Recording the pods whose evictions are refused", "node", n.Name)
	}
}

// updateBlockage counts a pod's eviction attempt toward force-after: a
// refusal by a PodDisruptionBudget starts or continues the count, any other
// outcome ends it. It says whether the set of blocked pods changed.
func updateBlockage(e *podEviction, now time.Time) bool {
	switch {
	case e.refused && !e.evicted && e.blockedSince.IsZero():
		e.blockedSince = now
		return true
	case (!e.refused || e.evicted) && !e.blockedSince.IsZero():
		e.blockedSince = time.Time{}
		return true
	}
	return false
}

// restartCounts starts every pod's count again when an eviction of this
// pass was accepted: budgets that let a pod go are moving, not stuck, and
// a pod refused now is refused only until that pod's replacement is Ready.
// It says whether a count changed.
func restartCounts(tracked map[types.UID]*podEviction, due []*podEviction, now time.Time) bool {
	progress := false
	for _, e := range due {
		progress = progress || (e.evicted && !e.forced && !e.unanswered && e.lastErr == "")
	}
	if !progress {
		return false
	}
	changed := false
	for _, e := range tracked {
		if !e.blockedSince.IsZero() && e.blockedSince.Before(now) {
			e.blockedSince, changed = now, true
		}
	}
	return changed
}

// forceDue says whether force-after deletes the pod now: its evictions have
// all been refused for forceAfter. A pod whose workload is rolling out is
// short of budget only for that moment: its count starts again (moving
// names the rollout).
func (c *Controller) forceDue(ctx context.Context, e *podEviction, forceAfter time.Duration, now time.Time) (due bool, moving string) {
	if !forceFallsDue(e, forceAfter, now) {
		return false, ""
	}
	if why := c.rollingOut(ctx, e.pod); why != "" {
		return false, why
	}
	return true, ""
}

// forceFallsDue says whether the pod's evictions have all been refused for
// forceAfter by now (whether its workload is rolling out is forceDue's).
func forceFallsDue(e *podEviction, forceAfter time.Duration, now time.Time) bool {
	return e.refused && forceAfter > 0 && !e.blockedSince.IsZero() && !now.Before(e.blockedSince.Add(forceAfter))
}

// rollingOut says why the pod's workload is rolling out now ("" when it is
// not, or when that cannot be read: then the blockage is taken as stuck,
// as it was counted). A Deployment rolls out while it has not observed its
// latest spec or its Progressing condition is True for a reason other than
// a finished rollout (one past its progress deadline is stuck, not moving);
// a StatefulSet while its current and update revisions differ.
func (c *Controller) rollingOut(ctx context.Context, p *v1.Pod) string {
	owner := metav1.GetControllerOf(p)
	if owner == nil {
		return ""
	}
	ctx, cancel := bounded(ctx)
	defer cancel()
	apps := c.client.AppsV1()
	switch owner.Kind {
	case "ReplicaSet":
		rs, err := apps.ReplicaSets(p.Namespace).Get(ctx, owner.Name, metav1.GetOptions{})
		if err != nil {
			return ""
		}
		d := metav1.GetControllerOf(rs)
		if d == nil || d.Kind != "Deployment" {
			return ""
		}
		dep, err := apps.Deployments(p.Namespace).Get(ctx, d.Name, metav1.GetOptions{})
		if err != nil {
			return ""
		}
		return deploymentRollingOut(dep)
	case "StatefulSet":
		ss, err := apps.StatefulSets(p.Namespace).Get(ctx, owner.Name, metav1.GetOptions{})
		if err != nil {
			return ""
		}
		if ss.Status.ObservedGeneration < ss.Generation || (ss.Status.UpdateRevision != "" && ss.Status.CurrentRevision != ss.Status.UpdateRevision) {
			return fmt.Sprintf("StatefulSet %s/%s is rolling out (revision %s to %s)", ss.Namespace, ss.Name, ss.Status.CurrentRevision, ss.Status.UpdateRevision)
		}
	}
	return ""
}

func deploymentRollingOut(d *appsv1.Deployment) string {
	name := "Deployment " + d.Namespace + "/" + d.Name
	if d.Status.ObservedGeneration < d.Generation {
		return name + " is rolling out (generation not yet observed)"
	}
	for _, c := range d.Status.Conditions {
		if c.Type == appsv1.DeploymentProgressing && c.Status == v1.ConditionTrue && c.Reason != "NewReplicaSetAvailable" {
			return fmt.Sprintf("%s is rolling out (Progressing: %s)", name, c.Reason)
		}
	}
	return ""
}

// forcePending says whether a drain past its timeout waits for force-after
// instead of failing, and until when at most: every pod left is
// terminating, or has been refused without a break (force-after will
// delete it), or was deleted by force-after (it goes within its grace
// period), and at least one is of the last two kinds. So force-after, not a
// retry with a new count, ends the drain.
func forcePending(waiting []*podEviction, forceAfter time.Duration, deadline time.Time) (bool, time.Time) {
	if forceAfter <= 0 {
		return false, time.Time{}
	}
	until := deadline.Add(forceAfter + maxEvictionBackoff)
	pending := 0
	for _, e := range waiting {
		switch {
		case e.forced:
			pending++
			grace := int64(v1.DefaultTerminationGracePeriodSeconds)
			if g := e.pod.Spec.TerminationGracePeriodSeconds; g != nil {
				grace = *g
			}
			if t := e.forcedAt.Add(time.Duration(grace)*time.Second + time.Minute); t.After(until) {
				until = t
			}
		case e.evicted || e.pod.DeletionTimestamp != nil:
		case e.refused && !e.blockedSince.IsZero():
			pending++
		default:
			return false, time.Time{}
		}
	}
	return pending > 0, until
}

// firstForce is when force-after first falls due among the blocked pods.
func firstForce(waiting []*podEviction, forceAfter time.Duration) time.Time {
	var out time.Time
	for _, e := range waiting {
		if e.blockedSince.IsZero() {
			continue
		}
		if t := e.blockedSince.Add(forceAfter); out.IsZero() || t.Before(out) {
			out = t
		}
	}
	return out
}

// markStarted records the drain's first evictions, in memory and on the
// node, for the drain buffer: as the time their requests were answered,
// which is never earlier than they were sent.
func (c *Controller) markStarted(ctx context.Context, n *v1.Node) {
	now := c.clock.Now()
	c.mu.Lock()
	c.lastStart = now
	c.mu.Unlock()
	owned := func(cur *v1.Node) bool { _, o := cur.Annotations[AnnotationConditions]; return o }
	if _, err := c.write(ctx, n, false, "record-start", "record the drain's first eviction (for --drain-buffer)", owned,
		func(m *v1.Node) { setAnnotation(m, AnnotationDrainStarted, formatTime(now)) }); err != nil && !errors.Is(err, errSkip) {
		klog.FromContext(ctx).Error(err, "Recording the drain's first eviction", "node", n.Name)
	}
}
