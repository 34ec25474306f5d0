package nodelifecycle

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/nodeshepherd/nodeshepherd/pkg/controllerutil"
	"github.com/nodeshepherd/nodeshepherd/pkg/kube"
)

// processMark marks every pod of a node NotReady; failures are retried with
// backoff for as long as the node is not Ready (upstream's nodesToRetry).
func (c *Controller) processMark(ctx context.Context) bool {
	return controllerutil.ProcessNext(ctx, c.markQueue, "node", "Failed to mark pods NotReady, retrying", c.markNodePods)
}

// markNodePods marks the pods of a node that is (still) not Ready.
func (c *Controller) markNodePods(ctx context.Context, name string) error {
	node, err := c.latestNode(name)
	if err != nil || kube.NodeReady(node) {
		return nil
	}
	objs, err := c.podIndexer.ByIndex(ByNodeIndex, name)
	if err != nil {
		return err
	}
	var errs []error
	for _, obj := range objs {
		if err := c.markPodNotReady(ctx, obj.(*v1.Pod)); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// processPod handles a pod newly bound to a node: if the node is known and
// not Ready, the pod is marked NotReady too.
func (c *Controller) processPod(ctx context.Context) bool {
	key, quit := c.podQueue.Get()
	if quit {
		return false
	}
	defer c.podQueue.Done(key)
	ns, name, _ := cache.SplitMetaNamespaceKey(key)
	pod, err := c.podLister.Pods(ns).Get(name)
	if err != nil {
		if !apierrors.IsNotFound(err) {
			c.podQueue.AddRateLimited(key)
		}
		return true
	}
	c.mu.Lock()
	_, known := c.health[pod.Spec.NodeName]
	c.mu.Unlock()
	if !known {
		return true
	}
	node, err := c.latestNode(pod.Spec.NodeName)
	if err != nil {
		c.podQueue.AddRateLimited(key)
		return true
	}
	ready := getCondition(&node.Status, v1.NodeReady)
	if ready == nil || ready.Status == v1.ConditionTrue {
		c.podQueue.Forget(key)
		return true
	}
	if err := c.markPodNotReady(ctx, pod); err != nil {
		c.podQueue.AddRateLimited(key)
		return true
	}
	c.podQueue.Forget(key)
	return true
}

// markPodNotReady sets a pod's Ready condition False (pods without one are
// left alone, as upstream does) and remembers it for readiness restoring.
func (c *Controller) markPodNotReady(ctx context.Context, pod *v1.Pod) error {
	idx := -1
	for i := range pod.Status.Conditions {
		if pod.Status.Conditions[i].Type == v1.PodReady {
			idx = i
		}
	}
	if idx < 0 || pod.Status.Conditions[idx].Status == v1.ConditionFalse {
		return nil
	}
	if c.cfg.DryRun {
		c.dryRun.Report(ctx, pod, "mark-pod-not-ready", fmt.Sprintf("pod %s/%s on node %s: Ready -> False", pod.Namespace, pod.Name, pod.Spec.NodeName))
		return nil
	}
	// Upstream writes the whole status, which conflicts with every other
	// writer of the pod (the taint eviction controller's DisruptionTarget
	// condition above all); a patch of the one condition (merged by type)
	// cannot conflict.
	patch, _ := json.Marshal(map[string]any{"status": map[string]any{"conditions": []map[string]any{{
		"type": v1.PodReady, "status": v1.ConditionFalse, "lastTransitionTime": metav1.NewTime(c.clock.Now()),
	}}}})
	written, err := c.client.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status")
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("marking pod %s/%s NotReady: %w", pod.Namespace, pod.Name, err)
	}
	if c.recorder != nil {
		c.recorder.Event(written, v1.EventTypeWarning, EventNodeNotReady, "Node is not ready")
	}
	c.metrics.podsMarkedNotReady.Inc()
	if c.cfg.PodReadinessRestoreDelay > 0 {
		c.markedMu.Lock()
		c.marked[written.UID] = markedPod{node: written.Spec.NodeName, resourceVersion: written.ResourceVersion}
		c.markedMu.Unlock()
	}
	return nil
}

// queueRestores schedules a readiness check, PodReadinessRestoreDelay from
// now, for every pod of a now Ready node that this controller marked NotReady.
func (c *Controller) queueRestores(node string) {
	if c.cfg.PodReadinessRestoreDelay <= 0 {
		return
	}
	c.markedMu.Lock()
	defer c.markedMu.Unlock()
	if len(c.marked) == 0 {
		return
	}
	objs, err := c.podIndexer.ByIndex(ByNodeIndex, node)
	if err != nil {
		return
	}
	for _, obj := range objs {
		pod := obj.(*v1.Pod)
		m, ok := c.marked[pod.UID]
		if !ok || m.restoreQueued {
			continue
		}
		m.restoreQueued = true
		c.marked[pod.UID] = m
		if key, err := cache.MetaNamespaceKeyFunc(pod); err == nil {
			c.restoreQueue.AddAfter(key, c.cfg.PodReadinessRestoreDelay)
		}
	}
}

// processRestore gives a pod Ready=True back when its node is Ready, its
// containers are all ready, and nobody (its kubelet above all) has written the
// pod since this controller marked it NotReady: the seed 002 incident, where a
// kubelet never re-posted the status after a short network loss.
func (c *Controller) processRestore(ctx context.Context) bool {
	key, quit := c.restoreQueue.Get()
	if quit {
		return false
	}
	defer c.restoreQueue.Done(key)
	defer c.restoreQueue.Forget(key)
	ns, name, _ := cache.SplitMetaNamespaceKey(key)
	pod, err := c.podLister.Pods(ns).Get(name)
	if err != nil {
		return true
	}
	c.markedMu.Lock()
	m, ok := c.marked[pod.UID]
	delete(c.marked, pod.UID)
	c.markedMu.Unlock()
	if !ok {
		return true
	}
	logger := klog.FromContext(ctx).WithValues("pod", klog.KObj(pod), "node", m.node)
	if pod.ResourceVersion != m.resourceVersion {
		logger.V(2).Info("Pod was updated since it was marked NotReady; leaving its readiness to the kubelet")
		return true
	}
	node, err := c.latestNode(m.node)
	if err == nil && !kube.NodeReady(node) && pod.Spec.NodeName == m.node {
		// The node failed again before the delay ran out: keep the mark for
		// its next recovery.
		m.restoreQueued = false
		c.markedMu.Lock()
		c.marked[pod.UID] = m
		c.markedMu.Unlock()
		return true
	}
	if err != nil || pod.Spec.NodeName != m.node || !containersAllReady(pod) {
		return true
	}
	p := pod.DeepCopy()
	for i := range p.Status.Conditions {
		if p.Status.Conditions[i].Type == v1.PodReady {
			p.Status.Conditions[i].Status = v1.ConditionTrue
			p.Status.Conditions[i].LastTransitionTime = metav1.NewTime(c.clock.Now())
		}
	}
	msg := fmt.Sprintf("Node %s is Ready again and its kubelet did not re-post this pod's status within %s; restored Ready=True", m.node, c.cfg.PodReadinessRestoreDelay)
	if c.cfg.DryRun {
		c.dryRun.Report(ctx, pod, "restore-pod-readiness", fmt.Sprintf("pod %s: %s", key, msg))
		return true
	}
	// The update carries the resourceVersion read above: if the kubelet wrote
	// the pod in the meantime, it fails with a conflict and is left alone.
	written, err := c.client.CoreV1().Pods(ns).UpdateStatus(ctx, p, metav1.UpdateOptions{})
	if err != nil {
		logger.V(2).Info("Not restoring pod readiness", "err", err)
		return true
	}
	c.metrics.podReadinessRestored.Inc()
	if c.recorder != nil {
		c.recorder.Event(written, v1.EventTypeNormal, EventReadinessRestored, msg)
	}
	logger.Info("Restored pod readiness after its node recovered")
	return true
}

// containersAllReady is the kubelet's own view: ContainersReady=True and every
// container ready.
func containersAllReady(pod *v1.Pod) bool {
	cr := false
	for _, c := range pod.Status.Conditions {
		if c.Type == v1.ContainersReady && c.Status == v1.ConditionTrue {
			cr = true
		}
	}
	if !cr || len(pod.Status.ContainerStatuses) == 0 {
		return false
	}
	for _, s := range pod.Status.ContainerStatuses {
		if !s.Ready {
			return false
		}
	}
	return true
}
