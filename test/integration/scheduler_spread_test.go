package integration

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/nodeshepherd/nodeshepherd/pkg/controller/scheduler"
	"github.com/nodeshepherd/nodeshepherd/pkg/kube"
	"github.com/nodeshepherd/nodeshepherd/test/framework"
)

const spreadZoneKey = "topology.kubernetes.io/zone"

// spreadOutcome is what a scheduler made of the spread workload: the
// Deployment's scheduled pods per zone (sorted, zones being interchangeable),
// its pending pods, and the message of the pod that cannot fit.
type spreadOutcome struct {
	perZone []int
	pending int
	msg     string
}

func spreadConstraint(ignoreAffinity bool) []v1.TopologySpreadConstraint {
	c := v1.TopologySpreadConstraint{MaxSkew: 1, TopologyKey: spreadZoneKey, WhenUnsatisfiable: v1.DoNotSchedule,
		LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "spread"}}}
	if ignoreAffinity {
		c.NodeAffinityPolicy = ptr.To(v1.NodeInclusionPolicyIgnore)
	}
	return []v1.TopologySpreadConstraint{c}
}

func spreadPodSpec(schedulerName string) v1.PodSpec {
	return v1.PodSpec{SchedulerName: schedulerName, TopologySpreadConstraints: spreadConstraint(false),
		Containers: []v1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10",
			Resources: v1.ResourceRequirements{Requests: v1.ResourceList{v1.ResourceCPU: resource.MustParse("100m")}}}}}
}

// runSpread schedules a Deployment of 7 replicas with a zone DoNotSchedule
// maxSkew 1 constraint on 3 zones × 2 nodes, then a pod of the same app
// that must go to the fullest zone (nodeAffinityPolicy Ignore, so that all
// zones count): it cannot fit.
func runSpread(t *testing.T, upstream bool) spreadOutcome {
	c := startPreemptionCluster(t, 6, upstream, nil)
	ctx := framework.Context(t)
	zoneOf := map[string]string{}
	nodes, err := c.client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes.Items {
		zoneOf[n.Name] = n.Labels[spreadZoneKey]
	}
	if zones := slices.Compact(slices.Sorted(func(yield func(string) bool) {
		for _, z := range zoneOf {
			if !yield(z) {
				return
			}
		}
	})); len(zones) != 3 || len(zoneOf) != 6 {
		t.Fatalf("want 6 nodes in 3 zones, got %v", zoneOf)
	}
	labels := map[string]string{"app": "spread"}
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "spread", Namespace: "default"},
		Spec: appsv1.DeploymentSpec{Replicas: ptr.To[int32](7), Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: v1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: spreadPodSpec(v1.DefaultSchedulerName)}}}
	if _, err := c.client.AppsV1().Deployments("default").Create(ctx, d, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var out spreadOutcome
	perZone := map[string]int{}
	framework.Eventually(t, 90*time.Second, "7 replicas running", func(ctx context.Context) (bool, string, error) {
		l, err := c.client.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=spread"})
		if err != nil {
			return false, "", err
		}
		clear(perZone)
		running, pending := 0, 0
		for _, p := range l.Items {
			switch {
			case p.Status.Phase == v1.PodRunning:
				running++
				perZone[zoneOf[p.Spec.NodeName]]++
			case p.Spec.NodeName == "":
				pending++
			}
		}
		out.pending = pending
		return running == 7, fmt.Sprintf("%d running (%v), %d pending", running, perZone, pending), nil
	})
	fullest := ""
	for z, n := range perZone {
		out.perZone = append(out.perZone, n)
		if fullest == "" || n > perZone[fullest] {
			fullest = z
		}
	}
	slices.Sort(out.perZone)

	extra := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "extra", Namespace: "default", Labels: labels}, Spec: spreadPodSpec(v1.DefaultSchedulerName)}
	extra.Spec.TopologySpreadConstraints = spreadConstraint(true)
	extra.Spec.NodeSelector = map[string]string{spreadZoneKey: fullest}
	c.create(t, extra)
	framework.Eventually(t, 30*time.Second, "extra reported unschedulable", func(ctx context.Context) (bool, string, error) {
		p, err := c.client.CoreV1().Pods("default").Get(ctx, "extra", metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		cond := kube.PodCondition(p, v1.PodScheduled)
		if p.Spec.NodeName != "" {
			return false, "", fmt.Errorf("extra was bound to %s", p.Spec.NodeName)
		}
		if cond == nil || cond.Status != v1.ConditionFalse || cond.Reason != v1.PodReasonUnschedulable {
			return false, fmt.Sprintf("condition %+v", cond), nil
		}
		out.msg = cond.Message
		return strings.Contains(cond.Message, "preemption:"), cond.Message, nil
	})
	return out
}

