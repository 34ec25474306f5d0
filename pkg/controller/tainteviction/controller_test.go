package tainteviction

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	testingclock "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
)

func value(c prometheus.Counter) float64 {
	m := &dto.Metric{}
	_ = c.Write(m)
	return m.GetCounter().GetValue()
}

// base is a whole second, as every time read from the API is.
var base = time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)

func noExec(key string, added *time.Time) v1.Taint {
	t := v1.Taint{Key: key, Effect: v1.TaintEffectNoExecute}
	if added != nil {
		t.TimeAdded = &metav1.Time{Time: *added}
	}
	return t
}

func tolFor(key string, seconds *int64) v1.Toleration {
	return v1.Toleration{Key: key, Operator: v1.TolerationOpExists, Effect: v1.TaintEffectNoExecute, TolerationSeconds: seconds}
}

func at(d time.Duration) *time.Time { t := base.Add(d); return &t }

func testNode(name string, taints ...v1.Taint) *v1.Node {
	return &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1.NodeSpec{Taints: taints}}
}

func testPod(name, node string, uid types.UID, created time.Time, tols ...v1.Toleration) *v1.Pod {
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, UID: uid, CreationTimestamp: metav1.NewTime(created)},
		Spec:       v1.PodSpec{NodeName: node, Tolerations: tols},
	}
}

// Deadlines come from the API's state alone, rounded so that no wait is
// shorter than tolerationSeconds.
func TestDecide(t *testing.T) {
	now := base.Add(time.Minute)
	c := &Controller{}
	seen := base.Add(3*time.Second + 250*time.Millisecond)
	nt := func(taints ...v1.Taint) *nodeTaints {
		n := &nodeTaints{taints: taints, seen: map[taintID]time.Time{}}
		for _, t := range taints {
			if t.TimeAdded == nil {
				n.seen[taintID{t.Key, t.Value}] = seen
			}
		}
		return n
	}
	old := base.Add(-time.Hour)
	cases := []struct {
		name  string
		nt    *nodeTaints
		pod   *v1.Pod
		must  bool
		due   time.Time
		cause string
	}{
		{"whole-second timeAdded: +1s", nt(noExec("a", at(0))), testPod("p", "n", "u", old, tolFor("a", ptr.To[int64](10))), true, base.Add(11 * time.Second), "a"},
		{"sub-second timeAdded is exact", nt(noExec("a", at(300*time.Millisecond))), testPod("p", "n", "u", old, tolFor("a", ptr.To[int64](10))), true, base.Add(10*time.Second + 300*time.Millisecond), "a"},
		{"no timeAdded: first seen", nt(noExec("a", nil)), testPod("p", "n", "u", old, tolFor("a", ptr.To[int64](10))), true, seen.Add(10 * time.Second), "a"},
		{"pod arrived after the taint", nt(noExec("a", at(0))), testPod("p", "n", "u", base.Add(30*time.Second), tolFor("a", ptr.To[int64](10))), true, base.Add(41 * time.Second), "a"},
		{"each taint counts from its own time", nt(noExec("a", at(0)), noExec("b", at(100*time.Second))),
			testPod("p", "n", "u", old, tolFor("a", ptr.To[int64](300)), tolFor("b", ptr.To[int64](10))), true, base.Add(111 * time.Second), "b"},
		{"the first to run out wins", nt(noExec("a", at(0)), noExec("b", at(100*time.Second))),
			testPod("p", "n", "u", old, tolFor("a", ptr.To[int64](60)), tolFor("b", ptr.To[int64](10))), true, base.Add(61 * time.Second), "a"},
		{"forever-tolerated taint does not count", nt(noExec("a", at(0)), noExec("b", at(5*time.Second))),
			testPod("p", "n", "u", old, tolFor("a", nil), tolFor("b", ptr.To[int64](10))), true, base.Add(16 * time.Second), "b"},
		{"all forever", nt(noExec("a", at(0))), testPod("p", "n", "u", old, tolFor("a", nil)), false, time.Time{}, ""},
		{"untolerated: at once", nt(noExec("a", at(0)), noExec("b", at(0))), testPod("p", "n", "u", old, tolFor("a", ptr.To[int64](10))), true, now, ""},
		{"tolerationSeconds 0: at once", nt(noExec("a", at(0))), testPod("p", "n", "u", old, tolFor("a", ptr.To[int64](0))), true, now, ""},
		{"first matching toleration is the one used", nt(noExec("a", at(0))), testPod("p", "n", "u", old, tolFor("a", nil), tolFor("a", ptr.To[int64](1))), false, time.Time{}, ""},
	}
	for _, tc := range cases {
		d := c.decide(klog.Background(), tc.pod, tc.nt, now)
		cause := ""
		if d.cause != nil {
			cause = d.cause.Key
		}
		if d.must != tc.must || !d.due.Equal(tc.due) || cause != tc.cause {
			t.Errorf("%s: got must=%v due=%v cause=%q, want %v %v %q", tc.name, d.must, d.due.Sub(base), cause, tc.must, tc.due.Sub(base), tc.cause)
		}
	}
}

