package owner

import (
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestSetRemoveRoundTrip(t *testing.T) {
	n := &v1.Node{}
	since := time.Date(2026, 11, 28, 10, 0, 0, 123, time.UTC)
	taint := v1.Taint{Key: v1.TaintNodeUnreachable, Effect: v1.TaintEffectNoExecute}
	Set(n, TaintKey(taint), Record{Controller: "nodelifecycle", Why: "no heartbeat", Since: since, Until: "Ready again"})
	Set(n, Cordon, Record{Controller: "drain", Why: "KernelDeadlock=True", Since: since})
	if got := n.Annotations[Annotation]; !strings.Contains(got, `"node.kubernetes.io/unreachable:NoExecute"`) || !strings.Contains(got, `"cordon"`) {
		t.Fatalf("annotation %s", got)
	}
	r, ok := Of(n, TaintKey(taint))
	if !ok || r.Controller != "nodelifecycle" || !r.Since.Equal(since) {
		t.Errorf("record %+v, %v", r, ok)
	}
	Remove(n, TaintKey(taint))
	if _, ok := Of(n, TaintKey(taint)); ok {
		t.Error("record left after Remove")
	}
	Remove(n, Cordon)
	if _, ok := n.Annotations[Annotation]; ok {
		t.Errorf("empty records leave the annotation: %q", n.Annotations[Annotation])
	}
	Remove(n, Cordon) // none: nothing to do
}

func TestMalformedIsAnErrorAndReplaced(t *testing.T) {
	for _, s := range []string{`{`, `[]`, `{"cordon":{"why":"x"}}`, `{"":{"controller":"drain"}}`} {
		n := &v1.Node{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{Annotation: s}}}
		if _, err := Read(n); err == nil || !strings.Contains(err.Error(), Annotation) {
			t.Errorf("%s: error %v, want one naming the annotation", s, err)
		}
		Set(n, Cordon, Record{Controller: "drain"})
		if recs, err := Read(n); err != nil || len(recs) != 1 {
			t.Errorf("%s: after Set: %v, %v", s, recs, err)
		}
	}
}

func FuzzParse(f *testing.F) {
	f.Add(`{"cordon":{"controller":"drain","why":"x","since":"2026-11-28T10:00:00Z","until":"y"}}`)
	f.Add(`{"a:NoSchedule":{"controller":"c","since":"bad"}}`)
	f.Add(`null`)
	f.Fuzz(func(t *testing.T, s string) {
		n := &v1.Node{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{Annotation: s}}}
		Set(n, "fuzz", Record{Controller: "c"})
		if r, ok := Of(n, "fuzz"); !ok || r.Controller != "c" {
			t.Fatalf("Set on %q: %+v, %v", s, r, ok)
		}
		recs, err := Parse(s)
		if err != nil {
			if len(recs) != 0 {
				t.Fatalf("records %v with error %v", recs, err)
			}
			return
		}
		again, err := Parse(Encode(recs))
		if err != nil || len(again) != len(recs) {
			t.Fatalf("re-encoded %v: %v, %v", recs, again, err)
		}
	})
}

// An expiry is an owner.Lease after the write, rounded up to the second:
// never sooner than Lease, and written at the annotation's precision.
func TestExpiresAtRoundsUp(t *testing.T) {
	at := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	if got, want := ExpiresAt(at), at.Add(Lease); !got.Equal(want) {
		t.Errorf("on a whole second: %v, want %v", got, want)
	}
	for _, ns := range []int{1, 500_000_000, 999_999_999} {
		now := at.Add(time.Duration(ns))
		got := ExpiresAt(now)
		if want := at.Add(Lease + time.Second); !got.Equal(want) {
			t.Errorf("%v: %v, want %v", now, got, want)
		}
		if got.Sub(now) < Lease || got.Nanosecond() != 0 || got.Location() != time.UTC {
			t.Errorf("%v: %v is sooner than the lease, or not a whole UTC second", now, got)
		}
	}
	// Through the annotation and back, to the same instant.
	n := &v1.Node{}
	Set(n, Cordon, Record{Controller: "drain"}.Renewed(at.Add(time.Nanosecond)))
	if r, _ := Of(n, Cordon); r.Expires == nil || !r.Expires.Equal(at.Add(Lease+time.Second)) {
		t.Errorf("read back %+v", r.Expires)
	}
}

