package outofservice

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	"github.com/nodeshepherd/nodeshepherd/pkg/controllertest"
	"github.com/nodeshepherd/nodeshepherd/pkg/remediation"
)

// fenceRecord is policy gpu's record at its step 4, a Fence taken for boot
// fenceBoot ("" : a step before any Fence).
func fenceRecord(fenceBoot string) map[string]string {
	st := remediation.State{Step: 3, StepSince: t0.Add(-10 * time.Minute), RepairSince: t0.Add(-time.Hour), BootID: "b1", FenceBootID: fenceBoot}
	action := remediation.ActionFence
	if fenceBoot == "" {
		action = remediation.ActionReboot
	}
	return map[string]string{remediation.AnnotationState: remediation.EncodeState("gpu", action, st)}
}

// testFencer is a fencing endpoint answering from a table: "off", "error";
// else running.
type testFencer struct {
	mu       sync.Mutex
	machines map[string]string
}

func (f *testFencer) PoweredOff(_ context.Context, n *v1.Node) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch f.machines[n.Name] {
	case "error":
		return false, fmt.Errorf("injected fencing error")
	case "off":
		return true, nil
	}
	return false, nil
}

func (f *testFencer) set(node, state string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.machines[node] = state
}

// withFencer gives the fixture's controller a fencing endpoint.
func withFencer(f *fixture, machines map[string]string) *testFencer {
	tf := &testFencer{machines: machines}
	f.c.fencer = tf
	f.c.cfg.Fencing.URL = "https://fence.test"
	return tf
}

// logLines records the log lines of verbosity 2 and below.
type logLines struct {
	mu    sync.Mutex
	lines []string
}

func (l *logLines) ctx() context.Context {
	return klog.NewContext(context.Background(), funcr.New(func(prefix, args string) {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.lines = append(l.lines, args)
	}, funcr.Options{Verbosity: 2}))
}

func (l *logLines) all() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.lines)
}

// A remediation policy's Fence is a confirmation of the boot it was taken
// for only, and only while the fencing endpoint (or the provider) answers
// the machine off: "running" vetoes it (issue 46), no answer leaves it
// uncounted; a record without a Fence, or a malformed one, confirms
// nothing, and why a record is ignored is logged once per change.
func TestRemediationConfirmationInput(t *testing.T) {
	const fencing = `fencing-webhook (https://fence.test answers that the machine of n1 is powered off)`
	for _, tc := range []struct {
		name        string
		annotations map[string]string
		machine     string // the fencing endpoint's answer
		want        string // the confirmations' wording; "" none
		vetoed      bool
		logged      string // logged once; "" nothing
	}{
		{"no record", nil, "off", fencing, false, ""},
		{"Fence for the current boot, machine off", fenceRecord("b1"), "off", fencing + `, remediation-policy (remediation policy gpu, step 4 (Fence), for boot ID "b1")`, false, ""},
		{"Fence for the current boot, machine running", fenceRecord("b1"), "running", "", true, ""},
		{"Fence for the current boot, no answer", fenceRecord("b1"), "error", "", false, "no answer of the cloud provider or the fencing endpoint confirms the machine off"},
		{"Fence for another boot", fenceRecord("b0"), "running", "", false, `taken for boot ID \"b0\", the node now reports boot ID \"b1\"`},
		{"a step before any Fence", fenceRecord(""), "running", "", false, ""},
		{"malformed", map[string]string{remediation.AnnotationState: `{"policy":"gpu","step":3,"fenceBootID":"b1"}`}, "running", "", false, "malformed"},
		{"not JSON", map[string]string{remediation.AnnotationState: `fence please`}, "running", "", false, "malformed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, testConfig(), false, node("n1", false, t0.Add(-time.Hour), "b1", tc.annotations))
			withFencer(f, map[string]string{"n1": tc.machine})
			var logs logLines
			ctx := logs.ctx()
			n, err := f.c.nodes.Get("n1")
			if err != nil {
				t.Fatal(err)
			}
			for i := range 3 {
				in := f.c.input(ctx, n, []*v1.Node{n})
				if got := describe(in.confirmations); got != tc.want {
					t.Fatalf("look %d: confirmations %q, want %q", i, got, tc.want)
				}
				if v := decide(in); (in.fenceVetoed != "") != tc.vetoed || tc.vetoed && (v.code != codeFenceVetoed || !strings.Contains(v.message, "answers that the machine runs")) {
					t.Fatalf("look %d: vetoed %q, verdict %+v", i, in.fenceVetoed, v)
				}
			}
			// The record's lines (the endpoint's errors are logged too).
			lines := slices.DeleteFunc(logs.all(), func(l string) bool { return !strings.Contains(l, `"annotation"`) })
			switch {
			case tc.logged == "" && len(lines) != 0:
				t.Errorf("logged %q about a record that is not ignored", lines)
			case tc.logged != "" && (len(lines) != 1 || !strings.Contains(lines[0], tc.logged)):
				t.Errorf("logged %q, want once that the record is ignored (%q)", lines, tc.logged)
			}
		})
	}
}

