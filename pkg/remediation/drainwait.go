package remediation

import (
	"fmt"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/nodeshepherd/nodeshepherd/pkg/kube"
)

// What the drain controller writes on a Node, read here by its public
// format so that the ladder knows whether a drain kept its promises
// (pkg/controller/drain's state.go defines them; its tests check that these
// are the same).
//
// DrainCondition is Draino's node condition: True while a drain is
// scheduled or running; False with DrainCompleted or DrainFailed and a time
// once it ended.
const DrainCondition v1.NodeConditionType = "DrainScheduled"

// The rest of what the drain controller writes.
const (
	DrainCompleted = " | Completed: "
	DrainFailed    = " | Failed: "
	// DrainCordonedAt is when the drain controller cordoned the node, and
	// DrainOwned marks the cordon as the drain controller's.
	DrainCordonedAt = "nodeshepherd.io/drain-cordoned-at"
	DrainOwned      = "nodeshepherd.io/drain-conditions"
	// DrainBlockedSince: every eviction of some pod has been refused by a
	// PodDisruptionBudget since then.
	DrainBlockedSince = "nodeshepherd.io/drain-blocked-since"
)

// DrainProgress is how a node's drain stands for the ladder.
type DrainProgress struct {
	// Done: the drain controller drained the node while its present cordon
	// held (every pod it evicts is gone, PodDisruptionBudgets respected or
	// its own force-after escalation used), so no pod a budget protects is
	// left for a disruptive step to kill.
	Done bool
	// Why says what holds the drain (when not Done).
	Why string
}

// DrainProgressOf reads the drain's progress from the Node.
func DrainProgressOf(n *v1.Node) DrainProgress {
	_, owned := n.Annotations[DrainOwned]
	if !owned || !n.Spec.Unschedulable {
		return DrainProgress{Why: "the drain controller has not cordoned the node (its cordon budget maxCordonedNodes holds it, someone else's cordon, or it does not run)"}
	}
	cordoned, _ := drainTime(n.Annotations[DrainCordonedAt])
	var cond *v1.NodeCondition
	for i := range n.Status.Conditions {
		if n.Status.Conditions[i].Type == DrainCondition {
			cond = &n.Status.Conditions[i]
		}
	}
	notStarted := DrainProgress{Why: "cordoned, the drain not started (its maintenance window, maxConcurrentDrains or the drain buffer holds it)"}
	switch {
	case cond == nil:
		return notStarted
	case cond.Status == v1.ConditionTrue:
		if since, ok := drainTime(n.Annotations[DrainBlockedSince]); ok {
			return DrainProgress{Why: "draining; evictions refused by a PodDisruptionBudget since " + since.UTC().Format(time.RFC3339)}
		}
		return DrainProgress{Why: "draining"}
	}
	if at, ok := drainTimeAfter(cond.Message, DrainCompleted); ok {
		if cordoned.IsZero() || !at.Before(cordoned) {
			return DrainProgress{Done: true}
		}
		return notStarted // a drain of an earlier cordon
	}
	if at, ok := drainTimeAfter(cond.Message, DrainFailed); ok && (cordoned.IsZero() || !at.Before(cordoned)) {
		why := "the drain failed at " + at.UTC().Format(time.RFC3339) + " and is tried again"
		if _, detail, ok := strings.Cut(cond.Message[strings.Index(cond.Message, DrainFailed)+len(DrainFailed):], " | "); ok && detail != "" {
			why += ": " + detail
		}
		return DrainProgress{Why: why}
	}
	return notStarted
}

// drainTimeAfter reads the time after marker in the condition's message.
func drainTimeAfter(msg, marker string) (time.Time, bool) {
	i := strings.Index(msg, marker)
	if i < 0 {
		return time.Time{}, false
	}
	ts, _, _ := strings.Cut(msg[i+len(marker):], " ")
	return drainTime(ts)
}

// drainTime parses the drain controller's times (kube.ParseTime: one at
// one-second precision is rounded up).
func drainTime(s string) (time.Time, bool) { return kube.ParseTime(s) }

// Disrupts says whether a step kills or stops the node's pods (a Reboot, a
// Replace, a Fence, a NoExecute taint): after a Drain step it starts only
// once the drain is done.
func Disrupts(st Step) bool {
	switch st.Action {
	case ActionReboot, ActionReplace, ActionFence:
		return true
	case ActionTaint:
		return st.Taint != nil && st.Taint.Effect == v1.TaintEffectNoExecute
	}
	return false
}

// WaitingForDrain begins the reason of a node held at its step until the
// drain is done.
const WaitingForDrain = "waiting for drain"

// waitForDrain is the Blocked decision of a node held at its step because
// step next would disrupt pods the drain has not moved yet.
func waitForDrain(step, next int, st Step, d DrainProgress) Decision {
	return Decision{Verdict: VerdictBlocked, Step: step,
		Reason: fmt.Sprintf("%s: step %d (%s) disrupts pods and starts only once the drain is done; %s", WaitingForDrain, next+1, st.Action, d.Why)}
}
