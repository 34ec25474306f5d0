package janitor

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/nodeshepherd/nodeshepherd/pkg/controllertest"
	"github.com/nodeshepherd/nodeshepherd/pkg/owner"
	rem "github.com/nodeshepherd/nodeshepherd/pkg/remediation"
)

var now = time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)

func at(t time.Time) *time.Time { return &t }

var (
	repairTaint = v1.Taint{Key: "example.com/repair", Effect: v1.TaintEffectNoSchedule}
	notReady    = v1.Taint{Key: v1.TaintNodeNotReady, Effect: v1.TaintEffectNoExecute}
	personal    = v1.Taint{Key: "example.com/maintenance", Effect: v1.TaintEffectNoSchedule}
)

// node carries the drain's cordon, a remediation taint, nodelifecycle's
// taint (no expiry), a person's taint (no record) and a repair record.
func node(cordonExp, taintExp, repairExp *time.Time) *v1.Node {
	n := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", UID: "u1", ResourceVersion: "7", Annotations: map[string]string{}},
		Spec: v1.NodeSpec{Unschedulable: true, Taints: []v1.Taint{notReady, repairTaint, personal}}}
	owner.Set(n, owner.Cordon, owner.Record{Controller: "drain", Why: "drain rules matched: KernelDeadlock=True,0s", Expires: cordonExp})
	owner.Set(n, owner.TaintKey(repairTaint), owner.Record{Controller: "remediation", Why: "remediation policy gpu, step 1", Expires: taintExp})
	owner.Set(n, owner.TaintKey(notReady), owner.Record{Controller: "nodelifecycle", Why: "Ready is False"})
	n.Annotations[rem.AnnotationState] = rem.EncodeState("gpu", rem.ActionDrain, rem.State{Step: 1, StepSince: now.Add(-2 * time.Hour), RepairSince: now.Add(-3 * time.Hour), Drain: true})
	if repairExp != nil {
		rem.SetRecordExpiry(n, *repairExp)
	}
	return n
}

func liveOf(names ...string) func(string) bool {
	return func(c string) bool { return slices.Contains(names, c) }
}

// Due lifts only expired records of controllers that are not live, and says
// when the next record of such a controller expires; records without an
// expiry and unreadable ones are never judged.
func TestDue(t *testing.T) {
	past, soon, later := at(now.Add(-time.Second)), at(now.Add(10*time.Minute)), at(now.Add(40*time.Minute))
	for _, c := range []struct {
		name                string
		n                   *v1.Node
		live                []string
		want                []string
		next                time.Time
		cordon, taint, repr *time.Time
	}{
		{name: "all expired, nothing live", n: node(past, past, past), want: []string{owner.Cordon, owner.TaintKey(repairTaint), rem.AnnotationState}},
		{name: "remediation live: its taint and repair record are its own", n: node(past, past, past), live: []string{"remediation", "drain"}},
		{name: "drain live", n: node(past, soon, later), live: []string{"drain"}, next: *soon},
		{name: "expiry exactly now", n: node(at(now), nil, nil), want: []string{owner.Cordon}},
		{name: "not yet", n: node(later, nil, soon), next: *soon},
		{name: "no expiry: never", n: node(nil, nil, nil)},
	} {
		t.Run(c.name, func(t *testing.T) {
			lifts, next := Due(c.n, liveOf(c.live...), now)
			if got := Keys(lifts); !slices.Equal(got, slices.Sorted(slices.Values(c.want))) {
				t.Errorf("lifts %v, want %v", got, c.want)
			}
			if !next.Equal(c.next) {
				t.Errorf("next %v, want %v", next, c.next)
			}
			for _, l := range lifts {
				if l.Why == "" || l.Expired.IsZero() {
					t.Errorf("lift %+v says no why or expiry", l)
				}
			}
		})
	}
	bad := node(past, past, past)
	bad.Annotations[owner.Annotation] = "{"
	bad.Annotations[rem.AnnotationState] = `{"policy":""}`
	if lifts, next := Due(bad, liveOf(), now); len(lifts) != 0 || !next.IsZero() {
		t.Errorf("unreadable records judged: %v, %v", Keys(lifts), next)
	}
}

func newJanitor(t *testing.T, n *v1.Node, live ...string) (*Janitor, *fake.Clientset, *record.FakeRecorder) {
	t.Helper()
	// NewSimpleClientset: the field-managed tracker of NewClientset builds
	// a type converter costing seconds under -race, for nothing here.
	client := fake.NewSimpleClientset(n)
	rec := record.NewFakeRecorder(10)
	nodes := informers.NewSharedInformerFactory(client, 0).Core().V1().Nodes()
	j, err := New(Deps{Client: client, Nodes: nodes, Recorder: rec, Clock: testingclock.NewFakeClock(now), Live: live})
	if err != nil {
		t.Fatal(err)
	}
	if err := nodes.Informer().GetIndexer().Add(n); err != nil {
		t.Fatal(err)
	}
	return j, client, rec
}

