package nodelifecycle

import (
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

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
