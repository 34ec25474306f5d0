package nodelifecycle

import (
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
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
	cl.run(10 * time.Second)
	a := cl.inZone("a")
	dead := a[0]
	cl.silence([]string{dead}, 0)
	cl.run(cfg.NodeMonitorGracePeriod + 5*time.Second)
	first := cl.taintOf(dead, UnreachableTaint)
	if first == nil || first.TimeAdded == nil {
		t.Fatalf("%s not tainted before the outage", dead)
	}
	t0 := *first.TimeAdded

	cl.silence(cl.nodes, 0)
	cl.run(cfg.NodeMonitorGracePeriod + 10*time.Second)
	for _, z := range []string{"a", "b"} {
		if got := cl.c.ZoneStates()[testZoneKey+z]; got != nodetopology.StateFullDisruption {
			t.Fatalf("zone %s is %s, want FullDisruption", z, got)
		}
	}
	if cl.taintOf(dead, UnreachableTaint) != nil {
		t.Fatalf("%s keeps its taint in the all-zones mode; upstream strips it", dead)
	}

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
