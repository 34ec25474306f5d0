package drain

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	v1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/nodeshepherd/nodeshepherd/pkg/controllertest"
)

// The drain controller's sync handler driven through New with a fake
// clientset, real informers over it and a fake clock: what is written
// (cordon, DrainScheduled), which pods are evicted, and what a budget holds
// back. The drain itself runs in its goroutine as in production; the test
// steps the fake clock for its polls.

var handlerNow = time.Date(2026, 11, 24, 10, 0, 0, 0, time.UTC)

type handler struct {
	t      *testing.T
	c      *Controller
	client *fake.Clientset
	clk    *testingclock.FakeClock
	rec    *record.FakeRecorder
	events []string
}

// newHandler builds the controller over objs and waits for its informers
// (their caches and their watches).
// Evictions are accepted and delete the pod, as the API server does.
func newHandler(t *testing.T, cfg Config, objs ...runtime.Object) *handler {
	t.Helper()
	// NewSimpleClientset, not NewClientset: the field-managed tracker builds a
	// type converter costing ~1 s per test binary under -race, and nothing here
	// uses server-side apply.
	client := fake.NewSimpleClientset(objs...)
	client.PrependReactor("create", "pods", func(a clienttesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() != "eviction" {
			return false, nil, nil
		}
		ev := a.(clienttesting.CreateAction).GetObject().(*policyv1.Eviction)
		// The tracker, not the clientset: reactors run under the clientset's lock.
		return true, nil, client.Tracker().Delete(v1.SchemeGroupVersion.WithResource("pods"), ev.Namespace, ev.Name)
	})
	// The fake clientset's watch starts from when it is registered: an object
	// deleted after an informer's List but before its Watch is never seen
	// deleted (the tracker replays the adds and updates since the List, not
	// the deletes), and WaitForCacheSync returns after the List. So a drain's
	// eviction sent in that window left the pod in the informer for good and
	// the drain waited for it until its timeout. The informers' watches are
	// waited for too: as against an API server, every later change is seen.
	var watchMu sync.Mutex
	watching := map[string]bool{}
	client.PrependWatchReactor("*", func(a clienttesting.Action) (bool, watch.Interface, error) {
		var opts metav1.ListOptions
		if w, ok := a.(clienttesting.WatchActionImpl); ok {
			opts = w.ListOptions
		}
		w, err := client.Tracker().Watch(a.GetResource(), a.GetNamespace(), opts)
		if err != nil {
			return false, nil, err
		}
		watchMu.Lock()
		watching[a.GetResource().Resource] = true
		watchMu.Unlock()
		return true, w, nil
	})
	factory := informers.NewSharedInformerFactory(client, 0)
	clk := testingclock.NewFakeClock(handlerNow)
	rec := record.NewFakeRecorder(1000)
	c, err := New(cfg, Deps{Client: client, Nodes: factory.Core().V1().Nodes(), Pods: factory.Core().V1().Pods(),
		Recorder: rec, Registry: prometheus.NewRegistry(), Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(func() {
		cancel()
		// As Run does when it returns: running drains stop without writing.
		c.stopDrains(errStopping)
		factory.Shutdown()
	})
	factory.Start(ctx.Done())
	for typ, ok := range factory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			t.Fatalf("%v did not sync", typ)
		}
	}
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(time.Millisecond) {
		watchMu.Lock()
		started, saw := watching["nodes"] && watching["pods"], fmt.Sprint(watching)
		watchMu.Unlock()
		if started {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the informers' watches did not start: %s", saw)
		}
	}
	client.ClearActions()
	return &handler{t: t, c: c, client: client, clk: clk, rec: rec}
}

func (h *handler) sync(name string) {
	h.t.Helper()
	if err := h.c.sync(context.Background(), name); err != nil {
		h.t.Fatalf("sync %s: %v", name, err)
	}
}

// writes lists the writes so far, evictions included; reads are left out.
func (h *handler) writes() []string { return controllertest.Writes(h.client) }

// evicted lists the pods evicted so far, sorted.
func (h *handler) evicted() []string {
	var out []string
	for _, w := range h.writes() {
		if p, ok := strings.CutPrefix(w, "create pods/eviction "); ok {
			out = append(out, p)
		}
	}
	slices.Sort(out)
	return out
}

