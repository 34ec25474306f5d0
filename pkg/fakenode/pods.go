package fakenode

import (
	"context"
	"encoding/json"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"github.com/nodeshepherd/nodeshepherd/pkg/kube"
)

// podState is what the fake kubelet believes about one of its pods.
type podState struct {
	dueAt     time.Time // when its containers are "started"
	startedAt metav1.Time
	running   bool
	ip        string
	// posted says the believed status was written since the kubelet last
	// (re)started. With EmulateStalePodStatus this alone decides whether to
	// post, which is the 1.15 bug: a status changed by someone else is
	// never corrected.
	posted bool
	// reconcileAt is the status sync at which a status someone else
	// changed is written back (zero: none pending).
	reconcileAt time.Time
}

// podConditionTypes are the conditions the kubelet owns.
var podConditionTypes = []v1.PodConditionType{v1.PodReadyToStartContainers, v1.PodInitialized, v1.ContainersReady, v1.PodReady}

func (m *Manager) onPod(obj any) {
	pod := obj.(*v1.Pod)
	if m.nodes[pod.Spec.NodeName] == nil {
		return
	}
	if key, err := cache.MetaNamespaceKeyFunc(pod); err == nil {
		m.podQ.Add(key)
	}
}

func (m *Manager) onPodDelete(obj any) {
	if pod, ok := kube.Untombstone(obj).(*v1.Pod); ok {
		m.podsMu.Lock()
		delete(m.pods, pod.UID)
		delete(m.claimWaits, string(pod.UID))
		m.podsMu.Unlock()
		if n := m.nodes[pod.Spec.NodeName]; n != nil && m.vols != nil && m.statusQ != nil {
			// Its volumes are unmounted: no longer in use.
			m.statusQ.Add(n.name)
		}
	}
}

func (m *Manager) processPod(ctx context.Context) bool {
	key, quit := m.podQ.Get()
	if quit {
		return false
	}
	defer m.podQ.Done(key)
	retryAfter, err := m.syncPod(ctx, key)
	switch {
	case err != nil:
		m.stats.errors.Add(1)
		klog.FromContext(ctx).V(2).Info("Pod sync failed", "pod", key, "err", err)
		m.podQ.AddRateLimited(key)
	case retryAfter > 0:
		m.podQ.Forget(key)
		m.podQ.AddAfter(key, retryAfter)
	default:
		m.podQ.Forget(key)
	}
	return true
}

// syncPod moves one pod through its life: started after PodStartDelay,
// status posted, graceful deletion completed. It returns a delay when the
// pod must be looked at again later.
func (m *Manager) syncPod(ctx context.Context, key string) (time.Duration, error) {
	obj, exists, err := m.podIndexer.GetByKey(key)
	if err != nil || !exists {
		return 0, err
	}
	pod := obj.(*v1.Pod)
	n := m.nodes[pod.Spec.NodeName]
	if n == nil || !n.isHealthy() {
		// A partitioned or stopped kubelet does nothing; recovery resyncs.
		return 0, nil
	}
	if pod.DeletionTimestamp != nil {
		err := m.cfg.Client.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{
			GracePeriodSeconds: ptr.To[int64](0), Preconditions: metav1.NewUIDPreconditions(string(pod.UID))})
		if err == nil {
			m.stats.podDeletes.Add(1)
		}
		if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
			return 0, nil
		}
		return 0, err
	}
	if pod.Status.Phase == v1.PodSucceeded || pod.Status.Phase == v1.PodFailed {
		return 0, nil
	}

	now := m.cfg.Clock.Now()
	m.podsMu.Lock()
	st := m.pods[pod.UID]
	known := st != nil
	m.podsMu.Unlock()
	if !known {
		// A kubelet starts the containers once the volumes are mounted.
		if ok, waiting := m.volumesReady(pod, n); !ok {
			klog.FromContext(ctx).V(4).Info("Pod waits for its volumes", "pod", key, "waiting", waiting)
			return volumeRetry, nil
		}
		// Then the DRA manager prepares its claims, or the pod waits.
		if len(pod.Spec.ResourceClaims) > 0 {
			waiting, err := m.claimsReady(ctx, pod, n)
			if err != nil {
				return 0, err
			}
			if waiting != "" {
				klog.FromContext(ctx).V(4).Info("Pod waits for its resource claims", "pod", key, "waiting", waiting)
				m.reportClaimsWaiting(ctx, pod, n, waiting)
				return claimRetry, nil
			}
			m.forgetClaimWait(pod)
		}
	}
	m.podsMu.Lock()
	st = m.pods[pod.UID]
	if st == nil {
		st = &podState{dueAt: now.Add(m.cfg.PodStartDelay)}
		m.pods[pod.UID] = st
	}
	if !st.running {
		if wait := st.dueAt.Sub(now); wait > 0 {
			m.podsMu.Unlock()
			return wait, nil
		}
		st.running, st.startedAt = true, metav1.NewTime(now)
		if pod.Spec.HostNetwork {
			st.ip = n.ip
		} else {
			n.mu.Lock()
			st.ip = n.nextPodIP()
			n.mu.Unlock()
		}
	}
	desired := m.desiredStatus(pod, n, st)
	post := !st.posted
	if !m.cfg.EmulateStalePodStatus && !post && statusDiffers(&pod.Status, &desired) {
		// The fixed kubelet reconciles: whatever the API server holds that
		// differs from its own view is written again, at its status
		// manager's next sync (nextSync); its own changes go out at once.
		if st.reconcileAt.IsZero() {
			n.mu.Lock()
			st.reconcileAt = nextSync(n.syncBase, now, m.cfg.NodeStatusUpdateFrequency)
			n.mu.Unlock()
		}
		if wait := st.reconcileAt.Sub(now); wait > 0 {
			m.podsMu.Unlock()
			return wait, nil
		}
		post = true
	}
	st.reconcileAt = time.Time{}
	m.podsMu.Unlock()
	if !post {
		return 0, nil
	}
	patch, err := json.Marshal(map[string]any{"status": desired})
	if err != nil {
		return 0, err
	}
	if _, err := m.cfg.Client.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.StrategicMergePatchType, patch,
		metav1.PatchOptions{FieldManager: FieldManager}, "status"); err != nil {
		if apierrors.IsNotFound(err) {
			return 0, nil
		}
		return 0, err
	}
	m.stats.podPosts.Add(1)
	m.podsMu.Lock()
	st.posted = true
	m.podsMu.Unlock()
	return 0, nil
}

