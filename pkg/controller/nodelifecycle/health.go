package nodelifecycle

import (
	"time"

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
	// gaps are the last two intervals between heartbeats: how often this
	// node usually reports, to tell an overdue node before its grace ends.
	gaps [2]time.Duration
}

// heard records a heartbeat seen at now.
func (h *nodeHealth) heard(now time.Time) {
	if !h.probe.IsZero() && now.After(h.probe) {
		h.gaps[1], h.gaps[0] = h.gaps[0], now.Sub(h.probe)
	}
	h.probe = now
}

// overdue says whether the node has been silent for longer than its usual
// heartbeat interval plus slack. Such a node counts as failing in its zone's
// state before its own grace period ends, so that nodes that fall silent
// together are judged together. Without two heartbeats seen, or with slack
// 0, nothing is overdue.
func (h *nodeHealth) overdue(now time.Time, grace, slack time.Duration) bool {
	interval := max(h.gaps[0], h.gaps[1])
	if slack <= 0 || interval <= 0 || !h.hasReady {
		return false
	}
	return now.Sub(h.probe) > overdueAfter(interval, grace, slack)
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

// observe refreshes a health record from the node object and returns the
// grace period that applies and the "observed" Ready condition (before any
// change by this controller). rec may be nil (first sight); the returned
// record is the one to keep.
func (c *Config) observe(rec *nodeHealth, node *v1.Node, now time.Time) (*nodeHealth, time.Duration, *v1.NodeCondition) {
	ready := kube.NodeCondition(node, v1.NodeReady)
	if ready == nil {
		// Never reported: timed from creation, with the startup grace period.
		// creationTimestamp is truncated to the second: the grace runs from
		// the latest instant it may stand for, so it is never shorter.
		observed := &v1.NodeCondition{Type: v1.NodeReady, Status: v1.ConditionUnknown,
			LastHeartbeatTime: node.CreationTimestamp, LastTransitionTime: node.CreationTimestamp}
		if rec == nil {
			created := kube.NotBefore(node.CreationTimestamp.Time)
			rec = &nodeHealth{probe: created, readyTransition: created}
		}
		rec.hasReady = false
		return rec, c.NodeStartupGracePeriod, observed
	}
	observed := ready.DeepCopy()
	switch {
	case rec == nil || !rec.hasReady:
		// First sight (also after a restart): a fresh grace period.
		rec = &nodeHealth{probe: now, readyTransition: now, leaseRenew: leaseRenewOf(rec)}
	case !rec.heartbeat.Equal(&ready.LastHeartbeatTime):
		rec.heard(now)
		if !rec.transition.Equal(&ready.LastTransitionTime) {
			rec.readyTransition = now
		}
	}
	rec.hasReady, rec.heartbeat, rec.transition = true, ready.LastHeartbeatTime, ready.LastTransitionTime
	return rec, c.NodeMonitorGracePeriod, observed
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
