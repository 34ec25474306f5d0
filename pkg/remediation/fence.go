package remediation

import (
	"fmt"
	"time"
)

// A Fence step powers the machine off and confirms it (issue 46): the
// remediation controller sends the cloud provider a power-off request
// (cloudprovider.Fencer, a request ID naming the boot), then asks the
// provider whether the machine is off (InstancesV2: shut down, or gone).
// Only a positive answer, for the boot the request was for, lets the
// controller write the record's FenceBootID, the confirmation the
// outofservice controller acts on. A provider that answers that the machine
// runs vetoes the Fence: the node stays at the step, visibly, and nothing
// is force-deleted. No answer (an error, a timeout) is neither.

// FenceSettleMax bounds how long after an accepted power-off request a
// "running" answer is taken for a power-off under way rather than a veto;
// a step's own settle time is half its timeout, at most this.
const FenceSettleMax = 30 * time.Second

// FenceRecheck is how often the controller asks again while a Fence is
// neither confirmed nor past its settle time, and after a veto (the machine
// may still go off).
const FenceRecheck = 2 * time.Second

// FenceSettle is the settle time of a Fence step of timeout t.
func FenceSettle(t time.Duration) time.Duration { return min(FenceSettleMax, t/2) }

// Power is the provider's answer about a machine.
type Power int

// Answers.
const (
	PowerUnknown Power = iota // not asked, or the question failed: no answer
	PowerOn                   // exists and not shut down
	PowerOff                  // shut down, or gone
)

// FenceInput is what DecideFence reads.
type FenceInput struct {
	Node string
	// RequestBoot is the boot the power-off request was for (the boot the
	// step was started for); NodeBoot the boot the node reports now.
	RequestBoot, NodeBoot string
	// Accepted is when the provider accepted the request (zero: no answer
	// yet); Refused its refusal ("" none).
	Accepted time.Time
	Refused  string
	Power    Power
	Settle   time.Duration
	Now      time.Time
}

// FenceOutcome is where a Fence stands.
type FenceOutcome string

// Outcomes.
const (
	// FenceWaiting: requested, not yet confirmed nor vetoed.
	FenceWaiting FenceOutcome = "Waiting"
	// FenceConfirmed: the provider answers the machine off, for the boot
	// the request was for: the record may confirm the death.
	FenceConfirmed FenceOutcome = "PoweredOff"
	// FenceVetoed: the machine runs (the provider says so after the settle
	// time, or refused the request, or the node reports another boot).
	FenceVetoed FenceOutcome = "Vetoed"
)

// FenceDecision is the outcome, in words for events and status (stable for
// one outcome and cause, so that it is said once), and when to look again.
type FenceDecision struct {
	Outcome FenceOutcome
	Message string
	Next    time.Time
}

// DecideFence judges a Fence step. It is pure.
func DecideFence(in FenceInput) FenceDecision {
	recheck := in.Now.Add(FenceRecheck)
	switch {
	case in.NodeBoot != in.RequestBoot:
		// The machine has booted again: whatever the provider says now is
		// about another boot, and that boot was never asked to go off.
		return FenceDecision{Outcome: FenceVetoed, Message: fmt.Sprintf(
			"vetoed: node %s reports boot ID %q, not %q, the boot the power-off was asked for: the machine runs again", in.Node, in.NodeBoot, in.RequestBoot)}
	case in.Accepted.IsZero() && in.Refused == "":
		return FenceDecision{Outcome: FenceWaiting, Next: recheck, Message: "requested: the power-off request has no answer yet"}
	case in.Power == PowerOff:
		return FenceDecision{Outcome: FenceConfirmed, Message: fmt.Sprintf(
			"powered off: the cloud provider answers that the machine of node %s is shut down or gone, for boot ID %q", in.Node, in.RequestBoot)}
	case in.Refused != "":
		return FenceDecision{Outcome: FenceVetoed, Next: recheck, Message: fmt.Sprintf(
			"vetoed: the cloud provider refused to power the machine of node %s off (%s), and does not answer that it is off", in.Node, in.Refused)}
	case in.Power == PowerUnknown:
		return FenceDecision{Outcome: FenceWaiting, Next: recheck, Message: "requested: the cloud provider could not say whether the machine is off"}
	}
	settled := in.Accepted.Add(in.Settle)
	if in.Now.Before(settled) {
		next := recheck
		if settled.Before(next) {
			next = settled
		}
		return FenceDecision{Outcome: FenceWaiting, Next: next, Message: "requested: waiting for the machine to power off"}
	}
	return FenceDecision{Outcome: FenceVetoed, Next: recheck, Message: fmt.Sprintf(
		"vetoed: the cloud provider answers that the machine of node %s runs, %v after it accepted the power-off request", in.Node, in.Settle)}
}

// FenceRefusal says why a policy cannot run with the capabilities can: a
// Fence step needs a provider that powers machines off and says they are
// off ("" when it can run). step is the first Fence step's index.
func (s *PolicySpec) FenceRefusal(can Capabilities) (step int, refused bool) {
	if can.Fence {
		return -1, false
	}
	for i, st := range s.Steps {
		if st.Action == ActionFence {
			return i, true
		}
	}
	return -1, false
}
