package nodelifecycle

import (
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

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
	rec, grace, observed := c.observe(nil, n, nil, now)
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
	rec, grace, _ := c.observe(nil, n, nil, realCreation)
	if expiry := rec.probe.Add(grace); expiry.Before(realCreation.Add(c.NodeStartupGracePeriod)) {
		t.Fatalf("expires %v after the real creation, shorter than --node-startup-grace-period %v", expiry.Sub(realCreation), c.NodeStartupGracePeriod)
	}
}

// A node seen for the first time gets a fresh grace period from now, whatever
// its heartbeat time says (after a controller restart too).
func TestObserveFirstSightIsFresh(t *testing.T) {
	c := DefaultConfig()
	rec, grace, _ := c.observe(nil, readyNode(v1.ConditionTrue, longAgo), nil, t0)
	if grace != c.NodeMonitorGracePeriod || !rec.probe.Equal(t0) {
		t.Fatalf("probe %v, want now", rec.probe)
	}
	// The same heartbeat later is not a probe; a new one is.
	rec, _, _ = c.observe(rec, readyNode(v1.ConditionTrue, longAgo), nil, t0.Add(time.Minute))
	if !rec.probe.Equal(t0) {
		t.Errorf("unchanged heartbeat moved the probe to %v", rec.probe)
	}
	hb := metav1.NewTime(t0.Add(time.Minute))
	rec, _, _ = c.observe(rec, readyNode(v1.ConditionTrue, hb), nil, t0.Add(2*time.Minute))
	if !rec.probe.Equal(t0.Add(2 * time.Minute)) {
		t.Errorf("new heartbeat: probe %v, want the controller's now", rec.probe)
	}
}

func nodeLease(renew time.Time, duration int32) *coordinationv1.Lease {
	return &coordinationv1.Lease{Spec: coordinationv1.LeaseSpec{RenewTime: ptr.To(metav1.NewMicroTime(renew)), LeaseDurationSeconds: ptr.To(duration)}}
}

// The Lease found at first sight (a new leader's first pass, a node just
// registered) is the state found, not a heartbeat; and the time from first
// sight to the first renewal is only part of an interval. A kubelet renewing
// every 10 s, first seen 10 ms before a renewal, is not taken to heartbeat
// every 10 ms (that made it overdue, counted as failing in its zone, for
// most of its first interval); its interval is the assumed 10 s (a quarter
// of its 40 s Lease) until two renewals have been seen.
func TestFirstSightIsNotAHeartbeat(t *testing.T) {
	c := DefaultConfig()
	node := readyNode(v1.ConditionTrue, longAgo)
	rec, _, _ := c.observe(nil, node, nodeLease(t0.Add(-9990*time.Millisecond), 40), t0)
	if rec.probeHeard || rec.gaps != [2]time.Duration{} || !rec.probe.Equal(t0) || rec.leaseDuration != 40*time.Second {
		t.Fatalf("first sight: %+v", rec)
	}
	// The renewal 10 ms later: a heartbeat, but no interval yet.
	at := t0.Add(10 * time.Millisecond)
	rec, _, _ = c.observe(rec, node, nodeLease(at, 40), at)
	if !rec.probe.Equal(at) || rec.gaps != [2]time.Duration{} || rec.interval(c.NodeMonitorGracePeriod) != 10*time.Second {
		t.Fatalf("after the first renewal: probe %v gaps %v interval %v", rec.probe, rec.gaps, rec.interval(c.NodeMonitorGracePeriod))
	}
	// Healthy: 9.9 s later it is not overdue (with a 10 ms interval it was).
	if rec.overdue(at.Add(9900*time.Millisecond), c.NodeMonitorGracePeriod, c.HeartbeatOverdueSlack) {
		t.Error("a node renewing every 10 s is overdue 9.9 s after its first renewal seen")
	}
	// The next renewal measures the first interval.
	next := at.Add(10 * time.Second)
	rec, _, _ = c.observe(rec, node, nodeLease(next, 40), next)
	if rec.gaps[0] != 10*time.Second || rec.interval(c.NodeMonitorGracePeriod) != 10*time.Second {
		t.Errorf("gaps %v, want the measured 10s", rec.gaps)
	}
	// The same renewal again is no heartbeat.
	rec, _, _ = c.observe(rec, node, nodeLease(next, 40), next.Add(time.Second))
	if !rec.probe.Equal(next) {
		t.Errorf("an unchanged Lease moved the probe to %v", rec.probe)
	}
}

