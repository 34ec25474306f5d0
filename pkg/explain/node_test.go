package explain

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	v1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/nodeshepherd/nodeshepherd/pkg/controller/drain"
	"github.com/nodeshepherd/nodeshepherd/pkg/controller/drain/budget"
	"github.com/nodeshepherd/nodeshepherd/pkg/controller/nodelifecycle"
	"github.com/nodeshepherd/nodeshepherd/pkg/controller/outofservice"
	rem "github.com/nodeshepherd/nodeshepherd/pkg/remediation"
)

// now is whole-second, as API timestamps are; every time below is relative.
var now = time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)

func ago(d time.Duration) metav1.Time { return metav1.NewTime(now.Add(-d)) }

func options(drainConditions ...string) NodeOptions {
	nl := nodelifecycle.DefaultConfig()
	d := drain.DefaultConfig()
	d.Conditions = drainConditions
	return NodeOptions{NodeLifecycle: nl, Drain: d, Now: func() time.Time { return now }}
}

// managed is a managedFields entry: manager wrote the fields at t.
func managed(manager string, t time.Duration, fields string) metav1.ManagedFieldsEntry {
	at := ago(t)
	return metav1.ManagedFieldsEntry{Manager: manager, Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "v1", Time: &at,
		FieldsType: "FieldsV1", FieldsV1: metav1.NewFieldsV1(fields)}
}

func node(name, zone string, ready v1.ConditionStatus, heartbeat time.Duration) *v1.Node {
	return &v1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{v1.LabelTopologyZone: zone}, CreationTimestamp: ago(time.Hour)},
		Status: v1.NodeStatus{Conditions: []v1.NodeCondition{{Type: v1.NodeReady, Status: ready, Reason: "KubeletReady",
			LastHeartbeatTime: ago(heartbeat), LastTransitionTime: ago(30 * time.Minute)}}},
	}
}

func lease(name string, renewed time.Duration) *coordinationv1.Lease {
	t := metav1.NewMicroTime(now.Add(-renewed))
	return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: v1.NamespaceNodeLease}, Spec: coordinationv1.LeaseSpec{RenewTime: &t}}
}

func pod(name, nodeName string, tolerations ...v1.Toleration) *v1.Pod {
	return &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", Labels: map[string]string{"app": "web"}, CreationTimestamp: ago(2 * time.Hour),
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web-1", UID: "rs", Controller: ptr.To(true)}}},
		Spec: v1.PodSpec{NodeName: nodeName, Tolerations: tolerations}}
}

func explainFor(t *testing.T, name string, o NodeOptions, objs ...runtime.Object) *NodeExplanation {
	t.Helper()
	e, err := Node(context.Background(), fake.NewClientset(objs...), name, o)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func TestExplainNodeHealthyJudgesTheLatestHeartbeatAgainstTheGrace(t *testing.T) {
	n := node("a", "z1", v1.ConditionTrue, 10*time.Second)
	e := explainFor(t, "a", options(), n, lease("a", 3*time.Second))
	if e.Health.Judgment != JudgmentHealthy {
		t.Fatalf("judgment %s: %s", e.Health.Judgment, e.Health.Message)
	}
	// Lease renewed 3s ago, rounded up to the end of its second, plus 50s.
	if want := now.Add(-3*time.Second + time.Second + 50*time.Second); !e.Heartbeats.Deadline.Equal(want) {
		t.Errorf("deadline %v, want %v", e.Heartbeats.Deadline, want)
	}
	if e.Heartbeats.GraceSetting != "nodeMonitorGracePeriod" || e.Heartbeats.Lease.Age != "3s" || e.Heartbeats.NodeStatus.Age != "10s" {
		t.Errorf("heartbeats %+v", e.Heartbeats)
	}
	if e.Zone.Name != "z1" || e.Zone.State != "Normal" || e.Settings.Source != "defaults" {
		t.Errorf("zone %+v settings %+v", e.Zone, e.Settings)
	}
	if e.Drain.State != "not-configured" || e.OutOfService.State != "in-service" {
		t.Errorf("drain %+v oos %+v", e.Drain, e.OutOfService)
	}
}

func TestExplainNodeSilentPastTheGraceIsOverdue(t *testing.T) {
	n := node("a", "z1", v1.ConditionTrue, 70*time.Second)
	e := explainFor(t, "a", options(), n, lease("a", 60*time.Second))
	if e.Health.Judgment != JudgmentOverdue || !strings.Contains(e.Health.Message, "marked Unknown") {
		t.Fatalf("health %+v", e.Health)
	}
}

func TestExplainNodeWithoutReadyUsesTheStartupGraceFromCreation(t *testing.T) {
	n := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "a", CreationTimestamp: ago(20 * time.Second)}}
	e := explainFor(t, "a", options(), n)
	if e.Health.Judgment != JudgmentStarting || e.Heartbeats.GraceSetting != "nodeStartupGracePeriod" {
		t.Fatalf("health %+v heartbeats %+v", e.Health, e.Heartbeats)
	}
	if want := now.Add(-20*time.Second + time.Second + time.Minute); !e.Heartbeats.Deadline.Equal(want) {
		t.Errorf("deadline %v, want %v", e.Heartbeats.Deadline, want)
	}
}

