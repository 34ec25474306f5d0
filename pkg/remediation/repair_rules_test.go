package remediation

import (
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"
)

// A condition gone stale with its unhealthy status never ends a repair: its
// reporter may be hung by the fault itself (issue 46 point 5). It starts
// none either.
func TestStaleConditionKeepsTheRepair(t *testing.T) {
	p := policy() // KernelDeadlock, staleAfter 10m
	stale := node(deadlock(v1.ConditionTrue, t0.Add(-time.Hour), t0.Add(-11*time.Minute)))
	atTaint := State{Step: 0, Action: ActionTaint, Key: StepKey(0, p.Steps[0]), StepSince: t0.Add(-6 * time.Minute), RepairSince: t0.Add(-6 * time.Minute)}
	can := Capabilities{Reboot: true, Replace: true, Fence: true}
	d := p.Decide(Input{Node: stale, State: atTaint, Can: can, Now: t0})
	if d.Verdict != VerdictAdvance || !strings.Contains(d.Reason, "stale since") {
		t.Errorf("in repair, stale True: %+v, want the repair to go on (Advance), saying the condition is stale", d)
	}
	early := atTaint
	early.StepSince = t0.Add(-time.Minute)
	if d := p.Decide(Input{Node: stale, State: early, Can: can, Now: t0.Add(time.Hour)}); d.Verdict == VerdictDone {
		t.Errorf("in repair, stale True for an hour: %+v, never Done", d)
	}
	if d := p.Decide(Input{Node: stale, State: NotInRepair, Can: can, Now: t0}); d.Verdict != VerdictNone {
		t.Errorf("not in repair, stale True: %+v, want None (a stale condition starts nothing)", d)
	}
}

// staleAfter on Ready under the kubelet's 5-minute status period would take
// every healthy node for stale: refused.
func TestReadyStaleAfterUnderFiveMinutesRefused(t *testing.T) {
	p := policy()
	p.Unhealthy[1].StaleAfter = ptr.To(d(time.Minute))
	errs := p.Validate(field.NewPath("spec"))
	if len(errs) != 1 || errs[0].Field != "spec.unhealthy[1].staleAfter" || !strings.Contains(errs[0].Detail, "at least 5m") {
		t.Errorf("Ready staleAfter 1m: %v, want one error at spec.unhealthy[1].staleAfter", errs)
	}
	p.Unhealthy[1].StaleAfter = ptr.To(d(5 * time.Minute))
	if errs := p.Validate(field.NewPath("spec")); len(errs) != 0 {
		t.Errorf("Ready staleAfter 5m: %v", errs)
	}
}

// A person's cordon during a repair pauses it: no new step while it stays
// (issue 46 point 5); before a repair it holds the start, as before.
func TestCordonDuringRepairPauses(t *testing.T) {
	p := policy()
	sick := node(deadlock(v1.ConditionTrue, t0.Add(-time.Hour), t0))
	atTaint := State{Step: 0, Action: ActionTaint, Key: StepKey(0, p.Steps[0]), StepSince: t0.Add(-6 * time.Minute), RepairSince: t0.Add(-6 * time.Minute)}
	can := Capabilities{Reboot: true, Replace: true, Fence: true}
	d := p.Decide(Input{Node: sick, State: atTaint, Can: can, Now: t0, CordonedByOther: true})
	if d.Verdict != VerdictBlocked || d.Step != 0 || !strings.Contains(d.Reason, "cordoned by someone else") {
		t.Errorf("cordoned during the repair: %+v, want Blocked at step 1", d)
	}
	if d := p.Decide(Input{Node: sick, State: atTaint, Can: can, Now: t0}); d.Verdict != VerdictAdvance {
		t.Errorf("uncordoned: %+v, want Advance", d)
	}
	if d := p.Decide(Input{Node: sick, State: NotInRepair, Can: can, Now: t0, CordonedByOther: true}); d.Verdict != VerdictBlocked {
		t.Errorf("cordoned before: %+v, want Blocked", d)
	}
}

