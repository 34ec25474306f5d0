package drain

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	"k8s.io/client-go/kubernetes/fake"
	policyv1client "k8s.io/client-go/kubernetes/typed/policy/v1"
	clienttesting "k8s.io/client-go/testing"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/nodeshepherd/nodeshepherd/pkg/kube"
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

// A drain whose eviction never returns is cut at its deadline (the fake
// clock's), not at the call's own bound (kube.WriteTimeout, real time), and
// fails as at its timeout: DrainFailed naming the pod, the result on the
// node, the failure counted, and its budget slot given back.
func TestHandlerDrainCutAtItsDeadline(t *testing.T) {
	cfg := handlerConfig()
	cfg.DrainTimeout = time.Minute
	h := newHandler(t, cfg, drainNode("n", true, ours), podOn("n", "web"))
	sent := make(chan struct{})
	var once atomic.Bool
	// Every eviction hangs until its context ends, as against an API server
	// that never answers.
	h.c.client = hangingEvictions{Clientset: h.client, hang: func(ctx context.Context) error {
		if !once.Swap(true) {
			close(sent)
		}
		<-ctx.Done()
		return ctx.Err()
	}}
	h.sync("n") // schedules the drain, which sends the eviction
	select {
	case <-sent:
	case <-time.After(time.Minute):
		t.Fatal("no eviction sent")
	}
	// The drain's deadline and its slack pass while the eviction hangs.
	stepped := time.Now()
	h.clk.Step(cfg.DrainTimeout + deadlineSlack + time.Second)
	waitFor(t, "DrainFailed", func() bool { return h.event(EventDrainFailed) != "" })
	if took := time.Since(stepped); took >= kube.WriteTimeout {
		t.Errorf("the drain ended %v after its deadline passed: at its call's own bound, not at its deadline", took)
	}
	if e := h.event(EventDrainFailed); !strings.Contains(e, "--drain-timeout=1m0s") || !strings.Contains(e, "ns/web") {
		t.Errorf("DrainFailed = %q, want the timeout and the pod named", e)
	}
	waitFor(t, "the budget slot given back", func() bool {
		h.c.mu.Lock()
		defer h.c.mu.Unlock()
		return len(h.c.running) == 0
	})
	if st := readState(h.node("n")); st.phase != phaseFailed {
		t.Errorf("node's drain phase %v, want failed", st.phase)
	}
	if got := counter(t, h.c.metrics.drained.WithLabelValues(resultFailed)); got != 1 {
		t.Errorf("draino_drained_nodes_total{failed} = %v, want 1", got)
	}
}

// hangingEvictions is the fake clientset with Evict replaced by hang, which
// sees the call's context (the fake's reactors do not).
type hangingEvictions struct {
	*fake.Clientset
	hang func(context.Context) error
}

func (c hangingEvictions) PolicyV1() policyv1client.PolicyV1Interface {
	return hangingPolicy{PolicyV1Interface: c.Clientset.PolicyV1(), hang: c.hang}
}

type hangingPolicy struct {
	policyv1client.PolicyV1Interface
	hang func(context.Context) error
}

func (p hangingPolicy) Evictions(ns string) policyv1client.EvictionInterface {
	return hangingEviction{EvictionInterface: p.PolicyV1Interface.Evictions(ns), hang: p.hang}
}

type hangingEviction struct {
	policyv1client.EvictionInterface
	hang func(context.Context) error
}

func (e hangingEviction) Evict(ctx context.Context, _ *policyv1.Eviction) error { return e.hang(ctx) }

// The watchdog fires at its time on the controller's clock, later when
// extended first, never after stop.
func TestWatchdog(t *testing.T) {
	clk := testingclock.NewFakeClock(handlerNow)
	var fired atomic.Int32
	w := newWatchdog(clk, handlerNow.Add(time.Minute), func() { fired.Add(1) })
	w.extend(handlerNow.Add(2 * time.Minute))
	w.extend(handlerNow.Add(30 * time.Second)) // earlier: ignored
	clk.Step(90 * time.Second)
	time.Sleep(10 * time.Millisecond)
	if fired.Load() != 0 {
		t.Fatal("fired before its extended time")
	}
	clk.Step(time.Minute)
	waitFor(t, "the watchdog fired", func() bool { return fired.Load() == 1 })
	if w.set(handlerNow.Add(time.Hour)) {
		t.Error("a fired watchdog was armed again")
	}
	w.stop()
	s := newWatchdog(clk, clk.Now().Add(time.Second), func() { fired.Add(1) })
	s.stop()
	clk.Step(time.Minute)
	time.Sleep(10 * time.Millisecond)
	if fired.Load() != 1 {
		t.Error("a stopped watchdog fired")
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// After its start, the controller cordons nothing for --drain-start-hold
// (CordonWaiting naming it, once), then lists every node from the API
// server before it decides; a resumed drain does not wait.
func TestHandlerStartHold(t *testing.T) {
	cfg := handlerConfig()
	h := newHandler(t, cfg, drainNode("a", true), drainNode("d", true, draining))
	h.c.mu.Lock()
	h.c.holdUntil = h.clk.Now().Add(DefaultStartHold) // as Run sets it
	h.c.mu.Unlock()
	h.sync("a")
	h.sync("a")
	if got := h.writes(); len(got) != 0 {
		t.Fatalf("wrote %q during the start hold", got)
	}
	if got := h.reasons(); !slices.Equal(got, []string{"Normal " + EventCordonWaiting}) || !strings.Contains(h.events[0], "--drain-start-hold=15s") {
		t.Fatalf("events %q, want one CordonWaiting naming --drain-start-hold", h.events)
	}
	h.sync("d") // resumed: its drain runs during the hold
	h.until("d drained", func() bool { return h.event(EventDrainSucceeded) != "" })
	h.client.ClearActions()
	h.clk.Step(DefaultStartHold)
	h.sync("a") // the hold is over: every node is listed first
	lists := 0
	for _, a := range h.client.Actions() {
		if a.GetVerb() == "list" && a.GetResource().Resource == "nodes" {
			lists++
		}
	}
	if lists != 1 || h.node("a").Spec.Unschedulable {
		t.Fatalf("%d LISTs of the nodes after the hold, cordoned %v; want one LIST, then a decision on it", lists, h.node("a").Spec.Unschedulable)
	}
	h.sync("a")
	if !h.node("a").Spec.Unschedulable {
		t.Fatal("a not cordoned after the hold")
	}
}