func TestExplainNodeUnreachableTaintsAttributedAndPodsEvictionTimes(t *testing.T) {
	n := node("a", "z1", v1.ConditionUnknown, 2*time.Minute)
	n.Status.Conditions[0].Reason = nodelifecycle.ReasonStatusUnknown
	added := ago(20 * time.Second)
	n.Spec.Taints = []v1.Taint{{Key: v1.TaintNodeUnreachable, Effect: v1.TaintEffectNoExecute, TimeAdded: &added},
		{Key: v1.TaintNodeUnreachable, Effect: v1.TaintEffectNoSchedule}}
	n.ManagedFields = []metav1.ManagedFieldsEntry{
		managed("fakenodes", time.Hour, `{"f:metadata":{"f:labels":{}}}`),
		managed("nodeshepherd", 20*time.Second, `{"f:spec":{"f:taints":{}}}`),
		managed("nodeshepherd", 20*time.Second, `{"f:status":{"f:conditions":{"k:{\"type\":\"Ready\"}":{"f:status":{}}}}}`),
	}
	plain := pod("plain", "a")
	patient := pod("patient", "a", v1.Toleration{Key: v1.TaintNodeUnreachable, Operator: v1.TolerationOpExists, Effect: v1.TaintEffectNoExecute, TolerationSeconds: ptr.To[int64](300)})
	ds := pod("ds", "a", v1.Toleration{Key: v1.TaintNodeUnreachable, Operator: v1.TolerationOpExists, Effect: v1.TaintEffectNoExecute})
	ds.OwnerReferences[0].Kind = "DaemonSet"
	elsewhere := pod("elsewhere", "b")
	e := explainFor(t, "a", options(), n, plain, patient, ds, elsewhere, node("b", "z1", v1.ConditionTrue, time.Second))

	if e.Health.Judgment != JudgmentUnknown || e.Health.MarkedBy != "nodeshepherd" || !strings.Contains(e.Health.Message, "fell silent") {
		t.Errorf("health %+v", e.Health)
	}
	if len(e.Taints) != 2 {
		t.Fatalf("taints %+v", e.Taints)
	}
	tt := e.Taints[0]
	if tt.SetBy != "nodeshepherd" || tt.SinceFrom != "timeAdded" || !tt.Since.Equal(added.Time) || !strings.Contains(tt.Why, "Ready=Unknown") {
		t.Errorf("NoExecute taint %+v", tt)
	}
	if tt := e.Taints[1]; tt.SinceFrom != "managedFields" || !tt.Since.Equal(now.Add(-20*time.Second)) {
		t.Errorf("NoSchedule taint %+v", tt)
	}
	got := map[string]PodEviction{}
	for _, p := range e.Evictions {
		got[p.Name] = p
	}
	if len(got) != 3 {
		t.Fatalf("evictions of pods on other nodes too: %+v", e.Evictions)
	}
	if p := got["plain"]; p.Eviction != EvictNow || p.Taint != v1.TaintNodeUnreachable+":NoExecute" {
		t.Errorf("plain %+v", p)
	}
	// timeAdded rounded up to the end of its second: never sooner than 300s.
	if p := got["patient"]; p.Eviction != EvictAt || !p.At.Equal(added.Add(time.Second+300*time.Second)) || *p.TolerationSeconds != 300 {
		t.Errorf("patient %+v", p)
	}
	if p := got["ds"]; p.Eviction != EvictNever || !strings.Contains(p.Note, "DaemonSet") {
		t.Errorf("ds %+v", p)
	}
	if e.Zone.NotReady != 1 || e.Zone.Nodes != 2 || e.Zone.State != "Normal" {
		t.Errorf("zone %+v", e.Zone)
	}
}