// TestSchedulerSpreadSameAsKubeScheduler: a zone DoNotSchedule maxSkew 1
// Deployment of 7 on 3 zones × 2 nodes gets 2 or 3 pods per zone from
// nodeshepherd's scheduler and from kube-scheduler, and a pod that would
// break the skew stays Pending with the same message from both.
func TestSchedulerSpreadSameAsKubeScheduler(t *testing.T) {
	const wantMsg = "0/6 nodes are available: 2 node(s) didn't match pod topology spread constraints, 4 node(s) didn't match Pod's node affinity/selector." +
		" preemption: 0/6 nodes are available: 2 No preemption victims found for incoming pod, 4 Preemption is not helpful for scheduling."
	var outs [2]spreadOutcome
	for i, upstream := range []bool{true, false} {
		who := map[bool]string{true: "kube-scheduler", false: "nodeshepherd"}[upstream]
		t.Run(who, func(t *testing.T) {
			out := runSpread(t, upstream)
			t.Logf("%s: per zone %v, %d pending, extra: %q", who, out.perZone, out.pending, out.msg)
			if !slices.Equal(out.perZone, []int{2, 2, 3}) || out.pending != 0 {
				t.Errorf("%s: per zone %v with %d pending, want [2 2 3] and none pending", who, out.perZone, out.pending)
			}
			if out.msg != wantMsg {
				t.Errorf("%s: extra's message %q, want %q", who, out.msg, wantMsg)
			}
			outs[i] = out
		})
	}
	if !slices.Equal(outs[0].perZone, outs[1].perZone) || outs[0].pending != outs[1].pending || outs[0].msg != outs[1].msg {
		t.Errorf("outcomes differ: kube-scheduler %+v, nodeshepherd %+v", outs[0], outs[1])
	}
}

