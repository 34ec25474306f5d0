package nodelifecycle

import (
	"errors"
	"slices"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"

	"github.com/nodeshepherd/nodeshepherd/pkg/kube"
	"github.com/nodeshepherd/nodeshepherd/pkg/nodetopology"
)

// counter returns a counter's value (the series whose result label is
// result, when given); 0 when absent.
func (cl *cluster) counter(name, result string) float64 {
	fams, err := cl.reg.Gather()
	if err != nil {
		cl.t.Fatal(err)
	}
	sum := 0.0
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.Metric {
			match := true
			for _, l := range m.Label {
				if l.GetName() == "result" && l.GetValue() != result {
					match = false
				}
			}
			if match {
				sum += m.GetCounter().GetValue()
			}
		}
	}
	return sum
}

// leaseLists counts the LISTs of Leases sent to the API (fresh reads).
func (cl *cluster) leaseLists() int {
	lists, _ := cl.leaseReads()
	return lists
}

// leaseReads counts the fresh reads sent to the API: LISTs of the Leases,
// and GETs of one Lease (the point reads of a few suspects).
func (cl *cluster) leaseReads() (lists, gets int) {
	for _, a := range cl.client.Actions() {
		if a.GetResource().Resource != "leases" {
			continue
		}
		switch a.GetVerb() {
		case "list":
			lists++
		case "get":
			gets++
		}
	}
	return lists, gets
}

// notReady returns the nodes whose Ready is not True, with their status.
func (cl *cluster) notReady() map[string]v1.ConditionStatus {
	out := map[string]v1.ConditionStatus{}
	for _, n := range cl.nodes {
		node, err := cl.c.latestNode(n)
		if err != nil {
			cl.t.Fatal(err)
		}
		if r := kube.NodeCondition(node, v1.NodeReady); r == nil || r.Status != v1.ConditionTrue {
			out[n] = r.Status
		}
	}
	return out
}

// TestStalledLeaseWatchJudgesNoNode: the Lease watch stalls (renewals reach
// the API, not the informer) for three grace periods. No node is marked
// Unknown or tainted, no zone leaves Normal, the stale view is counted, and
// the fresh reads are one LIST each, at most one per second. A node that
// really falls silent meanwhile is still marked Unknown and tainted, at its
// grace period's end (within the one-second read spacing).
func TestStalledLeaseWatchJudgesNoNode(t *testing.T) {
	cfg := correlatedConfig()
	cl := newCluster(t, cfg, map[string]int{"a": 3, "b": 3})
	cl.run(10 * time.Second)
	if lists, gets := cl.leaseReads(); lists+gets != 0 {
		t.Fatalf("%d fresh reads while the watch delivered every renewal, want 0", lists+gets)
	}
	cl.stalled = true
	stallFor := 3 * cfg.NodeMonitorGracePeriod
	cl.run(stallFor)
	if nr := cl.notReady(); len(nr) > 0 {
		t.Errorf("nodes not Ready on a stalled view: %v", nr)
	}
	if len(cl.tainted) > 0 {
		t.Errorf("tainted on a stalled view: %v", cl.tainted)
	}
	for _, z := range []string{"a", "b"} {
		if got := cl.c.ZoneStates()[testZoneKey+z]; got != nodetopology.StateNormal {
			t.Errorf("zone %s is %s on a stalled view, want Normal", z, got)
		}
	}
	if v := cl.counter("nodeshepherd_nodelifecycle_stale_view_confirmations_total", ""); v < 1 {
		t.Errorf("stale_view_confirmations_total = %v, want at least 1", v)
	}
	// A few suspects at a time: each is read alone (a GET of its Lease),
	// at most once per heartbeat interval (the read credits its renewal,
	// and the node is overdue again an interval later at the earliest).
	lists, gets := cl.leaseReads()
	if max := len(cl.nodes) * (int(stallFor/cl.renew) + 1); lists+gets < 1 || gets > max || lists > 0 {
		t.Errorf("%d LISTs and %d GETs of Leases in %v, want no LIST and 1 to %d GETs (one per node per interval)", lists, gets, stallFor, max)
	}

	// A node dies while the watch is still stalled.
	dead := cl.inZone("a")[0]
	cl.silence([]string{dead}, 0)
	cl.run(100 * time.Millisecond)
	lastRenew := cl.lastRnw[dead]
	cl.run(cfg.NodeMonitorGracePeriod + 5*time.Second)
	if nr := cl.notReady(); len(nr) != 1 || nr[dead] != v1.ConditionUnknown {
		t.Errorf("not Ready: %v, want only %s Unknown", nr, dead)
	}
	at, ok := cl.tainted[dead]
	if !ok {
		t.Fatalf("%s silent on a fresh read, not tainted", dead)
	}
	// Its grace runs from the first read that missed its renewal at the
	// latest (the read spacing, 1 s, after it), not from the stall.
	if late := at.Sub(lastRenew.Add(cfg.NodeMonitorGracePeriod)); late < 0 || late > 3*time.Second {
		t.Errorf("%s tainted %v after its grace period from its last renewal, want within 3 s", dead, late)
	}
}

