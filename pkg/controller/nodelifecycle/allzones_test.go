package nodelifecycle

import (
	"context"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8stesting "k8s.io/client-go/testing"

	"github.com/nodeshepherd/nodeshepherd/pkg/kube"
	"github.com/nodeshepherd/nodeshepherd/pkg/nodetopology"
)

// taintOf is the node's NoExecute taint of that key, as this controller
// last saw or wrote it (nil if none).
func (cl *cluster) taintOf(name string, want v1.Taint) *v1.Taint {
	cl.t.Helper()
	n, err := cl.c.latestNode(name)
	if err != nil {
		cl.t.Fatal(err)
	}
	return kube.FindTaint(n, want)
}

// judgedThenAllSilent: dead falls silent and is tainted, then every node
// falls silent and the all-zones mode strips the taint (every zone
// FullDisruption). It returns the taint's timeAdded.
func (cl *cluster) judgedThenAllSilent(cfg Config, dead string) metav1.Time {
	cl.t.Helper()
	cl.run(10 * time.Second)
	cl.silence([]string{dead}, 0)
	cl.run(cfg.NodeMonitorGracePeriod + 5*time.Second)
	first := cl.taintOf(dead, UnreachableTaint)
	if first == nil || first.TimeAdded == nil {
		cl.t.Fatalf("%s not tainted before the outage", dead)
	}
	cl.silence(cl.nodes, 0)
	cl.run(cfg.NodeMonitorGracePeriod + 10*time.Second)
	for z := range cl.c.ZoneStates() {
		if got := cl.c.ZoneStates()[z]; got != nodetopology.StateFullDisruption {
			cl.t.Fatalf("zone %s is %s, want FullDisruption", z, got)
		}
	}
	if cl.taintOf(dead, UnreachableTaint) != nil {
		cl.t.Fatalf("%s keeps its taint in the all-zones mode; upstream strips it", dead)
	}
	return *first.TimeAdded
}

// TestLeavingAllZonesModeHonoursZoneRate: a node of zone a (4 nodes) dies
// and is tainted; then every node falls silent (the all-zones mode strips
// the taint); then one node of zone a and every node of zone b come back in
// the same pass. Zone a is PartialDisruption when the mode ends (3 of 4 not
// Ready, a small zone: rate 0): the dead node's taint is not restored, as
// upstream queues it at rate 0. It is restored, with its original
// timeAdded, once the zone's rate allows it (a fourth node back: zone a
// Normal). Before, the taint was restored at once, before any zone state
// was computed.
func TestLeavingAllZonesModeHonoursZoneRate(t *testing.T) {
	cfg := correlatedConfig()
	cl := newCluster(t, cfg, map[string]int{"a": 4, "b": 3})
	a := cl.inZone("a")
	dead := a[0]
	t0 := cl.judgedThenAllSilent(cfg, dead)

	cl.report(a[3], v1.ConditionTrue)
	for _, n := range cl.inZone("b") {
		cl.report(n, v1.ConditionTrue)
	}
	cl.run(cfg.NodeMonitorPeriod + 5*time.Second)
	if got := cl.c.ZoneStates()[testZoneKey+"a"]; got != nodetopology.StatePartialDisruption {
		t.Fatalf("zone a is %s after the mode, want PartialDisruption", got)
	}
	for _, n := range a[:3] {
		if tt := cl.taintOf(n, UnreachableTaint); tt != nil {
			t.Errorf("%s tainted %v in a PartialDisruption zone of 4 nodes (rate 0) after the all-zones mode", n, tt)
		}
	}

	// Zone a heals but for the dead node: Normal, the taint comes back with
	// its original timeAdded.
	cl.report(a[1], v1.ConditionTrue)
	cl.report(a[2], v1.ConditionTrue)
	cl.run(cfg.NodeMonitorPeriod + 5*time.Second)
	if got := cl.c.ZoneStates()[testZoneKey+"a"]; got != nodetopology.StateNormal {
		t.Fatalf("zone a is %s, want Normal", got)
	}
	if tt := cl.taintOf(dead, UnreachableTaint); tt == nil || tt.TimeAdded == nil || !tt.TimeAdded.Equal(&t0) {
		t.Errorf("%s in a Normal zone: unreachable taint %v, want it back with timeAdded %v", dead, tt, t0)
	}
}