// runSpreadPreemption: zone-a's node holds two web pods of priority 10,
// zone-b's node one web pod and a big pod of priority 50 that leave no room.
// A web pod of priority 50 with a zone DoNotSchedule maxSkew 1 constraint
// fits nowhere (skew on node 1, cpu on node 2); preemption must remove one
// web pod from zone-a, which brings the skew back within bounds, and not
// both.
func runSpreadPreemption(t *testing.T, upstream bool) outcome {
	s := situation{name: "spread", nodes: 2, pods: []spec{
		{name: "w1", node: 1, class: "p10", milliCPU: 100, app: "web"}, {name: "w2", node: 1, class: "p10", milliCPU: 100, app: "web"},
		{name: "w3", node: 2, class: "p50", milliCPU: 100, app: "web"}, {name: "big", node: 2, class: "p50", milliCPU: 850}}}
	c := startPreemptionCluster(t, s.nodes, upstream, nil)
	c.setUp(t, s)
	p := spec{name: "hi", class: "p50", milliCPU: 100, app: "web"}.pod(c.nodes, v1.DefaultSchedulerName)
	p.Spec.TopologySpreadConstraints = []v1.TopologySpreadConstraint{{MaxSkew: 1, TopologyKey: spreadZoneKey, WhenUnsatisfiable: v1.DoNotSchedule,
		LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}}}
	c.create(t, p)
	var out outcome
	framework.Eventually(t, 90*time.Second, "hi bound", func(ctx context.Context) (bool, string, error) {
		got, err := c.client.CoreV1().Pods("default").Get(ctx, "hi", metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		out.node = slices.Index(c.nodes, got.Spec.NodeName) + 1
		cond := kube.PodCondition(got, v1.PodScheduled)
		return got.Spec.NodeName != "", fmt.Sprintf("nominated %q, condition %+v", got.Status.NominatedNodeName, cond), nil
	})
	l, err := c.client.CoreV1().Pods("default").List(framework.Context(t), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	alive := map[string]bool{}
	for _, p := range l.Items {
		if p.DeletionTimestamp == nil {
			alive[p.Name] = true
		}
	}
	for _, p := range s.pods {
		if !alive[p.name] {
			out.victims = append(out.victims, p.name)
		}
	}
	return out
}

// TestSchedulerSpreadPreemptionSameAsKubeScheduler: preemption counts the
// victims out of their zone, with kube-scheduler and with nodeshepherd (the
// two web pods of zone-a start together, so which one goes is not compared).
func TestSchedulerSpreadPreemptionSameAsKubeScheduler(t *testing.T) {
	for _, upstream := range []bool{true, false} {
		who := map[bool]string{true: "kube-scheduler", false: "nodeshepherd"}[upstream]
		t.Run(who, func(t *testing.T) {
			out := runSpreadPreemption(t, upstream)
			t.Logf("%s: %s", who, out)
			if out.node != 1 || len(out.victims) != 1 || (out.victims[0] != "w1" && out.victims[0] != "w2") {
				t.Errorf("%s: %s, want node1 and one of w1, w2 as the only victim", who, out)
			}
		})
	}
}

// TestSchedulerSpreadDefaultConstraints: with
// --default-pod-topology-spread=topology.kubernetes.io/zone:1:DoNotSchedule
// a Deployment's pods, which set no constraints, are spread by the selector
// of their ReplicaSet. zone-c's nodes are tainted; nodeTaintsPolicy defaults
// to Ignore, so zone-c still counts as a domain with 0 pods: of 4 replicas
// only one per other zone can run, the others stay Pending with the message.
func TestSchedulerSpreadDefaultConstraints(t *testing.T) {
	c := startPreemptionCluster(t, 6, false, func(s *scheduler.Config) {
		s.DefaultPodTopologySpread = spreadZoneKey + ":1:DoNotSchedule"
	})
	ctx := framework.Context(t)
	nodes, err := c.client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	zoneOf := map[string]string{}
	for _, n := range nodes.Items {
		zoneOf[n.Name] = n.Labels[spreadZoneKey]
		if n.Labels[spreadZoneKey] != "zone-c" {
			continue
		}
		patch := `{"spec":{"taints":[{"key":"dedicated","value":"other","effect":"NoSchedule"}]}}`
		if _, err := c.client.CoreV1().Nodes().Patch(ctx, n.Name, "application/strategic-merge-patch+json", []byte(patch), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	labels := map[string]string{"app": "defaults"}
	spec := spreadPodSpec(v1.DefaultSchedulerName)
	spec.TopologySpreadConstraints = nil
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "defaults", Namespace: "default"},
		Spec: appsv1.DeploymentSpec{Replicas: ptr.To[int32](4), Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: v1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: spec}}}
	if _, err := c.client.AppsV1().Deployments("default").Create(ctx, d, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	const wantMsg = "0/6 nodes are available: 2 node(s) had untolerated taint(s), 4 node(s) didn't match pod topology spread constraints."
	framework.Eventually(t, 60*time.Second, "one replica in zone-a and zone-b, two pending", func(ctx context.Context) (bool, string, error) {
		l, err := c.client.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=defaults"})
		if err != nil {
			return false, "", err
		}
		perZone := map[string]int{}
		var msgs []string
		for _, p := range l.Items {
			if p.Spec.NodeName != "" {
				perZone[zoneOf[p.Spec.NodeName]]++
				continue
			}
			if cond := kube.PodCondition(&p, v1.PodScheduled); cond != nil && cond.Reason == v1.PodReasonUnschedulable && strings.HasPrefix(cond.Message, wantMsg) {
				msgs = append(msgs, cond.Message)
			}
		}
		return perZone["zone-a"] == 1 && perZone["zone-b"] == 1 && perZone["zone-c"] == 0 && len(msgs) == 2,
			fmt.Sprintf("per zone %v, %d pending with the message", perZone, len(msgs)), nil
	})
}
