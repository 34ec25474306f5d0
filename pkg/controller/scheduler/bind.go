package scheduler

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/nodeshepherd/nodeshepherd/pkg/kube"
)

// messageLimit is the API's limit on an event's note.
const messageLimit = 1024

func truncate(msg string) string {
	if len(msg) <= messageLimit {
		return msg
	}
	return msg[:messageLimit-3] + "..."
}

// bind starts the pod's binding right after its cycle, as kube-scheduler
// does, while the next pods are scheduled; the pod stays assumed on the node
// until the informer confirms it, or is forgotten and retried with backoff on
// failure. There is no fixed pool of binding workers: under a creation storm
// a pool of N caps bindings at N per API round trip, whatever the creators
// get, and the backlog (every pod's wait) grows; one call per pod lets
// bindings take their share of the API server as the backlog grows. Calls
// start in scheduling order, which is queue order.
func (s *Scheduler) bind(ctx context.Context, p *queuedPod, node string) {
	pod := p.info.pod
	if s.dryRun.Enabled() {
		s.dryRun.Report(ctx, pod, "bind", fmt.Sprintf("would bind pod %s/%s to node %s", pod.Namespace, pod.Name, node))
		return
	}
	if ctx.Err() != nil {
		s.cache.forget(pod.UID) // no longer leading: leave it to the next leader
		return
	}
	s.wg.Go(func() { _ = s.doBind(context.WithoutCancel(ctx), p, node) })
}

// doBind binds the pod; the error is nil once it is bound.
func (s *Scheduler) doBind(ctx context.Context, p *queuedPod, node string) error {
	pod := p.info.pod
	b := &v1.Binding{ObjectMeta: metav1.ObjectMeta{Name: pod.Name, Namespace: pod.Namespace, UID: pod.UID},
		Target: v1.ObjectReference{Kind: "Node", Name: node}}
	s.metrics.bindingsInFlight.Inc()
	start := s.clock.Now()
	// Bounded: a binding whose answer never comes is an error; the pod goes
	// back to the queue, and the retry finds it bound (the informer drops
	// it, or the API server answers Conflict) if the first call landed.
	// A tracked step too, so that /healthz would tell a binding that hangs.
	_, err := boundWrite(ctx, s, "binding pod "+pod.Namespace+"/"+pod.Name+" to node "+node, func(ctx context.Context) (struct{}, error) {
		return struct{}{}, s.client.CoreV1().Pods(pod.Namespace).Bind(ctx, b, metav1.CreateOptions{})
	})
	s.metrics.bindingsInFlight.Dec()
	if err != nil && s.cache.isBound(pod.UID) {
		// The binding landed although the call failed (a timeout under
		// load): the informer already saw the pod bound. Retrying would
		// schedule a bound pod again, and perhaps preempt for it.
		err = nil
	}
	status := map[bool]string{true: "Success", false: "Error"}[err == nil]
	s.metrics.extensionPoint.WithLabelValues("Bind", status, s.cfg.SchedulerName).Observe(s.clock.Since(start).Seconds())
	if err != nil {
		s.cache.forget(pod.UID)
		s.metrics.attempts.WithLabelValues("error", s.cfg.SchedulerName).Inc()
		if apierrors.IsNotFound(err) {
			return err
		}
		klog.FromContext(ctx).Error(err, "Binding failed; retrying with backoff", "pod", klog.KObj(pod), "node", node)
		s.recorder.Eventf(pod, v1.EventTypeWarning, "FailedScheduling", "Binding rejected: %v", err)
		s.queue.Readd(pod)
		return err
	}
	s.metrics.e2eLatency.WithLabelValues(fmt.Sprint(min(p.attempts, 16))).Observe(s.clock.Since(p.created).Seconds())
	s.recorder.Eventf(pod, v1.EventTypeNormal, "Scheduled", "Successfully assigned %s/%s to %s", pod.Namespace, pod.Name, node)
	return nil
}

