package outofservice

import (
	"fmt"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/nodeshepherd/nodeshepherd/pkg/nodetopology"
)

// Confirmation sources, as they appear in events, annotations and metrics.
const (
	SourcePerson        = "person"
	SourceCloudProvider = "cloud-provider"
	SourceFencing       = "fencing-webhook"
	// SourceRemediation is a remediation policy's Fence step
	// (remediation.AnnotationState), for the boot it was taken for only.
	SourceRemediation = "remediation-policy"
)

// confirmation is one piece of evidence that a node's machine is dead.
type confirmation struct {
	source string
	detail string
}

func (c confirmation) String() string { return c.source + " (" + c.detail + ")" }

// providerAnswer is the cloud provider's view of the node's machine.
type providerAnswer int

const (
	providerNotAsked providerAnswer = iota // no provider, or not asked
	providerRunning                        // exists and not shut down
	providerDead                           // gone or shut down
	providerUnknown                        // the question failed: never an answer
)

// input is everything a decision about one node depends on.
type input struct {
	now   time.Time
	node  string
	ready bool
	// silentSince is when the node stopped being Ready, rounded up
	// (kube.NotBefore): the wait is never shorter than configured.
	silentSince   time.Time
	confirmations []confirmation
	provider      providerAnswer
	// fencing is the fencing endpoint's answer (providerDead: powered off).
	fencing providerAnswer
	// owned: the node carries the taint and this controller's boot-ID
	// annotation; taintedByOther: the taint without the annotation.
	owned, taintedByOther bool
	recordedBootID        string
	bootID                string
	// confirmationBootID is the boot a person's confirmation was given for
	// (AnnotationConfirmationBootID); confirmationStamped says whether it is
	// recorded at all.
	confirmationBootID  string
	confirmationStamped bool
	// A person's confirmation without a recorded boot counts (it is among
	// confirmations) only when it was written during the current boot:
	// bound says how that is known; unbound, when it is not, is the
	// refusal's message (confirm.go).
	bound, unbound string
	// fenceVetoed: a remediation policy's Fence is on the node, and the
	// provider or the fencing endpoint answers that the machine runs (the
	// refusal's message; the Fence is not among confirmations).
	fenceVetoed string
	// machineRuns: the provider or the fencing endpoint answers that the
	// machine runs (who answered); it vetoes every confirmation (issue 45,
	// seed 70030: a person's confirmation of a machine that was started
	// again and cut off before it could report its new boot).
	machineRuns  string
	zone         string
	zoneState    nodetopology.ZoneState
	clusterState nodetopology.ZoneState
	// outOfService nodes carry the taint now; limit is the budget.
	outOfService, limit int
	after               time.Duration
}

// Actions.
const (
	actNothing = ""
	actTaint   = "taint"
	actUntaint = "untaint"
	actWait    = "wait"   // confirmed, not silent long enough yet
	actRefuse  = "refuse" // would act, but a rule forbids it
	// A person's confirmation applies to one boot of the machine.
	actRecord = "record-confirmation" // record the boot it is given for
	actExpire = "expire-confirmation" // remove it: that boot ended
	actForget = "forget-confirmation" // remove the boot of a withdrawn one
)

// Codes: why, in metrics and in the event de-duplication key.
const (
	codeConfirmed       = "confirmed"              // taint
	codeRebooted        = "rebooted"               // untaint: a new boot ID
	codeWithdrawn       = "confirmation-withdrawn" // untaint: no confirmation left; forget
	codeSilentTooShort  = "silent-too-short"       // wait
	codeTakeover        = "takeover"               // wait: the previous leader's writes may still land
	codeBudget          = "budget"                 // refuse
	codeNodeReady       = "node-ready"             // refuse: confirmed, yet Ready
	codeNotRebooted     = "not-rebooted"           // refuse to untaint: Ready, same boot, confirmed
	codeStillSilent     = "still-silent"           // refuse to untaint: withdrawn, still silent
	codeDisruption      = "disruption"             // refuse: only fencing confirms, zone or cluster disrupted
	codeNewConfirmation = "new-confirmation"       // record
	codeBootChanged     = "boot-changed"           // expire
	codeUnbound         = "confirmation-unbound"   // refuse: a person's confirmation of an unknown boot
	codeFenceVetoed     = "fence-vetoed"           // refuse: a remediation Fence while the machine is answered running
	codeMachineRuns     = "machine-running"        // refuse: confirmed, yet the provider or the fencing endpoint answers that the machine runs
)

// verdict is what to do with one node, and what to say about it.
type verdict struct {
	action  string
	code    string
	message string
	// retryAt is when to look again for a wait (zero: no timer needed).
	retryAt time.Time
	// confirmationBootID is the boot to record (actRecord).
	confirmationBootID string
	// dropConfirmation: an untaint also removes a person's confirmation,
	// given for the boot that ended.
	dropConfirmation bool
}

