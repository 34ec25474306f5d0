package chaos

import (
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	v1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

var t0 = time.Date(2026, 11, 25, 14, 0, 0, 0, time.UTC)

func at(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }

func mtime(s float64) *metav1.Time { m := metav1.NewTime(at(s).Truncate(time.Second)); return &m }

var testLimits = Limits{Grace: 3 * time.Second, MonitorPeriod: time.Second, Slack: 2 * time.Second,
	MaxCordoned: 2, MaxConcurrentDrains: 1, MaxOutOfService: 1}

// history is a checker over the 3x4 test zones with the given steps
// applied (instantly) at the given seconds.
func history(t *testing.T, steps ...any) *Checker {
	t.Helper()
	truth := NewTruth(testZones())
	for i := 0; i+1 < len(steps); i += 2 {
		s := steps[i+1].(Step)
		truth.Record(Applied{Step: s, Start: at(steps[i].(float64)), Done: at(steps[i].(float64))})
	}
	c := NewChecker(testLimits, truth)
	for _, z := range testZones() {
		for _, n := range z.Nodes {
			c.ObserveNode(at(0), node(n), false)
		}
	}
	return c
}

func node(name string, taints ...v1.Taint) *v1.Node {
	return &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{}},
		Spec:   v1.NodeSpec{Taints: taints},
		Status: v1.NodeStatus{Conditions: []v1.NodeCondition{{Type: v1.NodeReady, Status: v1.ConditionTrue}}}}
}

func unreachable(added float64) v1.Taint {
	return v1.Taint{Key: taintUnreachable, Effect: v1.TaintEffectNoExecute, TimeAdded: mtime(added)}
}

func partition(nodes ...string) Step { return Step{Op: OpPartition, Nodes: nodes} }
func heal(nodes ...string) Step      { return Step{Op: OpHeal, Nodes: nodes} }

func wantViolations(t *testing.T, c *Checker, inv string, n int, contains string) {
	t.Helper()
	var got []Violation
	for _, v := range c.Violations() {
		if v.Invariant == inv {
			got = append(got, v)
		}
	}
	if len(got) != n {
		t.Fatalf("%d %s violations, want %d: %v", len(got), inv, n, c.Violations())
	}
	if n > 0 && !strings.Contains(got[0].String(), contains) {
		t.Errorf("violation %q does not say %q", got[0], contains)
	}
}

func TestZoneRulesPartialDisruption(t *testing.T) {
	// Three of zone-a's four nodes silent since 1s: PartialDisruption, rate 0.
	// n3 renews all along: the controller counted it Ready (someReady).
	c := history(t, 1.0, partition("n0", "n1", "n2"))
	renewing(c, "n3", 0, 40)
	c.ObserveNode(at(10), node("n0", unreachable(9.5)), false)
	wantViolations(t, c, InvZoneRules, 1, "zone-a was certainly in PartialDisruption")

	// n3 renewing but the checker did not see it renew around the pass:
	// the controller may have counted it overdue too, FullDisruption
	// (normal rate): no violation.
	c = history(t, 1.0, partition("n0", "n1", "n2"))
	renewing(c, "n3", 0, 5)
	c.ObserveNode(at(10), node("n0", unreachable(9.5)), false)
	wantViolations(t, c, InvZoneRules, 0, "")

	// Two silent: Normal, tainting allowed.
	c = history(t, 1.0, partition("n0", "n1"))
	c.ObserveNode(at(10), node("n0", unreachable(9.5)), false)
	wantViolations(t, c, InvZoneRules, 0, "")

	// The third went silent just now: the controller may not have counted
	// it (grace + period + slack = 6s), so no violation.
	c = history(t, 1.0, partition("n0", "n1"), 7.0, partition("n2"))
	c.ObserveNode(at(10), node("n0", unreachable(9.5)), false)
	wantViolations(t, c, InvZoneRules, 0, "")
}

func TestZoneRulesEveryZoneSilent(t *testing.T) {
	all := []string{"n0", "n1", "n2", "n3", "n4", "n5", "n6", "n7", "n8", "n9", "n10", "n11"}
	c := history(t, 1.0, partition(all...))
	c.ObserveNode(at(12), node("n4", unreachable(11.2)), false)
	wantViolations(t, c, InvZoneRules, 1, "every zone was certainly silent")
	// The same taint seen again is not a new decision.
	c.ObserveNode(at(13), node("n4", unreachable(11.2)), false)
	wantViolations(t, c, InvZoneRules, 1, "")

	// Once healed, tainting is judged afresh: a taint decided after the
	// heal with one node still silent is fine.
	c = history(t, 1.0, partition(all...), 20.0, heal(all...), 20.0, partition("n4"))
	c.ObserveNode(at(30), node("n4", unreachable(29)), false)
	wantViolations(t, c, InvZoneRules, 0, "")
}

func TestOutOfServiceTaintOnRunningMachine(t *testing.T) {
	oos := v1.Taint{Key: taintOutOfService, Value: "nodeshutdown", Effect: v1.TaintEffectNoExecute, TimeAdded: mtime(9)}
	// Partitioned but running: the taint lets pod GC delete pods that still run.
	c := history(t, 1.0, partition("n5"))
	c.ObserveNode(at(10), node("n5", oos), false)
	wantViolations(t, c, InvRunningForced, 1, "ran all along with the same boot")

	// Powered off: fine, and fine still once it boots again (a new boot).
	c = history(t, 1.0, Step{Op: OpMachineShutdown, Nodes: []string{"n5"}}, 15.0, Step{Op: OpMachineStart, Nodes: []string{"n5"}})
	c.ObserveNode(at(10), node("n5", oos), false)
	c.ObserveNode(at(16), node("n5", oos), false)
	wantViolations(t, c, InvRunningForced, 0, "")
}

// TestOutOfServiceTaintOnUnseenRestart: a machine powered off, then
// started again while its kubelet is cut off and the provider is blind to
// it (chaos seed 180024): nothing a controller sees tells it from a dead
// one, so a taint then is not judged; seen by the provider for a moment,
// or by its kubelet, it is.
func TestOutOfServiceTaintOnUnseenRestart(t *testing.T) {
	oos := v1.Taint{Key: taintOutOfService, Value: "nodeshutdown", Effect: v1.TaintEffectNoExecute, TimeAdded: mtime(17)}
	off, on := Step{Op: OpMachineShutdown, Nodes: []string{"n5"}}, Step{Op: OpMachineStart, Nodes: []string{"n5"}}
	blind, seeing := Step{Op: OpCloudBlind, Nodes: []string{"n5"}}, Step{Op: OpCloudSeeing, Nodes: []string{"n5"}}
	c := history(t, 1.0, partition("n5"), 2.0, off, 4.0, blind, 6.0, on)
	c.ObserveNode(at(18), node("n5", oos), false)
	wantViolations(t, c, InvRunningForced, 0, "")
	// Still on when it is healed and seen again (chaos seed 190009): judged
	// by when the taint came, not by the check after the heal.
	c = history(t, 1.0, partition("n5"), 2.0, off, 4.0, blind, 6.0, on, 19.0, heal("n5"), 19.0, seeing)
	c.ObserveNode(at(18), node("n5", oos), false)
	c.ObserveNode(at(19.5), node("n5", oos), false)
	wantViolations(t, c, InvRunningForced, 0, "")

	// The provider sees it again for a moment after the start.
	c = history(t, 1.0, partition("n5"), 2.0, off, 4.0, blind, 6.0, on, 7.0, seeing, 8.0, blind)
	c.ObserveNode(at(18), node("n5", oos), false)
	wantViolations(t, c, InvRunningForced, 1, "ran all along")

	// Its kubelet reaches the API server after the start (the new boot posted).
	c = history(t, 2.0, off, 4.0, blind, 6.0, on, 8.0, partition("n5"))
	c.ObserveNode(at(18), node("n5", oos), false)
	wantViolations(t, c, InvRunningForced, 1, "ran all along")
}