// A node whose Fence confirms its boot, its machine answered off, is
// tainted after the silence, with the policy named; Ready again with another
// boot ID the taint goes (the record is the remediation controller's and
// stays); a later silence of that boot, with the record of the previous
// one, taints nothing.
func TestRemediationFenceTaintsUntilTheReboot(t *testing.T) {
	old := t0.Add(-time.Hour)
	f := newFixture(t, testConfig(), false, node("n1", false, old, "b1", fenceRecord("b1")), node("n2", true, old, "x", nil),
		node("n3", true, old, "y", nil))
	fencer := withFencer(f, map[string]string{"n1": "off"})
	f.sync("n1")
	n := f.apiNode("n1")
	if !tainted(n) || n.Annotations[AnnotationBootID] != "b1" ||
		!strings.Contains(n.Annotations[AnnotationConfirmedBy], `remediation-policy (remediation policy gpu, step 4 (Fence), for boot ID "b1")`) {
		t.Fatalf("after the Fence: taints %v annotations %v", n.Spec.Taints, n.Annotations)
	}
	if ev := f.events(); len(ev) != 1 || !hasEvent(ev, EventTaintAdded) || !strings.Contains(ev[0], "remediation policy gpu, step 4 (Fence)") {
		t.Fatalf("events %v, want one %s naming the policy", ev, EventTaintAdded)
	}
	f.put(n)
	fencer.set("n1", "running") // the machine is started again

	f.set(boot(n, "b2", true, t0))
	f.sync("n1")
	n = f.apiNode("n1")
	if tainted(n) || n.Annotations[AnnotationBootID] != "" || n.Annotations[remediation.AnnotationState] != fenceRecord("b1")[remediation.AnnotationState] {
		t.Fatalf("after the reboot: taints %v annotations %v", n.Spec.Taints, n.Annotations)
	}
	if ev := f.events(); len(ev) != 1 || !hasEvent(ev, EventTaintRemoved) || !strings.Contains(ev[0], "after a reboot") {
		t.Fatalf("events %v", ev)
	}
	f.put(n)

	f.clock.Step(time.Hour)
	f.set(boot(n, "b2", false, t0))
	for range 3 {
		f.sync("n1")
	}
	if w := controllertest.TakeWrites(f.client); len(w) != 0 || tainted(f.apiNode("n1")) {
		t.Fatalf("writes %v: the new boot tainted on the Fence of the previous one", w)
	}
	if ev := f.events(); len(ev) != 0 {
		t.Fatalf("events %v", ev)
	}
}

