package cloudnodelifecycle

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"
	cloudprovider "k8s.io/cloud-provider"
	testingclock "k8s.io/utils/clock/testing"

	nscloud "github.com/nodeshepherd/nodeshepherd/pkg/cloudprovider"
	"github.com/nodeshepherd/nodeshepherd/pkg/controllertest"
)

// machine is what the in-test cloud says about one node's machine.
type machine int

const (
	running machine = iota
	shutdown
	gone
	broken // every question fails
)

// testCloud answers from a fixed table; a node not in it runs.
type testCloud struct {
	nscloud.Base
	machines map[string]machine
}

func (p *testCloud) Initialize(cloudprovider.ControllerClientBuilder, <-chan struct{}) {}
func (p *testCloud) ProviderName() string                                              { return "test" }
func (p *testCloud) InstancesV2() (cloudprovider.InstancesV2, bool)                    { return p, true }

func (p *testCloud) InstanceExists(_ context.Context, n *v1.Node) (bool, error) {
	m := p.machines[n.Name]
	if m == broken {
		return false, errors.New("injected provider error")
	}
	return m != gone, nil
}

func (p *testCloud) InstanceShutdown(_ context.Context, n *v1.Node) (bool, error) {
	m := p.machines[n.Name]
	if m == broken {
		return false, errors.New("injected provider error")
	}
	return m == shutdown, nil
}

func (p *testCloud) InstanceMetadata(context.Context, *v1.Node) (*cloudprovider.InstanceMetadata, error) {
	return &cloudprovider.InstanceMetadata{}, nil
}

type harness struct {
	t      *testing.T
	c      *Controller
	client *fake.Clientset
	store  interface{ Delete(any) error }
	rec    *record.FakeRecorder
	clk    *testingclock.FakeClock
}

func node(name string, ready bool, taints ...v1.Taint) *v1.Node {
	st := v1.ConditionTrue
	if !ready {
		st = v1.ConditionUnknown
	}
	return &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-" + name), ResourceVersion: "1"},
		Spec:   v1.NodeSpec{Taints: taints},
		Status: v1.NodeStatus{Conditions: []v1.NodeCondition{{Type: v1.NodeReady, Status: st}}}}
}