func pod(name, nodeName string, tolSeconds *int64) *v1.Pod {
	p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", Labels: map[string]string{"app": "web"}},
		Spec:   v1.PodSpec{NodeName: nodeName},
		Status: v1.PodStatus{Conditions: []v1.PodCondition{{Type: v1.PodReady, Status: v1.ConditionTrue}}}}
	if tolSeconds != nil {
		p.Spec.Tolerations = []v1.Toleration{
			{Key: taintUnreachable, Operator: v1.TolerationOpExists, Effect: v1.TaintEffectNoExecute, TolerationSeconds: tolSeconds},
			{Key: taintNotReady, Operator: v1.TolerationOpExists, Effect: v1.TaintEffectNoExecute, TolerationSeconds: tolSeconds},
		}
	}
	return p
}

func evicted(p *v1.Pod, reason string, when float64) *v1.Pod {
	q := p.DeepCopy()
	q.DeletionTimestamp = mtime(when)
	q.Status.Conditions = append(q.Status.Conditions, v1.PodCondition{Type: v1.DisruptionTarget, Status: v1.ConditionTrue, Reason: reason, LastTransitionTime: *mtime(when)})
	return q
}

func TestForceDeletedRunningPod(t *testing.T) {
	c := history(t, 1.0, partition("n2"))
	p := pod("web-1", "n2", nil)
	c.ObservePod(at(2), p, false)
	c.ObservePod(at(20), p, true)
	wantViolations(t, c, InvRunningForced, 1, "ran it with the kubelet cut off")

	// The machine was off: its pods do not run; deleting them is the point.
	c = history(t, 1.0, Step{Op: OpMachineShutdown, Nodes: []string{"n2"}})
	c.ObservePod(at(2), p, false)
	c.ObservePod(at(20), p, true)
	// A kubelet that reaches the API server confirms its own deletions.
	c.ObservePod(at(2), pod("web-2", "n3", nil), false)
	c.ObservePod(at(20), pod("web-2", "n3", nil), true)
	wantViolations(t, c, InvRunningForced, 0, "")
}

func TestEvictionBeforeToleration(t *testing.T) {
	c := history(t, 1.0, partition("n1"))
	c.ObserveNode(at(5), node("n1", unreachable(5)), false)
	p := pod("web-1", "n1", ptr.To(int64(8)))
	c.ObservePod(at(1), p, false)
	c.ObservePod(at(9.5), evicted(p, reasonTaintEvict, 9), false) // due at 13
	wantViolations(t, c, InvToleration, 1, "before its toleration ended")

	q := pod("web-2", "n1", ptr.To(int64(8)))
	c.ObservePod(at(1), q, false)
	c.ObservePod(at(13.2), evicted(q, reasonTaintEvict, 13), false)
	// Not tolerated at all: evicted at once.
	r := pod("web-3", "n1", nil)
	c.ObservePod(at(1), r, false)
	c.ObservePod(at(5.5), evicted(r, reasonTaintEvict, 5), false)
	// Evicted through the Eviction API (a drain): not a taint eviction.
	s := pod("web-4", "n1", ptr.To(int64(8)))
	c.ObservePod(at(1), s, false)
	c.ObservePod(at(6), evicted(s, reasonEvictionAPI, 6), false)
	wantViolations(t, c, InvToleration, 1, "")
}

func pdb(allowed int32) *policyv1.PodDisruptionBudget {
	return &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default"},
		Spec: policyv1.PodDisruptionBudgetSpec{MaxUnavailable: ptr.To(intstr.FromInt32(1)),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}},
		Status: policyv1.PodDisruptionBudgetStatus{DisruptionsAllowed: allowed}}
}

func TestPDBBypassed(t *testing.T) {
	c := history(t)
	c.ObservePDB(at(1), pdb(0), false)
	p := pod("web-1", "n1", nil)
	c.ObservePod(at(1), p, false)
	deleted := p.DeepCopy()
	deleted.DeletionTimestamp = mtime(5)
	c.ObservePod(at(5), deleted, false)
	wantViolations(t, c, InvPDB, 1, "allowed no disruption, with no announced forced eviction")

	// Announced by the drain, with force-after configured: allowed.
	l := testLimits
	l.ForceAllowed = true
	c = NewChecker(l, NewTruth(testZones()))
	c.ObservePDB(at(1), pdb(0), false)
	c.ObservePod(at(1), p, false)
	c.ObserveEvent(at(4), &v1.Event{Reason: eventForceDeleted, InvolvedObject: v1.ObjectReference{Kind: "Pod", Namespace: "default", Name: "web-1"}})
	c.ObservePod(at(5), deleted, false)
	// Through the Eviction API: the API server's arithmetic, trusted.
	q := pod("web-2", "n1", nil)
	c.ObservePod(at(1), q, false)
	c.ObservePod(at(5), evicted(q, reasonEvictionAPI, 5), false)
	wantViolations(t, c, InvPDB, 0, "")
}

func TestBudgets(t *testing.T) {
	c := history(t)
	drained := func(name string, inFlight bool) *v1.Node {
		n := node(name)
		n.Spec.Unschedulable = true
		n.Annotations[annDrainOwned] = "KernelDeadlock=True,0s"
		st := v1.ConditionFalse
		if inFlight {
			st = v1.ConditionTrue
		}
		n.Status.Conditions = append(n.Status.Conditions, v1.NodeCondition{Type: condDrainSched, Status: st})
		return n
	}
	c.ObserveNode(at(1), drained("n0", true), false)
	c.ObserveNode(at(2), drained("n4", false), false)
	wantViolations(t, c, InvBudgets, 0, "")
	c.ObserveNode(at(3), drained("n8", true), false)
	got := c.Violations()
	if len(got) != 2 || !strings.Contains(got[0].Detail, "3 nodes cordoned") || !strings.Contains(got[1].Detail, "2 drains in flight") {
		t.Fatalf("violations %v, want the cordon and the drain budgets", got)
	}
	oos := v1.Taint{Key: taintOutOfService, Effect: v1.TaintEffectNoExecute}
	c = history(t, 0.5, Step{Op: OpMachineShutdown, Nodes: []string{"n1", "n2"}})
	c.ObserveNode(at(5), node("n1", oos), false)
	c.ObserveNode(at(6), node("n2", oos), false)
	wantViolations(t, c, InvBudgets, 1, "2 nodes out of service, budget 1")
}

func TestPodCIDRTwice(t *testing.T) {
	c := history(t)
	a, b := node("n0"), node("n1")
	a.Spec.PodCIDRs, b.Spec.PodCIDRs = []string{"10.244.0.0/26"}, []string{"10.244.0.64/26"}
	c.ObserveNode(at(1), a, false)
	c.ObserveNode(at(1), b, false)
	wantViolations(t, c, InvCIDR, 0, "")
	b = b.DeepCopy()
	b.Spec.PodCIDRs = []string{"10.244.0.0/26"}
	c.ObserveNode(at(2), b, false)
	wantViolations(t, c, InvCIDR, 1, "10.244.0.0/26 also on node n0")
}

