package nodelifecycle

import (
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeshepherd/nodeshepherd/pkg/kube"
)

var longAgo = metav1.NewTime(time.Date(2012, 1, 1, 0, 0, 0, 0, time.UTC))

func readyNode(status v1.ConditionStatus, heartbeat metav1.Time) *v1.Node {
	n := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node0", CreationTimestamp: longAgo}}
	if status != "" {
		n.Status.Conditions = []v1.NodeCondition{{Type: v1.NodeReady, Status: status, LastHeartbeatTime: heartbeat, LastTransitionTime: heartbeat}}
	}
	return n
}

// Upstream's TestMonitorNodeHealthUpdateStatus, case 1: created long ago and
// never posted status → four NeverUpdated conditions, heartbeat = creation.
func TestObserveWithoutReadyUsesStartupGrace(t *testing.T) {
	c := DefaultConfig()
	now := t0
	n := readyNode("", metav1.Time{})
	rec, grace, observed := c.observe(nil, n, now)
	if grace != c.NodeStartupGracePeriod || observed.Status != v1.ConditionUnknown || !rec.probe.Equal(longAgo.Time.Add(time.Second)) {
		t.Fatalf("grace %v observed %+v probe %v", grace, observed, rec.probe)
	}
	if !now.After(rec.probe.Add(grace)) {
		t.Fatal("a node created long ago must be past its startup grace")
	}
	expire(n, metav1.NewTime(now))
	if len(n.Status.Conditions) != 4 {
		t.Fatalf("conditions %+v", n.Status.Conditions)
	}
	for _, c := range n.Status.Conditions {
		if c.Reason != reasonNeverUpdated || c.Message != messageNeverUpdated || !c.LastHeartbeatTime.Equal(&longAgo) {
			t.Errorf("%+v", c)
		}
	}
}

// creationTimestamp has one-second precision: the startup grace period runs
// from the end of that second, so a node is never judged before the full
// period has passed since its real creation (up to 0.999 s after the stamp).
func TestStartupGraceNeverShorterThanConfigured(t *testing.T) {
	c := DefaultConfig()
	created := time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC) // as the API server stores it
	realCreation := created.Add(999 * time.Millisecond)
	n := readyNode("", metav1.Time{})
	n.CreationTimestamp = metav1.NewTime(created)
	rec, grace, _ := c.observe(nil, n, realCreation)
	if expiry := rec.probe.Add(grace); expiry.Before(realCreation.Add(c.NodeStartupGracePeriod)) {
		t.Fatalf("expires %v after the real creation, shorter than --node-startup-grace-period %v", expiry.Sub(realCreation), c.NodeStartupGracePeriod)
	}
}

// A node seen for the first time gets a fresh grace period from now, whatever
// its heartbeat time says (after a controller restart too).
func TestObserveFirstSightIsFresh(t *testing.T) {
	c := DefaultConfig()
	rec, grace, _ := c.observe(nil, readyNode(v1.ConditionTrue, longAgo), t0)
	if grace != c.NodeMonitorGracePeriod || !rec.probe.Equal(t0) {
		t.Fatalf("probe %v, want now", rec.probe)
	}
	// The same heartbeat later is not a probe; a new one is.
	rec, _, _ = c.observe(rec, readyNode(v1.ConditionTrue, longAgo), t0.Add(time.Minute))
	if !rec.probe.Equal(t0) {
		t.Errorf("unchanged heartbeat moved the probe to %v", rec.probe)
	}
	hb := metav1.NewTime(t0.Add(time.Minute))
	rec, _, _ = c.observe(rec, readyNode(v1.ConditionTrue, hb), t0.Add(2*time.Minute))
	if !rec.probe.Equal(t0.Add(2 * time.Minute)) {
		t.Errorf("new heartbeat: probe %v, want the controller's now", rec.probe)
	}
}

