package outofservice

import (
	"context"
	"maps"
	"slices"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"

	"github.com/nodeshepherd/nodeshepherd/pkg/controllertest"
)

// A write whose answer is lost (kube.WriteTimeout ran out) may have landed:
// it is settled by a read of the node before anything else is decided about
// it, and counts against the budget meanwhile.

// loseUpdates makes the next n node updates of name fail with the client's
// deadline, after landing when apply is set.
func (f *fixture) loseUpdates(name string, n int, apply bool) {
	lostN := 0
	f.client.PrependReactor("update", "nodes", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if lostN >= n || a.(k8stesting.UpdateAction).GetObject().(*v1.Node).Name != name {
			return false, nil, nil
		}
		lostN++
		if apply {
			if _, _, err := k8stesting.ObjectReaction(f.client.Tracker())(a); err != nil {
				f.t.Fatalf("applying the update whose answer is lost: %v", err)
			}
		}
		return true, nil, context.DeadlineExceeded
	})
}

// TestLostTaintAnswerIsRecheckedNotRepeated: the taint's update lands, its
// answer is lost. The next sync (the informer has not seen the write) reads
// the node, finds the taint and reports it once: one event, one decision
// counted, no second update.
func TestLostTaintAnswerIsRecheckedNotRepeated(t *testing.T) {
	f := newFixture(t, testConfig(), false, node("n1", false, t0.Add(-time.Hour), "b1", confirmedFor("psu dead", "b1")))
	f.loseUpdates("n1", 1, true)
	if err := f.c.sync(context.Background(), "n1"); err == nil {
		t.Fatal("a taint without an answer reported success")
	}
	if ev := f.events(); hasEvent(ev, EventTaintAdded) {
		t.Fatalf("taint announced before any answer: %v", ev)
	}
	if got := value(f.c.metrics.decisions.WithLabelValues(actTaint, SourcePerson)); got != 0 {
		t.Fatalf("taint counted before any answer: %v", got)
	}
	for range 2 {
		f.sync("n1")
	}
	if w := controllertest.TakeWrites(f.client); !slices.Equal(w, []string{"update nodes n1"}) {
		t.Errorf("writes %v, want the one update whose answer was lost", w)
	}
	if !tainted(f.apiNode("n1")) {
		t.Error("node not tainted")
	}
	if ev := f.events(); len(ev) != 1 || !hasEvent(ev, EventTaintAdded) {
		t.Errorf("events %v, want one %s", ev, EventTaintAdded)
	}
	if got := value(f.c.metrics.decisions.WithLabelValues(actTaint, SourcePerson)); got != 1 {
		t.Errorf("decisions{taint,person} = %v, want 1", got)
	}
}

// TestLostTaintAnswerCountsAgainstBudget: with a budget of one node, the
// first node's taint gets no answer (it did not land). Until a read settles
// it, it counts: the second node is refused. The read finds no taint, so the
// first node is tainted again, and the second stays refused.
func TestLostTaintAnswerCountsAgainstBudget(t *testing.T) {
	old := t0.Add(-time.Hour)
	ann := confirmedFor("dead", "b")
	f := newFixture(t, testConfig(), false, node("a", false, old, "b", ann), node("b", false, old, "b", maps.Clone(ann)),
		node("c", true, old, "b", nil), node("d", true, old, "b", nil), node("e", true, old, "b", nil))
	f.loseUpdates("a", 1, false)
	if err := f.c.sync(context.Background(), "a"); err == nil {
		t.Fatal("a taint without an answer reported success")
	}
	f.sync("b")
	if w := controllertest.TakeWrites(f.client); !slices.Equal(w, []string{"update nodes a"}) {
		t.Fatalf("writes %v: the second node was tainted while the first one's taint may have landed", w)
	}
	if ev := f.events(); !hasEvent(ev, EventBlocked) {
		t.Errorf("events %v, want the budget's refusal of b", ev)
	}
	f.sync("a")
	f.sync("b")
	if w := controllertest.TakeWrites(f.client); !slices.Equal(w, []string{"update nodes a"}) {
		t.Errorf("writes %v, want a tainted again (its first update never landed) and b still refused", w)
	}
	if !tainted(f.apiNode("a")) || tainted(f.apiNode("b")) {
		t.Errorf("a tainted %v, b tainted %v; want only a", tainted(f.apiNode("a")), tainted(f.apiNode("b")))
	}
}