func notReadyPod(p *v1.Pod, since float64) *v1.Pod {
	q := p.DeepCopy()
	q.Status.Conditions = []v1.PodCondition{{Type: v1.PodReady, Status: v1.ConditionFalse, LastTransitionTime: *mtime(since)}}
	return q
}

func lease(name string, renew float64) *coordinationv1.Lease {
	r := metav1.NewMicroTime(at(renew))
	return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "kube-node-lease"}, Spec: coordinationv1.LeaseSpec{RenewTime: &r}}
}

func TestReadinessGivenBack(t *testing.T) {
	c := history(t)
	p := pod("web-1", "n3", nil)
	c.ObservePod(at(1), p, false)
	c.ObserveLease(at(4), lease("n3", 4))
	c.ObservePod(at(10), notReadyPod(p, 10), false)
	down := node("n3")
	down.Status.Conditions[0].Status = v1.ConditionUnknown
	c.ObserveNode(at(10), down, false)
	// Ready given back while the node is Unknown and silent since before the mark.
	c.ObservePod(at(12), p, false)
	c.Settle(at(13))
	wantViolations(t, c, InvReadiness, 0, "") // still within the slack
	c.Settle(at(15))
	wantViolations(t, c, InvReadiness, 1, "was not Ready or had not reported since the mark")

	// Given back after the node is Ready and renewed its lease: fine, even
	// when the node's update is seen a little after the pod's.
	c = history(t)
	c.ObservePod(at(1), p, false)
	c.ObservePod(at(10), notReadyPod(p, 10), false)
	c.ObserveNode(at(10), down, false)
	c.ObservePod(at(20), p, false)
	c.ObserveLease(at(20.5), lease("n3", 20.4))
	c.ObserveNode(at(21), node("n3"), false)
	c.Settle(at(30))
	wantViolations(t, c, InvReadiness, 0, "")

	// The kubelet's own post (managedFields name it as the Ready
	// condition's writer) is ground truth, not a restore: seed 8770, a
	// partition healed while the kubelet reported its node Ready=False.
	c = history(t)
	c.ObservePod(at(1), p, false)
	c.ObservePod(at(10), notReadyPod(p, 10), false)
	c.ObserveNode(at(10), down, false)
	byKubelet := p.DeepCopy()
	byKubelet.ManagedFields = []metav1.ManagedFieldsEntry{
		{Manager: "nodeshepherd", Subresource: "status", FieldsV1: metav1.NewFieldsV1(`{"f:status":{"f:conditions":{"k:{\"type\":\"DisruptionTarget\"}":{".":{},"f:status":{}}}}}`)},
		{Manager: KubeletManager, Subresource: "status", FieldsV1: metav1.NewFieldsV1(`{"f:status":{"f:conditions":{"k:{\"type\":\"Ready\"}":{".":{},"f:status":{}}}}}`)},
	}
	c.ObservePod(at(12), byKubelet, false)
	c.Settle(at(30))
	wantViolations(t, c, InvReadiness, 0, "")
	// The same write by a controller is checked.
	c = history(t)
	c.ObservePod(at(1), p, false)
	c.ObservePod(at(10), notReadyPod(p, 10), false)
	c.ObserveNode(at(10), down, false)
	byController := byKubelet.DeepCopy()
	byController.ManagedFields[1].Manager = "nodeshepherd"
	c.ObservePod(at(12), byController, false)
	c.Settle(at(30))
	wantViolations(t, c, InvReadiness, 1, "was not Ready or had not reported since the mark")
}

func TestProgress(t *testing.T) {
	c := history(t)
	n := node("n6")
	n.Annotations[annDrainOwned] = "KernelDeadlock=True,0s"
	n.Status.Conditions = append(n.Status.Conditions, v1.NodeCondition{Type: condDrainSched, Status: v1.ConditionTrue})
	c.ObserveNode(at(1), n, false)
	c.CheckProgress(at(100), []Deployment{{Name: "web", Replicas: 12, Available: 11}, {Name: "batch", Replicas: 4, Available: 4}}, 30*time.Second)
	got := c.Violations()
	if len(got) != 2 || !strings.Contains(got[0].Detail, "11 of 12") || !strings.Contains(got[1].Detail, "drain still in flight") {
		t.Fatalf("violations %v", got)
	}
	// A drain an event explains (a budget holds it) is not stuck.
	c = history(t)
	c.ObserveNode(at(1), n, false)
	c.ObserveEvent(at(2), &v1.Event{Reason: "DrainWaiting", Message: "budget", InvolvedObject: v1.ObjectReference{Kind: "Node", Name: "n6"}})
	c.CheckProgress(at(100), nil, 30*time.Second)
	wantViolations(t, c, InvProgress, 0, "")
	// A wait said before the drain started does not explain the drain
	// (api-hang: a CordonWaiting of the start hold, then a drain that hangs).
	c = history(t)
	c.ObserveNode(at(1), n, false)
	c.ObserveEvent(at(2), &v1.Event{Reason: "CordonWaiting", Message: "start hold", InvolvedObject: v1.ObjectReference{Kind: "Node", Name: "n6"}})
	c.ObserveEvent(at(3), &v1.Event{Reason: "DrainStarting", Message: "Draining node: 1 pods to evict", InvolvedObject: v1.ObjectReference{Kind: "Node", Name: "n6"}})
	c.CheckProgress(at(100), nil, 30*time.Second)
	wantViolations(t, c, InvProgress, 1, "drain still in flight")
}

func TestEvictionAfterTaintSwap(t *testing.T) {
	// not-ready at 5, swapped for unreachable at 8: the clock runs from 5.
	c := history(t, 1.0, partition("n1"))
	notReady := v1.Taint{Key: taintNotReady, Effect: v1.TaintEffectNoExecute, TimeAdded: mtime(5)}
	c.ObserveNode(at(5), node("n1", notReady), false)
	c.ObserveNode(at(8), node("n1", unreachable(8)), false)
	p := pod("web-1", "n1", ptr.To(int64(6)))
	c.ObservePod(at(1), p, false)
	c.ObservePod(at(11.5), evicted(p, reasonTaintEvict, 11), false)
	wantViolations(t, c, InvToleration, 0, "")
}

func TestEvictionWhileEverySilent(t *testing.T) {
	all := []string{"n0", "n1", "n2", "n3", "n4", "n5", "n6", "n7", "n8", "n9", "n10", "n11"}
	c := history(t, 1.0, partition(all...))
	p := pod("web-1", "n1", nil)
	c.ObservePod(at(1), p, false)
	c.ObservePod(at(20), evicted(p, reasonTaintEvict, 20), false)
	wantViolations(t, c, InvZoneRules, 1, "while every zone was certainly silent")
}

