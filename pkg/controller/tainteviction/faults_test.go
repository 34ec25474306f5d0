package tainteviction

import (
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clienttesting "k8s.io/client-go/testing"
)

// A DELETE that takes effect but whose answer is lost (the request timed
// out) is not sent again: the retry sees the pod terminating with this
// controller's DisruptionTarget condition and counts that deletion once.
func TestDeleteWhoseAnswerWasLostCountsOnce(t *testing.T) {
	pods := v1.SchemeGroupVersion.WithResource("pods")
	lost := 0
	h := startWith(t, func(h *harness) {
		h.onDelete = func(clienttesting.Action) (bool, runtime.Object, error) {
			if lost > 0 {
				return false, nil, nil
			}
			lost++
			// The API server starts a graceful deletion (the kubelet has yet
			// to confirm), and the answer never reaches the controller.
			obj, err := h.client.Tracker().Get(pods, "default", "p")
			if err != nil {
				return true, nil, err
			}
			p := obj.(*v1.Pod).DeepCopy()
			p.DeletionTimestamp = &metav1.Time{Time: base}
			if err := h.client.Tracker().Update(pods, p, "default"); err != nil {
				return true, nil, err
			}
			return true, nil, apierrors.NewTimeoutError("request timed out", 0)
		}
	}, testNode("n1", noExec("a", at(-time.Second))), testPod("p", "n1", "u1", base.Add(-time.Hour)))
	h.until("the lost attempt failed", func() bool { w, ok := h.c.workers.Get("default/p"); return ok && w.attempts == 1 && !w.running })
	h.until("the informer sees the pod terminating", func() bool {
		p, err := h.c.podLister.Pods("default").Get("p")
		return err == nil && p.DeletionTimestamp != nil
	})
	h.clk.Step(retryBackoff(1))
	h.until("the deletion counted", func() bool { return value(h.c.deletions) == 1 })
	h.until("no work left", func() bool { _, ok := h.c.workers.Get("default/p"); return !ok })
	if n := h.deleteCount(); n != 1 {
		t.Errorf("%d DELETE requests, want 1: the retry must not delete again", n)
	}
	if n := value(h.c.deletionErrors); n != 1 {
		t.Errorf("%v deletion errors counted, want 1 (the timeout)", n)
	}
	if n := h.eventsLike("Marking for deletion Pod default/p"); n != 1 {
		t.Errorf("%d Marking events, want 1", n)
	}
}
