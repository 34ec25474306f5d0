package framework

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/go-logr/logr"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	toolscache "k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"
	"k8s.io/klog/v2"
)

// PodDecision is what a scheduler made of a pod: the node it was bound to,
// or the reason and message of its PodScheduled=False condition.
type PodDecision struct {
	Node, Reason, Message string
}

// WaitPodDecision watches a pod until it is bound or a scheduler reports
// that it cannot place it (PodScheduled=False, reason Unschedulable or
// SchedulerError), failing the test after timeout. It watches rather than
// polls, so that tests that schedule pods one at a time stay fast.
func WaitPodDecision(t testing.TB, client kubernetes.Interface, namespace, name string, timeout time.Duration) PodDecision {
	t.Helper()
	return waitPodDecision(t, client, namespace, name, timeout, false)
}

// WaitPodOutcome is WaitPodDecision for a pod that may preempt: a pod
// reported unschedulable while it is nominated to a node (its victims are
// being removed) is waited on until it is bound there or loses the
// nomination.
func WaitPodOutcome(t testing.TB, client kubernetes.Interface, namespace, name string, timeout time.Duration) PodDecision {
	t.Helper()
	return waitPodDecision(t, client, namespace, name, timeout, true)
}

func waitPodDecision(t testing.TB, client kubernetes.Interface, namespace, name string, timeout time.Duration, throughPreemption bool) PodDecision {
	t.Helper()
	ctx, cancel := context.WithTimeout(Context(t), timeout)
	defer cancel()
	// The informer's own log lines (one watch per pod) would drown the
	// test's output.
	ctx = klog.NewContext(ctx, logr.Discard())
	selector := fields.OneTermEqualSelector("metadata.name", name).String()
	lw := &toolscache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.FieldSelector = selector
			return client.CoreV1().Pods(namespace).List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = selector
			return client.CoreV1().Pods(namespace).Watch(ctx, o)
		},
	}
	var d PodDecision
	last := "not seen"
	_, err := watchtools.UntilWithSync(ctx, lw, &v1.Pod{}, nil, func(ev watch.Event) (bool, error) {
		p, ok := ev.Object.(*v1.Pod)
		if !ok {
			return false, nil
		}
		if ev.Type == watch.Deleted {
			return false, fmt.Errorf("pod %s/%s was deleted", namespace, name)
		}
		if p.Spec.NodeName != "" {
			d = PodDecision{Node: p.Spec.NodeName}
			return true, nil
		}
		last = "no PodScheduled condition"
		for _, c := range p.Status.Conditions {
			if c.Type != v1.PodScheduled {
				continue
			}
			last = fmt.Sprintf("PodScheduled=%s %s: %s", c.Status, c.Reason, c.Message)
			if throughPreemption && p.Status.NominatedNodeName != "" {
				last += " (nominated to " + p.Status.NominatedNodeName + ")"
				continue
			}
			if c.Status == v1.ConditionFalse && (c.Reason == v1.PodReasonUnschedulable || c.Reason == v1.PodReasonSchedulerError) {
				d = PodDecision{Reason: c.Reason, Message: c.Message}
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("pod %s/%s: no scheduling decision within %s (%v); last seen: %s", namespace, name, timeout, err, last)
	}
	return d
}
