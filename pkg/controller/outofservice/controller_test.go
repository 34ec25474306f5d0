package outofservice

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"
	cloudprovider "k8s.io/cloud-provider"
	testingclock "k8s.io/utils/clock/testing"

	nscloud "github.com/nodeshepherd/nodeshepherd/pkg/cloudprovider"
	"github.com/nodeshepherd/nodeshepherd/pkg/controllertest"
)

// testCloud answers from a table: "gone", "shutdown", "error"; else running.
type testCloud struct {
	nscloud.Base
	machines map[string]string
	asked    int
}

func (p *testCloud) Initialize(cloudprovider.ControllerClientBuilder, <-chan struct{}) {}
func (p *testCloud) ProviderName() string                                              { return "test" }
func (p *testCloud) InstancesV2() (cloudprovider.InstancesV2, bool)                    { return p, true }

func (p *testCloud) InstanceExists(_ context.Context, n *v1.Node) (bool, error) {
	p.asked++
	if p.machines[n.Name] == "error" {
		return false, errors.New("injected provider error")
	}
	return p.machines[n.Name] != "gone", nil
}

func (p *testCloud) InstanceShutdown(_ context.Context, n *v1.Node) (bool, error) {
	if p.machines[n.Name] == "error" {
		return false, errors.New("injected provider error")
	}
	return p.machines[n.Name] == "shutdown", nil
}

func (p *testCloud) InstanceMetadata(context.Context, *v1.Node) (*cloudprovider.InstanceMetadata, error) {
	return &cloudprovider.InstanceMetadata{}, nil
}

type fixture struct {
	t        *testing.T
	c        *Controller
	client   *fake.Clientset
	factory  informers.SharedInformerFactory
	clock    *testingclock.FakeClock
	recorder *record.FakeRecorder
	cloud    *testCloud
	rv       int // last resourceVersion set by set
}

// node is Ready (or not, since the given time) with a boot ID, in zone z1.
func node(name string, ready bool, since time.Time, bootID string, annotations map[string]string) *v1.Node {
	status := v1.ConditionTrue
	if !ready {
		status = v1.ConditionUnknown
	}
	return &v1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, ResourceVersion: "1", Annotations: annotations,
			Labels: map[string]string{v1.LabelTopologyZone: "z1"}},
		Status: v1.NodeStatus{
			Conditions: []v1.NodeCondition{{Type: v1.NodeReady, Status: status, LastTransitionTime: metav1.NewTime(since)}},
			NodeInfo:   v1.NodeSystemInfo{BootID: bootID},
		},
	}
}

