package chaos

import (
	"sort"
	"strings"
	"sync"
	"time"
)

// Applied is a step as the runner applied it: it took effect at some
// moment between Start and Done (the fake nodes' flags flip under a lock in
// that window), which is all the checker may assume.
type Applied struct {
	Step  Step
	Start time.Time
	Done  time.Time
}

// Machine is the ground truth about one node at one moment: what the fake
// node does, whatever the API server shows.
type Machine struct {
	Partitioned    bool
	KubeletStopped bool
	Off            bool // machine shut down
	ReadyFalse     bool // the kubelet reports Ready=False
	Boot           int  // machine starts after a shutdown: the boot ID changes with it
	CloudBlind     bool // the cloud provider answers nothing about the machine
}

// Unseen says nothing the controllers can see tells how the machine is:
// its kubelet does not reach the API server and the provider answers
// nothing about it.
func (m Machine) Unseen() bool { return (m.Partitioned || m.KubeletStopped) && m.CloudBlind }

// Silent says the node's kubelet does not reach the API server.
func (m Machine) Silent() bool { return m.Partitioned || m.KubeletStopped || m.Off }

// NotReady says the node is silent or reports itself not Ready: what the
// node lifecycle controller counts as not Ready once it has noticed.
func (m Machine) NotReady() bool { return m.Silent() || m.ReadyFalse }

// Running says the machine runs its pods (the kubelet may be cut off).
func (m Machine) Running() bool { return !m.Off }

// Truth is the ground truth of a run, built from the applied steps. Safe
// for concurrent use: the runner records while the checker reads.
type Truth struct {
	mu    sync.Mutex
	zones map[string]string // node -> zone
	order []string          // zones in order
	steps map[string][]Applied
	// global holds the steps that touch no node, for the timeline.
	all []Applied
}

// NewTruth knows the nodes and their zones; every node starts healthy.
func NewTruth(zones []Zone) *Truth {
	t := &Truth{zones: map[string]string{}, steps: map[string][]Applied{}}
	for _, z := range zones {
		t.order = append(t.order, z.Name)
		for _, n := range z.Nodes {
			t.zones[n] = z.Name
		}
	}
	return t
}

// Record adds an applied step; steps of one node must be recorded in the
// order they were applied (the runner applies them one at a time).
func (t *Truth) Record(a Applied) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.all = append(t.all, a)
	if a.Step.Op == OpRegister {
		// Newcomers join their zone from their registration on.
		if _, ok := t.zoneKnown(a.Step.Zone); !ok {
			t.order = append(t.order, a.Step.Zone)
		}
		for _, n := range a.Step.Nodes {
			t.zones[n] = a.Step.Zone
		}
	}
	for _, n := range a.Step.Nodes {
		t.steps[n] = append(t.steps[n], a)
	}
}

func (t *Truth) zoneKnown(zone string) (int, bool) {
	for i, z := range t.order {
		if z == zone {
			return i, true
		}
	}
	return -1, false
}

// Applied returns every recorded step, in order.
func (t *Truth) Applied() []Applied {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]Applied(nil), t.all...)
}

// Zone returns a node's zone ("" when unknown).
func (t *Truth) Zone(node string) string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.zones[node]
}

// Zones returns every zone and its nodes, sorted by node name.
func (t *Truth) Zones() []Zone {
	// Read under the lock: a newcomer's registration (Record) adds to the
	// zones while the watches' handlers judge (chaos seeds 310021, 320021:
	// a data race).
	t.mu.Lock()
	defer t.mu.Unlock()
	by := map[string][]string{}
	for n, z := range t.zones {
		by[z] = append(by[z], n)
	}
	var out []Zone
	for _, z := range t.order {
		sort.Strings(by[z])
		out = append(out, Zone{Name: z, Nodes: by[z]})
	}
	return out
}

