package drain

import (
	"slices"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/nodeshepherd/nodeshepherd/pkg/owner"
)

// recorded is a node of ours cordoned with its owner record (as every
// cordon since owner records carries one), expiring at exp.
func recorded(exp time.Time) func(*v1.Node) {
	return func(n *v1.Node) {
		ours(n)
		setAnnotation(n, AnnotationCordonedAt, formatTime(handlerNow.Add(-2*time.Hour)))
		owner.Set(n, owner.Cordon, owner.Record{Controller: Name, Why: "drain rules matched: KernelDeadlock=True,0s", Since: handlerNow.Add(-2 * time.Hour), Expires: &exp})
	}
}

// While the controller runs, its cordon's record never expires: with less
// than half of owner.Lease left, or already expired (the controller was
// away), it is renewed to a lease from now in a write of its own, and the
// cordon stays; with more than half left nothing is written.
func TestHandlerRenewsCordonRecord(t *testing.T) {
	for _, c := range []struct {
		name  string
		left  time.Duration
		renew bool
	}{
		{"more than half left", owner.Lease/2 + time.Minute, false},
		{"less than half left", owner.Lease/2 - time.Minute, true},
		{"expired", -time.Minute, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			exp := handlerNow.Add(c.left)
			h := newHandler(t, handlerConfig(), drainNode("n", true, recorded(exp), func(n *v1.Node) {
				setDrainCondition(n, v1.ConditionFalse, finishedMessage(handlerNow.Add(-time.Hour), true, handlerNow.Add(-time.Hour), ""), handlerNow.Add(-time.Hour))
			}))
			h.sync("n")
			n := h.node("n")
			rec, ok := owner.Of(n, owner.Cordon)
			if !ok || !n.Spec.Unschedulable || !drainOwned(n) {
				t.Fatalf("cordon %v, record %v: want both kept", n.Spec.Unschedulable, ok)
			}
			want := exp
			if c.renew {
				want = owner.ExpiresAt(handlerNow)
			}
			if rec.Expires == nil || !rec.Expires.Equal(want) {
				t.Errorf("expires %v, want %v", rec.Expires, want)
			}
			if !rec.Since.Equal(handlerNow.Add(-2*time.Hour)) || rec.Why == "" {
				t.Errorf("the renewal changed the record: %+v", rec)
			}
			if got := h.writes(); c.renew != slices.Equal(got, []string{"patch nodes n"}) || !c.renew && len(got) > 0 {
				t.Errorf("writes %q", got)
			}
			if r := h.reasons(); len(r) > 0 {
				t.Errorf("events %q", r)
			}
		})
	}
}

func drainOwned(n *v1.Node) bool { _, ok := n.Annotations[AnnotationConditions]; return ok }

// A cordon the drain's annotations call its own, but without the drain's
// owner record, went with its expired record (lifted while no drain
// controller ran) and is someone else's since: the node is forgotten, its
// cordon left, matching rule or not.
func TestHandlerForgetsCordonWhoseRecordWasLifted(t *testing.T) {
	for _, sick := range []bool{false, true} {
		lifted := func(n *v1.Node) {
			recorded(handlerNow.Add(-time.Hour))(n)
			owner.Remove(n, owner.Cordon) // the janitor's lift...
			n.Spec.Unschedulable = true   // ...and a person's cordon since
		}
		h := newHandler(t, handlerConfig(), drainNode("n", sick, lifted))
		h.sync("n")
		n := h.node("n")
		if !n.Spec.Unschedulable || drainOwned(n) {
			t.Errorf("sick %v: unschedulable %v, drain annotations %v: want the person's cordon, and the node forgotten", sick, n.Spec.Unschedulable, n.Annotations)
		}
		h.sync("n")
		if n := h.node("n"); !n.Spec.Unschedulable || drainOwned(n) {
			t.Errorf("sick %v: the second look took the cordon: %v", sick, n.Annotations)
		}
		for _, r := range h.reasons() {
			if r == "Warning "+EventUncordonStarting || r == "Warning "+EventCordonStarting {
				t.Errorf("sick %v: event %s", sick, r)
			}
		}
	}
	// A cordon from before owner records (no drain-cordoned-at) is still
	// the drain's: lifted when its rule no longer matches.
	h := newHandler(t, handlerConfig(), drainNode("old", false, ours))
	h.sync("old")
	if n := h.node("old"); n.Spec.Unschedulable {
		t.Error("a cordon from before owner records was not lifted by the drain")
	}
}
