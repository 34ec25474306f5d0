package outofservice

import (
	"context"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"

	"github.com/nodeshepherd/nodeshepherd/pkg/controllertest"
)

// Issue 45 (4f): a taint that the previous leader's write put on a node
// after this process's informer listed counts against the budget. The
// first taint waits Config.TakeoverWait after the start; then the budget is
// counted on a fresh list, in which the other node is tainted.
func TestTakeoverCountsTheBudgetAfresh(t *testing.T) {
	old := t0.Add(-time.Hour)
	f := newFixture(t, testConfig(), false, node("a", false, old, "a1", confirmedFor("dead", "a1")),
		node("b", false, old, "b1", confirmedFor("dead", "b1")))
	f.c.fenceUntil = t0.Add(f.c.cfg.TakeoverWait) // as Run sets it
	// The previous leader's taint of b lands: in the API, not yet in the
	// informer.
	b := f.apiNode("b")
	b.Spec.Taints = append(b.Spec.Taints, Taint)
	b.Annotations[AnnotationBootID] = "b1"
	if _, err := f.client.CoreV1().Nodes().Update(context.Background(), b, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	f.client.ClearActions()

	f.sync("a")
	if w := controllertest.TakeWrites(f.client); len(w) != 0 {
		t.Fatalf("writes %v before the takeover wait is over", w)
	}
	if ev := f.events(); len(ev) != 1 || !hasEvent(ev, EventPending) || !strings.Contains(ev[0], "no sooner than 2026-11-24T10:00:15Z") {
		t.Fatalf("events %v, want one saying until when the first taint waits", ev)
	}
	f.clock.Step(f.c.cfg.TakeoverWait)
	f.sync("a")
	if tainted(f.apiNode("a")) {
		t.Fatal("tainted beyond the budget: the previous leader's taint of b was not counted")
	}
	ev := f.events()
	if len(ev) != 1 || !strings.HasPrefix(ev[0], "Warning "+EventBlocked) || !strings.Contains(ev[0], "1 nodes are out of service, the budget is 1") {
		t.Fatalf("events %v, want the budget's refusal", ev)
	}
	// Once b's taint goes, a is tainted.
	b = f.apiNode("b")
	b.Spec.Taints = nil
	if _, err := f.client.CoreV1().Nodes().Update(context.Background(), b, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	f.sync("a")
	if !tainted(f.apiNode("a")) {
		t.Fatal("not tainted once the budget has room")
	}
}

// A failed list decides nothing: no taint, the sync fails (retried).
func TestTakeoverListFailureTaintsNothing(t *testing.T) {
	old := t0.Add(-time.Hour)
	f := newFixture(t, testConfig(), false, node("a", false, old, "a1", confirmedFor("dead", "a1")))
	f.client.PrependReactor("list", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, context.DeadlineExceeded
	})
	if err := f.c.sync(context.Background(), "a"); err == nil || !strings.Contains(err.Error(), "out-of-service budget") {
		t.Fatalf("sync: %v, want the list's failure", err)
	}
	if tainted(f.apiNode("a")) {
		t.Fatal("tainted without a count of the budget")
	}
}