// A node without a Ready condition yet whose Lease is renewed is timed from
// now (upstream), and that is not a heartbeat either.
func TestFirstSightWithoutReadyAndALease(t *testing.T) {
	c := DefaultConfig()
	rec, grace, _ := c.observe(nil, readyNode("", metav1.Time{}), nodeLease(t0, 40), t0.Add(time.Second))
	if grace != c.NodeStartupGracePeriod || !rec.probe.Equal(t0.Add(time.Second)) || rec.probeHeard {
		t.Fatalf("grace %v probe %v heard %v", grace, rec.probe, rec.probeHeard)
	}
}

func TestAssumedInterval(t *testing.T) {
	for _, c := range []struct{ lease, grace, want time.Duration }{
		{40 * time.Second, 50 * time.Second, 10 * time.Second}, // the kubelet's Lease, upstream's grace
		{0, 50 * time.Second, 12500 * time.Millisecond},        // no Lease: a quarter of the grace
		{4 * time.Second, 6 * time.Second, time.Second},        // the integration tests' fake nodes
		{40 * time.Second, 20 * time.Second, 10 * time.Second}, // a real kubelet under a short grace: not capped at grace/4
		{40 * time.Second, 6 * time.Second, 10 * time.Second},  // a Lease long next to the grace
		{4 * time.Second, 3 * time.Second, time.Second},        // grace shorter than the Lease
	} {
		if got := assumedInterval(c.lease, c.grace); got != c.want {
			t.Errorf("assumedInterval(%v, %v) = %v, want %v", c.lease, c.grace, got, c.want)
		}
	}
}

// TestUnmeasuredKubeletNotOverdueUnderShortGrace: a real kubelet renews
// its 40 s Lease every 10 s. Under a 20 s grace period a node whose
// interval is not measured yet (first seen with its Lease, or heard once
// since) and that renewed 6 to 9 s ago is merely between two renewals: not
// overdue, so neither counted as failing in its zone nor a suspect for a
// fresh read (suspect needs overdue on the informers' view). With the
// assumed interval capped at grace/4 (5 s) it was overdue after 7 s. Its
// grace period still ends 20 s after the renewal, and it is overdue well
// before that.
func TestUnmeasuredKubeletNotOverdueUnderShortGrace(t *testing.T) {
	c := DefaultConfig()
	c.NodeMonitorGracePeriod = 20 * time.Second
	grace, slack := c.NodeMonitorGracePeriod, c.HeartbeatOverdueSlack
	node := readyNode(v1.ConditionTrue, longAgo)
	for _, ago := range []time.Duration{6 * time.Second, 7500 * time.Millisecond, 9 * time.Second} {
		// First sight (a new leader, a restart): the Lease renewed ago.
		renewed := t0.Add(-ago)
		rec, g, _ := c.observe(nil, node, nodeLease(renewed, 40), t0)
		if g != grace || rec.gaps != [2]time.Duration{} {
			t.Fatalf("first sight: grace %v gaps %v", g, rec.gaps)
		}
		if rec.overdue(t0, grace, slack) {
			t.Errorf("first seen with its Lease renewed %v ago: overdue (interval %v)", ago, rec.interval(grace))
		}
		// Heard once since first sight (no interval measured), then silent.
		heard := t0.Add(time.Second)
		rec, _, _ = c.observe(rec, node, nodeLease(heard, 40), heard)
		if !rec.probeHeard || rec.gaps != [2]time.Duration{} {
			t.Fatalf("one renewal heard: %+v", rec)
		}
		if rec.overdue(heard.Add(ago), grace, slack) {
			t.Errorf("renewed %v ago, heard once: overdue (interval %v)", ago, rec.interval(grace))
		}
		// A node really silent is still overdue before its grace ends, and
		// its expiry is the grace period from the renewal heard.
		if !rec.overdue(heard.Add(grace-time.Second), grace, slack) {
			t.Errorf("silent for %v of a %v grace: not overdue", grace-time.Second, grace)
		}
		if expiry := rec.probe.Add(grace); !expiry.Equal(heard.Add(grace)) {
			t.Errorf("expiry %v after the renewal, want the grace %v", expiry.Sub(heard), grace)
		}
	}
}