func TestExplainNodeZoneStates(t *testing.T) {
	objs := []runtime.Object{}
	for _, name := range []string{"a", "b", "c"} {
		objs = append(objs, node(name, "z1", v1.ConditionUnknown, time.Minute))
	}
	objs = append(objs, node("d", "z2", v1.ConditionTrue, time.Second))
	if e := explainFor(t, "a", options(), objs...); e.Zone.State != "FullDisruption" || e.Zone.NotReady != 3 {
		t.Errorf("zone %+v", e.Zone)
	}
	objs = append(objs, node("e", "z1", v1.ConditionTrue, time.Second))
	if e := explainFor(t, "a", options(), objs...); e.Zone.State != "PartialDisruption" {
		t.Errorf("zone %+v", e.Zone)
	}
}

func kernelDeadlock(n *v1.Node, since time.Duration) {
	n.Status.Conditions = append(n.Status.Conditions, v1.NodeCondition{Type: "KernelDeadlock", Status: v1.ConditionTrue, LastTransitionTime: ago(since)})
}

func TestExplainNodeCordonedByAHumanIsLeftAlone(t *testing.T) {
	n := node("a", "z1", v1.ConditionTrue, time.Second)
	kernelDeadlock(n, 10*time.Minute)
	n.Spec.Unschedulable = true
	n.ManagedFields = []metav1.ManagedFieldsEntry{managed("kubectl-cordon", time.Minute, `{"f:spec":{"f:unschedulable":{}}}`)}
	e := explainFor(t, "a", options("KernelDeadlock=True,5m"), n)
	d := e.Drain
	if d.State != "left-to-human" || d.CordonedBy != "kubectl-cordon" || d.CordonedByDrain || !strings.Contains(d.Summary, "nodeshepherd leaves it") {
		t.Fatalf("drain %+v", d)
	}
	if d.MatchedSince == nil || !d.MatchedSince.Equal(now.Add(-10*time.Minute)) || d.Matched[0] != "KernelDeadlock=True,5m0s" {
		t.Errorf("matched %v since %v", d.Matched, d.MatchedSince)
	}
}

func TestExplainNodeDrainPendingThenWaitingForACordonBudget(t *testing.T) {
	n := node("a", "z1", v1.ConditionTrue, time.Second)
	kernelDeadlock(n, time.Minute)
	e := explainFor(t, "a", options("KernelDeadlock=True,5m"), n)
	if e.Drain.State != "pending" || !e.Drain.PendingUntil.Equal(now.Add(-time.Minute+time.Second+5*time.Minute)) {
		t.Fatalf("drain %+v", e.Drain)
	}
	// Matched, but another node already holds the one cordon 10 % allows.
	other := node("b", "z1", v1.ConditionTrue, time.Second)
	other.Spec.Unschedulable, other.Annotations = true, map[string]string{drain.AnnotationConditions: "KernelDeadlock=True,0s"}
	e = explainFor(t, "a", options("KernelDeadlock=True"), n, other)
	if d := e.Drain; d.State != "waiting" || d.Budget == nil || d.Budget.Allowed || d.Budget.Budget != budget.MaxCordoned || d.Budget.Action != "cordon" {
		t.Fatalf("drain %+v budget %+v", d, d.Budget)
	}
}

