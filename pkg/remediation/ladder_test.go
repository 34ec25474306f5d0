package remediation

import (
	"fmt"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"
)

var t0 = time.Date(2026, 11, 28, 10, 0, 0, 0, time.UTC)

func d(x time.Duration) metav1.Duration { return metav1.Duration{Duration: x} }

// policy is a general pool's ladder: KernelDeadlock for 1m or Ready
// Unknown for 5m; taint, drain, reboot, replace, fence, 5m each; a 2m hold.
func policy() *PolicySpec {
	return &PolicySpec{
		Unhealthy: []UnhealthyCondition{
			{Type: "KernelDeadlock", Status: v1.ConditionTrue, For: d(time.Minute), StaleAfter: ptr.To(d(10 * time.Minute))},
			{Type: v1.NodeReady, Status: v1.ConditionUnknown, For: d(5 * time.Minute)},
		},
		HealthyHold: d(2 * time.Minute),
		Steps: []Step{
			{Action: ActionTaint, Timeout: d(5 * time.Minute), Taint: &TaintSpec{Key: "example.com/unhealthy", Effect: v1.TaintEffectNoSchedule}},
			{Action: ActionDrain, Timeout: d(5 * time.Minute)},
			{Action: ActionReboot, Timeout: d(5 * time.Minute)},
			{Action: ActionReplace, Timeout: d(5 * time.Minute)},
			{Action: ActionFence, Timeout: d(5 * time.Minute)},
		},
	}
}

func node(conds ...v1.NodeCondition) *v1.Node {
	n := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", CreationTimestamp: metav1.NewTime(t0.Add(-time.Hour))}}
	n.Status.Conditions = append([]v1.NodeCondition{{Type: v1.NodeReady, Status: v1.ConditionTrue,
		LastTransitionTime: metav1.NewTime(t0.Add(-time.Hour)), LastHeartbeatTime: metav1.NewTime(t0)}}, conds...)
	return n
}

// deadlock is KernelDeadlock with status since since, last heard at beat.
func deadlock(status v1.ConditionStatus, since, beat time.Time) v1.NodeCondition {
	return v1.NodeCondition{Type: "KernelDeadlock", Status: status, LastTransitionTime: metav1.NewTime(since), LastHeartbeatTime: metav1.NewTime(beat)}
}

func TestValidate(t *testing.T) {
	if errs := policy().Validate(field.NewPath("spec")); len(errs) != 0 {
		t.Fatalf("a good policy: %v", errs)
	}
	bad := policy()
	bad.Unhealthy[0].Status = "Maybe"
	bad.Steps[0].Taint.Effect = v1.TaintEffectPreferNoSchedule
	bad.Steps[1].Timeout = d(time.Minute) // below the 2m hold
	bad.Steps[2].Action = "Reimage"
	bad.Steps[3].Taint = &TaintSpec{Key: "x", Effect: v1.TaintEffectNoSchedule}
	bad.Steps[4] = Step{Action: ActionTaint, Timeout: d(5 * time.Minute), Taint: &TaintSpec{Key: "node.kubernetes.io/out-of-service", Effect: v1.TaintEffectNoExecute}}
	bad.Brakes.MaxInRepair = ptr.To(intstr.FromString("twenty"))
	bad.Brakes.MaxUnhealthy = ptr.To(intstr.FromString("-5%"))
	errs := bad.Validate(field.NewPath("spec"))
	for _, want := range []string{"spec.unhealthy[0].status", "spec.steps[0].taint.effect", "spec.steps[1].timeout", "spec.steps[2].action",
		"spec.steps[3].taint", "spec.steps[4].taint.key", "spec.brakes.maxInRepair", "spec.brakes.maxUnhealthy"} {
		if !strings.Contains(errs.ToAggregate().Error(), want) {
			t.Errorf("no error at %s: %v", want, errs)
		}
	}
	if errs := (&PolicySpec{}).Validate(field.NewPath("spec")); len(errs) != 2 {
		t.Errorf("an empty policy: %v, want the conditions and the steps required", errs)
	}
}