// TestNewLeaderKeepsNoExecuteTaint: a node dies and is tainted (timeAdded
// T0); the leader dies and a standby takes over with no memory. The node is
// still Unknown: the new leader keeps its taint and timeAdded (its pods'
// tolerationSeconds keep counting from T0) and never writes it away. When
// the node comes back, the taint is removed. Before, a new leader stripped
// the NoExecute taints of every node it saw for the first time and tainted
// it again with a new timeAdded.
func TestNewLeaderKeepsNoExecuteTaint(t *testing.T) {
	cfg := correlatedConfig()
	cl := newCluster(t, cfg, map[string]int{"a": 4, "b": 4})
	cl.run(10 * time.Second)
	dead := cl.inZone("a")[0]
	notReady := cl.inZone("b")[0]
	cl.silence([]string{dead}, 0)
	cl.report(notReady, v1.ConditionFalse) // and keeps renewing its Lease
	cl.run(cfg.NodeMonitorGracePeriod + 5*time.Second)
	before := map[string]v1.Taint{}
	for n, want := range map[string]v1.Taint{dead: UnreachableTaint, notReady: NotReadyTaint} {
		tt := cl.taintOf(n, want)
		if tt == nil || tt.TimeAdded == nil {
			t.Fatalf("%s not tainted %s before the takeover", n, want.Key)
		}
		before[n] = *tt
	}
	patches := len(cl.client.Actions())

	cl.leaderless(takeoverGap)
	cl.takeover()
	cl.run(cfg.NodeMonitorGracePeriod + 10*time.Second)
	for n, was := range before {
		tt := cl.taintOf(n, was)
		if tt == nil || !tt.TimeAdded.Equal(was.TimeAdded) {
			t.Errorf("%s after the takeover: taint %v, want %v kept with its timeAdded", n, tt, was.ToString())
		}
	}
	for _, a := range cl.client.Actions()[patches:] {
		if p, ok := a.(k8stesting.PatchAction); ok && a.GetResource().Resource == "nodes" {
			t.Errorf("the new leader patched node %s, whose taints were right: %s", p.GetName(), p.GetPatch())
		}
	}

	cl.report(dead, v1.ConditionTrue)
	cl.report(notReady, v1.ConditionTrue)
	cl.run(cfg.NodeMonitorPeriod + 2*time.Second)
	for n, was := range before {
		if tt := cl.taintOf(n, was); tt != nil {
			t.Errorf("%s Ready again but keeps %v", n, tt)
		}
	}
}