// An eviction by a NoExecute taint other than not-ready and unreachable
// (an out-of-service taint on a machine confirmed off) is no master
// disruption mode's to stop, as upstream's (chaos seed 50009: a power-off
// confirmed by the cloud during an all-zones partition).
func TestEvictionByOutOfServiceWhileEverySilent(t *testing.T) {
	all := []string{"n0", "n1", "n2", "n3", "n4", "n5", "n6", "n7", "n8", "n9", "n10", "n11"}
	c := history(t, 1.0, partition(all...))
	c.ObserveNode(at(18), node("n1", v1.Taint{Key: "node.kubernetes.io/out-of-service", Value: "nodeshutdown", Effect: v1.TaintEffectNoExecute, TimeAdded: mtime(18)}), false)
	p := pod("web-1", "n1", nil)
	c.ObservePod(at(1), p, false)
	c.ObservePod(at(18.5), evicted(p, reasonTaintEvict, 18), false)
	wantViolations(t, c, InvZoneRules, 0, "")
}

func TestPodGoneAfterReboot(t *testing.T) {
	// Rebooted (its pods died with the boot), then partitioned: deleting
	// the old pod is no force deletion of a running pod.
	c := history(t, 2.0, Step{Op: OpMachineShutdown, Nodes: []string{"n2"}}, 4.0, Step{Op: OpMachineStart, Nodes: []string{"n2"}}, 5.0, partition("n2"))
	p := pod("web-1", "n2", nil)
	p.CreationTimestamp = metav1.NewTime(at(1))
	c.ObservePod(at(1), p, false)
	c.ObservePod(at(20), p, true)
	wantViolations(t, c, InvRunningForced, 0, "")
}

func TestPDBTaintEvictionWithoutCondition(t *testing.T) {
	// A taint eviction whose condition write failed still bypasses budgets.
	c := history(t, 1.0, partition("n1"))
	c.ObservePDB(at(1), pdb(0), false)
	c.ObserveNode(at(5), node("n1", unreachable(5)), false)
	p := pod("web-1", "n1", nil)
	c.ObservePod(at(1), p, false)
	q := p.DeepCopy()
	q.DeletionTimestamp = mtime(6)
	c.ObservePod(at(6), q, false)
	wantViolations(t, c, InvPDB, 0, "")
}

func TestZoneRulesSwapIsNoNewTaint(t *testing.T) {
	// n0 reported NotReady (tainted not-ready at 2), then its zone went
	// Partial (3 of 4) and n0 silent: the swap to unreachable is immediate
	// upstream.
	c := history(t, 1.0, Step{Op: OpCondition, Nodes: []string{"n0"}, Condition: "Ready=False"}, 1.0, partition("n1", "n2"), 8.0, partition("n0"))
	renewing(c, "n3", 0, 40)
	notReady := v1.Taint{Key: taintNotReady, Effect: v1.TaintEffectNoExecute, TimeAdded: mtime(2)}
	c.ObserveNode(at(2), node("n0", notReady), false)
	c.ObserveNode(at(15), node("n0", unreachable(15)), false)
	wantViolations(t, c, InvZoneRules, 0, "")
	// The same unreachable taint on a node that had none is a new one.
	c.ObserveNode(at(15), node("n1", unreachable(15)), false)
	wantViolations(t, c, InvZoneRules, 1, "PartialDisruption")
}

func marked(p *v1.Pod, when float64) *v1.Pod {
	q := p.DeepCopy()
	q.Status.Conditions = append(q.Status.Conditions, v1.PodCondition{Type: v1.DisruptionTarget, Status: v1.ConditionTrue, Reason: reasonTaintEvict, LastTransitionTime: *mtime(when)})
	return q
}

func markEvent(p *v1.Pod, uid string, count int32, last float64) *v1.Event {
	return &v1.Event{ObjectMeta: metav1.ObjectMeta{UID: types.UID(uid)}, Reason: "TaintManagerEviction", Count: count,
		Message:        "Marking for deletion Pod " + p.Namespace + "/" + p.Name,
		InvolvedObject: v1.ObjectReference{Kind: "Pod", Namespace: p.Namespace, Name: p.Name, UID: p.UID}, LastTimestamp: *mtime(last)}
}

// A taint eviction stamped seconds after the checker saw the node's taint go
// (a controller acting on a stale node cache) breaks untainted-eviction,
// once the slack has let the node's view settle; one just after the removal
// is within EvictionSlack and the second's rounding.
func TestEvictionAfterTheTaintWent(t *testing.T) {
	c := history(t, 1.0, partition("n1"), 9.0, heal("n1"))
	c.ObserveNode(at(5), node("n1", unreachable(5)), false)
	c.ObserveNode(at(10), node("n1"), false) // the taint comes off
	stale := pod("web-1", "n1", ptr.To(int64(3)))
	c.ObservePod(at(1), stale, false)
	c.ObservePod(at(14.2), marked(stale, 14.7), false) // stamped 14
	c.ObservePod(at(14.3), evicted(stale, reasonTaintEvict, 14.7), false)
	c.Settle(at(15))
	wantViolations(t, c, InvUntainted, 0, "") // the node's view may still be behind
	c.Settle(at(16.5))
	wantViolations(t, c, InvUntainted, 1, "no NoExecute taint the pod does not tolerate forever: the last one was seen removed at 14:00:10.000, more than 1s before")
	wantViolations(t, c, InvToleration, 0, "") // judged once, here

	// Decided just before the removal, stamped 13 (rounded down from 13.9):
	// the decision may have come at 12.9, before the removal seen at 13.1.
	c = history(t, 1.0, partition("n1"), 9.0, heal("n1"))
	c.ObserveNode(at(5), node("n1", unreachable(5)), false)
	c.ObserveNode(at(13.1), node("n1"), false)
	late := pod("web-2", "n1", ptr.To(int64(3)))
	c.ObservePod(at(1), late, false)
	c.ObservePod(at(14), marked(late, 13.9), false)
	c.Settle(at(30))
	wantViolations(t, c, InvUntainted, 0, "")
}

// The event announcing an eviction is judged as the mark is, once per
// emission; a taint the pod tolerates forever does not count; a taint seen
// added just after the eviction (the node's watch trailing) may have been
// there.
func TestEvictionAnnouncedAfterTheTaintWent(t *testing.T) {
	forever := v1.Taint{Key: "dedicated", Effect: v1.TaintEffectNoExecute, TimeAdded: mtime(2)}
	c := history(t)
	c.ObserveNode(at(2), node("n1", forever, unreachable(2)), false)
	c.ObserveNode(at(6), node("n1", forever), false)
	p := pod("web-1", "n1", ptr.To(int64(3)))
	p.UID = "u1"
	p.Spec.Tolerations = append(p.Spec.Tolerations, v1.Toleration{Key: "dedicated", Operator: v1.TolerationOpExists})
	c.ObservePod(at(1), p, false)
	c.ObserveEvent(at(10.1), markEvent(p, "e1", 1, 10))
	c.ObserveEvent(at(10.2), markEvent(p, "e1", 1, 10)) // the same emission, seen again
	c.Settle(at(20))
	wantViolations(t, c, InvUntainted, 1, "announced (event) at 14:00:10")

	c = history(t)
	c.ObserveNode(at(2), node("n2", unreachable(2)), false)
	c.ObserveNode(at(6), node("n2"), false)
	q := pod("web-2", "n2", ptr.To(int64(3)))
	c.ObservePod(at(1), q, false)
	c.ObservePod(at(10.1), marked(q, 10), false)
	c.ObserveNode(at(11), node("n2", unreachable(9)), false) // back, seen late
	c.Settle(at(20))
	wantViolations(t, c, InvUntainted, 0, "")
}

