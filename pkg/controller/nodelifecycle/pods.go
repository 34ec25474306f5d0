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
	"github.com/nodeshepherd/nodeshepherd/pkg/nodetopology"
	"github.com/nodeshepherd/nodeshepherd/pkg/podreadiness"
)

// processMark marks every pod of a node NotReady; failures are retried with
// backoff for as long as the node is not Ready (upstream's nodesToRetry).
func (c *Controller) processMark(ctx context.Context) bool {
	return controllerutil.ProcessNext(ctx, c.markQueue, "node", "Failed to mark pods NotReady, retrying", c.markNodePods)
}

// markNodePods marks the pods of a node that is (still) not Ready.
func (c *Controller) markNodePods(ctx context.Context, name string) error {
	node, err := c.latestNode(name)
	if err != nil || kube.NodeReady(node) || c.holdingMarks(name) {
		return nil
	}
	objs, err := c.podIndexer.ByIndex(nodetopology.ByNodeIndex, name)
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
	return controllerutil.ProcessNext(ctx, c.podQueue, "pod", "Failed to mark a pod on a not-Ready node NotReady, retrying", c.syncBoundPod)
}

// syncBoundPod marks a pod NotReady if its node is known and not Ready.
func (c *Controller) syncBoundPod(ctx context.Context, key string) error {
	ns, name, _ := cache.SplitMetaNamespaceKey(key)
	pod, err := c.podLister.Pods(ns).Get(name)
	if err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		return err
	}
	c.mu.Lock()
	_, known := c.health[pod.Spec.NodeName]
	c.mu.Unlock()
	if !known {
		return nil
	}
	node, err := c.latestNode(pod.Spec.NodeName)
	if err != nil {
		return err
	}
	ready := kube.NodeCondition(node, v1.NodeReady)
	if ready == nil || ready.Status == v1.ConditionTrue || c.holdingMarks(node.Name) {
		return nil
	}
	return c.markPodNotReady(ctx, pod)
}

// MarkedCondition is the pod condition nodeshepherd writes next to Ready=False
// when it marks a pod NotReady because of its node. It is the durable record
// of the mark: any replica, after a leader change too, knows from it which
// pods it may give readiness back to. Status False once that is settled.
const MarkedCondition v1.PodConditionType = "nodeshepherd.io/MarkedNotReadyByNode"

// Reasons of MarkedCondition.
const (
	reasonMarked          = "NodeNotReady"
	reasonRestored        = "ReadinessRestored"
	reasonKubeletReported = "KubeletReported"
)

// markedOn returns the node a pod's mark names and when it was made, if the
// pod carries a live mark.
func markedOn(pod *v1.Pod) (*v1.PodCondition, bool) {
	c := kube.PodCondition(pod, MarkedCondition)
	return c, c != nil && c.Status == v1.ConditionTrue
}

