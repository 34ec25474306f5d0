package drain

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeshepherd/nodeshepherd/pkg/owner"
	"github.com/nodeshepherd/nodeshepherd/pkg/remediation"
)

// Drains asked by remediation policies: a node whose record
// (nodeshepherd.io/remediation) asks for a drain is cordoned and drained
// like a node a rule matches, without rules and whatever the rules' node
// selection, and uncordoned at once when the request goes.

const gpuRequest = "remediation policy gpu, step 2 (Drain)"

// requested gives the node the remediation record of policy gpu at its
// second step, a Drain step when drain is set.
func requested(drain bool) func(*v1.Node) {
	return func(n *v1.Node) {
		setAnnotation(n, remediation.AnnotationState, remediation.EncodeState("gpu", remediation.ActionDrain, remediation.State{
			Step: 1, StepSince: handlerNow.Add(-time.Minute), RepairSince: handlerNow.Add(-time.Hour), Drain: drain}))
	}
}

// heldForRequest is a node the drain controller cordoned for gpuRequest,
// its drain completed.
func heldForRequest(n *v1.Node) {
	cordon(n, holders{request: gpuRequest}, handlerNow.Add(-time.Hour), "until the remediation's repair ends")
	renewed(n)
	completed(n)
}

// heldForRule is a node the drain controller cordoned an hour ago for the
// KernelDeadlock rule.
func heldForRule(n *v1.Node) {
	cordon(n, holders{conditions: "KernelDeadlock=True,0s"}, handlerNow.Add(-time.Hour), "")
	renewed(n)
}

// renewed: the cordon's owner record was renewed a minute ago, as the
// controller renews it while it runs (TestHandlerRenewsCordonRecord), so
// no renewal is due in the test.
func renewed(n *v1.Node) { renewRecord(n, handlerNow.Add(-time.Minute)) }

func completed(n *v1.Node) {
	setDrainCondition(n, v1.ConditionFalse, finishedMessage(handlerNow.Add(-time.Hour), true, handlerNow.Add(-50*time.Minute), ""), handlerNow.Add(-50*time.Minute))
}

// noRules is the handlers' configuration without any drain rule, the
// budgets at their defaults, and a node selection the requests ignore.
func noRules() Config {
	cfg := handlerConfig()
	cfg.Conditions = nil
	cfg.NodeSelector = "pool=b"
	cfg.Budget.MaxCordonedNodes = DefaultConfig().Budget.MaxCordonedNodes
	cfg.UncordonAfter = time.Hour // never waited for by a request's end
	return cfg
}

// update changes the node in the API and waits until the controller's
// informer has it.
func (h *handler) update(name string, mut func(*v1.Node)) {
	h.t.Helper()
	n := h.node(name).DeepCopy()
	mut(n)
	n.ResourceVersion += "x" // the fake tracker keeps what it is given
	if _, err := h.client.CoreV1().Nodes().Update(context.Background(), n, metav1.UpdateOptions{}); err != nil {
		h.t.Fatal(err)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		if got, err := h.c.nodes.Get(name); err == nil && got.ResourceVersion == n.ResourceVersion {
			break
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("the informer did not see the update of %s", name)
		}
		time.Sleep(time.Millisecond)
	}
	h.client.ClearActions()
}

func TestConfigWithoutRulesIsValid(t *testing.T) {
	cfg := DefaultConfig()
	if cfg.Configured() {
		t.Fatal("the defaults configure no rule")
	}
	if err := cfg.Validate(); err != nil {
		t.Errorf("Validate without rules: %v", err)
	}
	if err := Descriptor.Validate(&cfg); err != nil {
		t.Errorf("the descriptor refuses no rules: %v", err)
	}
	if r, err := cfg.Compile(); err != nil || len(r.Conditions) != 0 {
		t.Errorf("Compile: %v, %d conditions", err, len(r.Conditions))
	}
}

