package scheduler

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"testing"
)

func newTestScheduler() *Scheduler {
	q, _ := newTestQueue()
	return &Scheduler{cfg: DefaultConfig(), cache: newCache(), queue: q, preempting: map[types.UID]*inflightPreemption{}}
}

func TestNominationRestoredFromStatus(t *testing.T) {
	s := newTestScheduler()
	s.cache.setNode(node("node1", 1000, 10))
	p := pod("high", 100, 800)
	p.Status.NominatedNodeName = "node1"
	s.onPod(nil, p) // what a restarted scheduler's informer delivers first
	if got := s.cache.nominatedNode(p); got != "node1" {
		t.Fatalf("nomination %q, want node1", got)
	}
	if st := statusesOf(s.cache, pod("low", 10, 500))["node1"]; st.ok() {
		t.Error("the restored nomination does not reserve room")
	}
	// An older copy without the field does not undo an in-memory nomination
	// that preemption made; a change of the field does.
	s.cache.nominate(newPodInfo(p), "node2")
	same := p.DeepCopy()
	s.onPod(p, same)
	if got := s.cache.nominatedNode(p); got != "node2" {
		t.Errorf("an unrelated update replaced the nomination: %q", got)
	}
	cleared := p.DeepCopy()
	cleared.Status.NominatedNodeName = ""
	s.onPod(p, cleared)
	if got := s.cache.nominatedNode(p); got != "" {
		t.Errorf("cleared nomination still %q", got)
	}
}

func TestBoundPodLeavesQueueAndNomination(t *testing.T) {
	s := newTestScheduler()
	s.cache.setNode(node("node1", 1000, 10))
	p := pod("p", 100, 500)
	p.Status.NominatedNodeName = "node1"
	s.onPod(nil, p)
	bound := p.DeepCopy()
	bound.Spec.NodeName = "node1"
	s.onPod(p, bound)
	if l := s.queue.Lens(); l[inActive] != 0 {
		t.Errorf("bound pod still queued: %v", l)
	}
	if s.cache.nominatedNode(p) != "" || len(s.cache.nodes["node1"].pods) != 1 {
		t.Errorf("bound pod should be counted once and not nominated")
	}
}

func TestAssignedPodDeleteWakesOnlyWhoItHelps(t *testing.T) {
	s := newTestScheduler()
	s.cache.setNode(node("node1", 1000, 10))
	s.cache.setNode(node("node2", 1000, 10))
	park := func(name, nominated string, resourceBound bool) {
		s.queue.Add(pod(name, 100, 500))
		p, cycle := pop(t, s.queue)
		p.nominated, p.resourceBound = nominated, resourceBound
		s.queue.Requeue(p, cycle, false)
	}
	park("nominated-here", "node1", true)
	park("nominated-elsewhere", "node2", true)
	park("needs-room", "", true)
	park("affinity-only", "", false)
	s.onPodDelete(pod("gone", 1, 100, onNode("node1")))
	s.queue.mu.Lock()
	defer s.queue.mu.Unlock()
	for name, wantParked := range map[string]bool{"nominated-here": false, "nominated-elsewhere": true, "needs-room": false, "affinity-only": true} {
		_, parked := s.queue.parked[types.UID(name)]
		if parked != wantParked {
			t.Errorf("%s parked=%v, want %v", name, parked, wantParked)
		}
	}
	// The pod nominated to the freed node skips its backoff; the others serve it.
	if p := s.queue.pods["nominated-here"]; p.where != inActive {
		t.Errorf("nominated-here is %s, want active", p.where)
	}
	if p := s.queue.pods["needs-room"]; p.where != inBackoff {
		t.Errorf("needs-room is %s, want backoff", p.where)
	}
}

func TestPreemptorHeldUntilVictimsDeleted(t *testing.T) {
	s := newTestScheduler()
	s.cache.setNode(node("node1", 1000, 10))
	victim := pod("v", 1, 1000, onNode("node1"))
	s.cache.setPod(victim)
	p := pod("high", 100, 500)
	if s.holdWhilePreempting(p) {
		t.Fatal("held without a preemption in flight")
	}
	pr := &inflightPreemption{victims: []types.UID{victim.UID}, running: true}
	s.preempting[p.UID] = pr
	if !s.holdWhilePreempting(p) || !pr.held {
		t.Fatal("a preemptor whose victims are being deleted must be held and marked for wake-up")
	}
	pr.running = false
	if !s.holdWhilePreempting(p) {
		t.Fatal("the calls are done but the cache still sees the victim running: must still hold")
	}
	terminating := victim.DeepCopy()
	now := metav1.Now()
	terminating.DeletionTimestamp = &now
	s.cache.setPod(terminating)
	if s.holdWhilePreempting(p) {
		t.Fatal("victim terminating: the preemptor must be let through")
	}
}