// TestNodesFirstSeenApartAreOverdueTogether: a new leader sees every node
// for the first time, each at its own instant of its first pass (the pass's
// workers read the clock apart, by more than the 1 ms by which a pass at an
// expiry follows it on a busy machine), and a node that registers after the
// takeover is first seen a pass later. None of them is heard again (they
// were silent already, or fell silent before their first renewal). When the
// first one's grace ends, every other one seen within the grace period less
// its overdue delay is counted as failing: before the interval was assumed,
// a node with no heartbeat seen since its first sight was never overdue, so
// it was counted only at its own expiry, and the first one was judged alone.
func TestNodesFirstSeenApartAreOverdueTogether(t *testing.T) {
	for _, c := range []struct {
		name         string
		grace, lease time.Duration
	}{
		{"kubelet defaults", 50 * time.Second, 40 * time.Second},
		{"integration test timings", 6 * time.Second, 4 * time.Second},
		{"grace shorter than the Lease", 3 * time.Second, 4 * time.Second},
		{"no Lease", 6 * time.Second, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.NodeMonitorGracePeriod = c.grace
			var lease *coordinationv1.Lease
			if c.lease > 0 {
				lease = nodeLease(t0.Add(-time.Second), int32(c.lease/time.Second))
			}
			first, _, _ := cfg.observe(nil, readyNode(v1.ConditionTrue, longAgo), lease, t0)
			expiry := first.probe.Add(c.grace).Add(time.Millisecond) // the pass at its deadline
			within := c.grace - overdueAfter(assumedInterval(c.lease, c.grace), c.grace, cfg.HeartbeatOverdueSlack)
			if within < time.Second {
				t.Fatalf("nodes first seen up to %v apart are counted together, want at least 1s", within)
			}
			for _, apart := range []time.Duration{time.Microsecond, 2 * time.Millisecond, 50 * time.Millisecond, 500 * time.Millisecond, time.Second, within - time.Millisecond} {
				other, _, _ := cfg.observe(nil, readyNode(v1.ConditionTrue, longAgo), lease, t0.Add(apart))
				if !other.overdue(expiry, c.grace, cfg.HeartbeatOverdueSlack) {
					t.Errorf("first seen %v later, silent since: not counted when the first one expires", apart)
				}
			}
		})
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

// A Node whose Ready heartbeat is older, on the kubelet's clock, than a
// Lease renewal already heard, delivered late (a lagging watch, or a
// re-list after a cut), is not a heartbeat heard now (chaos seed 280003: a
// node silent since its last renewal looked heard at the re-list, and its
// zone was counted Normal while three of its four nodes were silent): the
// node expires a grace period after its last renewal, not after the
// delivery.
func TestLateOldHeartbeatIsNotHeard(t *testing.T) {
	cfg := correlatedConfig()
	cl := newCluster(t, cfg, map[string]int{"a": 4})
	cl.run(10 * time.Second)
	n := cl.inZone("a")[0]
	stale, err := cl.c.latestNode(n)
	if err != nil {
		t.Fatal(err)
	}
	stale = stale.DeepCopy()
	cl.silence([]string{n}, 0)
	silent := cl.clk.Now()
	cl.run(cfg.NodeMonitorGracePeriod - 5*time.Second)
	// The late delivery: a heartbeat a second after the last one seen,
	// long before the last renewal.
	for i := range stale.Status.Conditions {
		if c := &stale.Status.Conditions[i]; c.Type == v1.NodeReady {
			c.LastHeartbeatTime = metav1.NewTime(c.LastHeartbeatTime.Add(time.Second))
		}
	}
	cur, err := cl.c.latestNode(n)
	if err != nil {
		t.Fatal(err)
	}
	stale.ResourceVersion = cur.ResourceVersion + "0"
	cl.updateNode(stale)
	cl.run(7 * time.Second)
	node, err := cl.c.latestNode(n)
	if err != nil {
		t.Fatal(err)
	}
	if r := kube.NodeCondition(node, v1.NodeReady); r == nil || r.Status != v1.ConditionUnknown {
		t.Errorf("%s silent since %v, %v later (grace %v): Ready %v, want Unknown: the late heartbeat older than its last renewal was taken as heard",
			n, silent.Format(time.TimeOnly), cl.clk.Now().Sub(silent), cfg.NodeMonitorGracePeriod, r)
	}
}
