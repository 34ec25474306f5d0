package remediation

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"

	nscloud "github.com/nodeshepherd/nodeshepherd/pkg/cloudprovider"
	"github.com/nodeshepherd/nodeshepherd/pkg/kube"
	rem "github.com/nodeshepherd/nodeshepherd/pkg/remediation"
)

// deadlineRepairer records the deadline of each request's context.
type deadlineRepairer struct {
	mu        sync.Mutex
	deadlines []time.Duration // from the call; -1: none
}

func (r *deadlineRepairer) record(ctx context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	d := time.Duration(-1)
	if dl, ok := ctx.Deadline(); ok {
		d = time.Until(dl)
	}
	r.deadlines = append(r.deadlines, d)
	return nil
}
func (r *deadlineRepairer) Reboot(ctx context.Context, _ *v1.Node, _ string, _ nscloud.Premise) error {
	return r.record(ctx)
}
func (r *deadlineRepairer) Replace(ctx context.Context, _ *v1.Node, _ string, _ nscloud.Premise) error {
	return r.record(ctx)
}
func (r *deadlineRepairer) PowerOff(ctx context.Context, _ *v1.Node, _ string, _ nscloud.Premise) error {
	return r.record(ctx)
}

// Issue 45 (4d): a repair request to the provider is bounded, so that a
// provider that never answers cannot hold the controller's one worker.
func TestProviderRequestBounded(t *testing.T) {
	r := &deadlineRepairer{}
	h := newHarness(t, r, rebootPolicy, deadlocked("n", "b1"))
	if err := h.c.sync(context.Background(), "n"); err != nil {
		t.Fatal(err)
	}
	if len(r.deadlines) != 1 || r.deadlines[0] <= 0 || r.deadlines[0] > providerTimeout {
		t.Fatalf("request deadlines %v, want one within %v", r.deadlines, providerTimeout)
	}
	if providerTimeout > kube.WriteTimeout {
		t.Errorf("providerTimeout %v above kube.WriteTimeout %v: a held call could make the controller look stuck", providerTimeout, kube.WriteTimeout)
	}
}

// Issue 45 (4d): a write into repair whose answer is lost may have landed:
// the node counts as in repair for maxInRepair until a read of it settles
// that, so a second node is not started meanwhile.
func TestLostWriteCountsAgainstTheBrake(t *testing.T) {
	policy := map[string]any{}
	for k, v := range rebootPolicy {
		policy[k] = v
	}
	policy["brakes"] = map[string]any{"maxInRepair": 1}
	h := newHarness(t, &fakeRepairer{}, policy, deadlocked("a", "a1"), deadlocked("b", "b1"))
	var mu sync.Mutex
	lose := true
	h.client.PrependReactor("patch", "nodes", func(a k8stesting.Action) (bool, runtime.Object, error) {
		mu.Lock()
		defer mu.Unlock()
		// The write into repair (its record), not the keep-off taint
		// before it, has its answer lost.
		if pa := a.(k8stesting.PatchAction); lose && pa.GetName() == "a" && strings.Contains(string(pa.GetPatch()), `"`+rem.AnnotationState+`"`) {
			return true, nil, context.DeadlineExceeded // no answer
		}
		return false, nil, nil
	})
	ctx := context.Background()
	if err := h.c.sync(ctx, "a"); err == nil {
		t.Fatal("a write without an answer taken for done")
	}
	if err := h.c.sync(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := rem.RequestOf(h.node(t, "b")); ok {
		t.Fatal("b started while a's start may have landed (maxInRepair 1)")
	}
	if v := h.c.verdicts["b"]; v.d.Verdict != rem.VerdictBlocked || !strings.Contains(v.d.Reason, "1 of 2 nodes of pool gpu in repair") {
		t.Fatalf("b's verdict %+v", v.d)
	}
	// The next look at a reads it (the write did not land) and starts it.
	mu.Lock()
	lose = false
	mu.Unlock()
	if err := h.c.sync(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if h.c.maybeInRepair("a") {
		t.Error("a still unsettled after a read and an answered write")
	}
	if _, ok, _ := rem.RequestOf(h.node(t, "a")); !ok {
		t.Fatal("a not started once its write got an answer")
	}
}
