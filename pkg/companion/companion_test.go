package companion

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	coordinationv1 "k8s.io/api/coordination/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/record"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/nodeshepherd/nodeshepherd/pkg/manager"
)

var t0 = time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)

// entry is a managedFields entry as the API server writes it.
func entry(manager, subresource, fields string) metav1.ManagedFieldsEntry {
	return metav1.ManagedFieldsEntry{Manager: manager, Operation: metav1.ManagedFieldsOperationUpdate, Subresource: subresource,
		Time: &metav1.Time{Time: t0}, FieldsType: "FieldsV1", FieldsV1: metav1.NewFieldsV1(fields)}
}

// What kube-controller-manager v1.37 wrote on a node it found silent (read
// back from the local control plane, see docs/companion.md).
func silentNode(taintsBy, readyBy string) *v1.Node {
	return &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", ManagedFields: []metav1.ManagedFieldsEntry{
		entry("nodeshepherd", "", `{"f:metadata":{"f:labels":{".":{}}}}`),
		entry(taintsBy, "", `{"f:spec":{"f:podCIDR":{},"f:podCIDRs":{".":{},"v:\"10.244.1.0/24\"":{}},"f:taints":{}}}`),
		entry(readyBy, "status", `{"f:status":{"f:conditions":{"k:{\"type\":\"Ready\"}":{"f:lastTransitionTime":{},"f:message":{},"f:reason":{},"f:status":{}}}}}`),
	}},
		Spec:   v1.NodeSpec{PodCIDR: "10.244.1.0/24", Taints: []v1.Taint{{Key: v1.TaintNodeUnreachable, Effect: v1.TaintEffectNoExecute}}},
		Status: v1.NodeStatus{Conditions: []v1.NodeCondition{{Type: v1.NodeReady, Status: v1.ConditionUnknown}}}}
}

func TestCheckFindsTheLastWriterOfWhatAControllerOwns(t *testing.T) {
	n := silentNode(KubeControllerManager, KubeControllerManager)
	got := check("nodelifecycle", "nodeshepherd", NodeLifecycle, n)
	if len(got) != 2 {
		t.Fatalf("evidence %v, want the taints and the Ready condition", got)
	}
	if s := got[0].String(); !strings.Contains(s, "node n1: taints node.kubernetes.io/unreachable:NoExecute (spec.taints) last written by kube-controller-manager at 2026-11-24T12:00:00Z") {
		t.Errorf("evidence reads %q", s)
	}
	if s := got[1].String(); !strings.Contains(s, `condition Ready=Unknown (status.conditions[{"type":"Ready"}].status)`) {
		t.Errorf("evidence reads %q", s)
	}
	if got := check("nodeipam", "nodeshepherd", NodeIPAM, n); len(got) != 1 || got[0].What != "podCIDR 10.244.1.0/24" {
		t.Errorf("nodeipam evidence %v", got)
	}
	// Written by someone else (nodeshepherd itself): no evidence.
	if got := check("nodelifecycle", "nodeshepherd", NodeLifecycle, silentNode("nodeshepherd", "nodeshepherd")); len(got) != 0 {
		t.Errorf("nodeshepherd's own writes taken as another writer's: %v", got)
	}
	// A node without the values holds no claim, whoever wrote its fields.
	n.Spec.Taints, n.Status.Conditions[0].Status = nil, v1.ConditionTrue
	if got := check("nodelifecycle", "nodeshepherd", NodeLifecycle, n); len(got) != 0 {
		t.Errorf("healthy node: %v", got)
	}
	// A provider's cloud-controller-manager and its shutdown taint.
	n.Spec.Taints = []v1.Taint{{Key: "node.cloudprovider.kubernetes.io/shutdown", Effect: v1.TaintEffectNoSchedule}}
	n.ManagedFields[1].Manager = "aws-cloud-controller-manager"
	if got := check("cloudnodelifecycle", "nodeshepherd", CloudNodeLifecycle, n); len(got) != 1 || got[0].Writer != "aws-cloud-controller-manager" {
		t.Errorf("cloud evidence %v", got)
	}
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p", ManagedFields: []metav1.ManagedFieldsEntry{
		entry(KubeControllerManager, "status", `{"f:status":{"f:conditions":{"k:{\"type\":\"DisruptionTarget\"}":{".":{},"f:reason":{},"f:status":{}}}}}`)}},
		Status: v1.PodStatus{Conditions: []v1.PodCondition{{Type: v1.DisruptionTarget, Status: v1.ConditionTrue, Reason: "DeletionByTaintManager"}}}}
	if got := check("tainteviction", "nodeshepherd", TaintEviction, pod); len(got) != 1 || got[0].Name != "ns/p" {
		t.Errorf("taint eviction evidence %v", got)
	}
}

