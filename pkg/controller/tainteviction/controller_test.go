package tainteviction

import (
	"context"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	testingclock "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
)

// Upstream's "lengthening toleration shouldn't work" and the schedule rules
// of processPodOnNode, on the timed workers alone (no API involved).
func TestScheduleRules(t *testing.T) {
	now := time.Now()
	clk := testingclock.NewFakeClock(now)
	fired := make(chan string, 10)
	c := &Controller{clock: clk}
	c.workers = newTimedWorkers(clk, func(key string, _ *timedWork) { fired <- key })
	pod := types.NamespacedName{Namespace: "ns", Name: "p"}
	taints := []v1.Taint{{Key: "node.kubernetes.io/unreachable", Effect: v1.TaintEffectNoExecute}}
	tol := func(s *int64) []v1.Toleration {
		return []v1.Toleration{{Key: "node.kubernetes.io/unreachable", Operator: v1.TolerationOpExists, Effect: v1.TaintEffectNoExecute, TolerationSeconds: s}}
	}
	ctx := context.Background()

	c.processPodOnNode(ctx, pod, tol(ptr.To[int64](1)), taints, now)
	if w := c.workers.Get("ns/p"); w == nil || !w.fireAt.Equal(now.Add(time.Second)) {
		t.Fatalf("scheduled %+v, want at now+1s", w)
	}
	// Lengthening the toleration later keeps the existing schedule.
	c.processPodOnNode(ctx, pod, tol(ptr.To[int64](100)), taints, now.Add(500*time.Millisecond))
	if w := c.workers.Get("ns/p"); !w.fireAt.Equal(now.Add(time.Second)) {
		t.Errorf("schedule moved to %v", w.fireAt)
	}
	// Tolerating forever cancels.
	c.processPodOnNode(ctx, pod, tol(nil), taints, now.Add(600*time.Millisecond))
	if c.workers.Get("ns/p") != nil {
		t.Error("infinite toleration did not cancel")
	}
	// Not tolerating at all evicts at once.
	c.processPodOnNode(ctx, pod, nil, taints, now.Add(700*time.Millisecond))
	select {
	case key := <-fired:
		if key != "ns/p" {
			t.Errorf("fired %s", key)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("untolerated taint: no immediate eviction")
	}
}
