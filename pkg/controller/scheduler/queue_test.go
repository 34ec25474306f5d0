package scheduler

import (
	"context"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	clocktesting "k8s.io/utils/clock/testing"
)

func newTestQueue() (*schedulingQueue, *clocktesting.FakeClock) {
	clk := clocktesting.NewFakeClock(epoch)
	return newSchedulingQueue(queueConfig{InitialBackoff: time.Second, MaxBackoff: 10 * time.Second, MaxUnschedulable: 5 * time.Minute}, clk), clk
}

func pop(t *testing.T, q *schedulingQueue) (*queuedPod, int64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second) // what is queued pops at once
	defer cancel()
	p, cycle, ok := q.Pop(ctx)
	if !ok {
		t.Fatal("nothing to pop")
	}
	return p, cycle
}

func TestQueueOrder(t *testing.T) {
	q, clk := newTestQueue()
	q.Add(pod("low-early", 1, 0))
	clk.Step(time.Millisecond)
	q.Add(pod("high", 100, 0))
	clk.Step(time.Millisecond)
	q.Add(pod("low-late", 1, 0))
	for _, want := range []string{"high", "low-early", "low-late"} {
		if p, _ := pop(t, q); p.info.pod.Name != want {
			t.Fatalf("popped %s, want %s", p.info.pod.Name, want)
		}
	}
}

func TestQueueBackoffDoubling(t *testing.T) {
	q, _ := newTestQueue()
	p := &queuedPod{lastAttempt: epoch}
	for attempts, want := range map[int]time.Duration{1: time.Second, 2: 2 * time.Second, 3: 4 * time.Second, 4: 8 * time.Second, 5: 10 * time.Second, 9: 10 * time.Second} {
		p.attempts = attempts
		if got := q.backoffExpiry(p).Sub(epoch); got != want {
			t.Errorf("attempt %d: backoff %v, want %v", attempts, got, want)
		}
	}
}

func TestQueueUnschedulablePool(t *testing.T) {
	q, clk := newTestQueue()
	q.Add(pod("a", 1, 0))
	p, cycle := pop(t, q)
	q.Requeue(p, cycle, false)
	if l := q.Lens(); l[inUnschedulable] != 1 {
		t.Fatalf("not parked: %v", l)
	}
	// A status-only update (our own PodScheduled write) does not wake it.
	updated := p.info.pod.DeepCopy()
	updated.Status.Conditions = []v1.PodCondition{{Type: v1.PodScheduled, Status: v1.ConditionFalse}}
	q.Update(p.info.pod, updated)
	if l := q.Lens(); l[inUnschedulable] != 1 {
		t.Fatalf("status update woke the pod: %v", l)
	}
	// An event that does not help leaves it; one that helps moves it to
	// backoff (its 1 s is not over), then the flush makes it active.
	q.MoveAll("test", func(*queuedPod) bool { return false })
	if l := q.Lens(); l[inUnschedulable] != 1 {
		t.Fatalf("moved by an event that cannot help: %v", l)
	}
	q.MoveAll("test", nil)
	if l := q.Lens(); l[inBackoff] != 1 {
		t.Fatalf("want backoff, got %v", l)
	}
	clk.Step(time.Second)
	q.flush()
	if l := q.Lens(); l[inActive] != 1 {
		t.Fatalf("want active after backoff, got %v", l)
	}

	// Without any event, a parked pod is retried after 5 minutes.
	p, cycle = pop(t, q)
	q.Requeue(p, cycle, false)
	clk.Step(5*time.Minute - time.Second)
	q.flush()
	if l := q.Lens(); l[inUnschedulable] != 1 {
		t.Fatalf("left the pool early: %v", l)
	}
	clk.Step(time.Second)
	q.flush()
	if l := q.Lens(); l[inActive] != 1 {
		t.Fatalf("not retried after 5 minutes: %v", l)
	}
}

func TestQueueEventDuringAttempt(t *testing.T) {
	q, _ := newTestQueue()
	q.Add(pod("a", 1, 0))
	p, cycle := pop(t, q)
	q.MoveAll("NodeAdd", nil) // happens while the pod is being scheduled
	q.Requeue(p, cycle, false)
	if l := q.Lens(); l[inBackoff] != 1 {
		t.Fatalf("a pod that failed while a helpful event happened must back off, not sleep: %v", l)
	}
}