// Without rules, a node a request asks to drain is cordoned (owner record
// naming the request) and drained within the budgets; the rules' node
// selection (pool=b) does not restrict it; a re-check says nothing again.
func TestRequestCordonsAndDrainsWithoutRules(t *testing.T) {
	h := newHandler(t, noRules(), drainNode("n", false, requested(true)), drainNode("other", false), podOn("n", "web"))

	h.sync("n") // cordon
	if got := h.writes(); !slices.Equal(got, []string{"patch nodes n"}) {
		t.Fatalf("first sync wrote %q, want the cordon patch", got)
	}
	n := h.node("n")
	if !n.Spec.Unschedulable || n.Annotations[AnnotationRequest] != gpuRequest || n.Annotations[AnnotationConditions] != "" {
		t.Fatalf("node not cordoned for the request: unschedulable=%v annotations=%v", n.Spec.Unschedulable, n.Annotations)
	}
	rec, ok := owner.Of(n, owner.Cordon)
	if !ok || rec.Controller != Name || rec.Why != gpuRequest || !strings.Contains(rec.Until, "until the remediation's repair ends") || !rec.Since.Equal(handlerNow) {
		t.Errorf("owner record %+v", rec)
	}
	if got := h.reasons(); !slices.Equal(got, []string{"Warning " + EventCordonStarting, "Warning " + EventCordonSucceeded}) {
		t.Errorf("events after the cordon: %q", h.events)
	}
	if e := h.event(EventCordonSucceeded); !strings.HasSuffix(e, "Cordoned node: "+gpuRequest) {
		t.Errorf("CordonSucceeded = %q, want it to name the request", e)
	}

	h.sync("n") // schedule and start the drain
	h.until("DrainSucceeded", func() bool { return h.event(EventDrainSucceeded) != "" })
	if got := h.evicted(); !slices.Equal(got, []string{"ns/web"}) {
		t.Errorf("evicted %q", got)
	}
	if e := h.event(EventDrainScheduled); !strings.HasSuffix(e, "for "+gpuRequest) {
		t.Errorf("DrainScheduled = %q, want it to name the request", e)
	}
	// Wait for the informer to see the drain's end (and the drain to be
	// gone), then check again: nothing more.
	h.until("drain recorded", func() bool {
		cur, err := h.c.nodes.Get("n")
		return err == nil && readState(cur).phase == phaseCompleted && h.c.Explain("n").State == "drained"
	})
	if d := h.c.Explain("n"); !strings.Contains(d.Reason, "drained for the remediation request: "+gpuRequest) {
		t.Errorf("Explain = %+v", d)
	}
	h.client.ClearActions()
	h.collect()
	before := len(h.events)
	h.sync("n")
	h.sync("other")
	if got := h.writes(); len(got) != 0 {
		t.Errorf("a re-check wrote %q", got)
	}
	if h.collect(); len(h.events) != before {
		t.Errorf("a re-check said more: %q", h.events[before:])
	}
	if got := h.node("other"); got.Spec.Unschedulable {
		t.Error("a node without a request was cordoned")
	}
}

// When the request goes (the record removed, or no longer asking for a
// drain), the cordon it holds is lifted at once, not after --uncordon-after,
// with the release's events naming why.
func TestRequestEndedUncordonsAtOnce(t *testing.T) {
	for _, tc := range []struct {
		name string
		end  func(*v1.Node)
		why  string
	}{
		{"record removed", func(n *v1.Node) { delete(n.Annotations, remediation.AnnotationState) },
			"Uncordoning node: the remediation's repair ended (" + gpuRequest + ")"},
		{"no longer asks for a drain", requested(false),
			"Uncordoning node: the remediation request (" + gpuRequest + ") no longer asks for a drain"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHandler(t, noRules(), drainNode("n", false, requested(true), heldForRequest))
			h.sync("n")
			if got := h.writes(); len(got) != 0 {
				t.Fatalf("a drained node whose request holds was written: %q", got)
			}
			old := h.node("n")
			h.update("n", tc.end)
			// The informer's update of the annotation queues the node.
			for h.c.queue.Len() > 0 {
				k, _ := h.c.queue.Get()
				h.c.queue.Done(k)
			}
			h.c.onNode(old, h.node("n"))
			if h.c.queue.Len() != 1 {
				t.Error("onNode did not queue the node whose request went")
			}
			h.sync("n")
			if got := h.writes(); !slices.Equal(got, []string{"patch nodes/status n", "patch nodes n"}) {
				t.Fatalf("writes %q, want the DrainScheduled removal and the uncordon", got)
			}
			n := h.node("n")
			_, hasRecord := owner.Of(n, owner.Cordon)
			if n.Spec.Unschedulable || hasRecord || n.Annotations[AnnotationRequest] != "" || n.Annotations[AnnotationConditions] != "" {
				t.Errorf("node still cordoned or owned: %v %v", n.Spec.Unschedulable, n.Annotations)
			}
			if got := h.reasons(); !slices.Equal(got, []string{"Warning " + EventUncordonStarting, "Warning " + EventUncordonSucceeded}) {
				t.Errorf("events %q", h.events)
			}
			if e := h.event(EventUncordonStarting); !strings.HasSuffix(e, tc.why) {
				t.Errorf("UncordonStarting = %q, want %q", e, tc.why)
			}
		})
	}
}