// collect moves the recorded events into h.events.
func (h *handler) collect() { h.events = append(h.events, controllertest.Events(h.rec)...) }

// reasons lists the event reasons so far ("Type Reason").
func (h *handler) reasons() []string {
	h.collect()
	out := make([]string, len(h.events))
	for i, e := range h.events {
		f := strings.Fields(e)
		out[i] = f[0] + " " + f[1]
	}
	return out
}

func (h *handler) event(reason string) string {
	h.collect()
	for _, e := range h.events {
		if strings.Fields(e)[1] == reason {
			return e
		}
	}
	return ""
}

// until steps the fake clock by the drain's poll interval until cond holds,
// for at most a minute of real time (a busy machine under -race).
func (h *handler) until(what string, cond func() bool) {
	h.t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			h.t.Fatalf("timed out waiting for %s; events %q, writes %q", what, h.events, h.writes())
		}
		h.clk.Step(pollInterval)
		time.Sleep(time.Millisecond) // let the drain goroutine and the informers run
	}
}

func (h *handler) node(name string) *v1.Node {
	h.t.Helper()
	n, err := h.client.Tracker().Get(v1.SchemeGroupVersion.WithResource("nodes"), "", name)
	if err != nil {
		h.t.Fatal(err)
	}
	return n.(*v1.Node)
}

// drainNode is a Ready node; with sick, KernelDeadlock=True for an hour.
func drainNode(name string, sick bool, mut ...func(*v1.Node)) *v1.Node {
	hour := metav1.NewTime(handlerNow.Add(-time.Hour))
	n := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-" + name), Labels: map[string]string{"pool": "a"}},
		Status: v1.NodeStatus{Conditions: []v1.NodeCondition{{Type: v1.NodeReady, Status: v1.ConditionTrue, LastTransitionTime: hour}}}}
	if sick {
		n.Status.Conditions = append(n.Status.Conditions,
			v1.NodeCondition{Type: "KernelDeadlock", Status: v1.ConditionTrue, LastTransitionTime: hour})
	}
	for _, m := range mut {
		m(n)
	}
	return n
}

func notReady(n *v1.Node) { n.Status.Conditions[0].Status = v1.ConditionUnknown }

// ours is a node the drain controller cordoned.
func ours(n *v1.Node) {
	n.Spec.Unschedulable = true
	setAnnotation(n, AnnotationConditions, "KernelDeadlock=True,0s")
}

// draining is a node of ours whose drain is in flight.
func draining(n *v1.Node) {
	ours(n)
	setDrainCondition(n, v1.ConditionTrue, scheduledMessage(handlerNow.Add(-time.Minute)), handlerNow.Add(-time.Minute))
}

func handlerConfig() Config {
	cfg := DefaultConfig()
	cfg.Conditions = []string{"KernelDeadlock=True"}
	cfg.Budget.MaxCordonedNodes = ""
	cfg.Budget.MaxUnhealthyNodes = "100%"
	cfg.ProtectedPodAnnotations = []string{"team/keep"}
	// The fake clock runs ahead of the informers while the test waits for
	// them: a day keeps a slow machine from failing the drain on time.
	cfg.DrainTimeout = 24 * time.Hour
	return cfg
}

// podOn is a pod on node, owned by a ReplicaSet unless mut changes it.
func podOn(node, name string, mut ...func(*v1.Pod)) *v1.Pod {
	p := pod(func(p *v1.Pod) {
		p.Name, p.UID, p.Spec.NodeName = name, types.UID("uid-"+name), node
		p.CreationTimestamp = metav1.NewTime(handlerNow.Add(-time.Hour))
		p.Status.Phase = v1.PodRunning
	})
	for _, m := range mut {
		m(p)
	}
	return p
}

func annotated(k, v string) func(*v1.Pod) {
	return func(p *v1.Pod) { p.Annotations = map[string]string{k: v} }
}

func emptyDir(p *v1.Pod) {
	p.Spec.Volumes = []v1.Volume{{Name: "scratch", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}}}
}

