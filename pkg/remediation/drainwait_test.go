package remediation

import (
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
)

// drainedNode is node() cordoned by the drain controller at cordoned, with
// the DrainScheduled condition's message msg ("" none).
func drainedNode(cordoned time.Time, msg string, status v1.ConditionStatus) *v1.Node {
	n := node(deadlock(v1.ConditionTrue, t0.Add(-time.Hour), t0))
	n.Spec.Unschedulable = true
	n.Annotations = map[string]string{DrainOwned: "", DrainCordonedAt: cordoned.Format("2006-01-02T15:04:05.000000000Z07:00")}
	if msg != "" {
		n.Status.Conditions = append(n.Status.Conditions, v1.NodeCondition{Type: DrainCondition, Status: status, Message: msg})
	}
	return n
}

func TestDrainProgressOf(t *testing.T) {
	at := func(x time.Time) string { return x.UTC().Format("2006-01-02T15:04:05.000000000Z07:00") }
	cordoned := t0.Add(-10 * time.Minute)
	for name, c := range map[string]struct {
		n    *v1.Node
		done bool
		why  string
	}{
		"not cordoned":  {n: node(), why: "has not cordoned"},
		"not started":   {n: drainedNode(cordoned, "", ""), why: "the drain not started"},
		"in flight":     {n: drainedNode(cordoned, "Drain activity scheduled "+at(cordoned), v1.ConditionTrue), why: "draining"},
		"completed":     {n: drainedNode(cordoned, "Drain activity scheduled "+at(cordoned)+" | Completed: "+at(cordoned.Add(time.Minute)), v1.ConditionFalse), done: true},
		"earlier drain": {n: drainedNode(cordoned, "Drain activity scheduled "+at(cordoned.Add(-time.Hour))+" | Completed: "+at(cordoned.Add(-time.Minute)), v1.ConditionFalse), why: "not started"},
		"failed": {n: drainedNode(cordoned, "Drain activity scheduled "+at(cordoned)+" | Failed: "+at(cordoned.Add(time.Minute))+" | default/web-1 (PodDisruptionBudget web refuses)", v1.ConditionFalse),
			why: "failed at 2026-11-28T09:51:00Z and is tried again: default/web-1 (PodDisruptionBudget web refuses)"},
		// One-second precision (Draino): the completion's true time may be
		// up to a second after the cordon written at that second.
		"completed, seconds": {n: drainedNode(cordoned, "Drain activity scheduled "+cordoned.Format(time.RFC3339)+" | Completed: "+cordoned.Format(time.RFC3339), v1.ConditionFalse), done: true},
	} {
		t.Run(name, func(t *testing.T) {
			got := DrainProgressOf(c.n)
			if got.Done != c.done || !strings.Contains(got.Why, c.why) {
				t.Errorf("DrainProgressOf = %+v, want done %v, why containing %q", got, c.done, c.why)
			}
		})
	}
}

// A step that disrupts pods waits at the Drain step until the drain is
// done (issue 46 point 2); a step that does not (a NoSchedule taint) climbs
// at the timeout as before.
func TestDecideWaitsForDrainBeforeDisruption(t *testing.T) {
	p := policy() // Taint, Drain, Reboot, Replace, Fence
	sick := node(deadlock(v1.ConditionTrue, t0.Add(-time.Hour), t0))
	atDrain := State{Step: 1, Action: ActionDrain, Key: StepKey(1, p.Steps[1]), StepSince: t0.Add(-6 * time.Minute), RepairSince: t0.Add(-time.Hour), Drain: true}
	can := Capabilities{Reboot: true, Replace: true, Fence: true}

	d := p.Decide(Input{Node: sick, State: atDrain, Can: can, Now: t0, Drain: DrainProgress{Why: "draining"}})
	if d.Verdict != VerdictBlocked || d.Step != 1 || !strings.HasPrefix(d.Reason, WaitingForDrain) || !strings.Contains(d.Reason, "step 3 (Reboot)") {
		t.Errorf("drain not done: %+v, want Blocked at step 2, waiting for drain before step 3 (Reboot)", d)
	}
	d = p.Decide(Input{Node: sick, State: atDrain, Can: can, Now: t0, Drain: DrainProgress{Done: true}})
	if d.Verdict != VerdictAdvance || d.Step != 2 {
		t.Errorf("drain done: %+v, want Advance to step 3", d)
	}
	// No provider reboots: the step after is a Replace, which waits too.
	d = p.Decide(Input{Node: sick, State: atDrain, Can: Capabilities{Replace: true, Fence: true}, Now: t0})
	if d.Verdict != VerdictBlocked || !strings.Contains(d.Reason, "step 4 (Replace)") {
		t.Errorf("no reboots, drain not done: %+v, want waiting before step 4 (Replace)", d)
	}
	// Drain then a NoSchedule taint: nothing disrupted, it climbs.
	q := policy()
	q.Steps = []Step{q.Steps[1], q.Steps[0]}
	st := State{Step: 0, Action: ActionDrain, Key: StepKey(0, q.Steps[0]), StepSince: t0.Add(-6 * time.Minute), RepairSince: t0.Add(-time.Hour), Drain: true}
	if d := q.Decide(Input{Node: sick, State: st, Can: can, Now: t0}); d.Verdict != VerdictAdvance {
		t.Errorf("drain then NoSchedule taint: %+v, want Advance", d)
	}
	// A NoExecute taint disrupts.
	q.Steps[1].Taint = &TaintSpec{Key: "example.com/unhealthy", Effect: v1.TaintEffectNoExecute}
	if d := q.Decide(Input{Node: sick, State: st, Can: can, Now: t0}); d.Verdict != VerdictBlocked {
		t.Errorf("drain then NoExecute taint: %+v, want Blocked", d)
	}
	// Before the timeout nothing changes: the step is under way.
	early := atDrain
	early.StepSince = t0.Add(-time.Minute)
	if d := p.Decide(Input{Node: sick, State: early, Can: can, Now: t0}); d.Verdict != VerdictNone {
		t.Errorf("before the timeout: %+v, want None", d)
	}
}