// A cordon is held for what wants it: a rule's cordon stays as it is when a
// request comes; when the rule lets go, the request keeps it; when the
// request goes, a rule matching then keeps it, else it is lifted at once.
func TestRequestAndRuleHandOver(t *testing.T) {
	cfg := handlerConfig()
	cfg.UncordonAfter = time.Minute
	h := newHandler(t, cfg, drainNode("n", true, heldForRule, completed))

	h.update("n", requested(true))
	h.sync("n")
	if got := h.writes(); len(got) != 0 {
		t.Fatalf("a request on a node drained for a rule wrote %q", got)
	}

	// The rule's condition cleared an hour ago: the request keeps the cordon.
	h.update("n", func(n *v1.Node) { n.Status.Conditions[1].Status = v1.ConditionFalse })
	h.sync("n")
	if got := h.writes(); !slices.Equal(got, []string{"patch nodes n"}) {
		t.Fatalf("writes %q, want the record handed to the request", got)
	}
	n := h.node("n")
	rec, _ := owner.Of(n, owner.Cordon)
	if !n.Spec.Unschedulable || n.Annotations[AnnotationRequest] != gpuRequest || n.Annotations[AnnotationConditions] != "" || rec.Why != gpuRequest {
		t.Fatalf("cordon not held for the request: %v %v", n.Spec.Unschedulable, n.Annotations)
	}
	if h.reasons(); len(h.events) != 0 {
		t.Errorf("events %q", h.events)
	}

	// The condition comes back, then the request goes: the rule keeps it.
	h.update("n", func(n *v1.Node) { n.Status.Conditions[1].Status = v1.ConditionTrue })
	h.sync("n")
	if got := h.writes(); len(got) != 0 {
		t.Fatalf("a rule matching a node held for a request wrote %q", got)
	}
	h.update("n", func(n *v1.Node) { delete(n.Annotations, remediation.AnnotationState) })
	h.sync("n")
	n = h.node("n")
	rec, _ = owner.Of(n, owner.Cordon)
	if !n.Spec.Unschedulable || n.Annotations[AnnotationRequest] != "" || n.Annotations[AnnotationConditions] != "KernelDeadlock=True,0s" || !strings.HasPrefix(rec.Why, "drain rules matched") {
		t.Fatalf("cordon not handed to the rule: %v %v", n.Spec.Unschedulable, n.Annotations)
	}
	if !rec.Since.Equal(handlerNow.Add(-time.Hour)) {
		t.Errorf("the cordon's since changed with its holder: %v", rec.Since)
	}
	if h.reasons(); len(h.events) != 0 {
		t.Errorf("events %q", h.events)
	}
}

// A node cordoned by someone else is left alone, said once, as for rules.
func TestRequestOnNodeCordonedByOther(t *testing.T) {
	h := newHandler(t, noRules(), drainNode("n", false, requested(true), func(n *v1.Node) { n.Spec.Unschedulable = true }), podOn("n", "web"))
	h.sync("n")
	h.sync("n")
	if got := h.writes(); len(got) != 0 {
		t.Errorf("wrote %q", got)
	}
	if got := h.reasons(); !slices.Equal(got, []string{"Normal " + EventDrainSkipped}) {
		t.Fatalf("events %q", h.events)
	}
	if want := "Cordoned by someone else; not drained although " + gpuRequest + " asks for it"; !strings.HasSuffix(h.events[0], want) {
		t.Errorf("DrainSkipped = %q, want %q", h.events[0], want)
	}
	if d := h.c.Explain("n"); d.State != "skipped" {
		t.Errorf("Explain = %+v", d)
	}
}

// A record that cannot be read asks nothing and changes nothing: no cordon
// starts for it, and a cordon held for a request is not lifted on its basis.
func TestRequestMalformedChangesNothing(t *testing.T) {
	malformed := func(n *v1.Node) {
		setAnnotation(n, remediation.AnnotationState, `{"policy":"gpu","step":1,"drain":true}`)
	}
	for _, tc := range []struct {
		name string
		n    *v1.Node
	}{
		{"not cordoned", drainNode("n", false, malformed)},
		{"cordoned for a request", drainNode("n", false, malformed, heldForRequest)},
		{"cordoned for a request, not yet drained", drainNode("n", false, malformed, func(n *v1.Node) {
			n.Spec.Unschedulable = true
			cordon(n, holders{request: gpuRequest}, handlerNow.Add(-time.Hour), "")
			renewed(n)
		})},
		{"cordoned for a rule that let go", drainNode("n", false, malformed, heldForRule, completed)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHandler(t, noRules(), tc.n, podOn("n", "web"))
			h.sync("n")
			h.sync("n")
			if got := h.writes(); len(got) != 0 {
				t.Errorf("wrote %q", got)
			}
			if got := h.reasons(); len(got) != 0 {
				t.Errorf("events %q", h.events)
			}
			if h.c.mu.Lock(); len(h.c.unreadable) != 1 {
				t.Errorf("unreadable %v", h.c.unreadable)
			}
			h.c.mu.Unlock()
		})
	}
}