func newFixture(t *testing.T, cfg Config, withCloud bool, nodes ...*v1.Node) *fixture {
	t.Helper()
	f := &fixture{t: t, clock: testingclock.NewFakeClock(t0), recorder: record.NewFakeRecorder(100), rv: 100}
	f.client = fake.NewClientset()
	for _, n := range nodes {
		if _, err := f.client.CoreV1().Nodes().Create(context.Background(), n, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	f.client.ClearActions()
	f.factory = informers.NewSharedInformerFactory(f.client, 0)
	d := Deps{Client: f.client, Nodes: f.factory.Core().V1().Nodes(), Recorder: f.recorder, Registry: prometheus.NewRegistry(), Clock: f.clock}
	if withCloud {
		f.cloud = &testCloud{machines: map[string]string{}}
		d.Cloud = f.cloud
		cfg.Cloud.Name = "test"
	}
	c, err := New(cfg, d)
	if err != nil {
		t.Fatal(err)
	}
	f.c = c
	for _, n := range nodes {
		f.put(n)
	}
	return f
}

// put sets the informer's copy, as a watch event would.
func (f *fixture) put(n *v1.Node) {
	if err := f.factory.Core().V1().Nodes().Informer().GetIndexer().Update(n); err != nil {
		f.t.Fatal(err)
	}
}

// apiNode is the node as the API server (the fake clientset) holds it.
func (f *fixture) apiNode(name string) *v1.Node {
	n, err := f.client.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		f.t.Fatal(err)
	}
	return n
}

func (f *fixture) sync(name string) {
	f.t.Helper()
	if err := f.c.sync(context.Background(), name); err != nil {
		f.t.Fatal(err)
	}
}

func (f *fixture) events() []string { return controllertest.Events(f.recorder) }

// confirmedFor is a person's confirmation, recorded for boot.
func confirmedFor(reason, boot string) map[string]string {
	return map[string]string{AnnotationConfirm: reason, AnnotationConfirmationBootID: boot}
}

func testConfig() Config {
	c := DefaultConfig()
	c.MaxNodes, c.MaxPercent = 1, 100
	return c
}

func tainted(n *v1.Node) bool {
	return slices.ContainsFunc(n.Spec.Taints, func(t v1.Taint) bool { return t.MatchTaint(&Taint) })
}

func hasEvent(events []string, reason string) bool {
	return slices.ContainsFunc(events, func(e string) bool { return strings.Contains(e, " "+reason+" ") })
}

// The annotation path: pending until silent long enough (one event however
// often it is re-checked), then tainted with the boot ID recorded.
func TestAnnotationTaintsAfterSilenceOnce(t *testing.T) {
	silent := t0.Add(-time.Minute) // a whole second: waits until 4m01s from now
	f := newFixture(t, testConfig(), false, node("n1", false, silent, "b1", confirmedFor("psu dead", "b1")),
		node("n2", true, t0.Add(-time.Hour), "x", nil))
	for range 3 {
		f.sync("n1")
	}
	ev := f.events()
	if len(ev) != 1 || !hasEvent(ev, EventPending) || !strings.Contains(ev[0], `"psu dead"`) {
		t.Fatalf("events %v, want one %s quoting the annotation", ev, EventPending)
	}
	if w := controllertest.TakeWrites(f.client); len(w) != 0 {
		t.Fatalf("writes before the wait is over: %v", w)
	}
	// lastTransitionTime has 1 s precision: 5m after it is not enough.
	f.clock.SetTime(silent.Add(5 * time.Minute))
	f.sync("n1")
	if w := controllertest.TakeWrites(f.client); len(w) != 0 {
		t.Fatalf("tainted at exactly lastTransitionTime+after, before the rounded-up time: %v", w)
	}
	f.clock.SetTime(silent.Add(5*time.Minute + time.Second))
	f.sync("n1")
	if w := controllertest.TakeWrites(f.client); !slices.Equal(w, []string{"update nodes n1"}) {
		t.Fatalf("writes %v", w)
	}
	n := f.apiNode("n1")
	if !tainted(n) || n.Annotations[AnnotationBootID] != "b1" || !strings.Contains(n.Annotations[AnnotationConfirmedBy], SourcePerson) {
		t.Fatalf("node after taint: taints %v annotations %v", n.Spec.Taints, n.Annotations)
	}
	if ev := f.events(); len(ev) != 1 || !hasEvent(ev, EventTaintAdded) {
		t.Fatalf("events %v, want one %s", ev, EventTaintAdded)
	}
	if got := value(f.c.metrics.decisions.WithLabelValues(actTaint, SourcePerson)); got != 1 {
		t.Errorf("decisions{taint,person} = %v", got)
	}
	// The informer has not delivered the write yet: the overlay knows.
	f.sync("n1")
	if w := controllertest.TakeWrites(f.client); len(w) != 0 {
		t.Fatalf("wrote again from the stale cache: %v", w)
	}
}

// The provider path, and no taint on provider errors or a running machine.
func TestProviderConfirms(t *testing.T) {
	old := t0.Add(-time.Hour)
	f := newFixture(t, testConfig(), true, node("gone", false, old, "b", nil), node("err", false, old, "b", nil),
		node("run", false, old, "b", nil), node("ready", true, old, "b", nil), node("r2", true, old, "b", nil))
	f.cloud.machines["gone"], f.cloud.machines["err"] = "gone", "error"
	for _, n := range []string{"err", "run", "ready"} {
		f.sync(n)
	}
	if w := controllertest.TakeWrites(f.client); len(w) != 0 {
		t.Fatalf("writes without confirmation: %v", w)
	}
	if f.cloud.asked != 2 {
		t.Errorf("provider asked %d times, want 2 (never about a Ready node)", f.cloud.asked)
	}
	f.sync("gone")
	if !tainted(f.apiNode("gone")) {
		t.Fatal("node whose machine is gone not tainted")
	}
	if got := value(f.c.metrics.decisions.WithLabelValues(actTaint, SourceCloudProvider)); got != 1 {
		t.Errorf("decisions{taint,cloud-provider} = %v", got)
	}
}

// The budget refuses the second node, once per change of reason, and the
// refusal is counted once.
func TestBudgetRefusesOnce(t *testing.T) {
	old := t0.Add(-time.Hour)
	ann := confirmedFor("dead", "b")
	f := newFixture(t, testConfig(), false, node("a", false, old, "b", ann), node("b", false, old, "b", maps.Clone(ann)),
		node("c", true, old, "b", nil), node("d", true, old, "b", nil), node("e", true, old, "b", nil))
	f.sync("a")
	f.events()
	for range 3 {
		f.sync("b")
	}
	ev := f.events()
	if len(ev) != 1 || !hasEvent(ev, EventBlocked) || !strings.Contains(ev[0], "the budget is 1") {
		t.Fatalf("events %v, want one budget refusal", ev)
	}
	if tainted(f.apiNode("b")) {
		t.Fatal("second node tainted beyond the budget")
	}
	if got := value(f.c.metrics.refusals.WithLabelValues(codeBudget)); got != 1 {
		t.Errorf("refusals{budget} = %v, want 1", got)
	}
	if got := value(f.c.metrics.nodes); got != 1 {
		t.Errorf("nodes gauge %v, want 1", got)
	}
}

// Take-back: kept while silent (one refusal when the confirmation goes),
// removed once Ready with a new boot ID, with its annotations.
func TestTakeBack(t *testing.T) {
	old := t0.Add(-time.Hour)
	f := newFixture(t, testConfig(), false, node("n1", false, old, "b1", confirmedFor("dead", "b1")))
	f.sync("n1")
	n := f.apiNode("n1")
	f.put(n)
	f.events()
	controllertest.TakeWrites(f.client)
	// Confirmation withdrawn while still silent: kept, said once.
	n = n.DeepCopy()
	delete(n.Annotations, AnnotationConfirm)
	delete(n.Annotations, AnnotationConfirmationBootID)
	n.ResourceVersion = "10"
	f.put(n)
	f.sync("n1")
	f.sync("n1")
	if ev := f.events(); len(ev) != 1 || !hasEvent(ev, EventBlocked) || !strings.Contains(ev[0], "still silent") {
		t.Fatalf("events %v", ev)
	}
	if w := controllertest.TakeWrites(f.client); len(w) != 0 {
		t.Fatalf("taint touched while silent: %v", w)
	}
	// Ready again after a reboot.
	n = n.DeepCopy()
	n.Status.Conditions[0].Status, n.Status.NodeInfo.BootID, n.ResourceVersion = v1.ConditionTrue, "b2", "11"
	f.put(n)
	if _, err := f.client.CoreV1().Nodes().Update(context.Background(), n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	f.client.ClearActions()
	f.sync("n1")
	got := f.apiNode("n1")
	if tainted(got) || got.Annotations[AnnotationBootID] != "" || got.Annotations[AnnotationConfirmedBy] != "" {
		t.Fatalf("after reboot: taints %v annotations %v", got.Spec.Taints, got.Annotations)
	}
	if ev := f.events(); len(ev) != 1 || !hasEvent(ev, EventTaintRemoved) || !strings.Contains(ev[0], "reboot") {
		t.Fatalf("events %v", ev)
	}
}

// A node Ready again with the same boot ID while still confirmed keeps the
// taint; a taint someone else added is never removed.
func TestKeepsWithoutRebootAndLeavesOthersTaints(t *testing.T) {
	old := t0.Add(-time.Hour)
	mine := node("mine", true, old, "b1", map[string]string{AnnotationConfirm: "dead", AnnotationConfirmationBootID: "b1", AnnotationBootID: "b1"})
	mine.Spec.Taints = []v1.Taint{Taint}
	theirs := node("theirs", true, old, "b1", nil)
	theirs.Spec.Taints = []v1.Taint{Taint}
	f := newFixture(t, testConfig(), false, mine, theirs)
	f.sync("mine")
	f.sync("theirs")
	if w := controllertest.TakeWrites(f.client); len(w) != 0 {
		t.Fatalf("writes %v", w)
	}
	if ev := f.events(); len(ev) != 1 || !strings.Contains(ev[0], "same boot ID") {
		t.Fatalf("events %v", ev)
	}
}

// Dry run writes nothing, but the would-be taint counts against the budget.
func TestDryRun(t *testing.T) {
	old := t0.Add(-time.Hour)
	ann := confirmedFor("dead", "b")
	cfg := testConfig()
	cfg.DryRun = true
	f := newFixture(t, cfg, false, node("a", false, old, "b", ann), node("b", false, old, "b", maps.Clone(ann)))
	f.sync("a")
	f.sync("b")
	if w := controllertest.TakeWrites(f.client); len(w) != 0 {
		t.Fatalf("dry run wrote %v", w)
	}
	ev := f.events()
	if len(ev) != 2 || !strings.Contains(ev[0], "DryRun") || !strings.Contains(ev[1], "the budget is 1") {
		t.Fatalf("events %v", ev)
	}
}

// Run drives the wait with the injected clock: the taint comes when the
// fake clock passes the rounded-up deadline, not before.
func TestRunWaitsOnTheClock(t *testing.T) {
	silent := t0.Add(-4 * time.Minute)
	due := silent.Add(5*time.Minute + time.Second) // --out-of-service-after past the silence, rounded up
	cfg := testConfig()
	f := newFixture(t, cfg, false, node("n1", false, silent, "b1", confirmedFor("dead", "b1")))
	// The fake time of the tainting write, seen where the write lands.
	var mu sync.Mutex
	var taintedAt time.Time
	f.client.PrependReactor("update", "nodes", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if n, ok := a.(k8stesting.UpdateAction).GetObject().(*v1.Node); ok && tainted(n) {
			mu.Lock()
			if taintedAt.IsZero() {
				taintedAt = f.clock.Now()
			}
			mu.Unlock()
		}
		return false, nil, nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	f.factory.Start(ctx.Done())
	done := make(chan error)
	go func() { done <- f.c.Run(ctx) }()
	waitFor(t, "pending event", func() bool { return len(f.recorder.Events) > 0 })
	f.clock.Step(time.Minute)
	f.clock.Step(time.Second)
	// client-go's delaying queue reads the time, then sets its timer: a step
	// between the two leaves the timer a step late (on a busy machine; a fake
	// clock's artefact, a real clock moves on by itself). So the clock is
	// moved on by a second at a time until the taint lands, and what the
	// test asserts is the time of the tainting write: never before the deadline.
	deadline := time.Now().Add(time.Minute)
	for !tainted(f.apiNode("n1")) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for the taint; fake clock at %v, due %v", f.clock.Now(), due)
		}
		for wait := time.Now().Add(time.Second); time.Now().Before(wait) && !tainted(f.apiNode("n1")); {
			time.Sleep(5 * time.Millisecond)
		}
		if !tainted(f.apiNode("n1")) {
			f.clock.Step(time.Second)
		}
	}
	mu.Lock()
	at := taintedAt
	mu.Unlock()
	if at.Before(due) {
		t.Errorf("tainted at %v, before the deadline %v", at, due)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// waitFor polls a condition of the controller's goroutine (real time
// bounds the test only; the controller's time is the fake clock).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// value reads a counter or gauge.
func value(m prometheus.Metric) float64 {
	var out dto.Metric
	if err := m.Write(&out); err != nil {
		panic(err)
	}
	if out.Counter != nil {
		return out.Counter.GetValue()
	}
	return out.Gauge.GetValue()
}

// set stores n in the API server and the informer, as a kubelet's or a
// person's write and its watch event would.
func (f *fixture) set(n *v1.Node) {
	f.t.Helper()
	// The fake clientset keeps resourceVersions as given: a newer one
	// tells the controller's overlay that this is not its own write.
	f.rv++
	n = n.DeepCopy()
	n.ResourceVersion = fmt.Sprint(f.rv)
	written, err := f.client.CoreV1().Nodes().Update(context.Background(), n, metav1.UpdateOptions{})
	if err != nil {
		f.t.Fatal(err)
	}
	f.put(written)
	f.client.ClearActions()
}

// boot makes the node report boot ID and readiness (since the given time).
func boot(n *v1.Node, bootID string, ready bool, since time.Time) *v1.Node {
	n = n.DeepCopy()
	n.Status.NodeInfo.BootID = bootID
	n.Status.Conditions[0].Status, n.Status.Conditions[0].LastTransitionTime = v1.ConditionUnknown, metav1.NewTime(since)
	if ready {
		n.Status.Conditions[0].Status = v1.ConditionTrue
	}
	return n
}

// Issue 30: a person's confirmation is recorded for the boot it is given
// for, goes with the taint when the machine comes back with another boot,
// and a later silence of that boot (a partition) taints nothing.
func TestConfirmationEndsWithTheBoot(t *testing.T) {
	old := t0.Add(-time.Hour)
	f := newFixture(t, testConfig(), false, node("n1", false, old, "b1", map[string]string{AnnotationConfirm: "psu dead"}))
	// Seen before the person confirmed: written during boot b1 (confirm.go).
	f.c.observe(node("n1", false, old, "b1", nil))
	f.sync("n1")
	if w := controllertest.TakeWrites(f.client); !slices.Equal(w, []string{"update nodes n1"}) {
		t.Fatalf("writes %v, want the confirmation's boot recorded", w)
	}
	n := f.apiNode("n1")
	if n.Annotations[AnnotationConfirmationBootID] != "b1" || tainted(n) {
		t.Fatalf("after the first look: taints %v annotations %v", n.Spec.Taints, n.Annotations)
	}
	if ev := f.events(); len(ev) != 1 || !hasEvent(ev, EventConfirmationRecorded) || !strings.Contains(ev[0], `boot ID "b1"`) {
		t.Fatalf("events %v, want one %s naming the boot", ev, EventConfirmationRecorded)
	}
	f.put(n)
	f.sync("n1")
	if n = f.apiNode("n1"); !tainted(n) {
		t.Fatal("not tainted on the recorded confirmation")
	}
	f.put(n)
	f.events()

	// The machine boots again and is Ready: the taint and the confirmation go.
	f.set(boot(n, "b2", true, t0))
	f.sync("n1")
	n = f.apiNode("n1")
	for _, a := range []string{AnnotationConfirm, AnnotationConfirmationBootID, AnnotationBootID, AnnotationConfirmedBy} {
		if _, ok := n.Annotations[a]; ok || tainted(n) {
			t.Fatalf("after the reboot: taints %v annotations %v", n.Spec.Taints, n.Annotations)
		}
	}
	if ev := f.events(); len(ev) != 1 || !hasEvent(ev, EventTaintRemoved) || !strings.Contains(ev[0], `was given for boot ID "b1" and is removed with the taint`) {
		t.Fatalf("events %v", ev)
	}
	f.put(n)

	// A partition of the machine that runs: silent long enough, same boot.
	f.clock.Step(time.Hour)
	f.set(boot(n, "b2", false, t0))
	for range 3 {
		f.sync("n1")
	}
	if w := controllertest.TakeWrites(f.client); len(w) != 0 || tainted(f.apiNode("n1")) {
		t.Fatalf("writes %v during a partition after the reboot", w)
	}
	if ev := f.events(); len(ev) != 0 {
		t.Fatalf("events %v", ev)
	}
}

// A confirmation whose boot ended before any taint (the machine came back
// while the controller waited) is ignored and removed, with one warning;
// the next silence of the new boot taints nothing. A recorded boot whose
// confirmation was withdrawn is removed quietly.
func TestConfirmationOfAnEndedBootExpires(t *testing.T) {
	f := newFixture(t, testConfig(), false, node("n1", false, t0.Add(-time.Minute), "b1", confirmedFor("psu dead", "b1")),
		node("n2", true, t0.Add(-time.Hour), "c1", map[string]string{AnnotationConfirmationBootID: "c1"}))
	f.sync("n1")
	if ev := f.events(); len(ev) != 1 || !hasEvent(ev, EventPending) {
		t.Fatalf("events %v", ev)
	}
	f.set(boot(f.apiNode("n1"), "b2", true, t0))
	f.sync("n1")
	f.sync("n1")
	n := f.apiNode("n1")
	if _, ok := n.Annotations[AnnotationConfirm]; ok || n.Annotations[AnnotationConfirmationBootID] != "" {
		t.Fatalf("confirmation of boot b1 kept on boot b2: %v", n.Annotations)
	}
	ev := f.events()
	if len(ev) != 1 || !strings.HasPrefix(ev[0], "Warning "+EventConfirmationExpired) || !strings.Contains(ev[0], `given for boot ID "b1", the node now reports boot ID "b2"`) {
		t.Fatalf("events %v, want one warning naming both boots", ev)
	}
	if got := value(f.c.metrics.decisions.WithLabelValues(actExpire, codeBootChanged)); got != 1 {
		t.Errorf("decisions{%s,%s} = %v", actExpire, codeBootChanged, got)
	}
	f.put(n)
	f.clock.Step(time.Hour)
	f.set(boot(n, "b2", false, t0))
	f.sync("n1")
	if tainted(f.apiNode("n1")) {
		t.Fatal("tainted on the confirmation of the previous boot")
	}

	f.sync("n2")
	if w := controllertest.TakeWrites(f.client); !slices.Equal(w, []string{"update nodes n2"}) {
		t.Fatalf("writes %v, want the withdrawn confirmation's boot removed", w)
	}
	if _, ok := f.apiNode("n2").Annotations[AnnotationConfirmationBootID]; ok {
		t.Fatal("recorded boot of a withdrawn confirmation kept")
	}
	if ev := f.events(); len(ev) != 0 {
		t.Fatalf("events %v", ev)
	}
}
