package drain

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	clienttesting "k8s.io/client-go/testing"
)

// loseCordonAnswer makes the first cordon patch of a node time out: the
// patch lands first when land is set (the answer alone is lost), or not at
// all.
func loseCordonAnswer(h *handler, land bool) *atomic.Int32 {
	var lost atomic.Int32
	h.client.PrependReactor("patch", "nodes", func(a clienttesting.Action) (bool, runtime.Object, error) {
		p := a.(clienttesting.PatchAction)
		if a.GetSubresource() != "" || !strings.Contains(string(p.GetPatch()), `"unschedulable":true`) || lost.Load() > 0 {
			return false, nil, nil
		}
		lost.Add(1)
		if land {
			gvr := v1.SchemeGroupVersion.WithResource("nodes")
			obj, err := h.client.Tracker().Get(gvr, "", p.GetName())
			if err != nil {
				return true, nil, err
			}
			orig, _ := json.Marshal(obj)
			patched, err := strategicpatch.StrategicMergePatch(orig, p.GetPatch(), v1.Node{})
			if err != nil {
				return true, nil, err
			}
			var n v1.Node
			if err := json.Unmarshal(patched, &n); err != nil {
				return true, nil, err
			}
			if err := h.client.Tracker().Update(gvr, &n, ""); err != nil {
				return true, nil, err
			}
		}
		return true, nil, apierrors.NewTimeoutError("request timed out", 0)
	})
	return &lost
}

// A cordon whose answer is lost counts against --max-cordoned-nodes until
// a read of its node settles it, landed or not: the other node waits. Not
// landed, the node is cordoned anew; landed, it is reported once as
// cordoned (no CordonFailed, no second cordon).
func TestHandlerLostCordonCountsUntilSettled(t *testing.T) {
	for _, land := range []bool{false, true} {
		t.Run(map[bool]string{false: "not landed", true: "landed"}[land], func(t *testing.T) {
			cfg := handlerConfig()
			cfg.Budget.MaxCordonedNodes = "1"
			h := newHandler(t, cfg, drainNode("a", true), drainNode("b", true))
			lost := loseCordonAnswer(h, land)
			err := h.c.sync(context.Background(), "a")
			if !errors.Is(err, errAnswerLost) || lost.Load() != 1 {
				t.Fatalf("sync a = %v (lost %d), want the cordon's answer lost", err, lost.Load())
			}
			h.sync("b")
			if got := h.reasons(); !strings.Contains(strings.Join(got, ","), EventCordonWaiting) {
				t.Fatalf("b: events %q, want CordonWaiting: the lost cordon counts", h.events)
			}
			if h.node("b").Spec.Unschedulable {
				t.Fatal("b cordoned while a's cordon may have landed (--max-cordoned-nodes=1)")
			}
			if e := h.event(EventCordonFailed); e != "" {
				t.Errorf("a lost answer was reported as a failure: %q", e)
			}
			// The next look at a reads it afresh and settles the write.
			h.sync("a")
			if n := h.node("a"); !n.Spec.Unschedulable {
				t.Fatalf("a not cordoned after the settling read")
			}
			cordons := 0
			for _, w := range h.writes() {
				if strings.HasPrefix(w, "patch nodes ") && strings.Contains(w, " a") {
					cordons++
				}
			}
			if e := h.event(EventCordonSucceeded); e == "" {
				t.Errorf("no CordonSucceeded for a; events %q", h.events)
			}
			if got := counter(t, h.c.metrics.cordoned.WithLabelValues(resultSucceeded)); got != 1 {
				t.Errorf("cordons counted %v, want 1", got)
			}
			h.sync("b")
			if h.node("b").Spec.Unschedulable {
				t.Fatal("b cordoned next to a")
			}
		})
	}
}