func TestReadinessRestoreCanBeSkipped(t *testing.T) {
	l := testLimits
	l.SkipReadinessRestore = true
	c := NewChecker(l, NewTruth(testZones()))
	p := pod("web-1", "n3", nil)
	c.ObservePod(at(1), p, false)
	c.ObservePod(at(10), notReadyPod(p, 10), false)
	c.ObservePod(at(12), p, false)
	c.Settle(at(30))
	wantViolations(t, c, InvReadiness, 0, "")
}

// renewing feeds n's Lease renewals every 0.5s over [from, to), each seen
// 50ms later.
func renewing(c *Checker, n string, from, to float64) {
	for s := from; s < to; s += 0.5 {
		c.ObserveLease(at(s+0.05), lease(n, s))
	}
}

func withReady(n *v1.Node, st v1.ConditionStatus) *v1.Node {
	n.Status.Conditions[0].Status = st
	return n
}

func TestReadyUnknownOnARenewingNode(t *testing.T) {
	// Renewing all along: Unknown at 15 is early.
	c := history(t)
	renewing(c, "n0", 0, 20)
	c.ObserveNode(at(15), withReady(node("n0"), v1.ConditionUnknown), false)
	c.Settle(at(15 + testLimits.Slack.Seconds() + 0.1))
	wantViolations(t, c, InvEarlyUnknown, 1, "Lease renewed with no gap")

	// Silent since 10: Unknown at 14 is in time.
	c = history(t, 10.0, partition("n0"))
	renewing(c, "n0", 0, 10)
	c.ObserveNode(at(14), withReady(node("n0"), v1.ConditionUnknown), false)
	c.Settle(at(20))
	wantViolations(t, c, InvEarlyUnknown, 0, "")

	// A renewal seen late (the Lease watch trailing by more than the grace
	// period) is a gap the controller may have seen too: no violation.
	c = history(t)
	for s := 0.0; s < 20; s += 0.5 {
		seen := s + 0.05
		if s >= 10 && s < 12 {
			seen = 13.5
		}
		c.ObserveLease(at(seen), lease("n0", s))
	}
	c.ObserveNode(at(15), withReady(node("n0"), v1.ConditionUnknown), false)
	c.Settle(at(20))
	wantViolations(t, c, InvEarlyUnknown, 0, "")
}

func TestCountdownTaintOnARenewingNode(t *testing.T) {
	// An unreachable taint on a node that renews all along.
	c := history(t)
	renewing(c, "n0", 0, 20)
	c.ObserveNode(at(15), node("n0", unreachable(14.8)), false)
	c.Settle(at(18))
	wantViolations(t, c, InvEarlyTaint, 1, "unreachable")

	// A not-ready taint on a node that reports Ready=False: the kubelet's
	// word, not silence.
	c = history(t, 12.0, Step{Op: OpCondition, Nodes: []string{"n0"}, Condition: "Ready=False"})
	renewing(c, "n0", 0, 20)
	c.ObserveNode(at(12.5), withReady(node("n0"), v1.ConditionFalse), false)
	notReady := v1.Taint{Key: taintNotReady, Effect: v1.TaintEffectNoExecute, TimeAdded: mtime(12.6)}
	c.ObserveNode(at(13), withReady(node("n0", notReady), v1.ConditionFalse), false)
	c.Settle(at(18))
	wantViolations(t, c, InvEarlyTaint, 0, "")
}

func TestCountdownStrippedWithoutRecovery(t *testing.T) {
	// Tainted at 6 while silent; stripped at 10 while still silent.
	c := history(t, 1.0, partition("n0"))
	renewing(c, "n0", 0, 1)
	c.ObserveNode(at(6), withReady(node("n0", unreachable(5.5)), v1.ConditionUnknown), false)
	c.ObserveNode(at(10), withReady(node("n0"), v1.ConditionUnknown), false)
	c.Settle(at(13))
	wantViolations(t, c, InvCountdown, 1, "removed while the node had not recovered")
	c.ObserveNode(at(14), withReady(node("n0"), v1.ConditionUnknown), false) // the same strip, seen again
	c.Settle(at(20))
	wantViolations(t, c, InvCountdown, 1, "")

	// Taken off once the node is back: Ready=True and renewing.
	c = history(t, 1.0, partition("n0"), 9.0, heal("n0"))
	renewing(c, "n0", 0, 1)
	c.ObserveNode(at(6), withReady(node("n0", unreachable(5.5)), v1.ConditionUnknown), false)
	renewing(c, "n0", 9, 12)
	c.ObserveNode(at(9.6), node("n0", unreachable(5.5)), false)
	c.ObserveNode(at(10), node("n0"), false)
	c.Settle(at(13))
	wantViolations(t, c, InvCountdown, 0, "")

	// Every zone down: the all-zones mode strips every taint, and gives it
	// back with its time; neither is a restart.
	all := []string{"n0", "n1", "n2", "n3", "n4", "n5", "n6", "n7", "n8", "n9", "n10", "n11"}
	c = history(t, 1.0, partition("n0"), 8.0, partition(all...))
	c.ObserveNode(at(6), withReady(node("n0", unreachable(5.5)), v1.ConditionUnknown), false)
	c.ObserveNode(at(13), withReady(node("n0"), v1.ConditionUnknown), false)
	c.ObserveNode(at(20), withReady(node("n0", unreachable(5.5)), v1.ConditionUnknown), false)
	c.Settle(at(23))
	wantViolations(t, c, InvCountdown, 0, "")

	// The same, with a node registering 1 s after the strip, before the
	// strip is judged (chaos seeds 160011, 160018: silent-newcomer beside
	// all-zones-failover): the controller could not have had it, so it
	// does not make a zone less than down.
	c = history(t, 1.0, partition("n0"), 8.0, partition(all...), 14.0, Step{Op: OpRegister, Nodes: []string{"late-0-a-0000"}, Zone: "zone-a"})
	c.ObserveNode(at(6), withReady(node("n0", unreachable(5.5)), v1.ConditionUnknown), false)
	c.ObserveNode(at(13), withReady(node("n0"), v1.ConditionUnknown), false)
	c.Settle(at(23))
	wantViolations(t, c, InvCountdown, 0, "")
}

