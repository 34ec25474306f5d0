package fakenode

import (
	"context"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	clocktesting "k8s.io/utils/clock/testing"
)

// TestReconnectAt: the request in flight at a heal gets through at its
// connection's next SYN retransmission (1, 3, 7 s after the attempt at the
// kubelet's 10 s), or the next attempt's: what a hollow node's kubelet at
// -v=6 showed (docs/simulate.md "Fidelity").
func TestReconnectAt(t *testing.T) {
	t0 := time.Date(2026, 12, 5, 3, 29, 0, 0, time.UTC)
	for _, tc := range []struct {
		healAfter, want time.Duration // after the last attempt
	}{
		{0, time.Second},
		{500 * time.Millisecond, time.Second},
		{time.Second, time.Second},
		{1500 * time.Millisecond, 3 * time.Second},
		{6 * time.Second, 7 * time.Second},
		{7500 * time.Millisecond, 10 * time.Second}, // the next attempt
		{23 * time.Second, 30 * time.Second},        // attempts went on at the interval
	} {
		if got := reconnectAt(t0, t0.Add(tc.healAfter), 10*time.Second).Sub(t0); got != tc.want {
			t.Errorf("heal %v after the attempt: reached %v after it, want %v", tc.healAfter, got, tc.want)
		}
	}
	// Compressed timings compress the retransmissions too.
	if got := reconnectAt(t0, t0.Add(200*time.Millisecond), time.Second).Sub(t0); got != 300*time.Millisecond {
		t.Errorf("1 s interval, heal after 200ms: reached after %v, want 300ms", got)
	}
	// No attempt yet: at once.
	if got := reconnectAt(time.Time{}, t0, 10*time.Second); !got.Equal(t0) {
		t.Errorf("no attempt: %v, want the heal", got)
	}
}

func TestNextSync(t *testing.T) {
	base := time.Date(2026, 12, 5, 3, 29, 4, 0, time.UTC)
	for _, tc := range []struct{ now, want time.Duration }{
		{-3 * time.Second, 0}, {0, 0}, {time.Nanosecond, 10 * time.Second}, {10 * time.Second, 10 * time.Second}, {25 * time.Second, 30 * time.Second},
	} {
		if got := nextSync(base, base.Add(tc.now), 10*time.Second).Sub(base); got != tc.want {
			t.Errorf("now base%+v: next sync base+%v, want base+%v", tc.now, got, tc.want)
		}
	}
}

// TestForeignStatusReconciledAtSync: a pod status that someone else changed
// (nodelifecycle marking it NotReady) is written back at the kubelet's next
// pod status sync (every NodeStatusUpdateFrequency, at the node's own
// phase), not when the kubelet sees the change, as the real kubelet's
// status manager does; the kubelet's own first post is not held; a node
// back from a partition waits for a sync after its return.
func TestForeignStatusReconciledAtSync(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	clk := clocktesting.NewFakeClock(time.Date(2026, 12, 5, 3, 0, 0, 0, time.UTC))
	client := fake.NewClientset()
	m, n := registeredNode(ctx, t, Config{Client: client, Nodes: 1, Clock: clk, NodeStatusUpdateFrequency: 10 * time.Second})
	n.syncBase = clk.Now().Add(4 * time.Second)
	m.podQ = workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[string]())
	t.Cleanup(m.podQ.ShutDown)
	m.podIndexer = cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{byNodeIndex: func(obj any) ([]string, error) {
		return []string{obj.(*v1.Pod).Spec.NodeName}, nil
	}})
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default", UID: "u1"}, Spec: v1.PodSpec{NodeName: n.name}}
	created, err := client.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.podIndexer.Add(created); err != nil {
		t.Fatal(err)
	}
	get := func() *v1.Pod {
		t.Helper()
		cur, err := client.CoreV1().Pods("default").Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return cur
	}
	// What the pod queue does on an informer event or a requeue.
	sync := func() (time.Duration, bool) {
		t.Helper()
		if err := m.podIndexer.Update(get()); err != nil {
			t.Fatal(err)
		}
		wait, err := m.syncPod(ctx, "default/web")
		if err != nil {
			t.Fatal(err)
		}
		return wait, podReady(get())
	}
	if _, err := m.syncPod(ctx, "default/web"); err != nil { // started
		t.Fatal(err)
	}
	clk.Step(DefaultPodStartDelay)
	if wait, ready := sync(); wait != 0 || !ready {
		t.Fatalf("first post: wait %v, Ready %v; want the kubelet's own post at once", wait, ready)
	}
	// Marked NotReady by someone else: left until the next sync, base.
	markNotReady(ctx, t, client)
	if wait, ready := sync(); wait != 3*time.Second || ready {
		t.Fatalf("foreign NotReady 1s after the start: wait %v, Ready %v; want it left until the sync 3s later", wait, ready)
	}
	clk.Step(2 * time.Second)
	if wait, ready := sync(); wait != time.Second || ready {
		t.Fatalf("looked at again 1s before the sync: wait %v, Ready %v", wait, ready)
	}
	// Looked at a little after the tick: written now, not a period later.
	clk.Step(time.Second + 5*time.Millisecond)
	if wait, ready := sync(); wait != 0 || !ready {
		t.Fatalf("at the sync: wait %v, Ready %v; want the status written back", wait, ready)
	}
	// Changed again: the next sync is base+10s.
	markNotReady(ctx, t, client)
	if wait, _ := sync(); wait != 10*time.Second-5*time.Millisecond {
		t.Fatalf("second foreign change: wait %v, want until base+10s", wait)
	}
	// Partitioned past that sync: nothing written while away; back (its
	// pods resynced), the sync that passed does not count, the next does.
	m.applyTo(n, Partition, nil)
	clk.Step(15 * time.Second) // base+15.005s, past the sync at base+10s
	if wait, ready := sync(); wait != 0 || ready {
		t.Fatalf("partitioned: wait %v, Ready %v; want nothing done", wait, ready)
	}
	n.mu.Lock()
	n.partitioned = false
	n.mu.Unlock()
	m.resyncPods(n, false)
	if wait, ready := sync(); wait != 5*time.Second-5*time.Millisecond || ready {
		t.Fatalf("back from the partition: wait %v, Ready %v; want it left until base+20s", wait, ready)
	}
}

func podReady(p *v1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == v1.PodReady {
			return c.Status == v1.ConditionTrue
		}
	}
	return false
}

func markNotReady(ctx context.Context, t *testing.T, client *fake.Clientset) {
	t.Helper()
	p, err := client.CoreV1().Pods("default").Get(ctx, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range p.Status.Conditions {
		if p.Status.Conditions[i].Type == v1.PodReady {
			p.Status.Conditions[i].Status = v1.ConditionFalse
		}
	}
	if _, err := client.CoreV1().Pods("default").UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}
