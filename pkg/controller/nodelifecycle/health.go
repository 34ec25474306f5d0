package nodelifecycle

import (
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeshepherd/nodeshepherd/pkg/kube"
)

// nodeHealth is what the controller remembers of a node's heartbeats. Every
// time in it is the controller's own clock, never the kubelet's.
type nodeHealth struct {
	// probe is when the controller last saw a heartbeat: a new Ready
	// lastHeartbeatTime or a newer Lease renewTime.
	probe           time.Time
	readyTransition time.Time
	hasReady        bool
	heartbeat       metav1.Time // last seen Ready.lastHeartbeatTime
	transition      metav1.Time // last seen Ready.lastTransitionTime
	leaseRenew      time.Time   // last seen Lease renewTime
	leaseDuration   time.Duration
	// probeHeard: probe is a heartbeat this process saw arrive, not a first
	// sight, so the next heartbeat measures a whole interval. The gap from a
	// first sight (a new leader, a node just registered) to the first
	// heartbeat is only part of one: it is not an interval.
	probeHeard bool
	// gaps are the last two intervals between heartbeats: how often this
	// node usually reports, to tell an overdue node before its grace ends.
	gaps [2]time.Duration
	// renewedBefore is, for a node first seen with a Lease and not heard
	// since, when its last renewal was made (the Lease's renewTime, on the
	// kubelet's clock, rounded up, never after first sight). Until this
	// process hears a heartbeat, the overdue rule counts the silence from
	// it, not from first sight: nodes that fell silent before a takeover
	// (or a restart) are counted as failing with their zone at once. It
	// never shortens the grace period, which runs from first sight.
	renewedBefore time.Time
	// lastHeard is when this process last heard a heartbeat arrive (heard):
	// unlike probe, never moved by a fresh grace period.
	lastHeard time.Time
	// pointRead is when the last quorum GET of this node's Lease alone was
	// sent (freshview.go): like a fresh LIST, it covers every renewal made
	// before it, for this node.
	pointRead time.Time
}

// silentSince is when the node's silence began as far as the overdue rule
// knows: the last heartbeat heard, or the Lease renewal found at first
// sight if that is earlier and nothing was heard since.
func (h *nodeHealth) silentSince() time.Time {
	if !h.probeHeard && !h.renewedBefore.IsZero() && h.renewedBefore.Before(h.probe) {
		return h.renewedBefore
	}
	return h.probe
}

// heard records a heartbeat seen at now.
func (h *nodeHealth) heard(now time.Time) {
	if h.probeHeard && now.After(h.probe) {
		h.gaps[1], h.gaps[0] = h.gaps[0], now.Sub(h.probe)
	}
	h.probe, h.probeHeard, h.renewedBefore, h.lastHeard = now, true, time.Time{}, now
}

// interval is how often the node usually heartbeats: the larger of the last
// two intervals measured, or, until this process has measured one, the
// interval assumed for it.
func (h *nodeHealth) interval(grace time.Duration) time.Duration {
	if measured := max(h.gaps[0], h.gaps[1]); measured > 0 {
		return measured
	}
	return assumedInterval(h.leaseDuration, grace)
}

// assumedInterval is the heartbeat interval of a node whose interval this
// process has not measured yet: a quarter of its Lease's duration (the
// kubelet renews every leaseDuration/4: 10 s of 40 s), or, without a Lease
// duration, a quarter of the grace period (upstream sizes the grace for
// four missed heartbeats). Every node then has an interval from its first
// sight on, so a node first seen later than its zone's peers (it
// registered after a takeover) is counted with them when they expire. A
// node that heartbeats slower is counted early for its first interval,
// which only holds back taints in its zone.
//
// Not capped at grace/4: with a short grace (20 s) a real kubelet renewing
// every 10 s was expected every 5 s, so every unmeasured node looked
// overdue between two renewals and the zones read as disrupted (hollow
// nodes: all zones in full disruption, a real failure detected a fresh
// grace period late). The interval only decides whether a node is overdue
// (counted as failing in its zone, a suspect for a fresh read); expiry and
// the Unknown mark run from the grace period alone, so a longer interval
// never delays detecting a node silent beyond its grace (overdueAfter
// never exceeds the grace either).
func assumedInterval(leaseDuration, grace time.Duration) time.Duration {
	if leaseDuration > 0 {
		return leaseDuration / 4
	}
	return grace / 4
}

// overdue says whether the node has been silent for longer than its usual
// heartbeat interval plus slack. Such a node counts as failing in its zone's
// state before its own grace period ends, so that nodes that fall silent
// together are judged together. With slack 0 nothing is overdue.
func (h *nodeHealth) overdue(now time.Time, grace, slack time.Duration) bool {
	if slack <= 0 || !h.hasReady {
		return false
	}
	return now.Sub(h.silentSince()) > overdueAfter(h.interval(grace), grace, slack)
}

// overdueAfter is the silence after which a node heartbeating every
// interval is overdue: interval plus slack, or sooner when the grace period
// is short. A node that fell silent together with one whose grace ends now
// has been silent for at least grace-interval (its last heartbeat came at
// most one interval later), so counting from grace less 1.5 intervals (half
// an interval for observation jitter) catches it even when interval+slack
// would not; never below 1.5 intervals, which a healthy node does not reach.
func overdueAfter(interval, grace, slack time.Duration) time.Duration {
	after := interval + slack
	if together := grace - interval - interval/2; together < after {
		after = max(together, interval+min(slack, interval/2))
	}
	return min(after, grace)
}