// A matching node is cordoned, its drain scheduled, and exactly the pods
// the filters allow are evicted; the drain then completes.
func TestHandlerDrainFilters(t *testing.T) {
	pods := []*v1.Pod{
		podOn("n", "web"),
		podOn("n", "mirror", annotated(mirrorPodAnnotation, "x")),
		podOn("n", "ds", owned("DaemonSet")),
		podOn("n", "sts", owned("StatefulSet")),
		podOn("n", "scratch", emptyDir),
		podOn("n", "bare", func(p *v1.Pod) { p.OwnerReferences = nil }),
		podOn("n", "pinned", annotated(SafeToEvictAnnotation, "false")),
		podOn("n", "kept", annotated("team/keep", "")),
		podOn("n", "done", func(p *v1.Pod) { p.Status.Phase = v1.PodSucceeded }),
		podOn("other", "elsewhere"),
	}
	for _, tc := range []struct {
		name string
		cfg  func(*Config)
		want []string
	}{
		{name: "defaults: only the replicated pod", cfg: func(*Config) {}, want: []string{"ns/web"}},
		{name: "every --evict-* flag: never mirror, safe-to-evict=false, protected or finished pods",
			cfg: func(c *Config) {
				c.EvictDaemonSetPods, c.EvictStatefulSetPods, c.EvictLocalStoragePods, c.EvictUnreplicatedPods = true, true, true, true
			},
			want: []string{"ns/bare", "ns/ds", "ns/scratch", "ns/sts", "ns/web"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := handlerConfig()
			tc.cfg(&cfg)
			objs := []runtime.Object{drainNode("n", true), drainNode("other", false)}
			for _, p := range pods {
				objs = append(objs, p.DeepCopy())
			}
			h := newHandler(t, cfg, objs...)

			h.sync("n") // cordon
			if got := h.writes(); !slices.Equal(got, []string{"patch nodes n"}) {
				t.Fatalf("first sync wrote %q, want the cordon patch", got)
			}
			if n := h.node("n"); !n.Spec.Unschedulable || n.Annotations[AnnotationConditions] == "" {
				t.Fatalf("node not cordoned and owned: unschedulable=%v annotations=%v", n.Spec.Unschedulable, n.Annotations)
			}
			if got := h.reasons(); !slices.Equal(got, []string{"Warning " + EventCordonStarting, "Warning " + EventCordonSucceeded}) {
				t.Errorf("events after the cordon: %q", got)
			}
			if len(h.evicted()) != 0 {
				t.Fatal("evicted before the drain was scheduled")
			}

			h.sync("n") // schedule and start the drain
			h.until("DrainSucceeded", func() bool { return h.event(EventDrainSucceeded) != "" })
			if got := h.evicted(); !slices.Equal(got, tc.want) {
				t.Errorf("evicted %q, want %q", got, tc.want)
			}
			if c := h.node("n").Status.Conditions; !slices.ContainsFunc(c, func(c v1.NodeCondition) bool {
				return c.Type == ConditionDrainScheduled && c.Status == v1.ConditionFalse && strings.Contains(c.Message, completedMarker)
			}) {
				t.Errorf("DrainScheduled not recorded as completed: %+v", c)
			}
			if e := h.event(EventDrainStarting); !strings.Contains(e, fmt.Sprintf(": %d pods to evict", len(tc.want))) {
				t.Errorf("DrainStarting = %q", e)
			}
		})
	}
}

