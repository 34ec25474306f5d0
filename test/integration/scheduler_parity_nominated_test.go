package integration

import (
	"context"
	"fmt"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodeshepherd/nodeshepherd/pkg/controlplane"
	"github.com/nodeshepherd/nodeshepherd/test/framework"
)

// runParityNominated: a preemptor nominated to a node whose victim is
// still terminating (a finalizer holds it), and the pods decided meanwhile.
// Each scheduler filters a node with the nominated pods of at least the
// pod's priority added (pass 1: their room is reserved) and, when it added
// any, again without them (pass 2: a pod may not count on a pod that is not
// there yet). Two nodes of 1 CPU: nom-1 holds the victim (600m, priority
// 10), nom-2 a pod of priority 1000 (800m); the preemptor (700m, priority
// 100, app=nominated) fits only by removing the victim.
func runParityNominated(t *testing.T, upstream bool) parityOutcome {
	cp := startControlPlaneAlone(t, controlplane.Config{ControllerManager: true, Scheduler: upstream})
	client := framework.Client(t, cp)
	ctx := framework.Context(t)
	createPriorityClasses(t, client)
	never := v1.PreemptNever
	if _, err := client.SchedulingV1().PriorityClasses().Create(ctx, &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: "p20-never"},
		Value: 20, PreemptionPolicy: &never}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	for _, name := range []string{"nom-1", "nom-2"} {
		createParityNode(t, client, parityNode{name: name, group: "nominate"})
	}
	pc := &preemptionCluster{client: client}
	bound := func(name, node, class string, milliCPU int64, finalizer bool) {
		p := parityPod(name, "nominate", milliCPU)
		p.Spec.NodeName, p.Spec.PriorityClassName = node, class
		if finalizer {
			p.Finalizers = []string{keepFinalizer}
		}
		pc.create(t, p)
	}
	bound("victim", "nom-1", "p10", 600, true)
	bound("filler", "nom-2", "p1000", 800, false)
	// The harness is ready before the scheduler under test starts.
	if !upstream {
		startParityScheduler(t, cp)
	}
	out := parityOutcome{}
	decide := func(p *v1.Pod) {
		pc.create(t, p)
		out[p.Name] = framework.WaitPodDecision(t, client, parityNamespace, p.Name, 60*time.Second)
	}

	preemptor := parityPod("preemptor", "nominate", 700)
	preemptor.Labels = map[string]string{"app": "nominated"}
	preemptor.Spec.PriorityClassName = "p100"
	pc.create(t, preemptor)
	framework.Eventually(t, time.Minute, "preemptor nominated, its victim terminating", func(ctx context.Context) (bool, string, error) {
		p, err := client.CoreV1().Pods(parityNamespace).Get(ctx, "preemptor", metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		v, err := client.CoreV1().Pods(parityNamespace).Get(ctx, "victim", metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		out["preemptor-nominated"] = framework.PodDecision{Node: p.Status.NominatedNodeName}
		return p.Status.NominatedNodeName != "" && v.DeletionTimestamp != nil,
			fmt.Sprintf("nominated %q, bound to %q, victim deleted %v", p.Status.NominatedNodeName, p.Spec.NodeName, v.DeletionTimestamp), nil
	})

	// Pass 1: 300m would fit nom-1 beside the victim (400m free), not
	// beside the victim and the nominated preemptor.
	pass1 := parityPod("pass1", "nominate", 300)
	pass1.Spec.PriorityClassName = "p20-never"
	decide(pass1)
	// Pass 2: a pod without requests that needs a pod app=nominated on its
	// node finds one on nom-1 only while the nominated preemptor is added.
	pass2 := parityPod("pass2", "nominate", 0)
	pass2.Spec.Containers[0].Resources = v1.ResourceRequirements{}
	pass2.Spec.PriorityClassName = "p20-never"
	pass2.Spec.Affinity = &v1.Affinity{PodAffinity: &v1.PodAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []v1.PodAffinityTerm{{
		LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "nominated"}}, TopologyKey: v1.LabelHostname}}}}
	decide(pass2)
	// A pod of higher priority than the nominated one does not see its
	// reservation: 300m fits nom-1 beside the victim.
	higher := parityPod("higher", "nominate", 300)
	higher.Spec.PriorityClassName = "p1000-never"
	decide(higher)

	// The victim goes: the preemptor takes the 700m left, and the pod that
	// needed it on its node follows.
	if _, err := client.CoreV1().Pods(parityNamespace).Patch(ctx, "victim", types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	out["preemptor"] = framework.PodDecision{Node: waitBound(t, client, "preemptor")}
	out["pass2-after"] = framework.PodDecision{Node: waitBound(t, client, "pass2")}
	out["pass1-after"] = podState(t, client, "pass1")
	return out
}

// TestSchedulerParityNominatedPods: kube-scheduler 1.37's two-pass filter
// with nominated pods (runParityNominated), run through kube-scheduler and
// through nodeshepherd's scheduler on plain nodes of the real API server:
// the same nomination, the same pods kept off the reserved room with the
// same messages, the same pod placed beside it, and the same bindings once
// the victim is gone.
func TestSchedulerParityNominatedPods(t *testing.T) {
	nom1 := framework.PodDecision{Node: "nom-1"}
	want := parityOutcome{
		"preemptor-nominated": nom1,
		"pass1": {Reason: v1.PodReasonUnschedulable, Message: "0/2 nodes are available: 2 Insufficient cpu." +
			" preemption: not eligible due to preemptionPolicy=Never."},
		"pass2": {Reason: v1.PodReasonUnschedulable, Message: "0/2 nodes are available: 2 node(s) didn't match pod affinity rules." +
			" preemption: not eligible due to preemptionPolicy=Never."},
		"higher":      nom1,
		"preemptor":   nom1,
		"pass2-after": nom1,
		"pass1-after": {},
	}
	bothSchedulersDecide(t, want, runParityNominated)
}