func disrupted(s nodetopology.ZoneState) bool {
	return s == nodetopology.StatePartialDisruption || s == nodetopology.StateFullDisruption
}

func describe(cs []confirmation) string {
	parts := make([]string, len(cs))
	for i, c := range cs {
		parts[i] = c.String()
	}
	return strings.Join(parts, ", ")
}

// decide is the decision table. It never taints without a confirmation and
// a long enough silence, never beyond the budget, never on a person's
// confirmation given for another boot or not shown to be written during
// this one (a remediation policy's Fence for another boot, and a person's
// confirmation of an unknown boot, are no confirmation at all: input leaves
// them out), and never takes its own taint back from a node that is still
// silent.
func decide(in input) verdict {
	if v, ok := decideConfirmation(in); ok {
		return v
	}
	v := decideNode(in)
	if in.fenceVetoed != "" && v.action == actNothing && !in.owned && !in.taintedByOther {
		// Said, so that a Fence that confirms nothing is visible here too.
		v = verdict{action: actRefuse, code: codeFenceVetoed, message: in.fenceVetoed}
	}
	if in.unbound != "" {
		// Said whatever else is decided, so that the person learns that
		// the annotation counts for nothing.
		if v.action == actNothing {
			return verdict{action: actRefuse, code: codeUnbound, message: in.unbound}
		}
		v.message += "; " + in.unbound
	}
	return v
}

// decideNode decides about the taint, once a person's confirmation is
// settled.
func decideNode(in input) verdict {
	if in.owned {
		return decideTakeBack(in)
	}
	if len(in.confirmations) == 0 || in.taintedByOther {
		// Nothing confirms a death, or someone else manages the taint.
		return verdict{}
	}
	confirmed := describe(in.confirmations)
	if in.ready {
		return verdict{action: actRefuse, code: codeNodeReady, message: fmt.Sprintf(
			"Not tainting node %s out of service although confirmed by %s: the node is Ready", in.node, confirmed)}
	}
	if in.machineRuns != "" {
		// An answer that the machine runs is a veto, whoever confirmed:
		// the confirmation may be about a boot that has ended, unseen.
		return verdict{action: actRefuse, code: codeMachineRuns, message: fmt.Sprintf(
			"Not tainting node %s out of service although confirmed by %s: %s answers that the machine runs; its pods may still be running there",
			in.node, confirmed, in.machineRuns)}
	}
	due := in.silentSince.Add(in.after)
	if in.now.Before(due) {
		return verdict{action: actWait, code: codeSilentTooShort, retryAt: due, message: fmt.Sprintf(
			"Node %s is confirmed dead by %s; it will be tainted out of service once NotReady for %v (at %s)",
			in.node, confirmed, in.after, due.UTC().Format(time.RFC3339))}
	}
	// The provider and a person speak for this node's machine, not from
	// silence, so a disrupted zone or cluster does not hold them back
	// (docs/outofservice.md); the message says so. A fencing endpoint or a
	// remediation policy alone does not override a disruption: when many
	// nodes fail together the endpoint's view may be as cut off as ours, and
	// a policy may be climbing its ladder on the same correlated failure.
	by := overriding(in.confirmations)
	if len(by) == 0 && (disrupted(in.zoneState) || disrupted(in.clusterState)) {
		state := fmt.Sprintf("zone %q is in %s", in.zone, in.zoneState)
		if !disrupted(in.zoneState) {
			state = fmt.Sprintf("the cluster is in %s", in.clusterState)
		}
		return verdict{action: actRefuse, code: codeDisruption, message: fmt.Sprintf(
			"Not tainting node %s out of service although confirmed by %s: %s, and only the cloud provider or a person (annotation %s) may confirm a death then",
			in.node, confirmed, state, AnnotationConfirm)}
	}
	var during string
	switch {
	case disrupted(in.zoneState):
		during = fmt.Sprintf("; zone %q is in %s, overridden by the confirmation of %s", in.zone, in.zoneState, strings.Join(by, " and "))
	case disrupted(in.clusterState):
		during = fmt.Sprintf("; the cluster is in %s, overridden by the confirmation of %s", in.clusterState, strings.Join(by, " and "))
	}
	if in.outOfService >= in.limit {
		return verdict{action: actRefuse, code: codeBudget, message: fmt.Sprintf(
			"Not tainting node %s out of service although confirmed by %s: %d nodes are out of service, the budget is %d (--max-out-of-service-nodes, --max-out-of-service-percent)",
			in.node, confirmed, in.outOfService, in.limit)}
	}
	return verdict{action: actTaint, code: codeConfirmed, message: fmt.Sprintf(
		"Tainting node %s %s: confirmed dead by %s, NotReady since %s%s",
		in.node, taintString(), confirmed, in.silentSince.UTC().Format(time.RFC3339), during)}
}

