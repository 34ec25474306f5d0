package remediation

import (
	"fmt"
	"strings"
	"time"
)

// A Fence step powers the machine off and confirms it (issue 46): the
// remediation controller sends the cloud provider a power-off request
// (cloudprovider.Fencer, a request ID naming the boot), then asks whether
// the machine is off: the provider (InstancesV2: shut down, or gone) and
// the fencing endpoint (PoweredOff), whichever are configured. Only an
// answer that it is off, with none that it runs, for the boot the request
// was for, lets the controller write the record's FenceBootID, the
// confirmation the outofservice controller acts on. An answer that the
// machine runs vetoes the Fence: the node stays at the step, visibly, and
// nothing is force-deleted. No answer (an error, a timeout) is neither.

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

// Power is the answer about a machine, all answers combined.
type Power int

// Answers.
const (
	PowerUnknown Power = iota // not asked, or every question failed: no answer
	PowerOn                   // some answer: it exists and is not shut down, or not powered off
	PowerOff                  // some answer: shut down, gone or powered off; none that it runs
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
	// By names who gave the answer Power is ("the cloud provider", "the
	// fencing endpoint URL"), or for PowerUnknown who was asked; empty:
	// the cloud provider.
	By     []string
	Settle time.Duration
	Now    time.Time
}

// who words in.By as the subject of a sentence, with its verb's ending
// ("answers", "answer").
func (in FenceInput) who() (subject, s string) {
	switch len(in.By) {
	case 0:
		return "the cloud provider", "s"
	case 1:
		return in.By[0], "s"
	}
	return strings.Join(in.By, " and "), ""
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
	by, s := in.who()
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
			"powered off: %s answer%s that the machine of node %s is off, for boot ID %q", by, s, in.Node, in.RequestBoot)}
	case in.Refused != "":
		return FenceDecision{Outcome: FenceVetoed, Next: recheck, Message: fmt.Sprintf(
			"vetoed: the cloud provider refused to power the machine of node %s off (%s), and no answer says that it is off", in.Node, in.Refused)}
	case in.Power == PowerUnknown:
		return FenceDecision{Outcome: FenceWaiting, Next: recheck, Message: fmt.Sprintf("requested: %s could not say whether the machine is off", by)}
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
		"vetoed: %s answer%s that the machine of node %s runs, %v after the cloud provider accepted the power-off request", by, s, in.Node, in.Settle)}
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