// TestAllZonesModeTimeAddedSurvivesLeaderChange (chaos seed 70019): a node
// of zone a dies and is tainted (timeAdded T0); every node falls silent
// and the all-zones mode strips the taint; the leader dies in the mode and
// a standby with no memory takes over. When the other nodes come back, the
// new leader gives the dead node its taint back with timeAdded T0, read from
// the record the first leader wrote on the node (AnnotationJudged), which
// goes with the restore. Before, the new leader tainted it from now: its
// pods' tolerationSeconds started again.
func TestAllZonesModeTimeAddedSurvivesLeaderChange(t *testing.T) {
	cfg := correlatedConfig()
	cl := newCluster(t, cfg, map[string]int{"a": 4, "b": 3})
	cl.run(10 * time.Second)
	a := cl.inZone("a")
	dead := a[0]
	cl.silence([]string{dead}, 0)
	cl.run(cfg.NodeMonitorGracePeriod + 5*time.Second)
	first := cl.taintOf(dead, UnreachableTaint)
	if first == nil || first.TimeAdded == nil {
		t.Fatalf("%s not tainted before the outage", dead)
	}
	t0 := first.TimeAdded.Unix()

	cl.silence(cl.nodes, 0)
	cl.run(cfg.NodeMonitorGracePeriod + 10*time.Second)
	if cl.taintOf(dead, UnreachableTaint) != nil {
		t.Fatalf("%s keeps its taint in the all-zones mode; upstream strips it", dead)
	}
	n, err := cl.client.CoreV1().Nodes().Get(context.Background(), dead, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := judgedOnNode(n); !ok {
		t.Fatalf("%s: the stripped taint is not recorded on the node: annotations %v", dead, n.Annotations)
	}

	cl.leaderless(takeoverGap)
	cl.takeover()
	cl.run(cfg.NodeMonitorGracePeriod + 5*time.Second)
	for _, n := range append(a[1:], cl.inZone("b")...) {
		cl.report(n, v1.ConditionTrue)
	}
	cl.run(cfg.NodeMonitorPeriod + 10*time.Second)
	if got := cl.c.ZoneStates()[testZoneKey+"a"]; got != nodetopology.StateNormal {
		t.Fatalf("zone a is %s, want Normal", got)
	}
	tt := cl.taintOf(dead, UnreachableTaint)
	if tt == nil || tt.TimeAdded == nil || tt.TimeAdded.Unix() != t0 {
		t.Errorf("%s after the new leader left the mode: unreachable taint %v, want it back with timeAdded %v", dead, tt, time.Unix(t0, 0).UTC())
	}
	if n, err := cl.client.CoreV1().Nodes().Get(context.Background(), dead, metav1.GetOptions{}); err != nil || n.Annotations[AnnotationJudged] != "" {
		t.Errorf("%s: the record stays after the restore: %v (%v)", dead, n.Annotations, err)
	}
}

// TestAllZonesExitRestoreSurvivesLeaderChange (chaos seed 90012): the mode
// ends with the dead node's zone in PartialDisruption, so its taint waits
// in the zone's queue (rate 0); the leader dies before it is restored. The
// new leader, which never saw the mode, restores it with timeAdded T0 from
// the record on the node once the zone is Normal. Before, the record was
// read (a shadowed variable) but not used: the new leader tainted it from
// now.
func TestAllZonesExitRestoreSurvivesLeaderChange(t *testing.T) {
	cfg := correlatedConfig()
	cl := newCluster(t, cfg, map[string]int{"a": 4, "b": 3})
	cl.run(10 * time.Second)
	a := cl.inZone("a")
	dead := a[0]
	cl.silence([]string{dead}, 0)
	cl.run(cfg.NodeMonitorGracePeriod + 5*time.Second)
	first := cl.taintOf(dead, UnreachableTaint)
	if first == nil || first.TimeAdded == nil {
		t.Fatalf("%s not tainted before the outage", dead)
	}
	t0 := first.TimeAdded.Unix()

	cl.silence(cl.nodes, 0)
	cl.run(cfg.NodeMonitorGracePeriod + 10*time.Second)
	cl.report(a[3], v1.ConditionTrue)
	for _, n := range cl.inZone("b") {
		cl.report(n, v1.ConditionTrue)
	}
	cl.run(cfg.NodeMonitorPeriod + 5*time.Second)
	if got := cl.c.ZoneStates()[testZoneKey+"a"]; got != nodetopology.StatePartialDisruption {
		t.Fatalf("zone a is %s after the mode, want PartialDisruption", got)
	}
	if tt := cl.taintOf(dead, UnreachableTaint); tt != nil {
		t.Fatalf("%s tainted %v in a PartialDisruption zone", dead, tt)
	}

	cl.leaderless(takeoverGap)
	cl.takeover()
	cl.report(a[1], v1.ConditionTrue)
	cl.report(a[2], v1.ConditionTrue)
	cl.run(cfg.NodeMonitorGracePeriod + 15*time.Second)
	if got := cl.c.ZoneStates()[testZoneKey+"a"]; got != nodetopology.StateNormal {
		t.Fatalf("zone a is %s, want Normal", got)
	}
	tt := cl.taintOf(dead, UnreachableTaint)
	if tt == nil || tt.TimeAdded == nil || tt.TimeAdded.Unix() != t0 {
		t.Errorf("%s under the new leader: unreachable taint %v, want it back with timeAdded %v", dead, tt, time.Unix(t0, 0).UTC())
	}
}

// Leaving the all-zones mode, a judged node that renews its Lease again,
// while its Node is not seen Ready yet, does not get its old taint back:
// heard through the Lease informer (chaos seed 170020: the node watch
// stalled), or, with the Lease watch stalled too, seen renewed by the fresh
// read of its Lease before the taint (chaos seed 210003).
func TestAllZonesExitSkipsANodeHeardAgain(t *testing.T) {
	for _, leasesStalled := range []bool{false, true} {
		cfg := correlatedConfig()
		cl := newCluster(t, cfg, map[string]int{"a": 4, "b": 3})
		a := cl.inZone("a")
		dead := a[0]
		cl.judgedThenAllSilent(cfg, dead)
		for _, n := range append(a[1:], cl.inZone("b")...) {
			cl.report(n, v1.ConditionTrue)
		}
		cl.stalled = leasesStalled // renewals reach the API server only
		delete(cl.silentAt, dead)  // its Lease renews; its Node is not seen Ready yet
		cl.run(cfg.NodeMonitorPeriod + 5*time.Second)
		if got := cl.c.ZoneStates()[testZoneKey+"a"]; got != nodetopology.StateNormal {
			t.Fatalf("Lease watch stalled %v: zone a is %s after the mode, want Normal", leasesStalled, got)
		}
		if tt := cl.taintOf(dead, UnreachableTaint); tt != nil {
			t.Errorf("Lease watch stalled %v: %s, renewing again, got its old taint back %v", leasesStalled, dead, tt)
		}
	}
	// A new leader whose first sight already holds the node's renewal after
	// its Unknown mark (chaos seed 250015: the node came back while no
	// leader ran; a first sight is not a heartbeat heard, and the fresh read
	// shows nothing newer): not restored. The node falls silent again: the
	// health pass judges that silence afresh, with a new timeAdded.
	cfg := correlatedConfig()
	cl := newCluster(t, cfg, map[string]int{"a": 4, "b": 3})
	a := cl.inZone("a")
	dead := a[0]
	old := cl.judgedThenAllSilent(cfg, dead)
	cl.leaderless(takeoverGap)
	cl.renewLease(dead) // back for a moment, before the takeover
	cl.takeover()
	for _, n := range append(a[1:], cl.inZone("b")...) {
		cl.report(n, v1.ConditionTrue)
	}
	cl.run(cfg.NodeMonitorPeriod + 5*time.Second)
	if got := cl.c.ZoneStates()[testZoneKey+"a"]; got != nodetopology.StateNormal {
		t.Fatalf("new leader: zone a is %s after the mode, want Normal", got)
	}
	if tt := cl.taintOf(dead, UnreachableTaint); tt != nil {
		t.Errorf("new leader: %s, renewed after its Unknown mark, got its old taint back %v", dead, tt)
	}
	cl.run(cfg.NodeMonitorGracePeriod + 5*time.Second)
	if tt := cl.taintOf(dead, UnreachableTaint); tt == nil || tt.TimeAdded == nil || !tt.TimeAdded.After(old.Time) {
		t.Errorf("new leader: %s silent again for its grace period: unreachable taint %v, want one with a timeAdded after %v", dead, tt, old)
	}
}
