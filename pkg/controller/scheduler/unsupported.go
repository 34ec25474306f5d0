package scheduler

import (
	"context"
	"fmt"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
)

// reasonSchedulerError is kube-scheduler's PodScheduled reason when it cannot
// evaluate a pod (a plugin's error). A refused pod gets it rather than
// Unschedulable: no node, added or freed, can help it, so neither
// cluster-autoscaler (which acts on Unschedulable pods) nor an operator
// reading `kubectl get pods` should take it for a capacity problem.
const reasonSchedulerError = v1.PodReasonSchedulerError

// unsupportedChecks are the pod features the scheduler does not implement.
// A pod using one stays pending rather than being placed as if the
// constraint were absent. Each check names what it found; implementing a
// feature removes its line.
var unsupportedChecks = []func(*v1.Pod) []string{
	inTreeDisks,
	func(p *v1.Pod) []string {
		if len(p.Spec.ResourceClaims) > 0 {
			return []string{resourceClaimsDRA}
		}
		return nil
	},
	func(p *v1.Pod) []string {
		if p.Spec.SchedulingGroup != nil {
			return []string{"spec.schedulingGroup (gang scheduling)"}
		}
		return nil
	},
}

// resourceClaimsDRA is what a pod with resource claims is refused for when
// the scheduler runs without the resource informers.
const resourceClaimsDRA = "spec.resourceClaims (DRA)"

// unsupported returns the refusal message for a pod that uses features the
// scheduler does not implement, or "". Without the storage informers
// (claims false), claim volumes are refused too; without the resource
// informers (dra false), resource claims.
func unsupported(pod *v1.Pod, claims, dra bool) string {
	var found []string
	if !claims {
		found = claimVolumes(pod)
	}
	for _, check := range unsupportedChecks {
		for _, f := range check(pod) {
			if dra && f == resourceClaimsDRA {
				continue // DynamicResources handles them
			}
			found = append(found, f)
		}
	}
	return refusal(found)
}

// refusal is the message naming what was found, or "" for nothing.
func refusal(found []string) string {
	if len(found) == 0 {
		return ""
	}
	return "nodeshepherd-scheduler does not support: " + strings.Join(found, ", ") + "; use kube-scheduler for this pod"
}

// claimVolumes finds the volumes that use PersistentVolumeClaims, for a
// scheduler built without the storage informers.
func claimVolumes(p *v1.Pod) []string {
	var pvcs, ephemeral []string
	for _, v := range p.Spec.Volumes {
		switch {
		case v.PersistentVolumeClaim != nil:
			pvcs = append(pvcs, fmt.Sprintf("%q", v.PersistentVolumeClaim.ClaimName))
		case v.Ephemeral != nil:
			ephemeral = append(ephemeral, fmt.Sprintf("%q", v.Name))
		}
	}
	var out []string
	if len(pvcs) > 0 {
		out = append(out, "persistentVolumeClaim volumes (pvc "+strings.Join(pvcs, ", ")+")")
	}
	if len(ephemeral) > 0 {
		out = append(out, "ephemeral volumes ("+strings.Join(ephemeral, ", ")+")")
	}
	return out
}

// inTreeDisks finds inline volumes of in-tree disk plugins, which
// kube-scheduler checks for disk conflicts (VolumeRestrictions) or counts
// against CSI limits once migrated (NodeVolumeLimits). Inline CSI volumes
// are not among them: kube-scheduler does not consider them either.
func inTreeDisks(p *v1.Pod) []string {
	var disks []string
	for _, v := range p.Spec.Volumes {
		if v.GCEPersistentDisk != nil || v.AWSElasticBlockStore != nil || v.RBD != nil || v.ISCSI != nil ||
			v.AzureDisk != nil || v.Cinder != nil || v.VsphereVolume != nil || v.PortworxVolume != nil {
			disks = append(disks, fmt.Sprintf("%q", v.Name))
		}
	}
	if len(disks) == 0 {
		return nil
	}
	return []string{"inline gcePersistentDisk, awsElasticBlockStore, rbd, iscsi, azureDisk, cinder, vsphereVolume or portworxVolume volumes (" + strings.Join(disks, ", ") + ")"}
}

// refuse parks a pod that cannot be evaluated as it is until its own spec or
// labels change: no cluster event, nor the unschedulable timeout, retries it.
// The FailedScheduling event and PodScheduled=False are written once per
// change of message, not per attempt.
func (s *Scheduler) refuse(ctx context.Context, p *queuedPod, cycle int64, reason, msg string, start time.Time) {
	pod := p.info.pod
	p.stuck = true
	p.nominated = s.cache.nominatedNode(pod)
	s.queue.Requeue(p, cycle, false)
	s.metrics.attempts.WithLabelValues("unschedulable", s.cfg.SchedulerName).Inc()
	s.metrics.attemptDuration.WithLabelValues("unschedulable", s.cfg.SchedulerName).Observe(s.clock.Since(start).Seconds())
	klog.FromContext(ctx).V(2).Info("Refusing to schedule pod until its spec changes", "pod", klog.KObj(pod), "err", msg)
	msg = truncate(msg)
	cond := podScheduledFalse(pod, reason, msg, s.clock.Now())
	if cond == nil {
		return
	}
	s.recorder.Event(pod, v1.EventTypeWarning, "FailedScheduling", msg)
	s.patchStatus(ctx, pod, map[string]any{"conditions": []any{cond}}, "report the refusal")
}