func newHarness(t *testing.T, cfg Config, cloud *testCloud, nodes ...*v1.Node) *harness {
	t.Helper()
	// NewSimpleClientset, not NewClientset: the field-managed tracker builds a
	// type converter costing ~1 s per test binary under -race, and nothing here
	// uses server-side apply.
	client := fake.NewSimpleClientset()
	factory := informers.NewSharedInformerFactory(client, 0)
	store := factory.Core().V1().Nodes().Informer().GetIndexer()
	for _, n := range nodes {
		if _, err := client.CoreV1().Nodes().Create(context.Background(), n, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := store.Add(n); err != nil {
			t.Fatal(err)
		}
	}
	client.ClearActions()
	rec := record.NewFakeRecorder(100)
	clk := testingclock.NewFakeClock(time.Date(2026, 11, 24, 10, 0, 0, 0, time.UTC))
	c, err := New(cfg, Deps{Client: client, Nodes: factory.Core().V1().Nodes(), Cloud: cloud, Recorder: rec,
		Registry: prometheus.NewRegistry(), Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	return &harness{t: t, c: c, client: client, store: store, rec: rec, clk: clk}
}

// writes lists the writes since the last call, sorted.
func (h *harness) writes() []string {
	out := controllertest.TakeWrites(h.client)
	slices.Sort(out)
	return out
}

// events takes the recorded events, sorted.
func (h *harness) events() []string {
	out := controllertest.Events(h.rec)
	slices.Sort(out)
	return out
}

func (h *harness) taints(name string) []v1.Taint {
	n, err := h.client.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		h.t.Fatal(err)
	}
	h.client.ClearActions()
	return n.Spec.Taints
}

func TestMonitorNodesDecisions(t *testing.T) {
	for _, tc := range []struct {
		name       string
		node       *v1.Node
		machine    machine
		wantWrites []string
		wantEvents []string // prefixes "Type Reason"
		wantTaint  bool     // shutdown taint on the node afterwards
	}{
		{name: "ready node, running machine: nothing", node: node("a", true), machine: running},
		{name: "ready node is never asked about, even if its machine is gone", node: node("a", true), machine: gone},
		{name: "not ready, machine gone: deleted", node: node("a", false), machine: gone,
			wantWrites: []string{"delete nodes a"}, wantEvents: []string{"Normal " + EventDeletingNode}},
		{name: "not ready, provider error: nothing deleted", node: node("a", false), machine: broken},
		{name: "not ready, machine shut down: shutdown taint added", node: node("a", false), machine: shutdown,
			wantWrites: []string{"patch nodes a"}, wantTaint: true},
		{name: "not ready, shut down, already tainted: no write", node: node("a", false, ShutdownTaint), machine: shutdown, wantTaint: true},
		{name: "not ready, machine running again: shutdown taint removed", node: node("a", false, ShutdownTaint), machine: running,
			wantWrites: []string{"patch nodes a"}},
		{name: "ready again: shutdown taint removed without asking", node: node("a", true, ShutdownTaint), machine: broken,
			wantWrites: []string{"patch nodes a"}},
		{name: "not ready, provider error, tainted: taint kept", node: node("a", false, ShutdownTaint), machine: broken, wantTaint: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := upstreamConfig()
			cfg.MaxUnhealthyNodes = "100%"
			h := newHarness(t, cfg, &testCloud{machines: map[string]machine{"a": tc.machine}}, tc.node)
			h.c.monitorNodes(context.Background())
			if got := h.writes(); !slices.Equal(got, tc.wantWrites) {
				t.Errorf("writes = %v, want %v", got, tc.wantWrites)
			}
			got := h.events()
			if len(got) != len(tc.wantEvents) {
				t.Fatalf("events = %q, want %q", got, tc.wantEvents)
			}
			for i, want := range tc.wantEvents {
				if !strings.HasPrefix(got[i], want+" ") {
					t.Errorf("event %q, want %q", got[i], want)
				}
			}
			if len(tc.wantWrites) > 0 && strings.HasPrefix(tc.wantWrites[0], "delete") {
				return
			}
			if got := slices.ContainsFunc(h.taints("a"), func(x v1.Taint) bool { return x.MatchTaint(&ShutdownTaint) }); got != tc.wantTaint {
				t.Errorf("shutdown taint = %v, want %v", got, tc.wantTaint)
			}
		})
	}
}

// More nodes not Ready than --max-unhealthy-nodes: nothing is deleted, and
// the blocked deletion is said in a Warning event.
func TestMonitorNodesIncidentGuard(t *testing.T) {
	cfg := upstreamConfig()
	cfg.MaxUnhealthyNodes = "1"
	cloud := &testCloud{machines: map[string]machine{"a": gone, "b": gone}}
	h := newHarness(t, cfg, cloud, node("a", false), node("b", false), node("c", true))
	h.c.monitorNodes(context.Background())
	if got := h.writes(); len(got) != 0 {
		t.Errorf("writes under the incident guard: %v", got)
	}
	ev := h.events()
	if len(ev) != 2 || !strings.HasPrefix(ev[0], "Warning "+EventDeletionBlocked+" ") || !strings.Contains(ev[0], "2 of 3 nodes are not Ready") {
		t.Errorf("events = %q, want two %s naming 2 of 3", ev, EventDeletionBlocked)
	}
	// The next passes refuse for the same reason: no new event.
	h.c.monitorNodes(context.Background())
	if ev := h.events(); len(ev) != 0 {
		t.Errorf("events on the second refusal for the same reason: %q", ev)
	}
	// Below the limit again: the deletion goes ahead.
	cloud.machines["b"] = running
	n := node("b", true)
	if err := h.store.(interface{ Update(any) error }).Update(n); err != nil {
		t.Fatal(err)
	}
	h.c.monitorNodes(context.Background())
	if got := h.writes(); !slices.Equal(got, []string{"delete nodes a"}) {
		t.Errorf("writes = %v, want the deletion of a", got)
	}
}

// --node-deletion-rate: one deletion now, the next once the rate allows it
// (on the fake clock); dry-run deletes nothing.
func TestMonitorNodesDeletionRate(t *testing.T) {
	cfg := upstreamConfig()
	cfg.MaxUnhealthyNodes = "100%"
	cfg.NodeDeletionRate = 0.1 // one per 10s
	cloud := &testCloud{machines: map[string]machine{"a": gone, "b": gone}}
	h := newHarness(t, cfg, cloud, node("a", false), node("b", false))
	pass := func() []string {
		h.c.monitorNodes(context.Background())
		got := h.writes()
		for _, w := range got {
			// The informer would deliver the deletion.
			_ = h.store.Delete(node(strings.TrimPrefix(w, "delete nodes "), false))
		}
		return got
	}
	if got := pass(); len(got) != 1 {
		t.Fatalf("first pass deleted %v, want exactly one node", got)
	}
	h.clk.Step(5 * time.Second)
	if got := pass(); len(got) != 0 {
		t.Fatalf("5s later deleted %v, want none (rate 0.1/s)", got)
	}
	h.clk.Step(5 * time.Second)
	if got := pass(); len(got) != 1 {
		t.Fatalf("10s later deleted %v, want the other node", got)
	}
}

func TestMonitorNodesDryRunWritesNothing(t *testing.T) {
	cfg := DefaultConfig()
	cfg.MaxUnhealthyNodes, cfg.DryRun = "100%", true
	cloud := &testCloud{machines: map[string]machine{"a": gone, "b": shutdown}}
	h := newHarness(t, cfg, cloud, node("a", false), node("b", false))
	h.c.monitorNodes(context.Background())
	if got := h.writes(); len(got) != 0 {
		t.Errorf("dry-run wrote %v", got)
	}
}

// upstreamConfig deletes on the first "gone" answer, as upstream does, for
// the tests of everything else.
func upstreamConfig() Config {
	cfg := DefaultConfig()
	cfg.DeletionConfirmations, cfg.DeletionDelay = 1, 0
	return cfg
}

// TestDeletionNeedsConsecutiveGoneAnswersOverTime: with the defaults (3
// answers over 20s), one or two "gone" answers delete nothing, an "exists"
// answer starts over, an error is no answer, and the third consecutive
// answer deletes only once 20s have passed since the first.
func TestDeletionNeedsConsecutiveGoneAnswersOverTime(t *testing.T) {
	cfg := DefaultConfig()
	cfg.MaxUnhealthyNodes = "100%"
	cloud := &testCloud{machines: map[string]machine{"a": gone}}
	h := newHarness(t, cfg, cloud, node("a", false))
	pass := func(m machine, step time.Duration) []string {
		cloud.machines["a"] = m
		h.c.monitorNodes(context.Background())
		h.clk.Step(step)
		return h.writes()
	}
	if w := pass(gone, 5*time.Second); len(w) != 0 {
		t.Fatalf("deleted on the first answer: %v", w)
	}
	if w := pass(running, 5*time.Second); len(w) != 0 { // starts over
		t.Fatalf("writes: %v", w)
	}
	for i, m := range []machine{gone, broken, gone} { // at 10, 15 and 20s; the error is no answer
		if w := pass(m, 5*time.Second); len(w) != 0 {
			t.Fatalf("pass %d (%v): deleted after fewer than 3 answers: %v", i, m, w)
		}
	}
	// The third answer, 15s after the first: not yet.
	if w := pass(gone, 5*time.Second); len(w) != 0 {
		t.Fatalf("deleted 15s after the first answer: %v", w)
	}
	if w := pass(gone, 0); !slices.Equal(w, []string{"delete nodes a"}) {
		t.Fatalf("writes = %v, want the deletion 20s after the first of consecutive answers", w)
	}
}

// A deletion whose answer is lost (the client's deadline) is checked by a
// read at once: one that landed is counted (the informer drops the node
// before any retry could), one that did not is sent again on the next pass.
func TestLostDeletionAnswerIsChecked(t *testing.T) {
	cfg := upstreamConfig()
	cfg.MaxUnhealthyNodes, cfg.NodeDeletionRate = "100%", 1000
	cloud := &testCloud{machines: map[string]machine{"landed": gone, "unsent": gone}}
	h := newHarness(t, cfg, cloud, node("landed", false), node("unsent", false))
	lost := map[string]bool{}
	h.client.PrependReactor("delete", "nodes", func(a k8stesting.Action) (bool, runtime.Object, error) {
		name := a.(k8stesting.DeleteAction).GetName()
		if lost[name] {
			return false, nil, nil
		}
		lost[name] = true
		if name == "landed" {
			if _, _, err := k8stesting.ObjectReaction(h.client.Tracker())(a); err != nil {
				t.Errorf("applying the deletion whose answer is lost: %v", err)
			}
		}
		return true, nil, context.DeadlineExceeded
	})
	pass := func() []string {
		h.c.monitorNodes(context.Background())
		got := h.writes()
		for _, name := range []string{"landed", "unsent"} {
			if _, err := h.client.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{}); err != nil {
				_ = h.store.Delete(node(name, false)) // the informer delivers the deletion
			}
		}
		h.client.ClearActions()
		return got
	}
	// One deletion per pass (the rate's burst is one, the clock fake).
	deletes := map[string]int{}
	for range 5 {
		for _, w := range pass() {
			deletes[strings.TrimPrefix(w, "delete nodes ")]++
		}
		h.clk.Step(time.Second)
	}
	if deletes["landed"] != 1 || deletes["unsent"] != 2 {
		t.Errorf("deletions sent %v, want landed once (checked by a read), unsent twice (sent again)", deletes)
	}
	var m dto.Metric
	if err := h.c.metrics.deleted.Write(&m); err != nil {
		t.Fatal(err)
	}
	if got := m.GetCounter().GetValue(); got != 2 {
		t.Errorf("deletions counted %v, want 2", got)
	}
	// The retry of the unsent deletion is not news: one DeletingNode each.
	said := map[string]int{}
	for _, e := range h.events() {
		if strings.HasPrefix(e, "Normal "+EventDeletingNode+" ") {
			for _, name := range []string{"landed", "unsent"} {
				if strings.Contains(e, "node "+name+" ") {
					said[name]++
				}
			}
		}
	}
	if said["landed"] != 1 || said["unsent"] != 1 {
		t.Errorf("DeletingNode events %v, want one per node however often the deletion is sent", said)
	}
}
