// Package podreadiness decides when a pod whose Ready condition a node
// lifecycle controller set False (seed 002: the node was silent, its kubelet
// never re-posted the pod afterwards) may get Ready=True back. Both
// nodeshepherd's nodelifecycle controller (pods it marked itself) and the
// readinessrestore controller (pods kube-controller-manager marked) use it.
package podreadiness

import (
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/nodeshepherd/nodeshepherd/pkg/kube"
)

// Verdict is what to do with a pod marked NotReady because of its node.
type Verdict int

const (
	Keep    Verdict = iota // not now
	Restore                // set Ready=True
	Settle                 // readiness is no longer ours to give: drop the mark only
)

// Decide says what to do with a pod marked NotReady at markedAt, on node
// (nil when unknown), and why when it is not Restore.
func Decide(pod *v1.Pod, node *v1.Node, markedAt time.Time) (Verdict, string) {
	ready := kube.PodCondition(pod, v1.PodReady)
	switch {
	case pod.DeletionTimestamp != nil:
		return Settle, "Pod is being deleted; readiness not restored"
	case ready == nil || ready.Status == v1.ConditionTrue:
		return Settle, "The kubelet reported the pod's readiness again"
	case ready.LastTransitionTime.Time.After(markedAt.Add(time.Second)):
		return Settle, "Pod readiness changed since the mark; left to the kubelet"
	}
	if node == nil {
		return Keep, "node unknown"
	}
	if !ReportedSince(node, markedAt) {
		return Keep, "node has not reported Ready since the mark"
	}
	if !ContainersAllReady(pod) || !GatesReady(pod) {
		return Keep, "containers or readiness gates not ready"
	}
	return Restore, ""
}

// ReportedSince says whether the node is Ready and its kubelet posted that
// after t (a kubelet keeps its own transition time when it never saw itself
// fail, so the heartbeat counts too).
func ReportedSince(node *v1.Node, t time.Time) bool {
	nr := kube.NodeCondition(node, v1.NodeReady)
	if nr == nil || nr.Status != v1.ConditionTrue {
		return false
	}
	return !nr.LastHeartbeatTime.Time.Before(t) || !nr.LastTransitionTime.Time.Before(t)
}

// GatesReady says whether every readiness gate's condition is True.
func GatesReady(pod *v1.Pod) bool {
	for _, g := range pod.Spec.ReadinessGates {
		if c := kube.PodCondition(pod, g.ConditionType); c == nil || c.Status != v1.ConditionTrue {
			return false
		}
	}
	return true
}

// ContainersAllReady is the kubelet's own view: ContainersReady=True and
// every container ready.
func ContainersAllReady(pod *v1.Pod) bool {
	if c := kube.PodCondition(pod, v1.ContainersReady); c == nil || c.Status != v1.ConditionTrue || len(pod.Status.ContainerStatuses) == 0 {
		return false
	}
	for _, s := range pod.Status.ContainerStatuses {
		if !s.Ready {
			return false
		}
	}
	return true
}
