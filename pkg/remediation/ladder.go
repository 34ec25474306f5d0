package remediation

import (
	"fmt"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/nodeshepherd/nodeshepherd/pkg/kube"
)

// Health is a node's health as a policy judges it.
type Health struct {
	Unhealthy bool
	// Why names the condition and since when (unhealthy), or what keeps it
	// from counting (healthy).
	Why string
	// Since is when the node became unhealthy (the condition's status plus
	// its For) or healthy (the latest condition's change back).
	Since time.Time
	// Pending is when a condition that holds but not yet long enough makes
	// the node unhealthy (zero: none).
	Pending time.Time
	// Holding: some condition has its unhealthy status now, however
	// briefly. A node in repair is healthy only when none does (its Since
	// is then when the last one changed back), so that a flapping condition
	// never counts as a recovery.
	Holding bool
	// Stale says which condition went stale with its unhealthy status (its
	// reporter stopped, maybe hung by the fault itself): it starts no
	// repair, and keeps a repair under way from ending (Holding).
	Stale string
}

// Judge says whether the node is unhealthy under the policy's conditions
// at now. A condition whose heartbeat is older than its StaleAfter counts
// as Unknown from then on; a condition absent counts as Unknown since the
// node's creation.
func (s *PolicySpec) Judge(n *v1.Node, now time.Time) Health {
	var h Health
	var healthySince time.Time
	for _, uc := range s.Unhealthy {
		status, since := v1.ConditionUnknown, n.CreationTimestamp.Time
		var heartbeat time.Time
		for _, c := range n.Status.Conditions {
			if c.Type == uc.Type {
				status, since, heartbeat = c.Status, c.LastTransitionTime.Time, c.LastHeartbeatTime.Time
			}
		}
		if uc.StaleAfter != nil && !heartbeat.IsZero() && status != v1.ConditionUnknown {
			if stale := heartbeat.Add(uc.StaleAfter.Duration); !now.Before(kube.NotBefore(stale)) {
				// Stale keeps the node's state: a stale unhealthy status
				// holds a repair under way and starts none; a stale healthy
				// one ends nothing either, as before.
				if status == uc.Status {
					h.Holding = true
					if h.Stale == "" {
						h.Stale = fmt.Sprintf("%s=%s stale since %s (no heartbeat for %v): kept as it was", uc.Type, uc.Status, stamp(stale), uc.StaleAfter.Duration)
					}
				} else if since.After(healthySince) {
					healthySince = since
				}
				continue
			}
		}
		if status != uc.Status {
			if since.After(healthySince) {
				healthySince = since
			}
			continue
		}
		h.Holding = true
		due := kube.NotBefore(since).Add(uc.For.Duration)
		if now.Before(due) {
			if h.Pending.IsZero() || due.Before(h.Pending) {
				h.Pending = due
			}
			continue
		}
		if !h.Unhealthy || due.Before(h.Since) {
			h.Unhealthy, h.Since = true, due
			h.Why = fmt.Sprintf("%s=%s since %s (for %v)", uc.Type, uc.Status, since.UTC().Format(time.RFC3339), uc.For.Duration)
		}
	}
	if !h.Unhealthy {
		h.Since = healthySince
	}
	return h
}

// State is where a node is on the ladder (kept on the Node by the
// controller; zero: not in repair).
type State struct {
	// Step is the index of the step under way; -1 when not in repair.
	Step int
	// Action is what the step under way does, and Key its identity
	// (StepKey), as recorded when the node reached it: the ladder's step at
	// Step is that step only while its StepKind matches (Place).
	Action Action
	Key    string
	// StepSince is when it started; RepairSince when the repair did.
	StepSince, RepairSince time.Time
	// BootID is the boot the step was started for: a Reboot step is
	// judged by the node reporting another one.
	BootID string
	// Drain: a Drain step is at or below Step (the drain controller keeps
	// the node drained until the repair ends). FenceBootID: a Fence step is,
	// and the provider confirmed the machine powered off in this boot (set
	// only after that confirmation: DecideFence).
	Drain       bool
	FenceBootID string
	// ResumeAt is the step a recurrence's repair aims at (0: none; a target
	// is always above a Drain step, so never step 0): it
	// started at a Drain step below it, and climbs there once the drain is
	// done, without waiting for the Drain step's timeout.
	ResumeAt int
	// MachineOff: the step started on the provider's answer that the
	// machine is off, so the node's not-Ready pods that a budget protects
	// were left to the taint manager, not evicted; the step's requests
	// carry that premise (nscloud.PremiseMachineOff) and are refused by a
	// provider whose machine runs again.
	MachineOff bool
}