func TestJudge(t *testing.T) {
	p := policy()
	for name, c := range map[string]struct {
		node      *v1.Node
		unhealthy bool
		since     time.Time
		pending   time.Time
		stale     bool
	}{
		"healthy":          {node: node(deadlock(v1.ConditionFalse, t0.Add(-time.Hour), t0)), since: t0.Add(-time.Hour)},
		"deadlock for 2m":  {node: node(deadlock(v1.ConditionTrue, t0.Add(-2*time.Minute), t0)), unhealthy: true, since: t0.Add(-time.Minute + time.Second)},
		"deadlock for 30s": {node: node(deadlock(v1.ConditionTrue, t0.Add(-30*time.Second), t0)), since: t0.Add(-time.Hour), pending: t0.Add(31 * time.Second)},
		// The reporter stopped 11m ago: the condition is stale from 1m ago.
		// It starts no repair, and ends none (issue 46 point 5: a
		// node-problem-detector hung by the deadlock): it holds.
		"stale deadlock": {node: node(deadlock(v1.ConditionTrue, t0.Add(-time.Hour), t0.Add(-11*time.Minute))), since: t0.Add(-time.Hour), stale: true},
	} {
		h := p.Judge(c.node, t0)
		if h.Unhealthy != c.unhealthy || !h.Since.Equal(c.since) || !h.Pending.Equal(c.pending) || (h.Stale != "") != c.stale || c.stale && !h.Holding {
			t.Errorf("%s: %+v, want unhealthy %v since %v pending %v", name, h, c.unhealthy, c.since, c.pending)
		}
	}
}