// An update that arrives while the pod is being scheduled waits for
// Requeue (the scheduling goroutine owns the pod meanwhile): a new spec or
// labels sends it to backoff to be tried again, even a stuck pod; a
// status-only change is applied and the pod is parked as usual.
func TestQueueUpdateDuringAttempt(t *testing.T) {
	q, _ := newTestQueue()
	a := pod("a", 1, 0)
	q.Add(a)
	p, cycle := pop(t, q)
	p.stuck = true // refused, as scheduleOne marks it
	relabelled := a.DeepCopy()
	relabelled.Labels = map[string]string{"fixed": "yes"}
	q.Update(a, relabelled)
	if p.info.pod != a {
		t.Fatal("the in-flight pod's object changed under the scheduling goroutine")
	}
	q.Requeue(p, cycle, false)
	if l := q.Lens(); l[inBackoff] != 1 || p.stuck || p.info.pod != relabelled {
		t.Fatalf("spec change during the attempt: lens %v, stuck %v, labels %v; want backoff with the new object", l, p.stuck, p.info.pod.Labels)
	}

	b := pod("b", 1, 0)
	q.Add(b)
	p, cycle = pop(t, q)
	status := b.DeepCopy()
	status.Status.NominatedNodeName = "node1"
	q.Update(b, status)
	q.Requeue(p, cycle, false)
	if l := q.Lens(); l[inUnschedulable] != 1 || p.info.pod != status {
		t.Fatalf("status change during the attempt: lens %v; want parked with the new object", l)
	}
}

func TestQueueGatedAndDeleted(t *testing.T) {
	q, _ := newTestQueue()
	g := pod("gated", 1, 0)
	g.Spec.SchedulingGates = []v1.PodSchedulingGate{{Name: "wait"}}
	q.Add(g)
	if l := q.Lens(); l[inGated] != 1 || l[inActive] != 0 {
		t.Fatalf("gated pod must wait: %v", l)
	}
	open := g.DeepCopy()
	open.Spec.SchedulingGates = nil
	q.Update(g, open)
	if l := q.Lens(); l[inActive] != 1 {
		t.Fatalf("ungated pod must be active: %v", l)
	}
	p, cycle := pop(t, q)
	q.Delete(p.info.pod.UID)
	q.Requeue(p, cycle, false)
	if l := q.Lens(); l[inUnschedulable]+l[inActive]+l[inBackoff] != 0 {
		t.Fatalf("a pod deleted during its attempt came back: %v", l)
	}
}

// A pod gated by PreEnqueue (its resource claims are not there yet) is
// parked without its attempt counting: the event that lets it in moves it
// to the active queue at once, and one during the check already has.
func TestQueueGate(t *testing.T) {
	q, _ := newTestQueue()
	q.Add(pod("a", 1, 0))
	p, cycle := pop(t, q)
	q.Gate(p, cycle)
	if l := q.Lens(); l[inGated] != 1 || l[inUnschedulable] != 0 || p.attempts != 0 {
		t.Fatalf("gated pod: queues %v, attempts %d", l, p.attempts)
	}
	q.MoveAll("ResourceClaimAdd", nil)
	if p.where != inActive {
		t.Fatalf("woken gated pod is %s, want active (no backoff)", p.where)
	}
	p, cycle = pop(t, q)
	q.MoveAll("PodGeneratedResourceClaim", nil) // while it is checked
	q.Gate(p, cycle)
	if p.where != inActive {
		t.Errorf("gated pod woken during its check is %s, want active", p.where)
	}
	// Its spec changed during the check: it is looked at again.
	p, cycle = pop(t, q)
	changed := p.info.pod.DeepCopy()
	changed.Labels = map[string]string{"new": "label"}
	q.Update(p.info.pod, changed)
	q.Gate(p, cycle)
	if p.where != inActive || p.info.pod.Labels["new"] != "label" {
		t.Errorf("gated pod changed during its check is %s with labels %v, want active with the change", p.where, p.info.pod.Labels)
	}
}