// ZonesAt returns every zone and the nodes it had at at: a newcomer joins
// from its registration's start on. A judgment of a moment that runs later
// (after the slack) must not count a node that registered meanwhile: the
// controller could not have had it.
func (t *Truth) ZonesAt(at time.Time) []Zone {
	t.mu.Lock()
	later := map[string]bool{}
	for n, steps := range t.steps {
		for _, a := range steps {
			if a.Step.Op == OpRegister && a.Start.After(at) {
				later[n] = true
			}
		}
	}
	t.mu.Unlock()
	var out []Zone
	for _, z := range t.Zones() {
		kept := Zone{Name: z.Name}
		for _, n := range z.Nodes {
			if !later[n] {
				kept.Nodes = append(kept.Nodes, n)
			}
		}
		if len(kept.Nodes) > 0 {
			out = append(out, kept)
		}
	}
	return out
}

// apply is what a step does to a machine, as the fake nodes do it: the
// flags are set and cleared, not counted (a heal ends every partition).
func apply(m Machine, s Step) Machine {
	switch s.Op {
	case OpPartition:
		m.Partitioned = true
	case OpHeal:
		m.Partitioned = false
	case OpRegister:
		m.Partitioned = s.Silent
	case OpKubeletStop:
		m.KubeletStopped = true
	case OpKubeletStart:
		m.KubeletStopped = false
	case OpMachineShutdown:
		m.Off = true
	case OpMachineStart:
		if m.Off {
			// A fresh boot starts a fresh kubelet: a stopped one does not
			// survive a power cycle (fakenode MachineStart; chaos seed
			// 90012: a node kubelet-stopped, then power-cycled, counted
			// silent while it ran).
			m.Boot++
			m.KubeletStopped = false
		}
		m.Off = false
	case OpCloudBlind:
		m.CloudBlind = true
	case OpCloudSeeing:
		m.CloudBlind = false
	case OpCondition:
		if strings.HasPrefix(s.Condition, "Ready=") {
			m.ReadyFalse = s.Condition != "Ready=True"
		}
	case OpClearCondition:
		if s.Condition == "Ready" {
			m.ReadyFalse = false
		}
	}
	return m
}

// Always says pred certainly held for node over all of [from, to]: for
// every state the node may have been in at some moment of the interval,
// given that each step took effect somewhere in its [Start, Done].
func (t *Truth) Always(node string, from, to time.Time, pred func(Machine) bool) bool {
	t.mu.Lock()
	steps := t.steps[node]
	t.mu.Unlock()
	// states[k] is the machine after k steps. At a moment x, every k from
	// (steps done by x) to (steps started by x) is possible.
	lo, hi := 0, 0
	for _, a := range steps {
		if !a.Done.After(from) {
			lo++
		}
		if !a.Start.After(to) {
			hi++
		}
	}
	m := Machine{}
	for k := 0; k <= hi; k++ {
		if k > 0 {
			m = apply(m, steps[k-1].Step)
		}
		if k >= lo && !pred(m) {
			return false
		}
	}
	return true
}

// BootStarted is when the machine's boot at moment at began at the
// earliest: the start of the last machine start that could have taken
// effect by then and began a boot (zero when it has run since the
// beginning). A start of a machine that already ran is no new boot: taken
// for one, it would excuse a taint on a machine that kept its boot.
func (t *Truth) BootStarted(node string, at time.Time) time.Time {
	t.mu.Lock()
	steps := t.steps[node]
	t.mu.Unlock()
	var started time.Time
	m := Machine{}
	for _, a := range steps {
		next := apply(m, a.Step)
		if a.Step.Op == OpMachineStart && next.Boot > m.Boot && !a.Start.After(at) {
			started = a.Start
		}
		m = next
	}
	return started
}

// Ever says pred possibly held for node at some moment of [from, to].
func (t *Truth) Ever(node string, from, to time.Time, pred func(Machine) bool) bool {
	return !t.Always(node, from, to, func(m Machine) bool { return !pred(m) })
}