// NotInRepair is the State of a node not in repair.
var NotInRepair = State{Step: -1}

// Pool is what the brakes need about the policy's nodes.
type Pool struct {
	Name string
	// Nodes, Unhealthy and InRepair count the pool's nodes.
	Nodes, Unhealthy, InRepair int
	// ZoneNodes and ZoneInRepair count them in the node's zone.
	Zone                    string
	ZoneNodes, ZoneInRepair int
	// StormEnded is when the unhealthy share last went back under
	// MaxUnhealthy (zero: never above).
	StormEnded time.Time
}

// Capabilities say which steps can run.
type Capabilities struct {
	Reboot, Replace bool
	// Fence: the provider powers machines off and says whether they are
	// off. Without it a policy with a Fence step is refused (FenceRefusal),
	// never skipped to.
	Fence bool
}

// Verdict is the decision for one node.
type Verdict string

// Verdicts.
const (
	// Nothing to do: healthy and not in repair, or a step under way that
	// has time left (Next says when to look again).
	VerdictNone Verdict = "None"
	// Start the repair at Step.
	VerdictStart Verdict = "Start"
	// Climb to Step: the one under way timed out.
	VerdictAdvance Verdict = "Advance"
	// The node is healthy for the hold time: the repair ends.
	VerdictDone Verdict = "Done"
	// A brake (or a person's cordon, or the pause) holds the repair back.
	VerdictBlocked Verdict = "Blocked"
	// The last step timed out and the node is still unhealthy: it stays
	// there, for a person (an alert fires).
	VerdictExhausted Verdict = "Exhausted"
	// The policy was edited and the node's step is now at another index
	// (Step): the record follows it; nothing else changes.
	VerdictMoved Verdict = "Moved"
	// The policy was edited and the node's step is no longer in the ladder
	// (or only after steps the node never had): the repair ends, undone,
	// and the node is judged again.
	VerdictEnd Verdict = "End"
)

// Decision is what to do with one node, and why.
type Decision struct {
	Verdict Verdict
	// Step is the step to run (Start, Advance) or under way.
	Step int
	// Skipped are the steps passed over on the way, with why.
	Skipped []string
	// ResumeAt is the step a Start after a recurrence aims at, when it
	// starts at a Drain step below it (0: none).
	ResumeAt int
	Reason   string
	// Next is when the decision may change without a change of the node
	// (zero: only on a change).
	Next time.Time
}

// Input is what Decide reads.
type Input struct {
	Node *v1.Node
	// CordonedByOther: the node is cordoned by someone else (a person,
	// another tool): no repair starts, and one under way takes no new
	// step until the cordon goes.
	CordonedByOther bool
	State           State
	Pool            Pool
	Can             Capabilities
	Paused          bool
	Now             time.Time
	// Drain is how the node's drain stands (DrainProgressOf): a step that
	// disrupts pods (Disrupts) after a Drain step waits until it is done.
	Drain DrainProgress
	// Last is the node's last repair under this policy, if any
	// (LastRepairOf): within the recurrence window a new repair starts at
	// the step after the one that ended it.
	Last *LastRepair
}