// A toleration changed on a running pod counts from the change as the API
// server recorded it (managedFields, to the second: +1s), so that every
// leader computes the same deadline; an unchanged spec (generation 1) and
// writes that own no tolerations do not count.
func TestDecideTolerationChanged(t *testing.T) {
	now := base.Add(time.Minute)
	entry := func(manager, sub string, at time.Duration, fields string) metav1.ManagedFieldsEntry {
		tm := metav1.NewTime(base.Add(at))
		return metav1.ManagedFieldsEntry{Manager: manager, Operation: metav1.ManagedFieldsOperationUpdate, Subresource: sub,
			Time: &tm, FieldsType: "FieldsV1", FieldsV1: metav1.NewFieldsV1(fields)}
	}
	const tols = `{"f:spec":{"f:tolerations":{},"f:containers":{}}}`
	const labels = `{"f:metadata":{"f:labels":{}}}`
	const status = `{"f:status":{"f:conditions":{}}}`
	created := base.Add(-time.Hour)
	nt := &nodeTaints{taints: []v1.Taint{noExec("a", at(0))}}
	cases := []struct {
		name    string
		gen     int64
		entries []metav1.ManagedFieldsEntry
		due     time.Duration
	}{
		{"never changed", 1, []metav1.ManagedFieldsEntry{entry("creator", "", -time.Hour, tols)}, 11 * time.Second},
		{"changed after the taint: from the change, +1s", 2,
			[]metav1.ManagedFieldsEntry{entry("creator", "", -time.Hour, labels), entry("kubectl-patch", "", 20*time.Second, tols)}, 31 * time.Second},
		{"changed before the taint: from the taint", 2,
			[]metav1.ManagedFieldsEntry{entry("kubectl-patch", "", -time.Minute, tols)}, 11 * time.Second},
		{"other writes after the change do not count", 2,
			[]metav1.ManagedFieldsEntry{entry("kubectl-patch", "", 20*time.Second, tols), entry("labeller", "", 40*time.Second, labels),
				entry("kubelet", "status", 50*time.Second, status)}, 31 * time.Second},
		{"server without pod generations", 0, []metav1.ManagedFieldsEntry{entry("kubectl-patch", "", 20*time.Second, tols)}, 31 * time.Second},
		{"managedFields cleared", 2, nil, 11 * time.Second},
	}
	for _, tc := range cases {
		pod := testPod("p", "n", "u", created, tolFor("a", ptr.To[int64](10)))
		pod.Generation, pod.ManagedFields = tc.gen, tc.entries
		d := (&Controller{}).decide(klog.Background(), pod, nt, now)
		if !d.must || !d.due.Equal(base.Add(tc.due)) {
			t.Errorf("%s: got must=%v due=%v, want due %v", tc.name, d.must, d.due.Sub(base), tc.due)
		}
		// explain says what the controller does.
		if must, due, _ := Deadline(pod, nt.taints, now); !must || !due.Equal(d.due) {
			t.Errorf("%s: explain's deadline %v, the controller's %v", tc.name, due.Sub(base), d.due.Sub(base))
		}
	}
}