func lease(name string, renewed time.Time, holder string) *coordinationv1.Lease {
	return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: LeaseNamespace, Name: name},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(holder), LeaseDurationSeconds: ptr.To[int32](15), RenewTime: &metav1.MicroTime{Time: renewed}}}
}

func TestActiveReadsTheWritersLease(t *testing.T) {
	ctx := context.Background()
	now := t0.Add(time.Hour)
	for _, c := range []struct {
		name  string
		lease *coordinationv1.Lease
		want  bool
		why   string
	}{
		{"no lease: taken as running", nil, true, "no leader Lease kube-system/kube-controller-manager is visible"},
		{"renewed", lease(KubeControllerManager, now.Add(-2*time.Second), "kcm-1"), true, "held by kcm-1, renewed 2s ago"},
		{"expired", lease(KubeControllerManager, now.Add(-time.Minute), "kcm-1"), false, "last renewed 1m0s ago, so it no longer runs"},
	} {
		client := fake.NewClientset()
		if c.lease != nil {
			client = fake.NewClientset(c.lease)
		}
		ok, why := active(ctx, client, KubeControllerManager, now)
		if ok != c.want || !strings.Contains(why, c.why) {
			t.Errorf("%s: active %v (%s), want %v (%s)", c.name, ok, why, c.want, c.why)
		}
	}
}

type idle struct{ ran chan struct{} }

func (i idle) Run(ctx context.Context) error { close(i.ran); <-ctx.Done(); return nil }

func mctx(client *fake.Clientset, rec record.EventRecorder, dryRun bool) manager.Context {
	return manager.Context{Client: client, Informers: informers.NewSharedInformerFactory(client, 0), Registry: prometheus.NewRegistry(),
		Clock: clocktesting.NewFakeClock(t0.Add(time.Hour)), Recorder: func(string) record.EventRecorder { return rec }, DryRun: dryRun}
}

func TestGuardRefusesAtStartUnlessAllowed(t *testing.T) {
	g := Guarded{Name: "nodelifecycle", Replaces: "nodelifecycle", Claims: NodeLifecycle}
	build := func(manager.Context) (manager.Controller, error) { return idle{make(chan struct{})}, nil }
	rec := record.NewFakeRecorder(10)
	_, err := Guard(g, build)(mctx(fake.NewClientset(silentNode(KubeControllerManager, KubeControllerManager)), rec, false))
	for _, want := range []string{"refusing to run controller nodelifecycle: kube-controller-manager writes what it owns: node n1: taints node.kubernetes.io/unreachable:NoExecute",
		"kube-controller-manager runs: no leader Lease", "(and 1 more)", "--controllers=*,-nodelifecycle", "--allow-conflicting-writers=nodelifecycle"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v lacks %q", err, want)
		}
	}
	client := fake.NewClientset(silentNode(KubeControllerManager, KubeControllerManager))
	if _, err := Guard(g, build)(mctx(client, rec, false)); err == nil {
		t.Fatal("not refused")
	}
	wantEvent(t, client, "nodeshepherd's nodelifecycle controller not started: kube-controller-manager last wrote taints node.kubernetes.io/unreachable:NoExecute here")
	// Allowed, in dry run, or with the writer's Lease expired: it runs.
	allowed := g
	allowed.Allowed = true
	if _, err := Guard(allowed, build)(mctx(fake.NewClientset(silentNode(KubeControllerManager, KubeControllerManager)), rec, false)); err != nil {
		t.Errorf("--allow-conflicting-writers: %v", err)
	}
	if _, err := Guard(g, build)(mctx(fake.NewClientset(silentNode(KubeControllerManager, KubeControllerManager)), rec, true)); err != nil {
		t.Errorf("--dry-run: %v", err)
	}
	stale := fake.NewClientset(silentNode(KubeControllerManager, KubeControllerManager), lease(KubeControllerManager, t0, "kcm-0"))
	if _, err := Guard(g, build)(mctx(stale, rec, false)); err != nil {
		t.Errorf("writer whose Lease expired: %v", err)
	}
}