// Decide is the ladder for one node. It is pure.
func (s *PolicySpec) Decide(in Input) Decision {
	h := s.Judge(in.Node, in.Now)
	st := in.State
	if st.Step < 0 {
		return s.decideStart(in, h)
	}
	// The ladder may have been edited since the node reached its step: it
	// keeps the action it has, or its repair ends; it never gets another
	// step's action without being judged again.
	switch at, ok := s.Place(st, in.Node); {
	case !ok:
		return Decision{Verdict: VerdictEnd, Step: st.Step, Reason: fmt.Sprintf("the policy changed: the node's step %s is no longer in the ladder "+
			"(or only after steps the node did not have); the repair ends and the node is judged again", st.Key)}
	case at != st.Step:
		return Decision{Verdict: VerdictMoved, Step: at, Reason: fmt.Sprintf("the policy changed: the node's step %s (%s) is now step %d; the node stays at it",
			st.Key, st.Action, at+1)}
	}
	if !h.Unhealthy && !h.Holding {
		done := kube.NotBefore(h.Since).Add(s.HealthyHold.Duration)
		if h.Since.IsZero() || !in.Now.Before(done) {
			return Decision{Verdict: VerdictDone, Step: st.Step, Reason: fmt.Sprintf("healthy for %v", s.HealthyHold.Duration)}
		}
		return Decision{Verdict: VerdictNone, Step: st.Step, Reason: "healthy since " + stamp(h.Since) + ", for the hold time", Next: done}
	}
	timeout := st.StepSince.Add(s.Steps[st.Step].Timeout.Duration) // our own time, exact
	why := h.Why
	switch {
	case !h.Unhealthy && h.Stale != "":
		why = h.Stale
	case !h.Unhealthy:
		why = "a condition holds again, not yet long enough"
	}
	resume := st.ResumeAt > st.Step && st.ResumeAt < len(s.Steps)
	if resume && in.Drain.Done && !in.Paused && !in.CordonedByOther {
		// A resumed repair's Drain step was only the way to its target.
		return Decision{Verdict: VerdictAdvance, Step: st.ResumeAt,
			Reason: fmt.Sprintf("the drain is done; the repair resumes at step %d (%s): %s", st.ResumeAt+1, s.Steps[st.ResumeAt].Action, why)}
	}
	if in.Now.Before(timeout) {
		return Decision{Verdict: VerdictNone, Step: st.Step, Reason: fmt.Sprintf("step %d (%s) under way; next at %s", st.Step+1, s.Steps[st.Step].Action, stamp(timeout)), Next: timeout}
	}
	if in.Paused {
		return Decision{Verdict: VerdictBlocked, Step: st.Step, Reason: "repair paused"}
	}
	if in.CordonedByOther {
		// A person's cordon during a repair pauses it, as before one.
		return Decision{Verdict: VerdictBlocked, Step: st.Step, Reason: "repair paused: the node is cordoned by someone else; uncordon it to let the repair go on"}
	}
	next, skipped := s.nextStep(st.Step+1, in.Can)
	if next < 0 {
		return Decision{Verdict: VerdictExhausted, Step: st.Step, Skipped: skipped,
			Reason: fmt.Sprintf("the last step (%s) timed out and the node is still unhealthy: %s", s.Steps[st.Step].Action, why)}
	}
	if st.Drain && Disrupts(s.Steps[next]) && !in.Drain.Done {
		// The drain's promises hold: its PodDisruptionBudgets, windows and
		// budgets are not undone by a reboot that kills what it kept.
		return waitForDrain(st.Step, next, s.Steps[next], in.Drain)
	}
	return Decision{Verdict: VerdictAdvance, Step: next, Skipped: skipped,
		Reason: fmt.Sprintf("step %d (%s) timed out after %v; still unhealthy: %s", st.Step+1, s.Steps[st.Step].Action, s.Steps[st.Step].Timeout.Duration, why)}
}

// StepKind is what a step does, as its identity across edits: its action,
// and for a Taint step its taint.
func StepKind(st Step) string {
	if st.Action == ActionTaint && st.Taint != nil {
		return fmt.Sprintf("%s/%s=%s:%s", st.Action, st.Taint.Key, st.Taint.Value, st.Taint.Effect)
	}
	return string(st.Action)
}