func TestCountdownRestartedOrBackdated(t *testing.T) {
	// The same key again with a later timeAdded (a new leader's strip and
	// re-add, in one write here).
	c := history(t, 1.0, partition("n0"))
	c.ObserveNode(at(6), withReady(node("n0", unreachable(5.5)), v1.ConditionUnknown), false)
	c.ObserveNode(at(9), withReady(node("n0", unreachable(8.5)), v1.ConditionUnknown), false)
	wantViolations(t, c, InvCountdown, 1, "the countdown restarted")

	// A swap of the failure kind gets a new timeAdded: fine.
	c = history(t, 1.0, partition("n0"))
	notReady := v1.Taint{Key: taintNotReady, Effect: v1.TaintEffectNoExecute, TimeAdded: mtime(5.5)}
	c.ObserveNode(at(6), withReady(node("n0", notReady), v1.ConditionFalse), false)
	c.ObserveNode(at(9), withReady(node("n0", unreachable(8.5)), v1.ConditionUnknown), false)
	wantViolations(t, c, InvCountdown, 0, "")

	// Swapped and swapped back (Unknown, False, Unknown again; chaos seed
	// 180011), each with a new timeAdded as upstream's: no restart.
	c = history(t, 1.0, partition("n0"))
	notReady7 := v1.Taint{Key: taintNotReady, Effect: v1.TaintEffectNoExecute, TimeAdded: mtime(7.5)}
	c.ObserveNode(at(6), withReady(node("n0", unreachable(5.5)), v1.ConditionUnknown), false)
	c.ObserveNode(at(8), withReady(node("n0", notReady7), v1.ConditionFalse), false)
	c.ObserveNode(at(12), withReady(node("n0", unreachable(11.5)), v1.ConditionUnknown), false)
	wantViolations(t, c, InvCountdown, 0, "")
	// Back to the same key without the swap between: a restart still.
	c.ObserveNode(at(14), withReady(node("n0", unreachable(13.5)), v1.ConditionUnknown), false)
	wantViolations(t, c, InvCountdown, 1, "the countdown restarted")

	// Ready=False, tainted; Ready=True for a moment (the taint still on),
	// Ready=False again; the strip the recovery called for lands after
	// that, and the taint comes back with a new time: a recovery and a
	// new countdown, not a restart (chaos seed 40013, two ready-flaps 0.4s
	// apart on a loaded machine).
	flap := Step{Op: OpCondition, Nodes: []string{"n0"}, Condition: "Ready=False"}
	unflap := Step{Op: OpClearCondition, Nodes: []string{"n0"}, Condition: "Ready"}
	c = history(t, 1.0, flap, 6.5, unflap, 6.9, flap)
	renewing(c, "n0", 0, 20)
	notReady5 := v1.Taint{Key: taintNotReady, Effect: v1.TaintEffectNoExecute, TimeAdded: mtime(1.2)}
	c.ObserveNode(at(1.3), withReady(node("n0", notReady5), v1.ConditionFalse), false)
	c.ObserveNode(at(6.5), withReady(node("n0", notReady5), v1.ConditionTrue), false)
	c.ObserveNode(at(6.9), withReady(node("n0", notReady5), v1.ConditionFalse), false)
	c.ObserveNode(at(7.7), withReady(node("n0"), v1.ConditionFalse), false)
	notReady10 := v1.Taint{Key: taintNotReady, Effect: v1.TaintEffectNoExecute, TimeAdded: mtime(10.9)}
	c.ObserveNode(at(11), withReady(node("n0", notReady10), v1.ConditionFalse), false)
	c.Settle(at(20))
	wantViolations(t, c, InvCountdown, 0, "")
	// The same without the moment of Ready=True: a strip without a
	// recovery, and a restart.
	c = history(t, 1.0, flap)
	renewing(c, "n0", 0, 20)
	c.ObserveNode(at(1.3), withReady(node("n0", notReady5), v1.ConditionFalse), false)
	c.ObserveNode(at(7.7), withReady(node("n0"), v1.ConditionFalse), false)
	c.ObserveNode(at(11), withReady(node("n0", notReady10), v1.ConditionFalse), false)
	c.Settle(at(20))
	wantViolations(t, c, InvCountdown, 2, "the countdown restarted")

	// The same recovery with the strip landing 6 s later, after the node
	// failed again, while 429s on nodes held the controllers' writes: the
	// recovery ended the countdown (chaos seed 90026). Without the 429s,
	// a strip that late is not the recovery's.
	throttle := Step{Op: OpAPIFaultStart, Fault: 3, Resource: "nodes", Status: 429}
	unthrottle := Step{Op: OpAPIFaultEnd, Fault: 3, Resource: "nodes"}
	for _, tc := range []struct {
		steps []any
		want  int
	}{{[]any{1.0, flap, 6.0, throttle, 6.5, unflap, 11.9, flap, 14.0, unthrottle}, 0}, {[]any{1.0, flap, 6.5, unflap, 11.9, flap}, 1}} {
		c = history(t, tc.steps...)
		renewing(c, "n0", 0, 20)
		c.ObserveNode(at(1.3), withReady(node("n0", notReady5), v1.ConditionFalse), false)
		c.ObserveNode(at(6.5), withReady(node("n0", notReady5), v1.ConditionTrue), false)
		c.ObserveNode(at(11.9), withReady(node("n0", notReady5), v1.ConditionFalse), false)
		c.ObserveNode(at(12.7), withReady(node("n0"), v1.ConditionFalse), false)
		c.Settle(at(20))
		wantViolations(t, c, InvCountdown, tc.want, "")
	}

	// A taint first seen at 20 that says it was added at 5: backdated.
	c = history(t, 1.0, partition("n0"))
	c.ObserveNode(at(20), withReady(node("n0", unreachable(5)), v1.ConditionUnknown), false)
	wantViolations(t, c, InvCountdown, 1, "backdated")
}

func TestRateLimit(t *testing.T) {
	limits := testLimits
	limits.EvictionRate = 0.1
	mk := func(steps ...any) *Checker {
		c := history(t, steps...)
		c.limits = limits
		return c
	}
	// Two nodes of zone-a tainted 2s apart: one token, not two.
	c := mk(1.0, partition("n0", "n1"))
	c.ObserveNode(at(5.5), node("n0", unreachable(5.2)), false)
	c.ObserveNode(at(7.5), node("n1", unreachable(7.2)), false)
	wantViolations(t, c, InvRateLimit, 1, "2 new not-ready/unreachable taints in zone zone-a")

	// Ten seconds apart: the second token.
	c = mk(1.0, partition("n0", "n1"))
	c.ObserveNode(at(5.5), node("n0", unreachable(5.2)), false)
	c.ObserveNode(at(16.5), node("n1", unreachable(16.2)), false)
	wantViolations(t, c, InvRateLimit, 0, "")

	// Seed 11's pair: seen 9.9s apart, the second stamped 9.8s after the
	// first was seen; the limiter may have had 10.1s: fine.
	c = mk(1.0, partition("n0", "n1"))
	c.ObserveNode(at(42.234), node("n0", unreachable(42.1)), false)
	c.ObserveNode(at(52.112), node("n1", unreachable(52.05)), false)
	wantViolations(t, c, InvRateLimit, 0, "")

	// Other zones have their own limiter.
	c = mk(1.0, partition("n0", "n4"))
	c.ObserveNode(at(5.5), node("n0", unreachable(5.2)), false)
	c.ObserveNode(at(6.5), node("n4", unreachable(6.2)), false)
	wantViolations(t, c, InvRateLimit, 0, "")

	// A new leader brings a fresh limiter.
	c = mk(1.0, partition("n0", "n1"))
	holder := func(h string) *coordinationv1.Lease {
		return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "nodeshepherd"}, Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(h)}}
	}
	c.ObserveLease(at(1), holder("a"))
	c.ObserveNode(at(5.5), node("n0", unreachable(5.2)), false)
	c.ObserveLease(at(6), holder("b"))
	c.ObserveNode(at(7.5), node("n1", unreachable(7.2)), false)
	wantViolations(t, c, InvRateLimit, 0, "")
}

// A taint re-applied with its old time is judged from when the checker
// saw it, not from its timeAdded.
func TestZoneRulesReappliedOldTaint(t *testing.T) {
	c := history(t, 1.0, partition("n0", "n1", "n2"))
	renewing(c, "n3", 0, 40)
	c.ObserveNode(at(30), node("n0", unreachable(0.5)), false)
	wantViolations(t, c, InvZoneRules, 1, "PartialDisruption")
}

