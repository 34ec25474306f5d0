package scheduler

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	volumehelpers "k8s.io/component-helpers/storage/volume"
	"k8s.io/klog/v2"

	"github.com/nodeshepherd/nodeshepherd/pkg/kube"
)

// volumeBindTimeout is how long the binding of a pod waits for its claims
// to be bound (kube-scheduler's VolumeBinding bindTimeoutSeconds default).
const volumeBindTimeout = 600 * time.Second

// bindWithPrebind runs the PreBind steps, then the pod's binding, in the
// background. VolumeBinding's: the volumes chosen get their claimRef, the
// claims to provision the selected-node annotation, and the steps wait
// until the PV controller (or a provisioner) has bound every claim.
// DynamicResources': the resource claims get their allocation and the pod
// in reservedFor (prebindClaims). On failure the pod is forgotten and
// retried with backoff, as kube-scheduler does; the resource claims
// reserved for it are unreserved, also when its binding fails.
func (s *Scheduler) bindWithPrebind(ctx context.Context, p *queuedPod, node *v1.Node, b *volumeBindings, claims []claimBinding) {
	pod := p.info.pod
	if s.dryRun.Enabled() {
		if b != nil {
			for _, sb := range b.static {
				s.dryRun.Report(ctx, pod, "bind-volume", fmt.Sprintf("would bind persistentvolume %s to claim %s/%s", sb.pv.Name, sb.pvc.Namespace, sb.pvc.Name))
			}
			for _, c := range b.provision {
				s.dryRun.Report(ctx, pod, "select-node", fmt.Sprintf("would annotate claim %s/%s with %s=%s", c.Namespace, c.Name, volumehelpers.AnnSelectedNode, node.Name))
			}
		}
		for _, c := range claims {
			what := "reserve"
			if c.allocation != nil {
				what = "allocate and reserve"
			}
			s.dryRun.Report(ctx, pod, "reserve-resourceclaim", fmt.Sprintf("would %s resourceclaim %s/%s for pod %s/%s on node %s", what, c.claim.Namespace, c.claim.Name, pod.Namespace, pod.Name, node.Name))
		}
		if b != nil {
			s.volumes.forgetAssumed(b)
		}
		s.dra.forgetInFlight(claims)
		s.bind(ctx, p, node.Name)
		return
	}
	s.wg.Go(func() {
		var err error
		plugin := "VolumeBinding"
		if !b.empty() {
			err = s.prebindVolumes(ctx, pod, node, b)
		}
		var written []claimBinding
		if err == nil && len(claims) > 0 {
			plugin = "DynamicResources"
			written, err = s.prebindClaims(ctx, pod, node.Name, claims)
		} else {
			s.dra.forgetInFlight(claims)
		}
		if ctx.Err() != nil || errors.Is(err, errPodGone) {
			// No longer leading (the next leader takes the pod over), or
			// the pod was deleted meanwhile.
			s.unreserveClaims(context.WithoutCancel(ctx), pod, written)
			s.cache.forget(pod.UID)
			return
		}
		if err != nil {
			s.unreserveClaims(ctx, pod, written)
			s.cache.forget(pod.UID)
			s.metrics.attempts.WithLabelValues("error", s.cfg.SchedulerName).Inc()
			msg := truncate(fmt.Sprintf("running PreBind plugin %q: %v", plugin, err))
			klog.FromContext(ctx).Error(err, "PreBind failed; retrying with backoff", "pod", klog.KObj(pod), "node", node.Name, "plugin", plugin)
			s.recorder.Event(pod, v1.EventTypeWarning, "FailedScheduling", msg)
			if cond := podScheduledFalse(pod, reasonSchedulerError, msg, s.clock.Now()); cond != nil {
				s.patchStatus(ctx, pod, map[string]any{"conditions": []any{cond}}, "report the PreBind failure")
			}
			s.queue.Readd(pod)
			return
		}
		if err := s.doBind(context.WithoutCancel(ctx), p, node.Name); err != nil {
			s.unreserveClaims(context.WithoutCancel(ctx), pod, written)
		}
	})
}

var errPodGone = errors.New("pod does not exist any more")

// boundWrite runs one API write of a binding goroutine as a tracked step
// (what says what it does), bounded by kube.WriteTimeout.
func boundWrite[T any](ctx context.Context, s *Scheduler, what string, write func(context.Context) (T, error)) (T, error) {
	end := s.Begin(what)
	defer end()
	wctx, cancel := context.WithTimeout(ctx, kube.WriteTimeout)
	defer cancel()
	return write(wctx)
}

