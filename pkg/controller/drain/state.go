package drain

import (
	"strconv"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeshepherd/nodeshepherd/pkg/controller/drain/rules"
	"github.com/nodeshepherd/nodeshepherd/pkg/kube"
	"github.com/nodeshepherd/nodeshepherd/pkg/owner"
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
	// AnnotationCordonedAt is when the drain controller cordoned the node:
	// with AnnotationConditions (why), the cordon's owner record.
	AnnotationCordonedAt = "nodeshepherd.io/drain-cordoned-at"
	// AnnotationBlockedSince is the earliest time since which every eviction
	// of one of the drain's pods has been refused by a PodDisruptionBudget
	// (AnnotationBlocked has each pod), with sub-second precision; it goes
	// when no pod is blocked any more, and with the cordon.
	AnnotationBlockedSince = "nodeshepherd.io/drain-blocked-since"
	// AnnotationDrainStarted is when the node's latest drain sent its first
	// eviction: the drain buffer counts from the latest on any node, also
	// for a new leader. It stays after the uncordon while the buffer counts
	// from it, and is removed once --drain-buffer has passed since it
	// (forgetStarted), or overwritten by the next drain.
	AnnotationDrainStarted = "nodeshepherd.io/drain-started"
	// AnnotationRequest marks a cordon held for a remediation request (the
	// node's nodeshepherd.io/remediation record asks for a drain); its value
	// words the request as it was when the cordon was taken for it. Such a
	// cordon is lifted at once when the request goes, not after
	// --uncordon-after: the remediation's hold time has already passed.
	// AnnotationConditions still marks the ownership; it is empty when no
	// rule matched.
	AnnotationRequest = "nodeshepherd.io/drain-request"

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
	// forRequest: the cordon is held for a remediation request
	// (AnnotationRequest, whose value is request); forRules: for the rules
	// recorded in AnnotationConditions (also when no request is recorded,
	// as every cordon before requests existed).
	forRequest, forRules bool
	request              string
	// blockedSince is AnnotationBlockedSince (zero when absent).
	blockedSince time.Time
	// startedAt is AnnotationDrainStarted, cordonedAt AnnotationCordonedAt
	// (zero when absent).
	startedAt, cordonedAt time.Time
}

func readState(n *v1.Node) nodeState {
	_, owned := n.Annotations[AnnotationConditions]
	s := nodeState{owned: owned, cordoned: n.Spec.Unschedulable, retryNow: n.Annotations[AnnotationRetry] == "true"}
	if owned {
		s.request, s.forRequest = n.Annotations[AnnotationRequest]
		s.forRules = n.Annotations[AnnotationConditions] != "" || !s.forRequest
	}
	s.attempts, _ = strconv.Atoi(n.Annotations[AnnotationAttempts])
	if v, ok := n.Annotations[AnnotationBlockedSince]; ok {
		s.blockedSince, _ = parseTime(v)
	}
	if v, ok := n.Annotations[AnnotationDrainStarted]; ok {
		s.startedAt, _ = parseTime(v)
	}
	if v, ok := n.Annotations[AnnotationCordonedAt]; ok {
		s.cordonedAt, _ = parseTime(v)
	}
	c := kube.NodeCondition(n, ConditionDrainScheduled)
	if c == nil {
		return s
	}
	s.scheduledAt = timeAfter(c, scheduledPrefix)
	switch {
	case c.Status == v1.ConditionTrue:
		s.phase = phaseInFlight
	case strings.Contains(c.Message, completedMarker):
		s.phase, s.finishedAt = phaseCompleted, timeAfter(c, completedMarker)
	case strings.Contains(c.Message, failedMarker):
		s.phase, s.finishedAt = phaseFailed, timeAfter(c, failedMarker)
	}
	return s
}

// timeFormat keeps sub-second precision (RFC3339 with nine fixed decimals,
// still readable as RFC3339), so that the drain buffer and deadlines are
// measured from the exact start.
const timeFormat = "2006-01-02T15:04:05.000000000Z07:00"

func formatTime(t time.Time) string { return t.UTC().Format(timeFormat) }

// parseTime reads a time written by formatTime, or at one-second precision
// (Draino, older nodeshepherd): that one is rounded up, as the true time lies
// in [t, t+1s), so that no wait measured from it is shorter than configured.
func parseTime(s string) (time.Time, bool) { return kube.ParseTime(s) }