// Upstream's schedule rules ("lengthening toleration shouldn't work",
// forever cancels, untolerated evicts at once) on the timed workers alone,
// and a deadline recomputed when the taint that set it goes.
func TestScheduleRules(t *testing.T) {
	clk := testingclock.NewFakeClock(base)
	fired := make(chan string, 10)
	c := &Controller{clock: clk}
	c.workers = newTimedWorkers(clk, func(key string, _ timedWork) bool { fired <- key; return false }, retryBackoff)
	ctx := context.Background()
	old := base.Add(-time.Hour)
	nt := &nodeTaints{taints: []v1.Taint{noExec("a", at(0)), noExec("b", at(0))}}
	due := func() time.Duration {
		w, ok := c.workers.Get("default/p")
		if !ok {
			return -1
		}
		return w.due.Sub(base)
	}

	c.processPod(ctx, testPod("p", "n", "u", old, tolFor("a", ptr.To[int64](1)), tolFor("b", ptr.To[int64](5))), nt, base)
	if d := due(); d != 2*time.Second {
		t.Fatalf("scheduled at base+%v, want base+2s", d)
	}
	// Lengthening the toleration later keeps the existing schedule.
	clk.SetTime(base.Add(500 * time.Millisecond))
	c.processPod(ctx, testPod("p", "n", "u", old, tolFor("a", ptr.To[int64](100)), tolFor("b", ptr.To[int64](5))), nt, clk.Now())
	if d := due(); d != 2*time.Second {
		t.Errorf("lengthening moved the schedule to base+%v", d)
	}
	// The taint that set it goes: the deadline is recomputed from what is left.
	clk.SetTime(base.Add(600 * time.Millisecond))
	c.processPod(ctx, testPod("p", "n", "u", old, tolFor("a", ptr.To[int64](100)), tolFor("b", ptr.To[int64](5))),
		&nodeTaints{taints: []v1.Taint{noExec("b", at(0))}}, clk.Now())
	if d := due(); d != 6*time.Second {
		t.Errorf("after taint a went: base+%v, want base+6s", d)
	}
	// Tolerating forever cancels.
	clk.SetTime(base.Add(700 * time.Millisecond))
	c.processPod(ctx, testPod("p", "n", "u", old, tolFor("a", nil), tolFor("b", nil)), nt, clk.Now())
	if d := due(); d != -1 {
		t.Error("infinite toleration did not cancel")
	}
	// Not tolerating at all evicts at once.
	clk.SetTime(base.Add(800 * time.Millisecond))
	c.processPod(ctx, testPod("p", "n", "u", old), nt, clk.Now())
	select {
	case key := <-fired:
		if key != "default/p" {
			t.Errorf("fired %s", key)
		}
	case <-time.After(time.Minute):
		t.Fatal("untolerated taint: no immediate eviction")
	}
}

type harness struct {
	t      *testing.T
	ctx    context.Context
	client *fake.Clientset
	clk    *testingclock.FakeClock
	c      *Controller
	rec    *record.FakeRecorder

	mu      sync.Mutex
	events  []string
	deletes []*metav1.Preconditions
	// failDeletes makes that many deletes fail (-1: all).
	failDeletes int
	// onDelete, when set, handles a delete (h.mu held) as a reactor does.
	onDelete func(clienttesting.Action) (bool, runtime.Object, error)
	// dryRun starts the controller with --dry-run.
	dryRun bool
}

func start(t *testing.T, objs ...runtime.Object) *harness {
	t.Helper()
	return startWith(t, nil, objs...)
}