// personConfirmation is a person's confirmation among cs, if any.
func personConfirmation(cs []confirmation) (confirmation, bool) {
	for _, c := range cs {
		if c.source == SourcePerson {
			return c, true
		}
	}
	return confirmation{}, false
}

// decideConfirmation binds a person's confirmation to the boot of the
// machine it was given for: the machine was confirmed dead, not the node's
// name. It is recorded when first seen, for the current boot, if it was
// written during that boot (input counts it only then: confirm.go), and
// removed once the node reports another boot ID, so that a later silence of
// the machine that came back (say, a partition) is not taken for the death
// already confirmed. ok is false when it has nothing to do.
func decideConfirmation(in input) (verdict, bool) {
	c, confirmed := personConfirmation(in.confirmations)
	switch {
	case confirmed && !in.confirmationStamped:
		how := ""
		if in.bound != "" {
			how = ": " + in.bound
		}
		return verdict{action: actRecord, code: codeNewConfirmation, confirmationBootID: in.bootID, message: fmt.Sprintf(
			"Recorded the confirmation by %s of node %s for its boot ID %q (annotation %s)%s; it applies to this boot of the machine only",
			c, in.node, in.bootID, AnnotationConfirmationBootID, how)}, true
	case !confirmed && in.confirmationStamped:
		return verdict{action: actForget, code: codeWithdrawn, message: fmt.Sprintf(
			"Removing annotation %s from node %s: the confirmation it belonged to was withdrawn", AnnotationConfirmationBootID, in.node)}, true
	case confirmed && in.confirmationBootID != in.bootID:
		if in.owned && in.ready && in.recordedBootID != in.bootID {
			return verdict{}, false // taken back with the taint: decideTakeBack
		}
		return verdict{action: actExpire, code: codeBootChanged, message: fmt.Sprintf(
			"Ignoring and removing the confirmation by %s of node %s: it was given for boot ID %q, the node now reports boot ID %q, so the machine has booted again since; annotate the node again if this boot is dead too",
			c, in.node, in.confirmationBootID, in.bootID)}, true
	}
	return verdict{}, false
}

// decideTakeBack handles a node that carries this controller's taint.
func decideTakeBack(in input) verdict {
	unsure := in.provider == providerUnknown || in.fencing == providerUnknown // a source may still confirm
	if !in.ready {
		if len(in.confirmations) == 0 && !unsure {
			return verdict{action: actRefuse, code: codeStillSilent, message: fmt.Sprintf(
				"Keeping node %s out of service although no confirmation is left: the node is still silent (not Ready)", in.node)}
		}
		return verdict{}
	}
	if in.bootID != in.recordedBootID {
		v := verdict{action: actUntaint, code: codeRebooted, message: fmt.Sprintf(
			"Removing the out-of-service taint from node %s: Ready again after a reboot (boot ID %q, was %q)", in.node, in.bootID, in.recordedBootID)}
		// A person's confirmation of the boot that ended goes with it.
		if c, ok := personConfirmation(in.confirmations); ok && in.confirmationBootID != in.bootID {
			v.dropConfirmation = true
			v.message += fmt.Sprintf("; the confirmation by %s was given for boot ID %q and is removed with the taint", c, in.confirmationBootID)
		}
		return v
	}
	if len(in.confirmations) == 0 {
		if unsure {
			return verdict{} // a source may still confirm: ask again
		}
		return verdict{action: actUntaint, code: codeWithdrawn, message: fmt.Sprintf(
			"Removing the out-of-service taint from node %s: Ready again and no longer confirmed dead", in.node)}
	}
	return verdict{action: actRefuse, code: codeNotRebooted, message: fmt.Sprintf(
		"Keeping node %s out of service: it is Ready again with the same boot ID %q while still confirmed dead by %s; "+
			"its pods may have been replaced while it ran: check the machine, then remove the confirmation", in.node, in.bootID, describe(in.confirmations))}
}

// overriding are the sources among cs that may override a zone or cluster
// disruption: the cloud provider and a person, who speak for this machine.
// Automated sources (the fencing endpoint, a remediation policy) may not.
func overriding(cs []confirmation) []string {
	var out []string
	for _, c := range cs {
		if c.source == SourcePerson || c.source == SourceCloudProvider {
			out = append(out, c.source)
		}
	}
	return out
}

func taintString() string {
	return fmt.Sprintf("%s=%s:%s", v1.TaintNodeOutOfService, TaintValue, v1.TaintEffectNoExecute)
}