// markPodNotReady sets a pod's Ready condition False (pods without one are
// left alone, as upstream does) and records the mark on the pod.
func (c *Controller) markPodNotReady(ctx context.Context, pod *v1.Pod) error {
	if sent, ok := peekLost(&c.lost.mu, &c.lost.marks, pod.UID); ok {
		// The last mark's answer was lost: the pod as the API server has
		// it tells whether it landed (Ready False since the time sent).
		rctx, cancel := context.WithTimeout(ctx, kube.WriteTimeout)
		fresh, err := c.client.CoreV1().Pods(pod.Namespace).Get(rctx, pod.Name, metav1.GetOptions{})
		cancel()
		if apierrors.IsNotFound(err) || (err == nil && fresh.UID != pod.UID) {
			c.lost.forgetPod(pod.UID)
			return nil
		}
		if err != nil {
			return fmt.Errorf("re-checking whether pod %s/%s was marked NotReady: %w", pod.Namespace, pod.Name, err)
		}
		takeLost(&c.lost.mu, &c.lost.marks, pod.UID)
		if ready := kube.PodCondition(fresh, v1.PodReady); ready != nil && ready.Status == v1.ConditionFalse && sameSecond(ready.LastTransitionTime, sent) {
			c.podMarked(fresh)
			return nil
		}
		pod = fresh
	}
	idx := -1
	for i := range pod.Status.Conditions {
		if pod.Status.Conditions[i].Type == v1.PodReady {
			idx = i
		}
	}
	if idx < 0 || pod.Status.Conditions[idx].Status == v1.ConditionFalse {
		return nil
	}
	if c.dryRun.Enabled() {
		c.dryRun.Report(ctx, pod, "mark-pod-not-ready", fmt.Sprintf("pod %s/%s on node %s: Ready -> False", pod.Namespace, pod.Name, pod.Spec.NodeName))
		return nil
	}
	// Upstream writes the whole status, which conflicts with every other
	// writer of the pod (the taint eviction controller's DisruptionTarget
	// condition above all); a patch of the conditions (merged by type)
	// cannot conflict. The mark is written in the same patch, so it exists
	// exactly when the pod was marked.
	now := metav1.NewTime(c.clock.Now())
	conds := []map[string]any{{"type": v1.PodReady, "status": v1.ConditionFalse, "lastTransitionTime": now}}
	if c.cfg.PodReadinessRestoreDelay > 0 {
		conds = append(conds, map[string]any{"type": MarkedCondition, "status": v1.ConditionTrue, "reason": reasonMarked,
			"message": fmt.Sprintf("Ready set False by nodeshepherd because node %s stopped being Ready", pod.Spec.NodeName), "lastTransitionTime": now})
	}
	patch, _ := json.Marshal(map[string]any{"status": map[string]any{"conditions": conds}})
	wctx, cancel := context.WithTimeout(ctx, kube.WriteTimeout)
	defer cancel()
	written, err := c.client.CoreV1().Pods(pod.Namespace).Patch(wctx, pod.Name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status")
	if apierrors.IsNotFound(err) {
		return nil
	}
	if lost(err) {
		setLost(&c.lost.mu, &c.lost.marks, pod.UID, now.Time)
		return fmt.Errorf("marking pod %s/%s NotReady got no answer (re-checked before it is sent again): %w", pod.Namespace, pod.Name, err)
	}
	if err != nil {
		return fmt.Errorf("marking pod %s/%s NotReady: %w", pod.Namespace, pod.Name, err)
	}
	c.podMarked(written)
	return nil
}

// podMarked records a pod marked NotReady by this controller: one event,
// counted once, and its mark indexed.
func (c *Controller) podMarked(written *v1.Pod) {
	if c.recorder != nil {
		c.recorder.Event(written, v1.EventTypeWarning, EventNodeNotReady, "Node is not ready")
	}
	c.metrics.podsMarkedNotReady.Inc()
	c.trackMark(written)
}

// trackMark keeps the in-memory index of marked pods in line with a pod as
// last seen (informer events and this controller's own writes): the record
// itself lives on the pod, so a new leader rebuilds the index from its
// informer's first list, and a pod that is gone is forgotten.
func (c *Controller) trackMark(pod *v1.Pod) {
	_, live := markedOn(pod)
	c.markedMu.Lock()
	defer c.markedMu.Unlock()
	m, known := c.marked[pod.UID]
	switch {
	case live && !known:
		c.marked[pod.UID] = markedPod{node: pod.Spec.NodeName}
	case live && known && m.node != pod.Spec.NodeName:
		m.node = pod.Spec.NodeName
		c.marked[pod.UID] = m
	case !live && known:
		delete(c.marked, pod.UID)
	}
}

func (c *Controller) forgetMark(pod *v1.Pod) {
	c.lost.forgetPod(pod.UID)
	c.markedMu.Lock()
	delete(c.marked, pod.UID)
	c.markedMu.Unlock()
}

// queueRestores schedules a readiness check, PodReadinessRestoreDelay from
// now, for every pod of a now Ready node that carries a mark.
func (c *Controller) queueRestores(node string) {
	if c.cfg.PodReadinessRestoreDelay <= 0 {
		return
	}
	c.markedMu.Lock()
	defer c.markedMu.Unlock()
	if len(c.marked) == 0 {
		return
	}
	objs, err := c.podIndexer.ByIndex(nodetopology.ByNodeIndex, node)
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

// processRestore gives a marked pod Ready=True back when its node came back
// after the mark, its containers and readiness gates are all ready, and
// nobody (its kubelet above all) changed its readiness since the mark: the
// seed 002 incident, where a kubelet never re-posted the status after a
// short network loss. The pod is read from the API server, after the
// recovery and the delay, not from the cache, and written with that
// resourceVersion, so the decision never rests on a status older than the
// recovery: a kubelet write in between makes the update fail and wins.
//
// Unlike the other workers it does not use controllerutil.ProcessNext: a
// failed restore is not retried with the queue's backoff but re-armed with
// the restore delay (requeueRestore), so the key is always forgotten.
func (c *Controller) processRestore(ctx context.Context) bool {
	key, quit := c.restoreQueue.Get()
	if quit {
		return false
	}
	defer c.restoreQueue.Done(key)
	defer c.restoreQueue.Forget(key)
	ns, name, _ := cache.SplitMetaNamespaceKey(key)
	// The read and the write are bounded together; an update whose answer
	// is lost is re-checked by the next read (below), never assumed.
	wctx, cancel := context.WithTimeout(ctx, kube.WriteTimeout)
	defer cancel()
	pod, err := c.client.CoreV1().Pods(ns).Get(wctx, name, metav1.GetOptions{})
	if err != nil {
		if cached, cerr := c.podLister.Pods(ns).Get(name); cerr == nil && apierrors.IsNotFound(err) {
			c.forgetMark(cached)
		} else if !apierrors.IsNotFound(err) {
			c.requeueRestore(ctx, key, err)
		}
		return true
	}
	mark, live := markedOn(pod)
	if l, ok := takeLost(&c.lost.mu, &c.lost.restores, pod.UID); ok && !live && mark != nil && sameSecond(mark.LastTransitionTime, l.at) &&
		(mark.Reason == reasonRestored || mark.Reason == reasonKubeletReported) {
		// The last restore, whose answer was lost, landed.
		c.restored(ctx, pod, l.verdict, l.msg)
		return true
	}
	if !live {
		c.forgetMark(pod)
		return true
	}
	logger := klog.FromContext(ctx).WithValues("pod", klog.KObj(pod), "node", pod.Spec.NodeName)
	node, err := c.latestNode(pod.Spec.NodeName)
	if err == nil && !kube.NodeReady(node) {
		// The node failed again before the delay ran out: keep the mark for
		// its next recovery.
		c.rearmRestore(pod.UID)
		return true
	}
	verdict, reason := restoreVerdict(pod, node, mark)
	if verdict == keepMark {
		logger.V(2).Info("Not restoring pod readiness", "why", reason)
		c.rearmRestore(pod.UID)
		return true
	}
	msg := fmt.Sprintf("Node %s is Ready again and its kubelet did not re-post this pod's status within %s; restored Ready=True", pod.Spec.NodeName, c.cfg.PodReadinessRestoreDelay)
	if verdict == settleMark {
		msg = reason
	}
	if c.dryRun.Enabled() {
		c.dryRun.Report(ctx, pod, "restore-pod-readiness", fmt.Sprintf("pod %s: %s", key, msg))
		return true
	}
	p := pod.DeepCopy()
	now := metav1.NewTime(c.clock.Now())
	for i := range p.Status.Conditions {
		cond := &p.Status.Conditions[i]
		switch {
		case cond.Type == v1.PodReady && verdict == restore:
			cond.Status, cond.LastTransitionTime = v1.ConditionTrue, now
		case cond.Type == MarkedCondition:
			cond.Status, cond.LastTransitionTime, cond.Reason, cond.Message = v1.ConditionFalse, now, reasonRestored, msg
			if verdict == settleMark {
				cond.Reason = reasonKubeletReported
			}
		}
	}
	// The update carries the resourceVersion read above: if the kubelet wrote
	// the pod in the meantime, it fails with a conflict and is tried again
	// (from a fresh read) at the node's next recovery check.
	written, err := c.client.CoreV1().Pods(ns).UpdateStatus(wctx, p, metav1.UpdateOptions{})
	if lost(err) {
		setLost(&c.lost.mu, &c.lost.restores, pod.UID, lostRestore{at: now.Time, verdict: verdict, msg: msg})
	}
	if err != nil {
		c.requeueRestore(ctx, key, err)
		return true
	}
	c.restored(ctx, written, verdict, msg)
	return true
}

// restored records a restore (or a settled mark) that was written.
func (c *Controller) restored(ctx context.Context, written *v1.Pod, verdict verdict, msg string) {
	c.forgetMark(written)
	if verdict != restore {
		return
	}
	c.metrics.podReadinessRestored.Inc()
	if c.recorder != nil {
		c.recorder.Event(written, v1.EventTypeNormal, EventReadinessRestored, msg)
	}
	klog.FromContext(ctx).Info("Restored pod readiness after its node recovered", "pod", klog.KObj(written), "node", written.Spec.NodeName)
}

// rearmRestore lets a marked pod be queued again at its node's next Ready check.
func (c *Controller) rearmRestore(uid types.UID) {
	c.markedMu.Lock()
	defer c.markedMu.Unlock()
	if m, ok := c.marked[uid]; ok {
		m.restoreQueued = false
		c.marked[uid] = m
	}
}

// requeueRestore makes the pod eligible again at its node's next Ready check.
func (c *Controller) requeueRestore(ctx context.Context, key string, err error) {
	klog.FromContext(ctx).V(2).Info("Pod readiness restore failed, will retry", "pod", key, "err", err)
	if !apierrors.IsConflict(err) { // a conflict: the kubelet wrote first, as it should
		c.metrics.restoreErrors.Inc()
	}
	ns, name, _ := cache.SplitMetaNamespaceKey(key)
	if pod, perr := c.podLister.Pods(ns).Get(name); perr == nil {
		c.rearmRestore(pod.UID)
	}
}

// The verdicts of a restore check, podreadiness's, under this package's names.
type verdict = podreadiness.Verdict

const (
	keepMark   = podreadiness.Keep    // not now
	restore    = podreadiness.Restore // set Ready=True and settle the mark
	settleMark = podreadiness.Settle  // readiness is no longer ours to give: settle the mark only
)

// restoreVerdict decides what to do with a marked pod on a Ready node; the
// rules are shared with the readinessrestore controller (pkg/podreadiness).
func restoreVerdict(pod *v1.Pod, node *v1.Node, mark *v1.PodCondition) (verdict, string) {
	return podreadiness.Decide(pod, node, mark.LastTransitionTime.Time)
}
