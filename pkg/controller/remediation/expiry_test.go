package remediation

import (
	"context"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/nodeshepherd/nodeshepherd/pkg/owner"
	rem "github.com/nodeshepherd/nodeshepherd/pkg/remediation"
)

// expiries are the expiries of the node's taint record and repair record.
func expiries(t *testing.T, n *v1.Node, taint v1.Taint) (taintExp, repairExp time.Time) {
	t.Helper()
	r, ok := owner.Of(n, owner.TaintKey(taint))
	exp, present, err := rem.RecordExpiry(n)
	if !ok || r.Controller != Name || r.Expires == nil || !present || err != nil || exp == nil {
		t.Fatalf("taint record %+v (%v), repair record expiry %v (%v, %v)", r, ok, exp, present, err)
	}
	return *r.Expires, *exp
}

// While the controller runs, the records of a repair never expire: each
// write of the repair gives them an owner.Lease, and with less than half
// of it left a look at the node renews both in one patch, nothing else
// changed; with more than half left nothing is written.
func TestRepairRecordsRenewed(t *testing.T) {
	taint := v1.Taint{Key: "nodeshepherd.io/degraded", Effect: v1.TaintEffectNoSchedule}
	h := newHarness(t, nil, map[string]any{
		"unhealthy":   []any{map[string]any{"type": "KernelDeadlock", "status": "True", "for": "1m"}},
		"healthyHold": "2m",
		"steps":       []any{map[string]any{"action": "Taint", "timeout": "24h", "taint": map[string]any{"key": taint.Key, "effect": "NoSchedule"}}},
	}, deadlocked("n", "boot-1"))
	ctx := context.Background()
	if err := h.c.sync(ctx, "n"); err != nil {
		t.Fatal(err)
	}
	started := h.node(t, "n")
	if te, re := expiries(t, started, taint); !te.Equal(owner.ExpiresAt(t0)) || !re.Equal(owner.ExpiresAt(t0)) {
		t.Errorf("at the start: taint record expires %v, repair record %v, want %v", te, re, owner.ExpiresAt(t0))
	}
	look := func(after time.Duration) (patches int, n *v1.Node) {
		t.Helper()
		h.clk.SetTime(t0.Add(after))
		cached, _ := h.c.nodes.Get("n")
		want := h.node(t, "n")
		if !cache.WaitForCacheSync(t.Context().Done(), func() bool {
			m, err := h.c.nodes.Get("n")
			return err == nil && m.Annotations[owner.Annotation] == want.Annotations[owner.Annotation] && m.Annotations[rem.AnnotationState] == want.Annotations[rem.AnnotationState]
		}) {
			t.Fatalf("informer: %v", cached.Annotations)
		}
		h.client.ClearActions()
		if err := h.c.sync(ctx, "n"); err != nil {
			t.Fatal(err)
		}
		for _, a := range h.client.Actions() {
			if a.GetVerb() == "patch" || a.GetVerb() == "update" {
				patches++
			}
		}
		return patches, h.node(t, "n")
	}
	if p, _ := look(owner.Lease/2 - time.Minute); p != 0 {
		t.Errorf("%d writes with more than half of the lease left", p)
	}
	p, n := look(owner.Lease/2 + time.Minute)
	if p != 1 {
		t.Errorf("%d writes to renew, want 1", p)
	}
	want := owner.ExpiresAt(t0.Add(owner.Lease/2 + time.Minute))
	if te, re := expiries(t, n, taint); !te.Equal(want) || !re.Equal(want) {
		t.Errorf("renewed: taint record expires %v, repair record %v, want %v", te, re, want)
	}
	before, _, _ := rem.RequestOf(started)
	after, _, _ := rem.RequestOf(n)
	if before != after || len(n.Spec.Taints) != 1 {
		t.Errorf("the renewal changed the repair: %+v -> %+v, taints %v", before, after, n.Spec.Taints)
	}
	r0, _ := owner.Of(started, owner.TaintKey(taint))
	r1, _ := owner.Of(n, owner.TaintKey(taint))
	if r0.Why != r1.Why || !r0.Since.Equal(r1.Since) {
		t.Errorf("the renewal changed the record: %+v -> %+v", r0, r1)
	}
	// Another controller's records are not this one's to renew.
	other := n.DeepCopy()
	exp := t0.Add(time.Minute)
	owner.Set(other, "cordon", owner.Record{Controller: "drain", Expires: &exp})
	if renewRecords(other, t0.Add(owner.Lease), func(r owner.Record) bool { return r.RenewDue(t0.Add(owner.Lease)) }); !mustOf(t, other, "cordon").Expires.Equal(exp) {
		t.Error("the drain's record was renewed by remediation")
	}
}

func mustOf(t *testing.T, n *v1.Node, key string) owner.Record {
	t.Helper()
	r, ok := owner.Of(n, key)
	if !ok {
		t.Fatalf("no record %s", key)
	}
	return r
}