// StepKey is the identity recorded for a node reaching step i: its number
// then and its kind ("2/Reboot"; request IDs are made from it).
func StepKey(i int, st Step) string { return fmt.Sprintf("%d/%s", i+1, StepKind(st)) }

// kindOf is the kind of a recorded key.
func kindOf(key string) string {
	if i := strings.IndexByte(key, '/'); i >= 0 {
		return key[i+1:]
	}
	return key
}

// Place finds the node's recorded step in the ladder as it is now: the
// same index if the step there is still the one recorded, else the first
// step of the same kind (a step inserted or removed before it), but only
// if the steps before that one give the node nothing it did not have (each
// Taint's taint is on it, a Drain only if it is drained): a node moved
// there gets no new action. ok false: the step is gone (or only after new
// steps); the repair must end.
func (s *PolicySpec) Place(st State, n *v1.Node) (int, bool) {
	kind := kindOf(st.Key)
	if st.Key == "" {
		kind = string(st.Action)
	}
	if kind == "" && st.Step < len(s.Steps) {
		return st.Step, true // a State without identity (not read from a record): its index
	}
	same := func(i int) bool {
		k := StepKind(s.Steps[i])
		// A record written before keys named the Taint's taint has the
		// action alone.
		return k == kind || !strings.Contains(kind, "/") && string(s.Steps[i].Action) == kind
	}
	if st.Step < len(s.Steps) && same(st.Step) {
		return st.Step, true
	}
	for j := range s.Steps {
		if !same(j) {
			continue
		}
		for _, before := range s.Steps[:j] {
			switch {
			case before.Action == ActionDrain && !st.Drain:
				return 0, false
			case before.Action == ActionTaint && (before.Taint == nil || n == nil ||
				kube.FindTaint(n, v1.Taint{Key: before.Taint.Key, Value: before.Taint.Value, Effect: before.Taint.Effect}) == nil):
				return 0, false
			}
		}
		return j, true
	}
	return 0, false
}

func (s *PolicySpec) decideStart(in Input, h Health) Decision {
	if !h.Unhealthy {
		return Decision{Verdict: VerdictNone, Step: -1, Reason: "healthy", Next: h.Pending}
	}
	if brake := s.brake(in); brake != "" {
		return Decision{Verdict: VerdictBlocked, Step: -1, Reason: "repair blocked: " + brake}
	}
	from, resumed := 0, ""
	if l := in.Last; l != nil && s.Recurrence() > 0 && in.Now.Sub(l.Ended) < s.Recurrence() && l.Step >= 0 {
		// The fault came back soon after the last repair ended: what ended
		// it did not last, so start above it (the last step again when it
		// was the top).
		from = min(l.Step+1, len(s.Steps)-1)
		resumed = fmt.Sprintf("; unhealthy again %v after a repair ended at step %d (within the recurrence window %v): resuming at step %d",
			in.Now.Sub(l.Ended).Round(time.Second), l.Step+1, s.Recurrence(), from+1)
	}
	first, skipped := s.nextStep(from, in.Can)
	if first < 0 {
		return Decision{Verdict: VerdictBlocked, Step: -1, Skipped: skipped, Reason: "repair blocked: no step of the ladder can run"}
	}
	if from > 0 && Disrupts(s.Steps[first]) {
		// A Drain step below comes first: a resumed repair keeps the
		// drain's promises too. It starts there and climbs to its target
		// once the drain is done.
		for j := from - 1; j >= 0; j-- {
			if s.Steps[j].Action == ActionDrain {
				return Decision{Verdict: VerdictStart, Step: j, ResumeAt: first,
					Reason: "unhealthy: " + h.Why + resumed + fmt.Sprintf(" once the drain of step %d is done", j+1)}
			}
		}
	}
	return Decision{Verdict: VerdictStart, Step: first, Skipped: skipped, Reason: "unhealthy: " + h.Why + resumed}
}