// Condition reasons and messages, as upstream writes them.
const (
	reasonNeverUpdated  = "NodeStatusNeverUpdated"
	messageNeverUpdated = "Kubelet never posted node status."
	reasonUnknown       = "NodeStatusUnknown"
	messageUnknown      = "Kubelet stopped posting node status."
)

// monitoredConditions are set Unknown when a node goes silent;
// NetworkUnavailable is never touched.
var monitoredConditions = []v1.NodeConditionType{v1.NodeReady, v1.NodeMemoryPressure, v1.NodeDiskPressure, v1.NodePIDPressure}

// observe refreshes a health record from the node object and its Lease
// (nil if it has none) and returns the grace period that applies and the
// "observed" Ready condition (before any change by this controller). rec
// may be nil (first sight); the returned record is the one to keep.
func (c *Config) observe(rec *nodeHealth, node *v1.Node, lease *coordinationv1.Lease, now time.Time) (*nodeHealth, time.Duration, *v1.NodeCondition) {
	ready := kube.NodeCondition(node, v1.NodeReady)
	var grace time.Duration
	var observed *v1.NodeCondition
	fresh := false // rec is new: what it sees now is the state found, not a heartbeat
	if ready == nil {
		// Never reported: timed from creation, with the startup grace period.
		// creationTimestamp is truncated to the second: the grace runs from
		// the latest instant it may stand for, so it is never shorter.
		observed = &v1.NodeCondition{Type: v1.NodeReady, Status: v1.ConditionUnknown,
			LastHeartbeatTime: node.CreationTimestamp, LastTransitionTime: node.CreationTimestamp}
		if rec == nil {
			created := kube.NotBefore(node.CreationTimestamp.Time)
			rec, fresh = &nodeHealth{probe: created, readyTransition: created}, true
		}
		rec.hasReady, grace = false, c.NodeStartupGracePeriod
	} else {
		observed, grace = ready.DeepCopy(), c.NodeMonitorGracePeriod
		switch {
		case rec == nil || !rec.hasReady:
			// First sight (also after a restart): a fresh grace period.
			rec, fresh = &nodeHealth{probe: now, readyTransition: now, leaseRenew: leaseRenewOf(rec)}, true
		case !rec.heartbeat.Equal(&ready.LastHeartbeatTime):
			rec.heard(now)
			if !rec.transition.Equal(&ready.LastTransitionTime) {
				rec.readyTransition = now
			}
		}
		rec.hasReady, rec.heartbeat, rec.transition = true, ready.LastHeartbeatTime, ready.LastTransitionTime
	}
	if lease != nil {
		if d := lease.Spec.LeaseDurationSeconds; d != nil && *d > 0 {
			rec.leaseDuration = time.Duration(*d) * time.Second
		}
		if rt := lease.Spec.RenewTime; rt != nil && rt.Time.After(rec.leaseRenew) {
			rec.leaseRenew = rt.Time
			if fresh {
				rec.probe = now // a renewed Lease: the grace runs from now (upstream)
			} else {
				rec.heard(now)
			}
		}
		if rt := lease.Spec.RenewTime; fresh && rec.hasReady && rt != nil {
			rec.renewedBefore = renewalNotBefore(rt.Time, now)
		}
	}
	return rec, grace, observed
}

// renewalNotBefore is the latest instant a Lease's renewTime may stand for,
// capped at now: a whole-second stamp (written with second precision) may
// stand for any instant of its second, a microsecond stamp for any of its
// microsecond. Counting the silence from it never makes a node overdue
// sooner than it is; a kubelet clock ahead of the controller's counts as
// renewed now. (A kubelet clock far behind makes the node count as overdue
// early, until its next heartbeat: that only holds back taints in its zone.)
func renewalNotBefore(t, now time.Time) time.Time {
	if t.Nanosecond() == 0 {
		t = t.Add(time.Second)
	} else {
		t = t.Truncate(time.Microsecond).Add(time.Microsecond)
	}
	if t.After(now) {
		return now
	}
	return t
}

func leaseRenewOf(rec *nodeHealth) time.Time {
	if rec == nil {
		return time.Time{}
	}
	return rec.leaseRenew
}

// expire sets the monitored conditions of a node (a copy the caller owns)
// Unknown, keeping lastHeartbeatTime of existing ones. It reports whether
// anything changed.
func expire(node *v1.Node, now metav1.Time) bool {
	changed := false
	for _, t := range monitoredConditions {
		c := kube.NodeCondition(node, t)
		switch {
		case c == nil:
			node.Status.Conditions = append(node.Status.Conditions, v1.NodeCondition{Type: t, Status: v1.ConditionUnknown,
				Reason: reasonNeverUpdated, Message: messageNeverUpdated,
				LastHeartbeatTime: node.CreationTimestamp, LastTransitionTime: now})
			changed = true
		case c.Status != v1.ConditionUnknown:
			c.Status, c.Reason, c.Message, c.LastTransitionTime = v1.ConditionUnknown, reasonUnknown, messageUnknown, now
			changed = true
		}
	}
	return changed
}