func TestDecide(t *testing.T) {
	sick := node(deadlock(v1.ConditionTrue, t0.Add(-10*time.Minute), t0))
	flapping := node(deadlock(v1.ConditionTrue, t0.Add(-5*time.Second), t0))
	recovered := func(ago time.Duration) *v1.Node { return node(deadlock(v1.ConditionFalse, t0.Add(-ago), t0)) }
	inRepair := func(step int, since time.Duration) State {
		return State{Step: step, StepSince: t0.Add(-since), RepairSince: t0.Add(-time.Hour)}
	}
	pool := Pool{Name: "gpu", Nodes: 10, Unhealthy: 1, InRepair: 0, Zone: "a", ZoneNodes: 5}
	all := Capabilities{Reboot: true, Replace: true}
	pct := func(s string) *intstr.IntOrString { return ptr.To(intstr.FromString(s)) }
	for name, c := range map[string]struct {
		mut     func(*PolicySpec)
		in      Input
		verdict Verdict
		step    int
		reason  string
		next    time.Time
	}{
		"healthy": {in: Input{Node: recovered(time.Hour), State: NotInRepair, Pool: pool, Can: all}, verdict: VerdictNone, step: -1},
		"unhealthy: the first step": {in: Input{Node: sick, State: NotInRepair, Pool: pool, Can: all},
			verdict: VerdictStart, step: 0, reason: "unhealthy: KernelDeadlock=True since"},
		"no provider: reboot and replace skipped": {mut: func(p *PolicySpec) { p.Steps = p.Steps[2:] },
			in: Input{Node: sick, State: NotInRepair, Pool: pool}, verdict: VerdictStart, step: 2},
		"a person's cordon": {in: Input{Node: sick, State: NotInRepair, Pool: pool, Can: all, CordonedByOther: true},
			verdict: VerdictBlocked, step: -1, reason: "repair blocked: the node is cordoned by someone else"},
		"paused": {in: Input{Node: sick, State: NotInRepair, Pool: pool, Can: all, Paused: true}, verdict: VerdictBlocked, step: -1, reason: "repair blocked: paused"},
		"storm": {mut: func(p *PolicySpec) { p.Brakes.MaxUnhealthy = pct("20%") },
			in:      Input{Node: sick, State: NotInRepair, Pool: Pool{Name: "gpu", Nodes: 10, Unhealthy: 3}, Can: all},
			verdict: VerdictBlocked, step: -1, reason: "repair blocked: 3 of 10 nodes of pool gpu unhealthy, limit 20%"},
		"cooldown": {mut: func(p *PolicySpec) { p.Brakes.MaxUnhealthy, p.Brakes.Cooldown = pct("20%"), d(10*time.Minute) },
			in:      Input{Node: sick, State: NotInRepair, Pool: Pool{Name: "gpu", Nodes: 10, Unhealthy: 2, StormEnded: t0.Add(-5 * time.Minute)}, Can: all},
			verdict: VerdictBlocked, step: -1, reason: "cooling down"},
		"two in repair, 20%": {mut: func(p *PolicySpec) { p.Brakes.MaxInRepair = pct("20%") },
			in:      Input{Node: sick, State: NotInRepair, Pool: Pool{Name: "gpu", Nodes: 10, Unhealthy: 3, InRepair: 2}, Can: all},
			verdict: VerdictBlocked, step: -1, reason: "repair blocked: 2 of 10 nodes of pool gpu in repair, limit 20%"},
		"one in repair, 20%": {mut: func(p *PolicySpec) { p.Brakes.MaxInRepair = pct("20%") },
			in:      Input{Node: sick, State: NotInRepair, Pool: Pool{Name: "gpu", Nodes: 10, Unhealthy: 3, InRepair: 1}, Can: all},
			verdict: VerdictStart, step: 0},
		"zone full": {mut: func(p *PolicySpec) { p.Brakes.MaxInRepairPerZone = ptr.To(intstr.FromInt32(1)) },
			in:      Input{Node: sick, State: NotInRepair, Pool: Pool{Name: "gpu", Nodes: 10, Zone: "a", ZoneNodes: 5, ZoneInRepair: 1}, Can: all},
			verdict: VerdictBlocked, step: -1, reason: `in zone "a" in repair, limit 1`},
		"step under way": {in: Input{Node: sick, State: inRepair(1, time.Minute), Pool: pool, Can: all},
			verdict: VerdictNone, step: 1, next: t0.Add(4 * time.Minute)},
		"step timed out": {in: Input{Node: sick, State: inRepair(1, 5*time.Minute), Pool: pool, Can: all},
			verdict: VerdictAdvance, step: 2, reason: "step 2 (Drain) timed out after 5m0s"},
		"timed out, paused": {in: Input{Node: sick, State: inRepair(1, 5*time.Minute), Pool: pool, Can: all, Paused: true},
			verdict: VerdictBlocked, step: 1, reason: "repair paused"},
		"timed out, no provider: fence next": {in: Input{Node: sick, State: inRepair(1, 5*time.Minute), Pool: pool},
			verdict: VerdictAdvance, step: 4},
		"last step timed out": {in: Input{Node: sick, State: inRepair(4, 6*time.Minute), Pool: pool, Can: all},
			verdict: VerdictExhausted, step: 4, reason: "the last step (Fence) timed out"},
		"healthy, not for the hold time": {in: Input{Node: recovered(time.Minute), State: inRepair(2, 3*time.Minute), Pool: pool, Can: all},
			verdict: VerdictNone, step: 2, next: t0.Add(time.Minute + time.Second)},
		// A transition stamped 2m ago (to the second) may have happened up
		// to a second later: not yet the whole hold time.
		"healthy for 2m by the stamp": {in: Input{Node: recovered(2 * time.Minute), State: inRepair(2, 3*time.Minute), Pool: pool, Can: all},
			verdict: VerdictNone, step: 2, next: t0.Add(time.Second)},
		"healthy for the hold time": {in: Input{Node: recovered(2*time.Minute + time.Second), State: inRepair(2, 3*time.Minute), Pool: pool, Can: all},
			verdict: VerdictDone, step: 2},
		// The condition came back 5 s ago (not yet for its minute): not a
		// recovery, so a flap every 30 s never ends the repair.
		"flapping": {in: Input{Node: flapping, State: inRepair(2, time.Minute), Pool: pool, Can: all},
			verdict: VerdictNone, step: 2, next: t0.Add(4 * time.Minute)},
		"flapping past the timeout": {in: Input{Node: flapping, State: inRepair(2, 5*time.Minute), Pool: pool, Can: all},
			verdict: VerdictAdvance, step: 3, reason: "a condition holds again"},
	} {
		p := policy()
		if c.mut != nil {
			c.mut(p)
		}
		c.in.Now = t0
		got := p.Decide(c.in)
		if got.Verdict != c.verdict || got.Step != c.step || !strings.Contains(got.Reason, c.reason) || !got.Next.Equal(c.next) {
			t.Errorf("%s: %+v, want %s at step %d, reason with %q, next %v", name, got, c.verdict, c.step, c.reason, c.next)
		}
	}
}