// A node alone in its zone is in FullDisruption: a Fence alone is refused
// there (once, counted once); a person's confirmation overrides it.
func TestRemediationFenceRefusedInADisruption(t *testing.T) {
	old := t0.Add(-time.Hour)
	f := newFixture(t, testConfig(), false, node("n1", false, old, "b1", fenceRecord("b1")))
	withFencer(f, map[string]string{"n1": "off"})
	for range 3 {
		f.sync("n1")
	}
	if w := controllertest.TakeWrites(f.client); len(w) != 0 {
		t.Fatalf("writes %v in a disrupted zone", w)
	}
	ev := f.events()
	if len(ev) != 1 || !hasEvent(ev, EventBlocked) || !strings.Contains(ev[0], `zone "z1" is in FullDisruption`) || !strings.Contains(ev[0], SourceRemediation) {
		t.Fatalf("events %v, want one disruption refusal naming the policy", ev)
	}
	if got := value(f.c.metrics.refusals.WithLabelValues(codeDisruption)); got != 1 {
		t.Errorf("refusals{disruption} = %v, want 1", got)
	}
	ann := maps.Clone(fenceRecord("b1"))
	maps.Copy(ann, confirmedFor("psu dead", "b1"))
	n := f.apiNode("n1")
	n.Annotations = ann
	f.set(n)
	f.sync("n1")
	if n = f.apiNode("n1"); !tainted(n) || !strings.Contains(n.Annotations[AnnotationConfirmedBy], SourceRemediation) {
		t.Fatalf("not tainted with a person's confirmation too: taints %v annotations %v", n.Spec.Taints, n.Annotations)
	}
	if ev := f.events(); len(ev) != 1 || !strings.Contains(ev[0], "overridden by the confirmation of person") {
		t.Fatalf("events %v", ev)
	}
}

// The running controller reacts to the record's arrival and departure (a
// node's annotations changing is a node event), not only to its timers:
// the fake clock moves once, at the start, past the wait of a new leader's
// first taint (settleBudget), and never after. While the fencing endpoint
// cannot say whether the machine is off nothing is tainted; the record
// counts once it answers off (the machine went off: the test's switch, then
// the record's arrival).
func TestRunReactsToTheRemediationRecord(t *testing.T) {
	old := t0.Add(-time.Hour)
	f := newFixture(t, testConfig(), false, node("n1", false, old, "b1", nil), node("n2", true, old, "x", nil),
		node("n3", true, old, "y", nil))
	fencer := withFencer(f, map[string]string{"n1": "error"})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	f.factory.Start(ctx.Done())
	done := make(chan error)
	go func() { done <- f.c.Run(ctx) }()
	waitFor(t, "the controller started", func() bool {
		f.c.mu.Lock()
		defer f.c.mu.Unlock()
		return !f.c.fenceUntil.IsZero()
	})
	f.clock.Step(f.c.cfg.TakeoverWait)
	// update writes through the API (the informer delivers it), with a
	// newer resourceVersion, as another writer's update has.
	update := func(change func(*v1.Node)) {
		t.Helper()
		f.rv++
		n := f.apiNode("n1")
		change(n)
		n.ResourceVersion = fmt.Sprint(f.rv)
		if _, err := f.client.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// The record first, while the endpoint cannot answer (it counts
	// nothing yet), and in the controller's cache before the machine goes
	// off: the fake client, unlike an API server, takes an update based on
	// an older resourceVersion, so a taint decided on a copy from before
	// the record would silently overwrite it.
	update(func(n *v1.Node) { n.Annotations = fenceRecord("b1") })
	waitFor(t, "the record in the controller's cache", func() bool {
		n, err := f.c.nodes.Get("n1")
		return err == nil && n.ResourceVersion == fmt.Sprint(f.rv)
	})
	fencer.set("n1", "off")
	// The endpoint's answer changing is no event: a node update is.
	update(func(n *v1.Node) { n.Labels["nodeshepherd.test/off"] = "true" })
	waitFor(t, "taint after the Fence appeared", func() bool { return tainted(f.apiNode("n1")) })
	// Ready with the same boot while fenced: kept; the record goes: off.
	update(func(n *v1.Node) { n.Status.Conditions[0].Status = v1.ConditionTrue })
	var events []string
	waitFor(t, "refusal to take the taint back", func() bool {
		events = append(events, f.events()...)
		return slices.ContainsFunc(events, func(e string) bool { return strings.Contains(e, "same boot ID") })
	})
	fencer.set("n1", "running") // a person starts the machine
	update(func(n *v1.Node) { delete(n.Annotations, remediation.AnnotationState) })
	waitFor(t, "taint removed after the record went", func() bool { return !tainted(f.apiNode("n1")) })
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