// desiredStatus is the status of a pod whose containers all run and are ready.
func (m *Manager) desiredStatus(pod *v1.Pod, n *node, st *podState) v1.PodStatus {
	t := st.startedAt
	ready := v1.ConditionTrue
	readyReason := ""
	for _, gate := range pod.Spec.ReadinessGates {
		if !conditionTrue(pod.Status.Conditions, gate.ConditionType) {
			ready, readyReason = v1.ConditionFalse, "ReadinessGatesNotReady"
		}
	}
	conds := make([]v1.PodCondition, 0, len(podConditionTypes))
	for _, typ := range podConditionTypes {
		c := v1.PodCondition{Type: typ, Status: v1.ConditionTrue, LastTransitionTime: t}
		if typ == v1.PodReady {
			c.Status, c.Reason = ready, readyReason
		}
		conds = append(conds, c)
	}
	s := v1.PodStatus{
		Phase:      v1.PodRunning,
		Conditions: conds,
		HostIP:     n.ip, HostIPs: []v1.HostIP{{IP: n.ip}},
		PodIP: st.ip, PodIPs: []v1.PodIP{{IP: st.ip}},
		StartTime: &t,
	}
	for _, c := range pod.Spec.InitContainers {
		s.InitContainerStatuses = append(s.InitContainerStatuses, v1.ContainerStatus{
			Name: c.Name, Image: c.Image, ImageID: "fake://" + c.Image, ContainerID: "fake://" + string(pod.UID) + "/" + c.Name,
			State: v1.ContainerState{Terminated: &v1.ContainerStateTerminated{ExitCode: 0, Reason: "Completed", StartedAt: t, FinishedAt: t}},
			Ready: true, Started: ptr.To(false),
		})
	}
	for _, c := range pod.Spec.Containers {
		s.ContainerStatuses = append(s.ContainerStatuses, v1.ContainerStatus{
			Name: c.Name, Image: c.Image, ImageID: "fake://" + c.Image, ContainerID: "fake://" + string(pod.UID) + "/" + c.Name,
			State: v1.ContainerState{Running: &v1.ContainerStateRunning{StartedAt: t}},
			Ready: true, Started: ptr.To(true),
		})
	}
	return s
}

func conditionTrue(conds []v1.PodCondition, t v1.PodConditionType) bool {
	for _, c := range conds {
		if c.Type == t {
			return c.Status == v1.ConditionTrue
		}
	}
	return false
}

// statusDiffers compares what the kubelet owns: phase, IP and its conditions.
func statusDiffers(api, want *v1.PodStatus) bool {
	if api.Phase != want.Phase || api.PodIP != want.PodIP {
		return true
	}
	for _, w := range want.Conditions {
		found := false
		for _, a := range api.Conditions {
			if a.Type == w.Type {
				found = true
				if a.Status != w.Status {
					return true
				}
			}
		}
		if !found {
			return true
		}
	}
	return false
}

// resyncPods queues every pod of a node, after it comes back. With restarted
// the kubelet has lost its memory of what it posted and writes every status.
func (m *Manager) resyncPods(n *node, restarted bool) {
	objs, err := m.podIndexer.ByIndex(byNodeIndex, n.name)
	if err != nil {
		return
	}
	for _, obj := range objs {
		pod := obj.(*v1.Pod)
		m.podsMu.Lock()
		if st := m.pods[pod.UID]; st != nil {
			st.posted = st.posted && !restarted
			// Back from away: what it finds changed waits for the next
			// sync from now, not one that passed while it was away.
			st.reconcileAt = time.Time{}
		}
		m.podsMu.Unlock()
		if key, err := cache.MetaNamespaceKeyFunc(pod); err == nil {
			m.podQ.Add(key)
		}
	}
}
