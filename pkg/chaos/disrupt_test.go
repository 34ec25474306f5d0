package chaos

import (
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
)

// withRV is p at resourceVersion rv.
func withRV(p *v1.Pod, rv string) *v1.Pod {
	q := p.DeepCopy()
	q.ResourceVersion = rv
	return q
}

// A repair request that takes a machine down disrupts the pods on it: one
// a budget protects must have been evicted before the request was written
// (resourceVersion order), unless its machine was off or a NoExecute taint
// was due for it (chaos seed 70016's path: a Reboot of a partitioned
// machine whose not-Ready web pod still ran).
func TestMachineTakenDownPastBudget(t *testing.T) {
	c := history(t, 1.0, partition("n2"))
	c.ObservePDB(at(1), pdb(0), false)
	left := pod("web-1", "n2", ptr.To(int64(300)))
	c.ObservePod(at(1), withRV(left, "10"), false)
	gone := pod("web-2", "n2", nil)
	c.ObservePod(at(1), withRV(gone, "11"), false)
	c.ObservePod(at(3), withRV(evicted(gone, reasonEvictionAPI, 3), "20"), false)
	late := pod("web-3", "n2", nil)
	c.MachineTakenDown(at(4), "n2", 30, "a reboot (request r1)")
	c.ObservePod(at(4.5), withRV(late, "31"), false) // bound after the request
	c.Settle(at(5))
	wantViolations(t, c, InvPDB, 0, "") // not judged within the slack
	c.Settle(at(7))
	wantViolations(t, c, InvPDB, 1, "pod/default/web-1: on node n2 when a reboot (request r1) took its running machine down")

	// The machine was off before the request: its pods ran nowhere.
	c = history(t, 1.0, Step{Op: OpMachineShutdown, Nodes: []string{"n2"}})
	c.ObservePDB(at(1), pdb(0), false)
	c.ObservePod(at(1), withRV(left, "10"), false)
	c.MachineTakenDown(at(4), "n2", 30, "a replace (request r2)")
	c.Settle(at(7))
	// A budget that allowed a disruption at the request.
	c.ObservePDB(at(8), pdb(1), false)
	c.ObservePod(at(8), withRV(pod("web-4", "n3", nil), "40"), false)
	c.MachineTakenDown(at(9), "n3", 41, "a reboot (request r3)")
	c.Settle(at(12))
	wantViolations(t, c, InvPDB, 0, "")

	// A NoExecute taint was due for the pod (not tolerated): taint
	// eviction ignores budgets, upstream's too.
	c = history(t, 1.0, partition("n2"))
	c.ObservePDB(at(1), pdb(0), false)
	c.ObserveNode(at(2), node("n2", unreachable(2)), false)
	c.ObservePod(at(1), withRV(pod("web-5", "n2", nil), "10"), false)
	c.MachineTakenDown(at(4), "n2", 30, "a reboot (request r4)")
	c.Settle(at(7))
	wantViolations(t, c, InvPDB, 0, "")
}

// Chaos seed 220005: a pod evicted through the Eviction API after the
// request was written, but seen gone before the machine went down, was
// the API server's budget to judge; the takedown found it gone. One
// evicted after the takedown, or deleted otherwise, still counts.
func TestMachineTakenDownAfterAnEviction(t *testing.T) {
	c := history(t, 1.0, partition("n2"))
	c.ObservePDB(at(1), pdb(0), false)
	first := pod("web-1", "n2", nil)
	c.ObservePod(at(1), withRV(first, "10"), false)
	c.ObservePod(at(3.5), withRV(evicted(first, reasonEvictionAPI, 3.5), "35"), false) // after the request (30), before the takedown
	late := pod("web-2", "n2", nil)
	c.ObservePod(at(1), withRV(late, "11"), false)
	c.MachineTakenDown(at(4), "n2", 30, "a reboot (request r1)")
	c.ObservePod(at(4.5), withRV(evicted(late, reasonEvictionAPI, 4.5), "45"), false) // after the takedown
	c.Settle(at(7))
	wantViolations(t, c, InvPDB, 1, "pod/default/web-2: on node n2 when a reboot (request r1) took its running machine down")
}