func TestExplainNodeDrainBlockedByAPodDisruptionBudget(t *testing.T) {
	n := node("a", "z1", v1.ConditionTrue, time.Second)
	kernelDeadlock(n, 10*time.Minute)
	n.Spec.Unschedulable = true
	n.Annotations = map[string]string{drain.AnnotationConditions: "KernelDeadlock=True,0s", drain.AnnotationBlockedSince: "2026-11-24T11:58:00.500000000Z"}
	n.Status.Conditions = append(n.Status.Conditions, v1.NodeCondition{Type: drain.ConditionDrainScheduled, Status: v1.ConditionTrue, Reason: drain.ConditionReason,
		Message: "Drain activity scheduled 2026-11-24T11:57:00.000000000Z", LastTransitionTime: ago(3 * time.Minute)})
	n.ManagedFields = []metav1.ManagedFieldsEntry{managed("nodeshepherd", 3*time.Minute, `{"f:spec":{"f:unschedulable":{}}}`)}
	web := pod("web-0", "a")
	protected := pod("db-0", "a")
	protected.Annotations = map[string]string{drain.SafeToEvictAnnotation: "false"}
	pdb := &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default"},
		Spec:   policyv1.PodDisruptionBudgetSpec{MinAvailable: ptr.To(intstr.FromInt32(2)), Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}},
		Status: policyv1.PodDisruptionBudgetStatus{DisruptionsAllowed: 0, CurrentHealthy: 2, DesiredHealthy: 2, ExpectedPods: 2}}
	e := explainFor(t, "a", options("KernelDeadlock=True"), n, web, protected, pdb)
	d := e.Drain
	if d.State != "draining" || !d.CordonedByDrain || d.CordonedBy != "nodeshepherd" || d.ScheduledAt == nil || !d.ScheduledAt.Equal(now.Add(-3*time.Minute)) {
		t.Fatalf("drain %+v", d)
	}
	if d.BlockedSince == nil || !d.BlockedSince.Equal(now.Add(-2*time.Minute+500*time.Millisecond)) {
		t.Errorf("blocked since %v", d.BlockedSince)
	}
	if len(d.Blockers) != 1 {
		t.Fatalf("blockers %+v (the protected pod is never evicted, so never blocked)", d.Blockers)
	}
	b := d.Blockers[0]
	if b.Pod != "default/web-0" || b.PodDisruptionBudget != "default/web" || b.DisruptionsAllowed != 0 || b.CurrentHealthy != 2 || b.DesiredHealthy != 2 ||
		!strings.Contains(b.Why, "minAvailable 2") {
		t.Errorf("blocker %+v", b)
	}
}

func TestExplainNodeDrainWaitsForTheConcurrentDrainBudget(t *testing.T) {
	cordoned := func(name string, scheduled bool) *v1.Node {
		n := node(name, "z1", v1.ConditionTrue, time.Second)
		kernelDeadlock(n, 10*time.Minute)
		n.Spec.Unschedulable = true
		n.Annotations = map[string]string{drain.AnnotationConditions: "KernelDeadlock=True,0s"}
		if scheduled {
			n.Status.Conditions = append(n.Status.Conditions, v1.NodeCondition{Type: drain.ConditionDrainScheduled, Status: v1.ConditionTrue,
				Message: "Drain activity scheduled 2026-11-24T11:59:00.000000000Z", LastTransitionTime: ago(time.Minute)})
		}
		return n
	}
	o := options("KernelDeadlock=True")
	o.Drain.Budget.MaxCordonedNodes = ""
	e := explainFor(t, "a", o, cordoned("a", false), cordoned("b", true))
	if d := e.Drain; d.State != "waiting" || d.Budget == nil || d.Budget.Budget != budget.MaxConcurrent || d.Budget.Action != "drain" {
		t.Fatalf("drain %+v budget %+v", d, d.Budget)
	}
}