// fail parks the pod, then reports the failure as kube-scheduler does: a
// FailedScheduling event and PodScheduled=False with reason Unschedulable,
// with the nomination when preemption changed it (nil keeps it).
func (s *Scheduler) fail(ctx context.Context, p *queuedPod, cycle int64, msg string, nominate *string, start time.Time) {
	pod := p.info.pod
	p.nominated = s.cache.nominatedNode(pod)
	s.queue.Requeue(p, cycle, false)
	s.metrics.attempts.WithLabelValues("unschedulable", s.cfg.SchedulerName).Inc()
	s.metrics.attemptDuration.WithLabelValues("unschedulable", s.cfg.SchedulerName).Observe(s.clock.Since(start).Seconds())
	klog.FromContext(ctx).V(2).Info("Unable to schedule pod; waiting", "pod", klog.KObj(pod), "err", msg)
	msg = truncate(msg)
	s.recorder.Event(pod, v1.EventTypeWarning, "FailedScheduling", msg)
	cond := podScheduledFalse(pod, v1.PodReasonUnschedulable, msg, s.clock.Now())
	nominationChanged := nominate != nil && *nominate != pod.Status.NominatedNodeName
	if cond == nil && !nominationChanged {
		return
	}
	status := map[string]any{}
	if cond != nil {
		status["conditions"] = []any{cond}
	}
	if nominationChanged {
		if *nominate == "" {
			status["nominatedNodeName"] = nil
		} else {
			status["nominatedNodeName"] = *nominate
		}
	}
	s.patchStatus(ctx, pod, status, "report the scheduling failure")
}

// podScheduledFalse is the condition to write, or nil when the pod already
// has it.
func podScheduledFalse(pod *v1.Pod, reason, msg string, now time.Time) map[string]any {
	transition := metav1.NewTime(now)
	for _, c := range pod.Status.Conditions {
		if c.Type != v1.PodScheduled {
			continue
		}
		if c.Status == v1.ConditionFalse && c.Reason == reason && c.Message == msg {
			return nil
		}
		if c.Status == v1.ConditionFalse {
			transition = c.LastTransitionTime
		}
	}
	return map[string]any{"type": v1.PodScheduled, "status": v1.ConditionFalse, "reason": reason,
		"message": msg, "lastProbeTime": nil, "lastTransitionTime": transition}
}

// patchStatus writes a strategic-merge patch of the pod's status in the
// background (conditions merge by type).
func (s *Scheduler) patchStatus(ctx context.Context, pod *v1.Pod, status map[string]any, why string) {
	if s.dryRun.Enabled() {
		return
	}
	body, err := json.Marshal(map[string]any{"status": status})
	if err != nil {
		return
	}
	s.wg.Go(func() {
		pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), kube.WriteTimeout)
		defer cancel()
		_, err := s.client.CoreV1().Pods(pod.Namespace).Patch(pctx, pod.Name, types.StrategicMergePatchType, body, metav1.PatchOptions{}, "status")
		if err != nil && !apierrors.IsNotFound(err) {
			klog.FromContext(ctx).Error(err, "Could not "+why, "pod", klog.KObj(pod))
		}
	})
}

// inflightPreemption is a preemptor whose victims are being deleted.
type inflightPreemption struct {
	victims []types.UID
	// claims are the victims' claims that their going frees; the
	// preemptor waits for the ResourceClaim controller to deallocate them.
	claims  []*resourceapi.ResourceClaim
	running bool // the API calls are not done
	held    bool // the preemptor was held back meanwhile: wake it at the end
}

// holdWhilePreempting keeps a preemptor back while its preemption is under
// way (kube-scheduler's PreEnqueue gate): while the deletions run, until
// the cache sees every victim terminating or gone, and until the claims
// only the victims reserved are deallocated. Retrying earlier would see
// the victims, or their devices, as taken and preempt again. A pod held
// after the calls finished is woken by its victims' deletion events and by
// the claims' changes.
func (s *Scheduler) holdWhilePreempting(pod *v1.Pod) bool {
	s.preemptMu.Lock()
	defer s.preemptMu.Unlock()
	pr, ok := s.preempting[pod.UID]
	if !ok {
		return false
	}
	if pr.running {
		pr.held = true
		return true
	}
	if s.cache.anyLive(pr.victims) || s.dra.stillHeld(pr.claims, pr.victims) {
		return true
	}
	delete(s.preempting, pod.UID)
	return false
}