// A record expires at its expiry, not a nanosecond before; one without an
// expiry never does. Its owner renews it once less than half of the lease
// is left, and at once when it has none.
func TestExpiredAndRenewDue(t *testing.T) {
	exp := time.Date(2026, 12, 3, 11, 0, 0, 0, time.UTC)
	r := Record{Controller: "drain", Expires: &exp}
	for _, c := range []struct {
		now            time.Time
		expired, renew bool
	}{
		{exp.Add(-Lease), false, false},
		{exp.Add(-Lease/2 - time.Nanosecond), false, false}, // half left, and a little more
		{exp.Add(-Lease / 2), false, true},
		{exp.Add(-time.Nanosecond), false, true},
		{exp, true, true},
		{exp.Add(24 * time.Hour), true, true},
	} {
		if got := r.Expired(c.now); got != c.expired {
			t.Errorf("at %v: expired %v, want %v", c.now, got, c.expired)
		}
		if got := r.RenewDue(c.now); got != c.renew {
			t.Errorf("at %v: renew %v, want %v", c.now, got, c.renew)
		}
	}
	if got := r.RenewAt(); !got.Equal(exp.Add(-30 * time.Minute)) {
		t.Errorf("RenewAt %v", got)
	}
	none := Record{Controller: "outofservice"}
	if none.Expired(exp.Add(1000*time.Hour)) || !none.RenewDue(exp) || !none.RenewAt().IsZero() {
		t.Errorf("a record without an expiry: expired %v, renew due %v, at %v", none.Expired(exp), none.RenewDue(exp), none.RenewAt())
	}
	renewed := r.Renewed(exp.Add(-time.Minute))
	if renewed.Expires.Equal(exp) || r.Expires != &exp || !renewed.Expires.Equal(exp.Add(Lease-time.Minute)) {
		t.Errorf("Renewed: %v (the original must keep %v)", renewed.Expires, r.Expires)
	}
}

// Lift takes off the cordon or the one taint its record owns, and the
// record; other taints (a person's with the same key and another effect
// too) and records stay.
func TestLift(t *testing.T) {
	mine := v1.Taint{Key: "example.com/repair", Effect: v1.TaintEffectNoSchedule}
	person := v1.Taint{Key: "example.com/repair", Effect: v1.TaintEffectPreferNoSchedule}
	other := v1.Taint{Key: "example.com/maintenance", Effect: v1.TaintEffectNoSchedule}
	n := &v1.Node{Spec: v1.NodeSpec{Unschedulable: true, Taints: []v1.Taint{other, mine, person}}}
	Set(n, Cordon, Record{Controller: "drain"})
	Set(n, TaintKey(mine), Record{Controller: "remediation"})
	Lift(n, TaintKey(mine))
	if len(n.Spec.Taints) != 2 || n.Spec.Taints[0] != other || n.Spec.Taints[1] != person || !n.Spec.Unschedulable {
		t.Errorf("after lifting the taint: unschedulable %v, taints %v", n.Spec.Unschedulable, n.Spec.Taints)
	}
	if _, ok := Of(n, TaintKey(mine)); ok {
		t.Error("the taint's record stays")
	}
	Lift(n, Cordon)
	if n.Spec.Unschedulable || len(n.Spec.Taints) != 2 {
		t.Errorf("after lifting the cordon: unschedulable %v, taints %v", n.Spec.Unschedulable, n.Spec.Taints)
	}
	if _, ok := n.Annotations[Annotation]; ok {
		t.Errorf("records left: %s", n.Annotations[Annotation])
	}
}