// nextStep is the first step from i that can run, and why the ones before
// it were skipped (-1: none).
func (s *PolicySpec) nextStep(i int, can Capabilities) (int, []string) {
	var skipped []string
	for ; i < len(s.Steps); i++ {
		switch a := s.Steps[i].Action; {
		case a == ActionReboot && !can.Reboot, a == ActionReplace && !can.Replace:
			skipped = append(skipped, fmt.Sprintf("step %d (%s): the cloud provider cannot %s machines", i+1, a, strings.ToLower(string(a))))
		default:
			return i, skipped
		}
	}
	return -1, skipped
}

// brake says which brake holds a new repair back ("" none).
func (s *PolicySpec) brake(in Input) string {
	p, b := in.Pool, s.Brakes
	switch {
	case in.CordonedByOther:
		return "the node is cordoned by someone else"
	case in.Paused:
		return "paused"
	}
	if b.MaxUnhealthy != nil {
		if limit := Limit(b.MaxUnhealthy, p.Nodes); p.Unhealthy > limit {
			return fmt.Sprintf("%d of %d nodes of pool %s unhealthy, limit %s", p.Unhealthy, p.Nodes, p.Name, b.MaxUnhealthy.String())
		}
		if !p.StormEnded.IsZero() && b.Cooldown.Duration > 0 {
			if until := kube.NotBefore(p.StormEnded).Add(b.Cooldown.Duration); in.Now.Before(until) {
				return fmt.Sprintf("cooling down after more than %s of pool %s were unhealthy, until %s", b.MaxUnhealthy.String(), p.Name, stamp(until))
			}
		}
	}
	// 0 (or a percentage of 0) means no new repair, as Karpenter's "nodes:
	// 0": never silently 1.
	if b.MaxInRepair != nil {
		if limit := Limit(b.MaxInRepair, p.Nodes); p.InRepair >= limit {
			return fmt.Sprintf("%d of %d nodes of pool %s in repair, limit %s", p.InRepair, p.Nodes, p.Name, b.MaxInRepair.String())
		}
	}
	if b.MaxInRepairPerZone != nil {
		if limit := Limit(b.MaxInRepairPerZone, p.ZoneNodes); p.ZoneInRepair >= limit {
			return fmt.Sprintf("%d of %d nodes of pool %s in zone %q in repair, limit %s", p.ZoneInRepair, p.ZoneNodes, p.Name, p.Zone, b.MaxInRepairPerZone.String())
		}
	}
	return ""
}

func stamp(t time.Time) string { return t.UTC().Format(time.RFC3339) }

// Selects says whether the policy's node selector takes the node (an
// invalid selector, refused by Validate, takes none).
func (s *PolicySpec) Selects(n *v1.Node) bool {
	return s.selector().Matches(labels.Set(n.Labels))
}

// selector is the policy's node selector, parsed: everything without one,
// nothing for an invalid one.
func (s *PolicySpec) selector() labels.Selector {
	if s.NodeSelector == nil {
		return labels.Everything()
	}
	sel, err := metav1.LabelSelectorAsSelector(s.NodeSelector)
	if err != nil {
		return labels.Nothing()
	}
	return sel
}

// PoolOf counts the policy's nodes for the brakes of a node in zone:
// selected, unhealthy now (Judge) and in repair (inRepair), in the pool and
// in the zone. StormEnded is the caller's to keep.
func (s *PolicySpec) PoolOf(name, zone string, nodes []*v1.Node, inRepair func(*v1.Node) bool, now time.Time) Pool {
	p := Pool{Name: name, Zone: zone}
	// Parsed once, not once a node: a pool of 5,000 nodes, every node's
	// sync counting it, parsed the selector 25 million times (the 5,000-node
	// fleet's heap profile).
	sel := s.selector()
	for _, n := range nodes {
		if !sel.Matches(labels.Set(n.Labels)) {
			continue
		}
		here := n.Labels[v1.LabelTopologyZone] == zone
		p.Nodes++
		if here {
			p.ZoneNodes++
		}
		if s.Judge(n, now).Unhealthy {
			p.Unhealthy++
		}
		if inRepair(n) {
			p.InRepair++
			if here {
				p.ZoneInRepair++
			}
		}
	}
	return p
}