// TestStalledWatchOverManyNodesReadsOneList: more suspects at once than
// point reads take (20 nodes renewing together, then their watch stalls):
// they are confirmed by one LIST of the Leases, at most one a second, no
// GET; no node is judged.
func TestStalledWatchOverManyNodesReadsOneList(t *testing.T) {
	cfg := correlatedConfig()
	cl := newCluster(t, cfg, map[string]int{"a": 10, "b": 10})
	cl.run(10 * time.Second)
	for _, n := range cl.nodes { // from now on they renew together
		cl.lastRnw[n] = cl.lastRnw[cl.nodes[0]]
	}
	cl.run(5 * time.Second)
	cl.stalled = true
	stallFor := 3 * cfg.NodeMonitorGracePeriod
	cl.run(stallFor)
	if nr := cl.notReady(); len(nr) > 0 {
		t.Errorf("nodes not Ready on a stalled view: %v", nr)
	}
	lists, gets := cl.leaseReads()
	if max := int(stallFor/time.Second) + 1; lists < 1 || lists > max || gets > 0 {
		t.Errorf("%d LISTs and %d GETs of Leases in %v, want 1 to %d LISTs (at most one a second) and no GET", lists, gets, stallFor, max)
	}
}

// TestFailedFreshReadJudgesNoNode: every node falls silent while fresh reads
// fail: no node is judged (as while blind); when reads succeed again, the
// nodes are judged and every zone is FullDisruption.
func TestFailedFreshReadJudgesNoNode(t *testing.T) {
	cfg := correlatedConfig()
	cl := newCluster(t, cfg, map[string]int{"a": 2, "b": 2})
	cl.run(10 * time.Second)
	failing := true
	for _, verb := range []string{"list", "get"} {
		cl.client.PrependReactor(verb, "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
			if failing {
				return true, nil, errors.New("injected: the API server timed out")
			}
			return false, nil, nil
		})
	}
	cl.silence(cl.nodes, 0)
	cl.run(2 * cfg.NodeMonitorGracePeriod)
	if nr := cl.notReady(); len(nr) > 0 {
		t.Errorf("nodes judged without a successful fresh read: %v", nr)
	}
	if v := cl.counter("nodeshepherd_nodelifecycle_fresh_lease_reads_total", "error"); v < 1 {
		t.Errorf("fresh_lease_reads_total{result=error} = %v", v)
	}
	failing = false
	cl.run(3 * time.Second)
	if nr := cl.notReady(); len(nr) != len(cl.nodes) {
		t.Errorf("after reads succeed: not Ready %v, want every node Unknown", nr)
	}
	for _, z := range []string{"a", "b"} {
		if got := cl.c.ZoneStates()[testZoneKey+z]; got != nodetopology.StateFullDisruption {
			t.Errorf("zone %s is %s, want FullDisruption", z, got)
		}
	}
}