// Budgets and guards decided in the sync handler: the node waits (one event
// saying which budget), nothing is written and nothing evicted.
func TestHandlerBudgetsHoldBack(t *testing.T) {
	for _, tc := range []struct {
		name   string
		cfg    func(*Config)
		nodes  []*v1.Node // besides n
		n      *v1.Node
		reason string // event reason
		budget string // in the event's message
	}{
		{name: "max concurrent drains", cfg: func(c *Config) { c.Budget.MaxConcurrentDrains = 1 },
			nodes: []*v1.Node{drainNode("busy", true, draining)}, n: drainNode("n", true, ours),
			reason: EventDrainWaiting, budget: "--max-concurrent-drains=1"},
		{name: "max cordoned nodes", cfg: func(c *Config) { c.Budget.MaxCordonedNodes = "1" },
			nodes: []*v1.Node{drainNode("c1", true, ours)}, n: drainNode("n", true),
			reason: EventCordonWaiting, budget: "--max-cordoned-nodes=1"},
		{name: "max cordoned nodes as a percentage", cfg: func(c *Config) { c.Budget.MaxCordonedNodes = "10%" },
			nodes: []*v1.Node{drainNode("c1", true, ours), drainNode("x", false)}, n: drainNode("n", true),
			reason: EventCordonWaiting, budget: "--max-cordoned-nodes=10%"},
		{name: "circuit breaker: too many nodes not Ready", cfg: func(c *Config) { c.Budget.MaxUnhealthyNodes = "1" },
			nodes: []*v1.Node{drainNode("x1", false, notReady), drainNode("x2", false, notReady), drainNode("x3", false), drainNode("x4", false)},
			n:     drainNode("n", true), reason: EventCordonWaiting, budget: "circuit breaker"},
		{name: "circuit breaker also holds back a drain", cfg: func(c *Config) { c.Budget.MaxUnhealthyNodes = "1" },
			nodes: []*v1.Node{drainNode("x1", false, notReady), drainNode("x2", false, notReady), drainNode("x3", false), drainNode("x4", false)},
			n:     drainNode("n", true, ours), reason: EventDrainWaiting, budget: "circuit breaker"},
		{name: "drain buffer after the last drain start", cfg: func(c *Config) { c.Budget.DrainBuffer = 10 * time.Minute; c.Budget.MaxConcurrentDrains = 0 },
			nodes: []*v1.Node{drainNode("busy", true, draining)}, n: drainNode("n", true, ours),
			reason: EventDrainWaiting, budget: "--drain-buffer"},
		{name: "outside the maintenance windows", cfg: func(c *Config) { c.Windows = []string{"* 01:00-02:00"} },
			n: drainNode("n", true, ours), reason: EventDrainWaiting, budget: "outside the maintenance windows"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := handlerConfig()
			tc.cfg(&cfg)
			objs := []runtime.Object{tc.n, podOn("n", "web")}
			for _, n := range tc.nodes {
				objs = append(objs, n)
			}
			h := newHandler(t, cfg, objs...)
			h.sync("n")
			if got := h.writes(); len(got) != 0 {
				t.Errorf("wrote %q although a budget forbids", got)
			}
			if got := h.reasons(); !slices.Equal(got, []string{"Normal " + tc.reason}) {
				t.Fatalf("events %q, want one %s", h.events, tc.reason)
			}
			if !strings.Contains(h.events[0], tc.budget) {
				t.Errorf("event %q does not name %q", h.events[0], tc.budget)
			}
			if d := h.c.Explain("n"); d.State != "waiting" {
				t.Errorf("Explain = %+v, want waiting", d)
			}
			// A re-check with the same verdict says nothing again.
			h.sync("n")
			if got := h.reasons(); len(got) != 1 {
				t.Errorf("re-check said more: %q", h.events)
			}
		})
	}
}

// Nodes the rules do not cover, or cordoned by someone else, are left alone.
func TestHandlerLeavesAlone(t *testing.T) {
	for _, tc := range []struct {
		name   string
		cfg    func(*Config)
		n      *v1.Node
		events []string
	}{
		{name: "no condition", cfg: func(*Config) {}, n: drainNode("n", false)},
		{name: "condition not held long enough", cfg: func(c *Config) { c.Conditions = []string{"KernelDeadlock=True,2h"} }, n: drainNode("n", true)},
		{name: "not selected", cfg: func(c *Config) { c.NodeSelector = "pool=b" }, n: drainNode("n", true)},
		{name: "cordoned by someone else", cfg: func(*Config) {},
			n: drainNode("n", true, func(n *v1.Node) { n.Spec.Unschedulable = true }), events: []string{"Normal " + EventDrainSkipped}},
		{name: "--skip-drain: cordoned, never drained", cfg: func(c *Config) { c.SkipDrain = true }, n: drainNode("n", true, ours)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := handlerConfig()
			tc.cfg(&cfg)
			h := newHandler(t, cfg, tc.n, podOn("n", "web"))
			h.sync("n")
			h.sync("n")
			if got := h.writes(); len(got) != 0 {
				t.Errorf("wrote %q", got)
			}
			if got := h.reasons(); !slices.Equal(got, tc.events) {
				t.Errorf("events %q, want %q", h.events, tc.events)
			}
		})
	}
}