func TestExplainNodeOutOfService(t *testing.T) {
	n := node("a", "z1", v1.ConditionUnknown, time.Hour)
	added := ago(5 * time.Minute)
	n.Spec.Taints = []v1.Taint{{Key: v1.TaintNodeOutOfService, Value: outofservice.TaintValue, Effect: v1.TaintEffectNoExecute, TimeAdded: &added}}
	n.Annotations = map[string]string{outofservice.AnnotationBootID: "boot-1", outofservice.AnnotationConfirmedBy: "cloud provider (instance terminated)"}
	e := explainFor(t, "a", options(), n)
	o := e.OutOfService
	if o.State != "out-of-service" || o.BootID != "boot-1" || o.Taint != "nodeshutdown:NoExecute" || !o.Since.Equal(added.Time) || !strings.Contains(o.Summary, "nodeshepherd") {
		t.Fatalf("out of service %+v", o)
	}
	if !strings.Contains(e.Taints[0].Why, "confirmed dead: cloud provider") {
		t.Errorf("taint %+v", e.Taints[0])
	}

	n2 := node("b", "z1", v1.ConditionTrue, time.Second)
	n2.Annotations = map[string]string{outofservice.AnnotationConfirm: "disk fire"}
	if o := explainFor(t, "b", options(), n2).OutOfService; o.State != "confirmed" || *o.Confirmation != "disk fire" || !strings.Contains(o.Summary, "not recorded yet") {
		t.Errorf("confirmed %+v", o)
	}

	// The confirmation is about one boot: shown with it, and shown expired
	// once the node reports another.
	n3 := node("c", "z1", v1.ConditionUnknown, time.Second)
	n3.Status.NodeInfo.BootID = "boot-1"
	n3.Annotations = map[string]string{outofservice.AnnotationConfirm: "disk fire", outofservice.AnnotationConfirmationBootID: "boot-1"}
	if o := explainFor(t, "c", options(), n3).OutOfService; o.State != "confirmed" || o.ConfirmationBootID != "boot-1" || !strings.Contains(o.Summary, "for boot boot-1 only") {
		t.Errorf("confirmed for a boot %+v", o)
	}
	n3.Status.NodeInfo.BootID = "boot-2"
	if o := explainFor(t, "c", options(), n3).OutOfService; o.State != "confirmation-expired" || !strings.Contains(o.Summary, "now reports boot boot-2") {
		t.Errorf("confirmation of an earlier boot %+v", o)
	}
}

func TestExplainNodeNotFound(t *testing.T) {
	_, err := Node(context.Background(), fake.NewClientset(), "ghost", options())
	if err == nil || err.Error() != `node "ghost" not found` {
		t.Fatalf("err %v", err)
	}
}

func TestExplainNodeOutputFormats(t *testing.T) {
	n := node("a", "z1", v1.ConditionUnknown, 2*time.Minute)
	added := ago(20 * time.Second)
	n.Spec.Taints = []v1.Taint{{Key: v1.TaintNodeUnreachable, Effect: v1.TaintEffectNoExecute, TimeAdded: &added}}
	kernelDeadlock(n, time.Hour)
	n.Spec.Unschedulable = true
	e := explainFor(t, "a", options("KernelDeadlock=True"), n, pod("web-0", "a"), lease("a", 2*time.Minute))

	var table bytes.Buffer
	if err := Write(&table, "table", e); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Node:", "Heartbeats:", "Health:", "Unknown", `Zone:`, "Taints:", "node.kubernetes.io/unreachable", "default/web-0", "now",
		"Drain:", "left-to-human", "Out of service:", "Remediation:  not-installed: no RemediationPolicy resource (CRD not installed)"} {
		if !strings.Contains(table.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, table.String())
		}
	}
	var js bytes.Buffer
	if err := Write(&js, "json", e); err != nil {
		t.Fatal(err)
	}
	var back map[string]any
	if err := json.Unmarshal(js.Bytes(), &back); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"name", "settings", "heartbeats", "health", "zone", "taints", "evictions", "drain", "outOfService", "remediation"} {
		if _, ok := back[k]; !ok {
			t.Errorf("json lacks %q: %s", k, js.String())
		}
	}
	var y bytes.Buffer
	if err := Write(&y, "yaml", e); err != nil {
		t.Fatal(err)
	}
	var fromYAML NodeExplanation
	if err := yaml.Unmarshal(y.Bytes(), &fromYAML); err != nil || fromYAML.Drain.State != "left-to-human" {
		t.Errorf("yaml %v %+v", err, fromYAML.Drain)
	}
}

func TestExplainNodeMirrorPodsAndTerminatingPods(t *testing.T) {
	n := node("a", "z1", v1.ConditionFalse, time.Second)
	n.Spec.Taints = []v1.Taint{{Key: v1.TaintNodeNotReady, Effect: v1.TaintEffectNoExecute}}
	mirror := pod("etcd-a", "a")
	mirror.OwnerReferences = nil
	mirror.Annotations = map[string]string{v1.MirrorPodAnnotationKey: "x"}
	going := pod("going", "a")
	going.DeletionTimestamp = ptr.To(ago(time.Second))
	e := explainFor(t, "a", options(), n, mirror, going)
	if e.Health.Judgment != JudgmentNotReady {
		t.Errorf("health %+v", e.Health)
	}
	got := map[string]PodEviction{}
	for _, p := range e.Evictions {
		got[p.Name] = p
	}
	// A taint without timeAdded counts from now: evicted at once, untolerated.
	if p := got["etcd-a"]; p.Eviction != EvictNow || !strings.Contains(p.Note, "mirror pod") || p.Taint != v1.TaintNodeNotReady+":NoExecute" {
		t.Errorf("mirror %+v", p)
	}
	if p := got["going"]; p.Eviction != EvictGoing {
		t.Errorf("terminating %+v", p)
	}
	if e.Taints[0].SinceFrom != "" || !strings.Contains(e.Taints[0].Why, "Ready=False") {
		t.Errorf("taint %+v", e.Taints[0])
	}
}