// One patch, bound to the resourceVersion judged, lifts the drain's cordon
// and the remediation's taint with their records and the repair record;
// nodelifecycle's taint and the person's stay. One event per lift names the
// controller and the record, and the metric counts it.
func TestSyncLiftsExpired(t *testing.T) {
	past := at(now.Add(-time.Minute))
	j, client, rec := newJanitor(t, node(past, past, past), "nodelifecycle")
	if err := j.sync(context.Background(), "n1"); err != nil {
		t.Fatal(err)
	}
	var patches []string
	for _, a := range client.Actions() {
		if p, ok := a.(k8stesting.PatchAction); ok {
			patches = append(patches, string(p.GetPatch()))
		}
	}
	if len(patches) != 1 || !strings.Contains(patches[0], `"resourceVersion":"7"`) {
		t.Fatalf("patches %v, want one bound to resourceVersion 7", patches)
	}
	n, err := client.CoreV1().Nodes().Get(context.Background(), "n1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if n.Spec.Unschedulable || !slices.Equal(n.Spec.Taints, []v1.Taint{notReady, personal}) {
		t.Errorf("unschedulable %v, taints %v", n.Spec.Unschedulable, n.Spec.Taints)
	}
	recs, _ := owner.Read(n)
	if got := owner.Keys(recs); !slices.Equal(got, []string{owner.TaintKey(notReady)}) {
		t.Errorf("records left %v", got)
	}
	if _, ok := n.Annotations[rem.AnnotationState]; ok {
		t.Error("the repair record stays")
	}
	evs := controllertest.Events(rec)
	if len(evs) != 3 {
		t.Fatalf("events %q, want one per lift", evs)
	}
	for i, want := range []string{"the cordon of controller drain", "the taint example.com/repair:NoSchedule of controller remediation", "the repair record " + rem.AnnotationState + " of controller remediation"} {
		if !strings.HasPrefix(evs[i], "Warning "+EventExpired+" Lifted "+want) || !strings.Contains(evs[i], "does not run in this process") {
			t.Errorf("event %q, want it to say %q", evs[i], want)
		}
	}
	if !strings.Contains(evs[2], "remediation policy gpu, step 2 (Drain)") {
		t.Errorf("the repair record's event %q does not say what it asked", evs[2])
	}
	if got := counter(t, j, "drain", KindCordon) + counter(t, j, "remediation", KindTaint) + counter(t, j, "remediation", KindRepair); got != 3 {
		t.Errorf("metric counts %v lifts, want 3", got)
	}
}

func counter(t *testing.T, j *Janitor, controller, kind string) float64 {
	t.Helper()
	c, err := j.expired.GetMetricWithLabelValues(controller, kind)
	if err != nil {
		t.Fatal(err)
	}
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

// A conflict is judged afresh on the node read again: its owner renewed the
// record meanwhile, so nothing is lifted and nothing said.
func TestConflictJudgedAfresh(t *testing.T) {
	past := at(now.Add(-time.Minute))
	stale := node(past, nil, nil)
	j, client, rec := newJanitor(t, stale, "remediation")
	renewed := node(at(now.Add(owner.Lease)), nil, nil)
	renewed.ResourceVersion = "8"
	if err := client.Tracker().Update(schema.GroupVersionResource{Version: "v1", Resource: "nodes"}, renewed, ""); err != nil {
		t.Fatal(err)
	}
	client.PrependReactor("patch", "nodes", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if !strings.Contains(string(a.(k8stesting.PatchAction).GetPatch()), `"resourceVersion":"8"`) {
			return true, nil, apierrors.NewConflict(schema.GroupResource{Resource: "nodes"}, "n1", nil)
		}
		return false, nil, nil
	})
	if err := j.sync(context.Background(), "n1"); err != nil {
		t.Fatal(err)
	}
	var gets, patches int
	for _, a := range client.Actions() {
		switch a.GetVerb() {
		case "get":
			gets++
		case "patch":
			patches++
		}
	}
	if gets != 1 || patches != 1 {
		t.Errorf("%d gets and %d patches, want the stale patch refused, one read, and no second patch", gets, patches)
	}
	n, _ := client.CoreV1().Nodes().Get(context.Background(), "n1", metav1.GetOptions{})
	if !n.Spec.Unschedulable {
		t.Error("the renewed cordon was lifted")
	}
	if evs := controllertest.Events(rec); len(evs) != 0 {
		t.Errorf("events %q", evs)
	}
}

// A cordon and taints without a record are never touched, expired records
// around them or not; a node with nothing expired is not written.
func TestOthersCordonUntouched(t *testing.T) {
	n := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", ResourceVersion: "3"},
		Spec: v1.NodeSpec{Unschedulable: true, Taints: []v1.Taint{personal, repairTaint}}}
	j, client, rec := newJanitor(t, n)
	if err := j.sync(context.Background(), "n1"); err != nil {
		t.Fatal(err)
	}
	for _, a := range client.Actions() {
		if a.GetVerb() != "list" && a.GetVerb() != "watch" {
			t.Errorf("wrote or read %s", a.GetVerb())
		}
	}
	if evs := controllertest.Events(rec); len(evs) != 0 {
		t.Errorf("events %q", evs)
	}
	// With an expired record of a taint, only that taint goes.
	m := n.DeepCopy()
	owner.Set(m, owner.TaintKey(repairTaint), owner.Record{Controller: "remediation", Expires: at(now.Add(-time.Second))})
	j, client, _ = newJanitor(t, m)
	if err := j.sync(context.Background(), "n1"); err != nil {
		t.Fatal(err)
	}
	got, _ := client.CoreV1().Nodes().Get(context.Background(), "n1", metav1.GetOptions{})
	if !got.Spec.Unschedulable || !slices.Equal(got.Spec.Taints, []v1.Taint{personal}) {
		t.Errorf("unschedulable %v, taints %v: want the person's cordon and taint", got.Spec.Unschedulable, got.Spec.Taints)
	}
}