// startWith is start with the harness prepared by prepare before anything runs.
func startWith(t *testing.T, prepare func(*harness), objs ...runtime.Object) *harness {
	t.Helper()
	h := &harness{t: t, client: fake.NewSimpleClientset(objs...), clk: testingclock.NewFakeClock(base), rec: record.NewFakeRecorder(1000)}
	if prepare != nil {
		prepare(h)
	}
	h.client.PrependReactor("delete", "pods", func(a clienttesting.Action) (bool, runtime.Object, error) {
		h.mu.Lock()
		defer h.mu.Unlock()
		h.deletes = append(h.deletes, a.(clienttesting.DeleteActionImpl).DeleteOptions.Preconditions)
		if h.onDelete != nil {
			if handled, obj, err := h.onDelete(a); handled {
				return handled, obj, err
			}
		}
		if h.failDeletes != 0 {
			h.failDeletes--
			return true, nil, apierrors.NewForbidden(v1.Resource("pods"), a.(clienttesting.DeleteActionImpl).Name, errors.New("denied by policy"))
		}
		// The API server's UID precondition, which the fake tracker lacks.
		if pre := a.(clienttesting.DeleteActionImpl).DeleteOptions.Preconditions; pre != nil && pre.UID != nil {
			obj, err := h.client.Tracker().Get(v1.SchemeGroupVersion.WithResource("pods"), a.GetNamespace(), a.(clienttesting.DeleteActionImpl).Name)
			if err == nil && obj.(*v1.Pod).UID != *pre.UID {
				return true, nil, apierrors.NewConflict(v1.Resource("pods"), a.(clienttesting.DeleteActionImpl).Name, errors.New("UID precondition failed"))
			}
		}
		return false, nil, nil
	})
	f := informers.NewSharedInformerFactory(h.client, 0)
	c, err := New(Config{DryRun: h.dryRun}, Deps{Client: h.client, Nodes: f.Core().V1().Nodes(), Pods: f.Core().V1().Pods(),
		Recorder: h.rec, Registry: prometheus.NewRegistry(), Clock: h.clk})
	if err != nil {
		t.Fatal(err)
	}
	h.c = c
	ctx, cancel := context.WithCancel(context.Background())
	h.ctx = ctx
	f.Start(ctx.Done())
	done := make(chan struct{})
	go func() { _ = c.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done; f.Shutdown() })
	return h
}

// until polls (real time) for what goroutines do; the controller's own time
// is the fake clock. The deadline is for a busy machine under -race.
func (h *harness) until(what string, cond func() bool) {
	h.t.Helper()
	if err := wait.PollUntilContextTimeout(h.ctx, time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		return cond(), nil
	}); err != nil {
		h.t.Fatalf("%s: not reached", what)
	}
}

// eventsLike returns the events recorded so far that contain s.
func (h *harness) eventsLike(s string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	for {
		select {
		case e := <-h.rec.Events:
			h.events = append(h.events, e)
			continue
		default:
		}
		break
	}
	n := 0
	for _, e := range h.events {
		if strings.Contains(e, s) {
			n++
		}
	}
	return n
}

func (h *harness) deleteCount() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.deletes)
}

func (h *harness) due(key string) (time.Duration, types.UID) {
	w, ok := h.c.workers.Get(key)
	if !ok {
		return -1, ""
	}
	return w.due.Sub(base), w.uid
}

func (h *harness) podGone(name string) bool {
	_, err := h.client.CoreV1().Pods("default").Get(h.ctx, name, metav1.GetOptions{})
	return apierrors.IsNotFound(err)
}