// prebindVolumes writes the bindings and waits until they are complete.
func (s *Scheduler) prebindVolumes(ctx context.Context, pod *v1.Pod, node *v1.Node, b *volumeBindings) error {
	logger := klog.FromContext(ctx)
	written := 0
	static := make([]staticBinding, len(b.static))
	copy(static, b.static)
	provision := make([]*v1.PersistentVolumeClaim, len(b.provision))
	copy(provision, b.provision)
	defer func() {
		// What was not written is not assumed any more; what was written
		// stays assumed until the informer shows it.
		rest := &volumeBindings{}
		for i, sb := range b.static {
			if i >= written {
				rest.static = append(rest.static, sb)
			}
		}
		for i, c := range b.provision {
			if i+len(b.static) >= written {
				rest.provision = append(rest.provision, c)
			}
		}
		s.volumes.forgetAssumed(rest)
	}()
	// Each write is bounded (kube.WriteTimeout) and a tracked step, so that
	// a write whose answer never comes neither holds the pod assumed for
	// good nor goes unseen by /healthz. One whose answer is lost may have
	// landed: nothing here counts on either outcome. Its assumed copy is
	// dropped like a failed one's, the pod is retried, and every write of
	// a volume or claim is conditional on the resourceVersion it was
	// decided on, so a write that landed makes any later one conflict until
	// the informer shows it.
	for i, sb := range b.static {
		pv, err := boundWrite(ctx, s, "binding persistentvolume "+sb.pv.Name+" for pod "+pod.Namespace+"/"+pod.Name, func(ctx context.Context) (*v1.PersistentVolume, error) {
			return s.client.CoreV1().PersistentVolumes().Update(ctx, sb.pv, metav1.UpdateOptions{})
		})
		if err != nil {
			return err
		}
		logger.V(2).Info("Bound PersistentVolume to claim; waiting for the PV controller", "pod", klog.KObj(pod), "pv", pv.Name, "pvc", klog.KObj(sb.pvc))
		static[i].pv = pv
		written++
	}
	for i, c := range b.provision {
		pvc, err := boundWrite(ctx, s, "selecting node "+node.Name+" for claim "+c.Namespace+"/"+c.Name+" of pod "+pod.Namespace+"/"+pod.Name, func(ctx context.Context) (*v1.PersistentVolumeClaim, error) {
			return s.client.CoreV1().PersistentVolumeClaims(c.Namespace).Update(ctx, c, metav1.UpdateOptions{})
		})
		if err != nil {
			return err
		}
		provision[i] = pvc
		written++
	}
	deadline := s.clock.Now().Add(volumeBindTimeout)
	t := s.clock.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C():
		}
		done, err := s.volumesBound(pod, node, static, provision)
		if err != nil {
			return fmt.Errorf("binding volumes: %w", err)
		}
		if done {
			return nil
		}
		if !s.clock.Now().Before(deadline) {
			return fmt.Errorf("binding volumes: %w", context.DeadlineExceeded)
		}
	}
}

// olderThan is true when the informer's object is older than the one
// written (resource versions are etcd revisions).
func olderThan(informer, written string) bool {
	a, errA := strconv.ParseUint(informer, 10, 64)
	b, errB := strconv.ParseUint(written, 10, 64)
	return errA == nil && errB == nil && a < b
}

// volumesBound checks the API objects (the informers', not the assumed
// ones): true once every claim is fully bound; an error when the binding
// was undone (a PV's claimRef reset, a provisioner's removal of the
// selected node) or cannot serve the node.
func (s *Scheduler) volumesBound(pod *v1.Pod, node *v1.Node, static []staticBinding, provision []*v1.PersistentVolumeClaim) (bool, error) {
	if !s.cache.isAssigned(pod.UID) {
		return false, errPodGone
	}
	env := s.volumes
	for _, sb := range static {
		pv, err := env.pvs.Get(sb.pv.Name)
		if err != nil {
			return false, fmt.Errorf("failed to check binding: %w", err)
		}
		pvc, err := env.pvcs.PersistentVolumeClaims(sb.pvc.Namespace).Get(sb.pvc.Name)
		if err != nil {
			return false, fmt.Errorf("failed to check binding: %w", err)
		}
		if olderThan(pv.ResourceVersion, sb.pv.ResourceVersion) {
			return false, nil
		}
		if err := volumehelpers.CheckNodeAffinity(pv, node.Labels); err != nil {
			return false, fmt.Errorf("pv %q node affinity doesn't match node %q: %w", pv.Name, node.Name, err)
		}
		if pv.Spec.ClaimRef == nil || pv.Spec.ClaimRef.UID == "" {
			return false, fmt.Errorf("ClaimRef got reset for pv %q", pv.Name)
		}
		if !fullyBound(pvc) {
			return false, nil
		}
	}
	for _, c := range provision {
		pvc, err := env.pvcs.PersistentVolumeClaims(c.Namespace).Get(c.Name)
		if err != nil {
			return false, fmt.Errorf("failed to check provisioning pvc: %w", err)
		}
		if olderThan(pvc.ResourceVersion, c.ResourceVersion) {
			return false, nil
		}
		if pvc.Annotations == nil {
			return false, fmt.Errorf("selectedNode annotation reset for PVC %q", pvc.Name)
		}
		if pvc.Annotations[volumehelpers.AnnSelectedNode] != node.Name {
			return false, fmt.Errorf("provisioning failed for PVC %q", pvc.Name)
		}
		if pvc.Spec.VolumeName != "" {
			pv, err := env.pvs.Get(pvc.Spec.VolumeName)
			if apierrors.IsNotFound(err) {
				return false, nil
			}
			if err != nil {
				return false, fmt.Errorf("failed to get pv %q from cache: %w", pvc.Spec.VolumeName, err)
			}
			if err := volumehelpers.CheckNodeAffinity(pv, node.Labels); err != nil {
				return false, fmt.Errorf("pv %q node affinity doesn't match node %q: %w", pv.Name, node.Name, err)
			}
		}
		if !fullyBound(pvc) {
			return false, nil
		}
	}
	return true, nil
}