// A fault that comes back soon after a repair ended resumes above the step
// that ended it, not at step 1 (issue 46 point 5, as AKS escalates); after
// the recurrence window, or with it off, it starts at step 1 again. A
// disruptive step to resume at waits behind a Drain step below it.
func TestRecurrenceResumesHigher(t *testing.T) {
	p := policy() // Taint, Drain, Reboot, Replace, Fence
	sick := node(deadlock(v1.ConditionTrue, t0.Add(-time.Hour), t0))
	can := Capabilities{Reboot: true, Replace: true, Fence: true}
	start := func(last *LastRepair) Decision {
		return p.Decide(Input{Node: sick, State: NotInRepair, Can: can, Now: t0, Last: last})
	}
	if d := start(&LastRepair{Policy: "p", Step: 0, Ended: t0.Add(-10 * time.Minute)}); d.Verdict != VerdictStart || d.Step != 1 || !strings.Contains(d.Reason, "resuming at step 2") {
		t.Errorf("ended at step 1 (Taint) 10m ago: %+v, want Start at step 2 (Drain)", d)
	}
	// Ended at step 3 (Reboot): the target is step 4 (Replace), which
	// disrupts: it starts at the Drain step below and aims there.
	d3 := start(&LastRepair{Policy: "p", Step: 2, Ended: t0.Add(-10 * time.Minute)})
	if d3.Verdict != VerdictStart || d3.Step != 1 || d3.ResumeAt != 3 || !strings.Contains(d3.Reason, "once the drain of step 2 is done") {
		t.Errorf("ended at step 3 (Reboot): %+v, want Start at step 2 (Drain) aiming at step 4 (Replace)", d3)
	}
	atDrain := State{Step: 1, Action: ActionDrain, Key: StepKey(1, p.Steps[1]), StepSince: t0, RepairSince: t0, Drain: true, ResumeAt: 3}
	if d := p.Decide(Input{Node: sick, State: atDrain, Can: can, Now: t0.Add(time.Minute)}); d.Verdict != VerdictNone {
		t.Errorf("resumed, drain not done: %+v, want None (the Drain step under way)", d)
	}
	if d := p.Decide(Input{Node: sick, State: atDrain, Can: can, Now: t0.Add(time.Minute), Drain: DrainProgress{Done: true}}); d.Verdict != VerdictAdvance || d.Step != 3 {
		t.Errorf("resumed, drain done before the timeout: %+v, want Advance to step 4 at once", d)
	}
	q := policy()
	q.Steps = []Step{q.Steps[0], q.Steps[2]} // Taint, Reboot: no drain below
	if d := q.Decide(Input{Node: sick, State: NotInRepair, Can: can, Now: t0, Last: &LastRepair{Policy: "p", Step: 0, Ended: t0.Add(-time.Minute)}}); d.Step != 1 || d.ResumeAt != 0 {
		t.Errorf("Taint, Reboot, ended at the Taint: %+v, want Start at step 2 (Reboot)", d)
	}
	if d := start(&LastRepair{Policy: "p", Step: 4, Ended: t0.Add(-time.Minute)}); d.Step != 1 || d.ResumeAt != 4 {
		t.Errorf("ended at the top step: %+v, want the top step again, behind the drain", d)
	}
	if d := start(&LastRepair{Policy: "p", Step: 2, Ended: t0.Add(-2 * time.Hour)}); d.Step != 0 {
		t.Errorf("ended 2h ago (window 1h): %+v, want step 1", d)
	}
	p.RecurrenceWindow = ptr.To(d(0))
	if d := start(&LastRepair{Policy: "p", Step: 2, Ended: t0.Add(-time.Minute)}); d.Step != 0 {
		t.Errorf("window 0 (off): %+v, want step 1", d)
	}
}