// A new leader continues the countdown from the taint's timeAdded, and
// evicts at once when it is already over (here the controller starts at
// base, after the taints were added).
func TestCountdownContinuesFromTimeAdded(t *testing.T) {
	old := base.Add(-time.Hour)
	h := start(t,
		testNode("n1", noExec("a", at(-5*time.Second))), testNode("n2", noExec("a", at(-20*time.Second))),
		testPod("p1", "n1", "u1", old, tolFor("a", ptr.To[int64](10))), testPod("p2", "n2", "u2", old, tolFor("a", ptr.To[int64](10))))
	h.until("p2 evicted at once", func() bool { return h.podGone("p2") })
	h.until("p1 scheduled", func() bool { d, _ := h.due("default/p1"); return d == 6*time.Second })
	h.clk.Step(6*time.Second - time.Millisecond)
	if h.podGone("p1") {
		t.Fatal("p1 deleted before its toleration ran out")
	}
	h.clk.Step(time.Millisecond)
	h.until("p1 evicted at timeAdded+1s+10s", func() bool { return h.podGone("p1") })
	h.until("two deletions counted", func() bool { return value(h.c.deletions) == 2 })
}

// A failed delete is retried with backoff until it succeeds; one event.
func TestFailedDeletesAreRetriedUntilTheySucceed(t *testing.T) {
	// The deletes fail from the first: set before the controller starts.
	h := startWith(t, func(h *harness) { h.failDeletes = 9 },
		testNode("n1", noExec("a", at(-time.Second))), testPod("p", "n1", "u1", base.Add(-time.Hour)))
	errs := func() int { return int(value(h.c.deletionErrors)) }
	// armed: the retry after the i-th failure waits on the clock.
	armed := func(i int) func() bool {
		return func() bool { w, ok := h.c.workers.Get("default/p"); return ok && w.attempts == i && !w.running }
	}
	h.until("first failure", armed(1))
	for i := 1; i < 9; i++ {
		h.clk.Step(retryBackoff(i) - time.Millisecond)
		if n := h.deleteCount(); n != i {
			t.Fatalf("attempt %d made before its backoff %v", n, retryBackoff(i))
		}
		h.clk.Step(time.Millisecond)
		h.until(fmt.Sprintf("failure %d", i+1), armed(i+1))
	}
	if errs() != 9 {
		t.Errorf("%d failures counted, want 9", errs())
	}
	if retryBackoff(9) != 25600*time.Millisecond || retryBackoff(10) != retryMax || retryBackoff(40) != retryMax {
		t.Errorf("backoff: %v %v %v", retryBackoff(9), retryBackoff(10), retryBackoff(40))
	}
	h.clk.Step(retryBackoff(9))
	h.until("deleted at the 10th attempt", func() bool { return h.podGone("p") })
	h.until("counted", func() bool { return value(h.c.deletions) == 1 })
	if n := h.eventsLike("Marking for deletion Pod default/p"); n != 1 {
		t.Errorf("%d Marking events, want 1", n)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, pre := range h.deletes {
		if pre == nil || pre.UID == nil || *pre.UID != "u1" {
			t.Fatalf("delete without the pod's UID as precondition: %+v", pre)
		}
	}
}

// Retries end when the pod no longer must go: the taint is removed.
func TestRetriesStopWhenTheTaintGoes(t *testing.T) {
	h := startWith(t, func(h *harness) { h.failDeletes = -1 },
		testNode("n1", noExec("a", at(-time.Second))), testPod("p", "n1", "u1", base.Add(-time.Hour)))
	h.until("first failure", func() bool { w, ok := h.c.workers.Get("default/p"); return ok && w.attempts == 1 && !w.running })
	if _, err := h.client.CoreV1().Nodes().Update(h.ctx, testNode("n1"), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	h.until("retry cancelled", func() bool { d, _ := h.due("default/p"); return d == -1 })
	h.until("cancel event", func() bool { return h.eventsLike("Cancelling deletion of Pod default/p") == 1 })
	h.clk.Step(time.Hour)
	if n := h.deleteCount(); n != 1 {
		t.Errorf("%d delete attempts after the taint went", n)
	}
	if h.podGone("p") {
		t.Error("pod deleted")
	}
}

// A pod recreated under the same name (a StatefulSet's) while a deletion is
// pending gets its own countdown; the old one never deletes it.
func TestRecreatedPodIsNotDeletedByTheOldCountdown(t *testing.T) {
	h := start(t, testNode("n1", noExec("a", at(0))), testPod("p", "n1", "u1", base.Add(-time.Hour), tolFor("a", ptr.To[int64](10))))
	h.until("scheduled", func() bool { d, _ := h.due("default/p"); return d == 11*time.Second })
	pods := h.client.CoreV1().Pods("default")
	if err := pods.Delete(h.ctx, "p", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := pods.Create(h.ctx, testPod("p", "n1", "u2", base.Add(5*time.Second), tolFor("a", ptr.To[int64](10))), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	h.until("rescheduled for the new pod", func() bool { d, uid := h.due("default/p"); return uid == "u2" && d == 16*time.Second })
	h.clk.Step(11 * time.Second)
	if h.podGone("p") || h.deleteCount() != 1 {
		t.Fatal("the old countdown deleted the new pod")
	}
	h.clk.Step(5 * time.Second)
	h.until("new pod evicted by its own countdown", func() bool { return h.podGone("p") })
	if n := h.eventsLike("Cancelling deletion of Pod default/p"); n != 1 {
		t.Errorf("%d cancel events for the old pod, want 1", n)
	}
}

// The deletion itself checks the UID: a timer of an old pod that fires
// before the informer saw the new one deletes nothing.
func TestDeletePodChecksUID(t *testing.T) {
	h := start(t, testPod("p", "n1", "u2", base))
	if err := h.c.deletePod(h.ctx, types.NamespacedName{Namespace: "default", Name: "p"}, "u1", func() {}); !errors.Is(err, errPodGone) {
		t.Errorf("deletePod of an old UID: %v, want errPodGone", err)
	}
	if h.podGone("p") || h.deleteCount() != 0 {
		t.Error("the new pod was deleted")
	}
	p, _ := h.client.CoreV1().Pods("default").Get(h.ctx, "p", metav1.GetOptions{})
	if len(p.Status.Conditions) != 0 {
		t.Errorf("the new pod was marked: %+v", p.Status.Conditions)
	}
}

// kubernetes/kubernetes#90794: removing the taint that set the countdown, or
// tolerating it forever, cancels the deletion while other taints remain.
func TestCancelledWhenTheTaintGoesOrIsToleratedForever(t *testing.T) {
	taints := []v1.Taint{noExec("dedicated", at(0)), noExec("maintenance", at(0))}
	tols := []v1.Toleration{tolFor("dedicated", nil), tolFor("maintenance", ptr.To[int64](10))}
	h := start(t, testNode("n1", taints...), testNode("n2", taints...),
		testPod("p1", "n1", "u1", base.Add(-time.Hour), tols...), testPod("p2", "n2", "u2", base.Add(-time.Hour), tols...))
	for _, p := range []string{"default/p1", "default/p2"} {
		h.until(p+" scheduled", func() bool { d, _ := h.due(p); return d == 11*time.Second })
	}
	if _, err := h.client.CoreV1().Nodes().Update(h.ctx, testNode("n1", taints[0]), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	p2 := testPod("p2", "n2", "u2", base.Add(-time.Hour), tols[0], tolFor("maintenance", nil))
	if _, err := h.client.CoreV1().Pods("default").Update(h.ctx, p2, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"p1", "p2"} {
		h.until(p+" cancelled", func() bool { d, _ := h.due("default/" + p); return d == -1 })
		h.until(p+" cancel event", func() bool { return h.eventsLike("Cancelling deletion of Pod default/"+p) == 1 })
	}
	h.clk.Step(time.Hour)
	if h.podGone("p1") || h.podGone("p2") || h.deleteCount() != 0 {
		t.Error("a cancelled deletion happened")
	}
}