// A node of ours whose condition cleared is uncordoned once --uncordon-after
// has passed on the clock, not before.
func TestHandlerUncordonAfter(t *testing.T) {
	cfg := handlerConfig()
	cfg.UncordonAfter = 5 * time.Minute
	n := drainNode("n", false, ours, func(n *v1.Node) {
		n.Status.Conditions = append(n.Status.Conditions, v1.NodeCondition{Type: "KernelDeadlock", Status: v1.ConditionFalse,
			LastTransitionTime: metav1.NewTime(handlerNow.Add(-time.Minute))})
	})
	h := newHandler(t, cfg, n)
	h.sync("n")
	if got := h.writes(); len(got) != 0 {
		t.Fatalf("uncordoned after 1m of --uncordon-after=5m: %q", got)
	}
	h.clk.Step(4*time.Minute + time.Second) // transition times count from the end of their second
	h.sync("n")
	if got := h.writes(); !slices.Equal(got, []string{"patch nodes n"}) {
		t.Fatalf("writes %q, want the uncordon patch", got)
	}
	if got := h.node("n"); got.Spec.Unschedulable || got.Annotations[AnnotationConditions] != "" {
		t.Errorf("node still cordoned or owned: %v %v", got.Spec.Unschedulable, got.Annotations)
	}
	if got := h.reasons(); !slices.Equal(got, []string{"Warning " + EventUncordonStarting, "Warning " + EventUncordonSucceeded}) {
		t.Errorf("events %q", h.events)
	}
}

// --dry-run decides as usual but writes nothing; evictions are server-side
// dry runs.
func TestHandlerDryRun(t *testing.T) {
	cfg := handlerConfig()
	cfg.DryRun = true
	h := newHandler(t, cfg, drainNode("n", true), podOn("n", "web"))
	var dryRuns []bool
	h.client.PrependReactor("create", "pods", func(a clienttesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() == "eviction" {
			ev := a.(clienttesting.CreateAction).GetObject().(*policyv1.Eviction)
			dryRuns = append(dryRuns, slices.Equal(ev.DeleteOptions.DryRun, []string{metav1.DryRunAll}))
			return true, nil, nil
		}
		return false, nil, nil
	})
	h.sync("n") // cordon (remembered only)
	h.sync("n") // schedule (remembered only) and drain
	h.until("DrainSucceeded", func() bool { return h.event(EventDrainSucceeded) != "" })
	for _, w := range h.writes() {
		if !strings.HasPrefix(w, "create pods/eviction ") {
			t.Errorf("dry-run wrote %q", w)
		}
	}
	if len(dryRuns) != 1 || !dryRuns[0] {
		t.Errorf("evictions %v, want one server-side dry run", dryRuns)
	}
	if n := h.node("n"); n.Spec.Unschedulable {
		t.Error("dry-run cordoned the node")
	}
}

// A drain a previous process had in flight (its leader killed mid-drain)
// whose condition cleared meanwhile is not resumed; that it stopped is
// said once, as a drain stopped in this process is (chaos seeds 40016 and
// 50018: the new leader said nothing, and the drain looked in flight with
// no reason for minutes). The cordon waits for --uncordon-after.
func TestHandlerPreviousLeadersDrainStoppedWhenItsConditionCleared(t *testing.T) {
	cleared := func(n *v1.Node) {
		n.Status.Conditions = append(n.Status.Conditions,
			v1.NodeCondition{Type: "KernelDeadlock", Status: v1.ConditionFalse, LastTransitionTime: metav1.NewTime(handlerNow.Add(-10 * time.Second))})
	}
	h := newHandler(t, handlerConfig(), drainNode("n", false, draining, cleared), podOn("n", "web-1"))
	h.sync("n")
	h.sync("n")
	var aborted int
	for _, r := range h.reasons() {
		if r == "Normal "+EventDrainAborted || r == "Warning "+EventDrainAborted {
			aborted++
		}
	}
	if aborted != 1 {
		t.Fatalf("events %q: want one %s", h.reasons(), EventDrainAborted)
	}
	if !strings.Contains(h.event(EventDrainAborted), "no drain condition matches the node any more") {
		t.Errorf("DrainAborted says %q", h.event(EventDrainAborted))
	}
	if len(h.evicted()) != 0 {
		t.Errorf("evicted %v: the drain was resumed", h.evicted())
	}
	if !h.node("n").Spec.Unschedulable {
		t.Error("uncordoned before --uncordon-after")
	}
}