// zoneViewCase: zone-a's four nodes renew every 0.5 s from 0 (each renewal
// seen 50 ms later) until their partition; n0, n1, n2 are cut 1 s apart
// from 10.2 s. The controller's --heartbeat-overdue-slack is 2 s.
func zoneViewCase(t *testing.T, extra ...any) *Checker {
	t.Helper()
	steps := append([]any{10.2, partition("n0"), 11.2, partition("n1"), 12.2, partition("n2")}, extra...)
	c := history(t, steps...)
	c.limits.OverdueSlack = 2 * time.Second
	renewing(c, "n0", 0, 10.2)
	renewing(c, "n1", 0, 11.2)
	renewing(c, "n2", 0, 12.2)
	renewing(c, "n3", 0, 40)
	return c
}

// TestZoneRulesOwnView: zone-rules counts a node silent from the moment
// the checker saw its last Lease renewal (plus the longest overdue time the
// controller can have used and ViewLag), not only once the ground truth
// has it silent for grace + monitor period + slack before the decision
// (issue 45, point 3).
func TestZoneRulesOwnView(t *testing.T) {
	// n2 tainted at 18 (seen at 19): at the pass before, at 16 (a monitor
	// period and the ViewLag of a late pass), the three had been silent
	// 5.95 s, 4.95 s and 3.95 s by the renewals seen, beyond
	// the 3.4 s bound (the overdue time 2.4 s of a 0.5-1.5 s interval, and
	// 1 s of ViewLag): PartialDisruption, rate 0. The certain silences
	// alone (since 18 - 6 s) count only n0 and n1: no violation then.
	c := zoneViewCase(t)
	c.ObserveNode(at(19), node("n2", unreachable(18)), false)
	wantViolations(t, c, InvZoneRules, 0, "")
	c.Settle(at(19 + testLimits.Slack.Seconds() + 0.1))
	wantViolations(t, c, InvZoneRules, 1, "PartialDisruption by the checker's view of the Lease renewals")

	// A taint the zone's state allowed: n0 tainted at 14 (seen at 14.5),
	// its grace and a pass after its silence; at the pass (12) n1 had
	// been silent 0.95 s and n2 not yet: Normal.
	c = zoneViewCase(t)
	c.ObserveNode(at(14.5), node("n0", unreachable(14)), false)
	c.Settle(at(14.5 + testLimits.Slack.Seconds() + 0.1))
	wantViolations(t, c, InvZoneRules, 0, "")

	// The first case while a stall of the replicas' Lease watches held the
	// controller's view: its silences may have run from a fresh read, so
	// only the certain silences judge.
	c = zoneViewCase(t, 9.0, Step{Op: OpWatchStallStart, Fault: 7, Resource: "leases"}, 15.0, Step{Op: OpWatchStallEnd, Fault: 7, Resource: "leases"})
	c.ObserveNode(at(19), node("n2", unreachable(18)), false)
	c.Settle(at(19 + testLimits.Slack.Seconds() + 0.1))
	wantViolations(t, c, InvZoneRules, 0, "")

	// n3 falls silent too, at 16.5, between the earliest pass (16) and
	// the decision (18): the controller may have counted all four (the
	// zone in FullDisruption, normal rate), so no violation (someReady).
	c = zoneViewCase(t, 16.5, partition("n3"))
	c.ObserveNode(at(19), node("n2", unreachable(18)), false)
	c.Settle(at(19 + testLimits.Slack.Seconds() + 0.1))
	wantViolations(t, c, InvZoneRules, 0, "")

	// n1 healed at 17, between the earliest pass (16) and the decision
	// (18), renewing again: a pass that late (a new leader's first, say)
	// saw it Ready, the zone Normal (2 of 4): no violation (chaos seed
	// 90013).
	c = zoneViewCase(t, 17.0, heal("n1"))
	renewing(c, "n1", 17, 40)
	c.ObserveNode(at(19), node("n2", unreachable(18)), false)
	c.Settle(at(19 + testLimits.Slack.Seconds() + 0.1))
	wantViolations(t, c, InvZoneRules, 0, "")

	// A renewal of n2 that landed late (seen at 16.5, made at 12.1 before
	// its cut): n2's silence runs from 16.5 in the controller's view too.
	c = zoneViewCase(t)
	c.ObserveLease(at(16.5), lease("n2", 12.1))
	c.ObserveNode(at(19), node("n2", unreachable(18)), false)
	c.Settle(at(19 + testLimits.Slack.Seconds() + 0.1))
	wantViolations(t, c, InvZoneRules, 0, "")
}

// TestOverdueBound: the longest overdue time the controller can use for a
// node heartbeating every 0.5 s is 2.4 s (an interval of 0.4 s, within the
// 0.5 s + 1 s of ViewLag it may have measured); with no overdue slack,
// the grace period.
func TestOverdueBound(t *testing.T) {
	c := history(t)
	c.limits.OverdueSlack = 2 * time.Second
	rs := []renewal{{renewed: at(0)}, {renewed: at(0.5)}, {renewed: at(1)}}
	if got := c.overdueBound(rs, false); got != 2400*time.Millisecond {
		t.Errorf("overdueBound every 0.5s = %v, want 2.4s", got)
	}
	rs = []renewal{{renewed: at(0)}, {renewed: at(2)}, {renewed: at(2.5)}}
	if got := c.overdueBound(rs, false); got != 3*time.Second {
		t.Errorf("overdueBound with a 2s gap = %v, want the grace period 3s", got)
	}
	// One renewal: nothing known of the intervals before it, unless it is
	// the Lease's whole history (a newcomer): then the controller measured
	// no gap or assumed one (a quarter of the Lease's duration: 1 s for the
	// chaos Leases, see overdueBound), so the longest overdue time of any
	// interval up to max(ViewLag, grace/4), 1 s:
	// 2.4 s, as for 0.5 s renewals.
	if got := c.overdueBound(rs[:1], false); got != 3*time.Second {
		t.Errorf("overdueBound of one renewal = %v, want the grace period 3s", got)
	}
	if got := c.overdueBound(rs[:1], true); got >= 3*time.Second || got < 2*time.Second {
		t.Errorf("overdueBound of a newcomer's one renewal = %v, want the controller's overdue time for an interval up to 1.75s (2-3s)", got)
	}
	c.limits.OverdueSlack = 0
	if got := c.overdueBound(rs[:2], true); got != 3*time.Second {
		t.Errorf("overdueBound without overdue slack = %v, want the grace period", got)
	}
}

// TestZoneRulesOwnViewReplacedNode: a Node deleted in the window (a
// replacement) is left out of the view's count: zone-a of the controller
// may have had 3 Nodes, 2 of them silent (Normal).
// TestZoneRulesEveryZoneSilentButAReplacement: every node cut; n0 replaced
// inside the window (its Node deleted, a new machine registered Ready).
// The controller may have counted the new n0 Ready: zone-a not in
// FullDisruption, so a taint is no proof of a broken all-zones rule (chaos
// seed 170023: left out of the zone as deleted, it made every zone
// "certainly silent").
func TestZoneRulesEveryZoneSilentButAReplacement(t *testing.T) {
	all := []string{"n0", "n1", "n2", "n3", "n4", "n5", "n6", "n7", "n8", "n9", "n10", "n11"}
	c := history(t, 1.0, partition(all...), 9.0, heal("n0"))
	c.ObserveNode(at(6), node("n0"), true)
	c.ObserveNode(at(9.2), node("n0"), false)
	c.ObserveNode(at(12), node("n4", unreachable(11.2)), false)
	c.Settle(at(12 + testLimits.Slack.Seconds() + 0.1))
	wantViolations(t, c, InvZoneRules, 0, "")

	// Deleted and not back: the others certainly silent, every zone down.
	c = history(t, 1.0, partition(all...))
	c.ObserveNode(at(6), node("n0"), true)
	c.ObserveNode(at(12), node("n4", unreachable(11.2)), false)
	wantViolations(t, c, InvZoneRules, 1, "every zone was certainly silent")
}