// timeAfter reads the timestamp that follows marker in Draino's message,
// falling back to the condition's transition time (rounded up).
func timeAfter(c *v1.NodeCondition, marker string) time.Time {
	if i := strings.Index(c.Message, marker); i >= 0 && (marker != scheduledPrefix || i == 0) {
		ts, _, _ := strings.Cut(c.Message[i+len(marker):], " ")
		if t, ok := parseTime(ts); ok {
			return t
		}
	}
	return kube.NotBefore(c.LastTransitionTime.Time)
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

// holders are what a cordon of the drain controller is held for: the rules
// that matched (conditions, in Draino's format; "" for none), a remediation
// request (its wording; "" for none), or both.
type holders struct {
	conditions string
	request    string
}

func ruleHolders(matched []rules.Condition) holders {
	return holders{conditions: formatConditions(matched)}
}

// why words the holders for the owner record and the events.
func (h holders) why() string {
	var parts []string
	if h.conditions != "" {
		parts = append(parts, "drain rules matched: "+h.conditions)
	}
	if h.request != "" {
		parts = append(parts, h.request)
	}
	return strings.Join(parts, "; ")
}

// short words them in events: the conditions alone (as before requests
// existed), or the request.
func (h holders) short() string {
	if h.request == "" {
		return h.conditions
	}
	if h.conditions == "" {
		return h.request
	}
	return h.conditions + "; " + h.request
}

// cordon marks the node unschedulable and owned, with why, since when and
// until when (the owner record, package owner).
func cordon(n *v1.Node, h holders, now time.Time, until string) {
	n.Spec.Unschedulable = true
	owner.Remove(n, owner.Cordon) // a new cordon: since is now
	setHolders(n, h, now, until)
	setAnnotation(n, AnnotationCordonedAt, formatTime(now))
	delete(n.Annotations, AnnotationAttempts)
	delete(n.Annotations, AnnotationBlockedSince)
	delete(n.Annotations, AnnotationBlocked)
}

// setHolders records what the cordon is held for, in the ownership
// annotations and the owner record; a record already there keeps its since
// (when the cordon was taken), else since is now. The record expires an
// owner.Lease from now: renewRecord keeps it from expiring while the
// controller runs.
func setHolders(n *v1.Node, h holders, now time.Time, until string) {
	setAnnotation(n, AnnotationConditions, h.conditions)
	if h.request != "" {
		setAnnotation(n, AnnotationRequest, h.request)
	} else {
		delete(n.Annotations, AnnotationRequest)
	}
	since := now
	if rec, ok := owner.Of(n, owner.Cordon); ok && rec.Controller == Name && !rec.Since.IsZero() {
		since = rec.Since
	}
	owner.Set(n, owner.Cordon, owner.Record{Controller: Name, Why: h.why(), Since: since, Until: until}.Renewed(now))
}

// cordonRecord is the drain controller's owner record of the node's cordon;
// known is false when the owners annotation cannot be read (then nothing is
// judged on it).
func cordonRecord(n *v1.Node) (rec owner.Record, ours, known bool) {
	recs, err := owner.Read(n)
	if err != nil {
		return owner.Record{}, false, false
	}
	rec, ok := recs[owner.Cordon]
	return rec, ok && rec.Controller == Name, true
}

// recordLifted says whether the node's cordon, which the drain's annotations
// call its own, has lost the drain's owner record: every cordon the drain
// took since it records nodeshepherd.io/drain-cordoned-at carries one, so
// the record was lifted (it expired while no drain controller ran,
// pkg/owner/janitor) and the node cordoned again since, by someone else.
// A cordon from before owner records (no drain-cordoned-at) is still the
// drain's.
func recordLifted(n *v1.Node, st nodeState) bool {
	_, ours, known := cordonRecord(n)
	return known && !ours && !st.cordonedAt.IsZero()
}

// renewRecord moves the expiry of the drain's owner record of the cordon
// to an owner.Lease from now.
func renewRecord(n *v1.Node, now time.Time) {
	if rec, ours, _ := cordonRecord(n); ours {
		owner.Set(n, owner.Cordon, rec.Renewed(now))
	}
}

// release forgets the node; with uncordon it also becomes schedulable.
func release(n *v1.Node, uncordon bool) {
	if uncordon {
		n.Spec.Unschedulable = false
	}
	delete(n.Annotations, AnnotationConditions)
	delete(n.Annotations, AnnotationRequest)
	delete(n.Annotations, AnnotationCordonedAt)
	owner.Remove(n, owner.Cordon)
	delete(n.Annotations, AnnotationAttempts)
	delete(n.Annotations, AnnotationBlockedSince)
	delete(n.Annotations, AnnotationBlocked)
}

// latestOf is the latest of the times.
func latestOf(ts ...time.Time) time.Time {
	var out time.Time
	for _, t := range ts {
		if t.After(out) {
			out = t
		}
	}
	return out
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

func scheduledMessage(t time.Time) string { return scheduledPrefix + formatTime(t) }

// finishedMessage is Draino's message for a drain's end; detail (which pods
// blocked a failed drain, and why) follows after " | ".
func finishedMessage(scheduled time.Time, ok bool, now time.Time, detail string) string {
	marker := failedMarker
	if ok {
		marker = completedMarker
	}
	msg := scheduledMessage(scheduled) + marker + formatTime(now)
	if detail != "" {
		msg += " | " + detail
	}
	return msg
}

// rulesGone says, when none of the rules that cordoned the node (recorded
// in AnnotationConditions) is configured any more, which they were ("" when
// one still is, or the record names none).
func rulesGone(n *v1.Node, rs []rules.Condition) string {
	recorded := n.Annotations[AnnotationConditions]
	if recorded == "" {
		return ""
	}
	for _, part := range strings.Split(recorded, ";") {
		spec, _, _ := strings.Cut(part, ",")
		for _, r := range rs {
			if spec == string(r.Type)+"="+string(r.Status) {
				return ""
			}
		}
	}
	return "the drain rules that cordoned it (" + recorded + ") are no longer configured"
}

// clearedSince is when the node last stopped matching any rule: the latest
// transition of a rule's condition type that no longer has the rule's
// status, rounded up to the end of its second. ok is false while some
// rule's condition holds (whatever its duration so far).
func clearedSince(n *v1.Node, rs []rules.Condition) (since time.Time, ok bool) {
	for _, r := range rs {
		c := kube.NodeCondition(n, r.Type)
		if c == nil {
			continue
		}
		if c.Status == r.Status {
			return time.Time{}, false
		}
		if t := kube.NotBefore(c.LastTransitionTime.Time); t.After(since) {
			since = t
		}
	}
	return since, true
}