// The case: 3 of 10 gpu nodes unhealthy, 20% in repair at most:
// two start, the third is held back and says why.
func TestPoolOfThreeUnhealthyTwentyPercent(t *testing.T) {
	p := policy()
	p.NodeSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"pool": "gpu"}}
	p.Brakes.MaxInRepair = ptr.To(intstr.FromString("20%"))
	var nodes []*v1.Node
	for i := range 12 {
		n := node(deadlock(v1.ConditionFalse, t0.Add(-time.Hour), t0))
		if i < 3 {
			n = node(deadlock(v1.ConditionTrue, t0.Add(-time.Hour), t0))
		}
		n.Name = fmt.Sprintf("n%d", i)
		n.Labels = map[string]string{"pool": "gpu", v1.LabelTopologyZone: "a"}
		if i >= 10 {
			n.Labels["pool"] = "cpu" // not the policy's
			n.Status.Conditions = node(deadlock(v1.ConditionTrue, t0.Add(-time.Hour), t0)).Status.Conditions
		}
		nodes = append(nodes, n)
	}
	repairing := map[string]bool{}
	var verdicts []string
	for _, n := range nodes[:3] {
		pool := p.PoolOf("gpu", "a", nodes, func(m *v1.Node) bool { return repairing[m.Name] }, t0)
		d := p.Decide(Input{Node: n, State: NotInRepair, Pool: pool, Can: Capabilities{Reboot: true, Replace: true}, Now: t0})
		if d.Verdict == VerdictStart {
			repairing[n.Name] = true
		}
		verdicts = append(verdicts, string(d.Verdict)+": "+d.Reason)
	}
	if len(repairing) != 2 || !strings.HasPrefix(verdicts[2], "Blocked: repair blocked: 2 of 10 nodes of pool gpu in repair, limit 20%") {
		t.Errorf("verdicts %q", verdicts)
	}
}