// TestJudgedNodeKeepsItsTaintAcrossAllZonesMode: a node dies and is tainted
// (timeAdded T0); then every other node falls silent: the all-zones mode
// strips its taint, as upstream; when a node comes back the mode ends and
// the dead node gets its unreachable taint back at once with timeAdded T0
// (its pods' tolerationSeconds keep counting from T0), while the nodes that
// fell silent with the outage are tainted anew.
func TestJudgedNodeKeepsItsTaintAcrossAllZonesMode(t *testing.T) {
	cfg := correlatedConfig()
	cl := newCluster(t, cfg, map[string]int{"a": 3, "b": 3})
	cl.run(10 * time.Second)
	dead := cl.inZone("a")[0]
	cl.silence([]string{dead}, 0)
	cl.run(cfg.NodeMonitorGracePeriod + 5*time.Second)
	taintOf := func(name string) *v1.Taint {
		n, err := cl.c.latestNode(name)
		if err != nil {
			t.Fatal(err)
		}
		return kube.FindTaint(n, UnreachableTaint)
	}
	first := taintOf(dead)
	if first == nil || first.TimeAdded == nil {
		t.Fatalf("%s not tainted before the outage", dead)
	}
	t0 := *first.TimeAdded
	readyBefore, _ := cl.c.latestNode(dead)
	transition := kube.NodeCondition(readyBefore, v1.NodeReady).LastTransitionTime

	cl.silence(cl.nodes, 0)
	cl.run(cfg.NodeMonitorGracePeriod + 10*time.Second)
	for _, z := range []string{"a", "b"} {
		if got := cl.c.ZoneStates()[testZoneKey+z]; got != nodetopology.StateFullDisruption {
			t.Fatalf("zone %s is %s, want FullDisruption", z, got)
		}
	}
	if taintOf(dead) != nil {
		t.Fatalf("%s keeps its taint in the all-zones mode; upstream strips it", dead)
	}

	back := cl.inZone("b")[0]
	cl.report(back, v1.ConditionTrue)
	cl.run(cfg.NodeMonitorPeriod + 5*time.Second) // the next pass sees it; then one taint a second

	if got := cl.c.ZoneStates()[testZoneKey+"b"]; got == nodetopology.StateFullDisruption {
		t.Fatalf("zone b still FullDisruption after %s came back", back)
	}
	restored := taintOf(dead)
	if restored == nil || restored.TimeAdded == nil || !restored.TimeAdded.Equal(&t0) {
		t.Errorf("%s after the all-zones mode: unreachable taint %v, want it back with timeAdded %v (its countdown not restarted)", dead, restored, t0)
	}
	node, _ := cl.c.latestNode(dead)
	if r := kube.NodeCondition(node, v1.NodeReady); r.Status != v1.ConditionUnknown || !r.LastTransitionTime.Equal(&transition) {
		t.Errorf("%s Ready %s since %v, want Unknown since %v", dead, r.Status, r.LastTransitionTime, transition)
	}
	// A node that fell silent with the outage is tainted anew.
	other := cl.inZone("a")[1]
	if tt := taintOf(other); tt == nil || !tt.TimeAdded.After(t0.Time) {
		t.Errorf("%s: taint %v, want a new one after the mode", other, tt)
	}
}

// TestUnconfirmedSuspectHoldsTaintsWhenEveryZoneMayBeDown: every node
// falls silent; zone a's are confirmed by their fresh reads, zone b's reads
// fail. Counted Ready until confirmed, b's nodes keep zone b out of
// FullDisruption, so zone a alone looked fully disrupted and tainted at the
// normal rate, while every zone was down: the all-zones mode taints
// nothing (chaos seed 160036: a new leader whose Lease reads failed). With
// the suspects counted as silent every zone would be down: no zone taints
// until the reads settle them, and then the all-zones mode holds.
func TestUnconfirmedSuspectHoldsTaintsWhenEveryZoneMayBeDown(t *testing.T) {
	cfg := correlatedConfig()
	cl := newCluster(t, cfg, map[string]int{"a": 2, "b": 2})
	cl.run(10 * time.Second)
	b := cl.inZone("b")
	failing := true
	for _, verb := range []string{"list", "get"} {
		cl.client.PrependReactor(verb, "leases", func(a k8stesting.Action) (bool, runtime.Object, error) {
			if !failing {
				return false, nil, nil
			}
			if g, ok := a.(k8stesting.GetAction); ok && !slices.Contains(b, g.GetName()) {
				return false, nil, nil // zone a's point reads answer
			}
			return true, nil, errors.New("injected: the API server timed out")
		})
	}
	cl.silence(cl.nodes, 0)
	cl.run(2 * cfg.NodeMonitorGracePeriod)
	for _, n := range cl.inZone("a") {
		if cl.notReady()[n] == "" {
			t.Fatalf("zone a's node %s not marked: the test shows nothing", n)
		}
	}
	for _, n := range cl.nodes {
		for _, taint := range []v1.Taint{UnreachableTaint, NotReadyTaint} {
			if cl.everWritten(n, taint) {
				t.Errorf("node %s got %s while zone b's silent nodes were unconfirmed and every zone may have been down", n, taint.Key)
			}
		}
	}
	failing = false
	cl.run(3 * time.Second)
	for _, z := range []string{"a", "b"} {
		if got := cl.c.ZoneStates()[testZoneKey+z]; got != nodetopology.StateFullDisruption {
			t.Errorf("zone %s is %s, want FullDisruption", z, got)
		}
	}
}
