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