// An edit of the ladder never gives a node another step's action: its
// recorded step is found where it went (Moved, when the steps before it
// give the node nothing new) or the repair ends (End), to be judged again.
func TestDecideAfterEdit(t *testing.T) {
	sick := node(deadlock(v1.ConditionTrue, t0.Add(-time.Hour), t0))
	taint := v1.Taint{Key: "example.com/unhealthy", Effect: v1.TaintEffectNoSchedule}
	tainted := sick.DeepCopy()
	tainted.Spec.Taints = []v1.Taint{taint}
	p0 := policy() // Taint, Drain, Reboot, Replace, Fence
	at := func(i int, drained bool) State {
		return State{Step: i, Action: p0.Steps[i].Action, Key: StepKey(i, p0.Steps[i]), StepSince: t0.Add(-time.Minute), RepairSince: t0.Add(-time.Hour), Drain: drained}
	}
	reboot := Step{Action: ActionReboot, Timeout: d(5 * time.Minute)}
	healthy := node(deadlock(v1.ConditionFalse, t0.Add(-time.Hour), t0))
	healthy.Spec.Taints = []v1.Taint{taint}
	for name, c := range map[string]struct {
		edit    func(*PolicySpec)
		node    *v1.Node
		st      State
		verdict Verdict
		step    int
		reason  string
	}{
		"unchanged": {edit: func(*PolicySpec) {}, node: tainted, st: at(1, true), verdict: VerdictNone, step: 1},
		// The case: a Reboot inserted before the node's Taint step
		// is not sent; the node stays at its Taint step, now the second.
		"reboot inserted before": {edit: func(p *PolicySpec) { p.Steps = append([]Step{reboot}, p.Steps...) },
			node: tainted, st: at(0, false), verdict: VerdictMoved, step: 1, reason: "is now step 2"},
		"drain at the step's index now": {edit: func(p *PolicySpec) { p.Steps = p.Steps[1:] },
			node: tainted, st: at(0, false), verdict: VerdictEnd, step: 0, reason: "no longer in the ladder"},
		"a step before removed": {edit: func(p *PolicySpec) { p.Steps = append(p.Steps[:1], p.Steps[2:]...) },
			node: tainted, st: at(2, true), verdict: VerdictMoved, step: 1, reason: "now step 2"},
		"steps after removed": {edit: func(p *PolicySpec) { p.Steps = p.Steps[:1] },
			node: tainted, st: at(2, true), verdict: VerdictEnd, step: 2, reason: "no longer in the ladder"},
		// Found again only after a Drain the node never had: moving it
		// there would skip a drain it was promised; it ends instead.
		"a drain inserted before, node not drained": {edit: func(p *PolicySpec) {
			p.Steps = append([]Step{{Action: ActionDrain, Timeout: d(5 * time.Minute)}}, p.Steps...)
		}, node: tainted, st: at(0, false), verdict: VerdictEnd, step: 0},
		// Found again only after a Taint the node does not have.
		"a taint inserted before, not on the node": {edit: func(p *PolicySpec) {
			p.Steps = append([]Step{{Action: ActionTaint, Timeout: d(5 * time.Minute), Taint: &TaintSpec{Key: "other", Effect: v1.TaintEffectNoExecute}}}, p.Steps...)
		}, node: tainted, st: at(1, true), verdict: VerdictEnd, step: 1},
		"the taint changed": {edit: func(p *PolicySpec) {
			p.Steps[0].Taint = &TaintSpec{Key: "example.com/other", Effect: v1.TaintEffectNoExecute}
		},
			node: tainted, st: at(0, false), verdict: VerdictEnd, step: 0},
		"reboot became replace": {edit: func(p *PolicySpec) { p.Steps[2].Action = ActionReplace },
			node: tainted, st: at(2, true), verdict: VerdictEnd, step: 2},
		// Timed out and the node healthy are both settled after the edit:
		// no Advance from a step that is not the node's.
		"healthy but moved": {edit: func(p *PolicySpec) { p.Steps = append([]Step{reboot}, p.Steps...) },
			node: healthy, st: at(1, true), verdict: VerdictMoved, step: 2},
	} {
		p := policy()
		c.edit(p)
		got := p.Decide(Input{Node: c.node, State: c.st, Pool: Pool{Name: "gpu", Nodes: 3}, Can: Capabilities{Reboot: true, Replace: true, Fence: true}, Now: t0})
		if got.Verdict != c.verdict || got.Step != c.step || !strings.Contains(got.Reason, c.reason) {
			t.Errorf("%s: %+v, want %s at step %d, reason with %q", name, got, c.verdict, c.step, c.reason)
		}
	}
}
