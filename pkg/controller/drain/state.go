package drain

import (
	"strconv"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeshepherd/nodeshepherd/pkg/controller/drain/rules"
	"github.com/nodeshepherd/nodeshepherd/pkg/kube"
)

// Everything the controller must remember lives on the Node, so that a
// restart or a new leader carries on: ownership and attempts as annotations,
// the drain's schedule and result as Draino's DrainScheduled condition.
const (
	// AnnotationConditions marks a node cordoned by the drain controller and
	// records the matched conditions, in Draino's format (Type=Status,duration;...).
	AnnotationConditions = "nodeshepherd.io/drain-conditions"
	// AnnotationAttempts counts failed drains since the cordon, for the backoff.
	AnnotationAttempts = "nodeshepherd.io/drain-attempts"
	// AnnotationRetry, Draino's, set to "true" retries a failed drain at once.
	AnnotationRetry = "draino/drain-retry"

	// ConditionDrainScheduled is Draino's node condition: True while a drain
	// is scheduled or running, False with "| Completed: ts" or "| Failed: ts"
	// once it ended.
	ConditionDrainScheduled v1.NodeConditionType = "DrainScheduled"
	// ConditionReason is Draino's reason on that condition.
	ConditionReason = "Draino"

	scheduledPrefix = "Drain activity scheduled "
	completedMarker = " | Completed: "
	failedMarker    = " | Failed: "
)

// drainPhase is where a node's drain stands.
type drainPhase int

const (
	phaseNone drainPhase = iota
	phaseInFlight
	phaseCompleted
	phaseFailed
)

// nodeState is the controller's view of one node, read from the object.
type nodeState struct {
	owned       bool // carries AnnotationConditions
	cordoned    bool // spec.unschedulable
	phase       drainPhase
	scheduledAt time.Time
	finishedAt  time.Time
	attempts    int
	retryNow    bool
}

func readState(n *v1.Node) nodeState {
	_, owned := n.Annotations[AnnotationConditions]
	s := nodeState{owned: owned, cordoned: n.Spec.Unschedulable, retryNow: n.Annotations[AnnotationRetry] == "true"}
	s.attempts, _ = strconv.Atoi(n.Annotations[AnnotationAttempts])
	c := kube.NodeCondition(n, ConditionDrainScheduled)
	if c == nil {
		return s
	}
	s.scheduledAt = scheduledAt(c)
	switch {
	case c.Status == v1.ConditionTrue:
		s.phase = phaseInFlight
	case strings.Contains(c.Message, completedMarker):
		s.phase, s.finishedAt = phaseCompleted, c.LastTransitionTime.Time
	case strings.Contains(c.Message, failedMarker):
		s.phase, s.finishedAt = phaseFailed, c.LastTransitionTime.Time
	}
	return s
}

// scheduledAt reads the schedule from Draino's message, falling back to the
// condition's transition time.
func scheduledAt(c *v1.NodeCondition) time.Time {
	if rest, ok := strings.CutPrefix(c.Message, scheduledPrefix); ok {
		ts, _, _ := strings.Cut(rest, " ")
		if t, err := time.Parse(time.RFC3339, ts); err == nil {
			return t
		}
	}
	return c.LastTransitionTime.Time
}

// retryAt is when a failed drain may be tried again.
func (s nodeState) retryAt(base time.Duration) time.Time {
	if s.retryNow {
		return s.finishedAt
	}
	backoff := base
	for i := 1; i < s.attempts && backoff < MaxRetryBackoff; i++ {
		backoff *= 2
	}
	return s.finishedAt.Add(min(backoff, MaxRetryBackoff))
}

// formatConditions is Draino's annotation format.
func formatConditions(cs []rules.Condition) string {
	parts := make([]string, len(cs))
	for i, c := range cs {
		parts[i] = string(c.Type) + "=" + string(c.Status) + "," + c.MinDuration.String()
	}
	return strings.Join(parts, ";")
}

func setAnnotation(n *v1.Node, k, v string) {
	if n.Annotations == nil {
		n.Annotations = map[string]string{}
	}
	n.Annotations[k] = v
}

// cordon marks the node unschedulable and owned.
func cordon(n *v1.Node, matched []rules.Condition) {
	n.Spec.Unschedulable = true
	setAnnotation(n, AnnotationConditions, formatConditions(matched))
	delete(n.Annotations, AnnotationAttempts)
}

// release forgets the node; with uncordon it also becomes schedulable.
func release(n *v1.Node, uncordon bool) {
	if uncordon {
		n.Spec.Unschedulable = false
	}
	delete(n.Annotations, AnnotationConditions)
	delete(n.Annotations, AnnotationAttempts)
}

// setDrainCondition writes DrainScheduled, keeping the other conditions.
func setDrainCondition(n *v1.Node, status v1.ConditionStatus, msg string, now time.Time) {
	c := v1.NodeCondition{Type: ConditionDrainScheduled, Status: status, Reason: ConditionReason, Message: msg,
		LastHeartbeatTime: metav1.NewTime(now), LastTransitionTime: metav1.NewTime(now)}
	for i := range n.Status.Conditions {
		if n.Status.Conditions[i].Type == ConditionDrainScheduled {
			if n.Status.Conditions[i].Status == status {
				c.LastTransitionTime = n.Status.Conditions[i].LastTransitionTime
			}
			n.Status.Conditions[i] = c
			return
		}
	}
	n.Status.Conditions = append(n.Status.Conditions, c)
}

// removeDrainCondition drops DrainScheduled (a new cordon starts afresh).
func removeDrainCondition(n *v1.Node) {
	out := n.Status.Conditions[:0]
	for _, c := range n.Status.Conditions {
		if c.Type != ConditionDrainScheduled {
			out = append(out, c)
		}
	}
	n.Status.Conditions = out
}

func scheduledMessage(t time.Time) string { return scheduledPrefix + t.UTC().Format(time.RFC3339) }

func finishedMessage(scheduled time.Time, ok bool, now time.Time) string {
	marker := failedMarker
	if ok {
		marker = completedMarker
	}
	return scheduledMessage(scheduled) + marker + now.UTC().Format(time.RFC3339)
}

// clearedSince is when the node last stopped matching any rule: the latest
// transition of a rule's condition type that no longer has the rule's
// status. ok is false while some rule's condition holds (whatever its
// duration so far).
func clearedSince(n *v1.Node, rs []rules.Condition) (since time.Time, ok bool) {
	for _, r := range rs {
		c := kube.NodeCondition(n, r.Type)
		if c == nil {
			continue
		}
		if c.Status == r.Status {
			return time.Time{}, false
		}
		if c.LastTransitionTime.After(since) {
			since = c.LastTransitionTime.Time
		}
	}
	return since, true
}