func TestGuardStopsTheControllerWhenAWriterAppears(t *testing.T) {
	healthy := silentNode("nodeshepherd", "nodeshepherd")
	healthy.Spec.Taints, healthy.Status.Conditions[0].Status = nil, v1.ConditionTrue
	client := fake.NewClientset(healthy)
	rec := record.NewFakeRecorder(10)
	ctx := mctx(client, rec, false)
	inner := idle{make(chan struct{})}
	c, err := Guard(Guarded{Name: "nodelifecycle", Replaces: "nodelifecycle", Claims: NodeLifecycle},
		func(manager.Context) (manager.Controller, error) { return inner, nil })(ctx)
	if err != nil {
		t.Fatalf("no other writer yet: %v", err)
	}
	run, cancel := context.WithCancel(context.Background())
	defer cancel()
	ctx.Informers.Start(run.Done())
	ctx.Informers.WaitForCacheSync(run.Done())
	done := make(chan error, 1)
	go func() { done <- c.Run(run) }()
	<-inner.ran
	// kube-controller-manager taints the node: the fake clientset records
	// the field manager as the API server does.
	n, err := client.CoreV1().Nodes().Get(run, healthy.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n.Spec.Taints = append(n.Spec.Taints, v1.Taint{Key: v1.TaintNodeNotReady, Effect: v1.TaintEffectNoExecute})
	if _, err := client.CoreV1().Nodes().Update(run, n, metav1.UpdateOptions{FieldManager: KubeControllerManager}); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "stopped controller nodelifecycle: kube-controller-manager writes what it owns") {
			t.Errorf("error %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the controller still runs 30s after kube-controller-manager's taint appeared")
	}
	wantEvent(t, client, "nodeshepherd's nodelifecycle controller stopped: kube-controller-manager last wrote taints node.kubernetes.io/not-ready:NoExecute here")
	var m dto.Metric
	if err := conflictMetric(ctx.Registry).WithLabelValues("nodelifecycle", KubeControllerManager).Write(&m); err != nil || m.GetGauge().GetValue() != 1 {
		t.Errorf("nodeshepherd_conflicting_writer = %v (%v), want 1", m.GetGauge().GetValue(), err)
	}
}

func TestSettings(t *testing.T) {
	s := Settings{AllowConflictingWriters: []string{"nodelifecycle"}}
	if !s.Allowed("nodelifecycle") || s.Allowed("nodeipam") {
		t.Error("Allowed")
	}
	if !(&Settings{AllowConflictingWriters: []string{"*"}}).Allowed("nodeipam") {
		t.Error("* allows all")
	}
	err := (&Settings{AllowConflictingWriters: []string{"nodelifecyle"}}).Validate([]string{"nodelifecycle"})
	if err == nil || !strings.Contains(err.Error(), `unknown controller "nodelifecyle" in --allow-conflicting-writers`) {
		t.Errorf("error %v", err)
	}
}

func wantEvent(t *testing.T, client *fake.Clientset, msg string) {
	t.Helper()
	evs, err := client.CoreV1().Events(metav1.NamespaceDefault).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range evs.Items {
		if e.Reason == EventConflictingWriter && e.Type == v1.EventTypeWarning && e.InvolvedObject.Kind == "Node" && strings.HasPrefix(e.Message, msg) {
			return
		}
	}
	t.Errorf("no Warning %s event %q among %d events", EventConflictingWriter, msg, len(evs.Items))
}

type panicky struct{}

func (panicky) Run(context.Context) error { panic("boom") }

// A panic of the guarded controller reaches the goroutine the manager runs
// it in, which turns it into the controller's error.
func TestGuardHandsBackAPanic(t *testing.T) {
	client := fake.NewClientset()
	c, err := Guard(Guarded{Name: "nodelifecycle", Claims: NodeLifecycle},
		func(manager.Context) (manager.Controller, error) { return panicky{}, nil })(mctx(client, nil, false))
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if r := recover(); r != "boom" {
			t.Errorf("recovered %v, want the controller's panic", r)
		}
	}()
	_ = c.Run(context.Background())
	t.Error("Run returned instead of panicking")
}