// preempt acts on the chosen candidate: lower-priority pods nominated to the
// node lose their nomination now (in memory) and in the API, and the victims
// get DisruptionTarget and are deleted, in the background so that other
// pods keep being scheduled.
func (s *Scheduler) preempt(ctx context.Context, preemptor *podInfo, c *candidate) {
	s.metrics.preemptionVictims.Observe(float64(len(c.victims)))
	var demoted []*podInfo
	s.cache.mu.Lock()
	for _, p := range s.cache.nominated[c.node] {
		if p.priority < preemptor.priority {
			demoted = append(demoted, p)
		}
	}
	for _, p := range demoted {
		s.cache.unnominateLocked(p.pod.UID)
	}
	for _, v := range c.victims {
		if s.cache.podNode[v.pod.UID] != "" {
			s.cache.doomed[v.pod.UID] = true
		}
	}
	s.cache.mu.Unlock()
	pod := preemptor.pod
	logger := klog.FromContext(ctx)
	if logger.V(2).Enabled() {
		names := make([]string, len(c.victims))
		for i, v := range c.victims {
			names[i] = v.pod.Name
		}
		logger.V(2).Info("Preempting", "preemptor", klog.KObj(pod), "node", c.node, "victims", names, "pdbViolations", c.pdbViolations,
			"freedClaims", klog.KObjSlice(c.freedClaims))
	}
	if s.dryRun.Enabled() {
		for _, v := range c.victims {
			s.dryRun.Report(ctx, v.pod, "preempt", fmt.Sprintf("would preempt pod %s/%s on node %s for %s/%s", v.pod.Namespace, v.pod.Name, c.node, pod.Namespace, pod.Name))
		}
		return
	}
	pr := &inflightPreemption{running: true, claims: c.freedClaims}
	for _, v := range c.victims {
		pr.victims = append(pr.victims, v.pod.UID)
	}
	s.preemptMu.Lock()
	s.preempting[pod.UID] = pr
	s.preemptMu.Unlock()
	s.wg.Go(func() {
		ctx := context.WithoutCancel(ctx)
		for _, p := range demoted {
			s.patchStatus(ctx, p.pod, map[string]any{"nominatedNodeName": nil}, "clear a lower-priority nomination")
		}
		var failed atomic.Bool
		var wg sync.WaitGroup
		for _, v := range c.victims {
			if v.pod.DeletionTimestamp != nil {
				continue
			}
			wg.Go(func() {
				if err := s.deleteVictim(ctx, pod, v.pod, c.node); err != nil {
					s.cache.undoom(v.pod.UID)
					logger.Error(err, "Preemption failed", "preemptor", klog.KObj(pod), "victim", klog.KObj(v.pod))
					failed.Store(true)
				}
			})
		}
		wg.Wait()
		s.preemptMu.Lock()
		held := pr.held
		pr.running = false
		if failed.Load() {
			delete(s.preempting, pod.UID)
		}
		s.preemptMu.Unlock()
		if held || failed.Load() {
			s.queue.Activate(pod.UID)
		}
	})
}

// deleteVictim marks the victim with DisruptionTarget (PreemptionByScheduler)
// and deletes it. A plain delete, as kube-scheduler: PDBs were weighed when
// choosing victims, not enforced here.
func (s *Scheduler) deleteVictim(ctx context.Context, preemptor, victim *v1.Pod, node string) error {
	cond := map[string]any{"type": v1.DisruptionTarget, "status": v1.ConditionTrue, "reason": v1.PodReasonPreemptionByScheduler,
		"message": preemptor.Spec.SchedulerName + ": preempting to accommodate a higher priority pod", "lastTransitionTime": metav1.NewTime(s.clock.Now())}
	body, _ := json.Marshal(map[string]any{"status": map[string]any{"conditions": []any{cond}}})
	ctx, cancel := context.WithTimeout(ctx, kube.WriteTimeout)
	defer cancel()
	if _, err := s.client.CoreV1().Pods(victim.Namespace).Patch(ctx, victim.Name, types.StrategicMergePatchType, body, metav1.PatchOptions{}, "status"); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		return err
	}
	err := s.client.CoreV1().Pods(victim.Namespace).Delete(ctx, victim.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &victim.UID}})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return err
	}
	s.recorder.AnnotatedEventf(victim, nil, v1.EventTypeNormal, preemptedReason, "Preempted by pod %s on node %s", preemptor.UID, node)
	return nil
}