// Expiry keeps lastHeartbeatTime, leaves NetworkUnavailable alone and does
// not touch conditions already Unknown.
func TestExpire(t *testing.T) {
	hb := metav1.NewTime(t0)
	n := readyNode(v1.ConditionTrue, hb)
	n.Status.Conditions = append(n.Status.Conditions,
		v1.NodeCondition{Type: v1.NodeNetworkUnavailable, Status: v1.ConditionFalse},
		v1.NodeCondition{Type: v1.NodeMemoryPressure, Status: v1.ConditionUnknown, Reason: "x"})
	now := metav1.NewTime(t0.Add(time.Hour))
	if !expire(n, now) {
		t.Fatal("no change reported")
	}
	ready := kube.NodeCondition(n, v1.NodeReady)
	if ready.Status != v1.ConditionUnknown || ready.Reason != reasonUnknown || ready.Message != messageUnknown ||
		!ready.LastHeartbeatTime.Equal(&hb) || !ready.LastTransitionTime.Equal(&now) {
		t.Errorf("Ready %+v", ready)
	}
	if c := kube.NodeCondition(n, v1.NodeNetworkUnavailable); c.Status != v1.ConditionFalse {
		t.Error("NetworkUnavailable touched")
	}
	if c := kube.NodeCondition(n, v1.NodeMemoryPressure); c.Reason != "x" {
		t.Error("an Unknown condition was rewritten")
	}
	if c := kube.NodeCondition(n, v1.NodeDiskPressure); c == nil || c.Reason != reasonNeverUpdated {
		t.Errorf("missing DiskPressure not appended: %+v", c)
	}
	if expire(n, now) {
		t.Error("second expiry reported a change")
	}
}

// Upstream's TestTaintsNodeByCondition and the unschedulable taint; foreign
// NoSchedule taints are never removed.
func TestNoScheduleDiff(t *testing.T) {
	n := &v1.Node{}
	n.Spec.Unschedulable = true
	n.Status.Conditions = []v1.NodeCondition{
		{Type: v1.NodeReady, Status: v1.ConditionFalse},
		{Type: v1.NodeNetworkUnavailable, Status: v1.ConditionTrue},
	}
	n.Spec.Taints = []v1.Taint{
		{Key: "example.com/foo", Effect: v1.TaintEffectNoSchedule},
		{Key: v1.TaintNodeMemoryPressure, Effect: v1.TaintEffectNoSchedule},
		{Key: v1.TaintNodeUnreachable, Effect: v1.TaintEffectNoExecute},
	}
	add, remove := noScheduleDiff(n)
	keys := func(ts []v1.Taint) map[string]bool {
		m := map[string]bool{}
		for _, t := range ts {
			m[t.Key] = true
		}
		return m
	}
	if a := keys(add); len(a) != 3 || !a[v1.TaintNodeNotReady] || !a[v1.TaintNodeNetworkUnavailable] || !a[v1.TaintNodeUnschedulable] {
		t.Errorf("add %v", add)
	}
	if r := keys(remove); len(r) != 1 || !r[v1.TaintNodeMemoryPressure] {
		t.Errorf("remove %v", remove)
	}
	n.Status.Conditions[0].Status = v1.ConditionUnknown
	if add, _ := noScheduleDiff(n); !keys(add)[v1.TaintNodeUnreachable] {
		t.Errorf("Ready=Unknown must add unreachable:NoSchedule, got %v", add)
	}
}

// Upstream's TestReconcileNodeLabels.
func TestLabelChanges(t *testing.T) {
	if labelChanges(&v1.Node{}) != nil {
		t.Error("no labels: no-op")
	}
	if labelChanges(&v1.Node{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"a": "b"}}}) != nil {
		t.Error("no target labels: no-op")
	}
	got := labelChanges(&v1.Node{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{
		v1.LabelOSStable: "linux", v1.LabelArchStable: "amd64", "beta.kubernetes.io/arch": "arm64"}}})
	if got["beta.kubernetes.io/os"] != "linux" || got["beta.kubernetes.io/arch"] != "amd64" {
		t.Errorf("got %v", got)
	}
}

func TestConfigValidate(t *testing.T) {
	c := DefaultConfig()
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	c.NodeEvictionRate, c.UnhealthyZoneThreshold, c.NodeMonitorGracePeriod = -1, 1.5, time.Second
	err := c.Validate()
	for _, want := range []string{"--node-eviction-rate", "--unhealthy-zone-threshold", "--node-monitor-grace-period"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v does not name %s", err, want)
		}
	}
}