func TestZoneRulesOwnViewReplacedNode(t *testing.T) {
	c := zoneViewCase(t)
	c.ObserveNode(at(15), node("n0"), true)
	c.ObserveNode(at(17.5), node("n0"), false)
	c.ObserveNode(at(19), node("n2", unreachable(18)), false)
	c.Settle(at(19 + testLimits.Slack.Seconds() + 0.1))
	wantViolations(t, c, InvZoneRules, 0, "")

	// The same for the certain silences: n0 (silent since 1) deleted at 8.
	c = history(t, 1.0, partition("n0", "n1", "n2"))
	renewing(c, "n3", 0, 40)
	c.ObserveNode(at(8), node("n0"), true)
	c.ObserveNode(at(10), node("n1", unreachable(9.5)), false)
	wantViolations(t, c, InvZoneRules, 0, "")
}

// TestZoneRulesLeavingAllZonesPartial: every zone cut, n1 and n2 of zone-a
// powered off inside the window and n0 before it (judged dead, its taint
// stripped on entering the all-zones mode); n3 healed first, the other
// zones 7 s later. A taint on n0 right after n3's heal is forbidden either
// way: n3 counted Ready, zone-a is PartialDisruption (rate 0); not, every
// zone is down. No node of zone-a was healthy for a grace period, so
// someReady cannot say it (all-zones-lasting, issue 45 point 4).
func TestZoneRulesLeavingAllZonesPartial(t *testing.T) {
	all := []string{"n0", "n1", "n2", "n3", "n4", "n5", "n6", "n7", "n8", "n9", "n10", "n11"}
	others := all[4:]
	off := func(n ...string) Step { return Step{Op: OpMachineShutdown, Nodes: n} }
	c := history(t, 0.5, off("n0"), 8.0, partition(all...), 8.5, off("n1", "n2"), 24.0, heal("n3"), 31.0, heal(others...))
	renewing(c, "n3", 24, 40)
	c.ObserveNode(at(25.5), node("n0", unreachable(4)), false)
	wantViolations(t, c, InvZoneRules, 1, "every zone but zone-a was certainly in FullDisruption and zone-a certainly in PartialDisruption")

	// Every partition healed at once: another zone's node may be the one
	// counted Ready, zone-a FullDisruption at the normal rate: allowed.
	c = history(t, 0.5, off("n0"), 8.0, partition(all...), 8.5, off("n1", "n2"), 24.0, heal(all...))
	renewing(c, "n3", 24, 40)
	c.ObserveNode(at(25.5), node("n0", unreachable(4)), false)
	c.Settle(at(40))
	wantViolations(t, c, InvZoneRules, 0, "")

	// Only n0 and n1 silent across the heal: zone-a Normal: allowed.
	c = history(t, 0.5, off("n0"), 8.0, partition(all...), 8.5, off("n1"), 24.0, heal("n2", "n3"), 31.0, heal(others...))
	c.ObserveNode(at(25.5), node("n0", unreachable(4)), false)
	c.Settle(at(40))
	wantViolations(t, c, InvZoneRules, 0, "")

}

// TestEvictionBeforeShortenedToleration: a toleration shortened from 60 s
// to 8 s at 15 s, 10 s into the taint, counts its 8 s from the change as
// the checker saw it (less the slack, 2 s here): evicted at 15 (the taint's
// timeAdded + 8 s passed already), it is early; at 22 it is not (the
// toleration-from-new-value mutant).
func TestEvictionBeforeShortenedToleration(t *testing.T) {
	c := history(t, 1.0, partition("n1"))
	c.ObserveNode(at(5), node("n1", unreachable(5)), false)
	p := pod("tol-1", "n1", ptr.To(int64(60)))
	c.ObservePod(at(1), p, false)
	short := pod("tol-1", "n1", ptr.To(int64(8)))
	c.ObservePod(at(15.1), short, false)
	c.ObservePod(at(15.6), evicted(short, reasonTaintEvict, 15), false) // due at 15.1-2+8 = 21.1
	wantViolations(t, c, InvToleration, 1, "from the tolerations' change seen at")

	q := pod("tol-2", "n1", ptr.To(int64(60)))
	c.ObservePod(at(1), q, false)
	c.ObservePod(at(15.1), pod("tol-2", "n1", ptr.To(int64(8))), false)
	c.ObservePod(at(22.3), evicted(pod("tol-2", "n1", ptr.To(int64(8))), reasonTaintEvict, 22), false)
	// Unchanged tolerations still count from the taint's timeAdded.
	r := pod("web-3", "n1", ptr.To(int64(8)))
	c.ObservePod(at(1), r, false)
	c.ObservePod(at(13.2), evicted(r, reasonTaintEvict, 13), false)
	wantViolations(t, c, InvToleration, 1, "")
}

// TestTruthMachineStartRestartsAStoppedKubelet: a machine whose kubelet was
// stopped, then powered off and started again, boots a fresh kubelet, as
// fakenode does (chaos seed 90012: counted silent while it ran).
func TestTruthMachineStartRestartsAStoppedKubelet(t *testing.T) {
	m := apply(apply(apply(Machine{}, Step{Op: OpKubeletStop}), Step{Op: OpMachineShutdown}), Step{Op: OpMachineStart})
	if m.Silent() || m.Boot != 1 {
		t.Errorf("after kubelet-stop, machine-shutdown, machine-start: %+v, want a running kubelet on boot 1", m)
	}
	if m := apply(apply(Machine{}, Step{Op: OpKubeletStop}), Step{Op: OpMachineStart}); !m.KubeletStopped {
		t.Errorf("a machine-start of a machine that runs restarts nothing: %+v", m)
	}
}

// TestTruthBootStartedOnlyByANewBoot: a machine start of a machine that
// already ran begins no boot, so it does not move BootStarted (which
// excuses an out-of-service taint on a machine whose new boot went unseen).
func TestTruthBootStartedOnlyByANewBoot(t *testing.T) {
	truth := NewTruth(testZones())
	t0 := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	rec := func(off time.Duration, op Op) {
		truth.Record(Applied{Step: Step{Op: op, Nodes: []string{"n1"}}, Start: t0.Add(off), Done: t0.Add(off + 10*time.Millisecond)})
	}
	rec(time.Second, OpMachineShutdown)
	rec(2*time.Second, OpMachineStart)
	rec(5*time.Second, OpMachineStart) // the machine runs: no new boot
	if got := truth.BootStarted("n1", t0.Add(time.Second)); !got.IsZero() {
		t.Errorf("before the first start: %v, want zero", got)
	}
	for _, at := range []time.Duration{3 * time.Second, 6 * time.Second} {
		if got := truth.BootStarted("n1", t0.Add(at)); !got.Equal(t0.Add(2 * time.Second)) {
			t.Errorf("at +%v: boot started %v, want +2s", at, got.Sub(t0))
		}
	}
}