func TestExplainNodeStartupGraceOverdue(t *testing.T) {
	n := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "a", CreationTimestamp: ago(2 * time.Minute)}}
	if e := explainFor(t, "a", options(), n); e.Health.Judgment != JudgmentOverdue || !strings.Contains(e.Health.Message, nodelifecycle.ReasonStatusNeverUpdated) {
		t.Errorf("health %+v", e.Health)
	}
}

func TestExplainNodeFailedDrainRetryAndSelection(t *testing.T) {
	n := node("a", "z1", v1.ConditionTrue, time.Second)
	n.Labels["pool"] = "batch"
	kernelDeadlock(n, time.Hour)
	n.Spec.Unschedulable = true
	n.Annotations = map[string]string{drain.AnnotationConditions: "KernelDeadlock=True,0s", drain.AnnotationAttempts: "2"}
	n.Status.Conditions = append(n.Status.Conditions, v1.NodeCondition{Type: drain.ConditionDrainScheduled, Status: v1.ConditionFalse,
		Message:            "Drain activity scheduled 2026-11-24T11:50:00.000000000Z | Failed: 2026-11-24T11:58:00.000000000Z | default/web-0 (PodDisruptionBudget web refuses)",
		LastTransitionTime: ago(2 * time.Minute)})
	e := explainFor(t, "a", options("KernelDeadlock=True"), n)
	// Backoff 2m doubled once after the second failure.
	if d := e.Drain; d.State != "failed" || d.Attempts != 2 || d.RetryAt == nil || !d.RetryAt.Equal(now.Add(-2*time.Minute+4*time.Minute)) || !strings.Contains(d.Message, "Failed") {
		t.Errorf("drain %+v", d)
	}

	o := options("KernelDeadlock=True")
	o.Drain.NodeSelector = "pool=web"
	n2 := node("b", "z1", v1.ConditionTrue, time.Second)
	kernelDeadlock(n2, time.Hour)
	n2.Labels["pool"] = "batch"
	if d := explainFor(t, "b", o, n2).Drain; d.State != "not-selected" || d.Selected {
		t.Errorf("drain %+v", d)
	}
}

func TestExplainNodeWithoutTheRightToReadLeasesWarns(t *testing.T) {
	cs := fake.NewClientset(node("a", "z1", v1.ConditionTrue, time.Second))
	cs.PrependReactor("get", "leases", func(clienttesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Group: "coordination.k8s.io", Resource: "leases"}, "a", errors.New("no"))
	})
	e, err := Node(context.Background(), cs, "a", options())
	if err != nil {
		t.Fatal(err)
	}
	if len(e.Warnings) != 1 || !strings.Contains(e.Warnings[0], "Lease") || e.Heartbeats.Lease != nil || e.Health.Judgment != JudgmentHealthy {
		t.Errorf("warnings %v heartbeats %+v", e.Warnings, e.Heartbeats)
	}
}

// A node a remediation request asks to drain, with no drain rule
// configured: explain says so, not "the drain controller does not run".
func TestDrainStateForRemediationRequest(t *testing.T) {
	n := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", Annotations: map[string]string{
		rem.AnnotationState: rem.EncodeState("gpu", rem.ActionDrain, rem.State{Step: 1, StepSince: now.Add(-time.Minute), RepairSince: now.Add(-5 * time.Minute), Drain: true})}}}
	d, err := drainState(n, []*v1.Node{n}, nil, nil, drain.DefaultConfig(), now)
	if err != nil {
		t.Fatal(err)
	}
	if d.State != "pending" || !strings.Contains(d.Summary, "remediation policy gpu, step 2 (Drain) asks for a drain") {
		t.Errorf("state %q, summary %q", d.State, d.Summary)
	}
}
