package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodeshepherd/nodeshepherd/pkg/controller/scheduler"
	"github.com/nodeshepherd/nodeshepherd/pkg/kube"
	"github.com/nodeshepherd/nodeshepherd/test/framework"
)

const keepFinalizer = "test.nodeshepherd.io/keep"

func ours(s spec, nodes []string) *v1.Pod { return s.pod(nodes, scheduler.DefaultSchedulerName) }

func podGet(t *testing.T, c *preemptionCluster, name string) *v1.Pod {
	t.Helper()
	p, err := c.client.CoreV1().Pods("default").Get(framework.Context(t), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func waitRunningOn(t *testing.T, c *preemptionCluster, name, node string) {
	t.Helper()
	framework.Eventually(t, 60*time.Second, name+" running", func(ctx context.Context) (bool, string, error) {
		p, err := c.client.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		return p.Status.Phase == v1.PodRunning && (node == "" || p.Spec.NodeName == node), fmt.Sprintf("%s on %q", p.Status.Phase, p.Spec.NodeName), nil
	})
}

// waitUnschedulable waits for the scheduler's verdict on a pending pod and
// returns its PodScheduled message.
func waitUnschedulable(t *testing.T, c *preemptionCluster, name, contains string) string {
	t.Helper()
	var msg string
	framework.Eventually(t, 30*time.Second, name+" reported unschedulable", func(ctx context.Context) (bool, string, error) {
		p, err := c.client.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		cond := kube.PodCondition(p, v1.PodScheduled)
		if cond == nil {
			return false, "no PodScheduled condition", nil
		}
		msg = cond.Message
		return p.Spec.NodeName == "" && cond.Status == v1.ConditionFalse && cond.Reason == v1.PodReasonUnschedulable && strings.Contains(msg, contains), msg, nil
	})
	return msg
}

// TestSchedulerPreemption: nodeshepherd's scheduler, under its own name,
// preempts the right victim on the right node (DisruptionTarget, Preempted
// event, nomination), keeps the nominated room from a lower-priority pod, and
// the preemptor ends Running there.
func TestSchedulerPreemption(t *testing.T) {
	asServiceAccount(t)
	c := startPreemptionCluster(t, 3, false, func(s *scheduler.Config) { s.SchedulerName = scheduler.DefaultSchedulerName })
	n := c.nodes
	victim := spec{name: "c", node: 2, class: "p10", milliCPU: 400}
	setup := []spec{{name: "a", node: 1, class: "p20", milliCPU: 500}, {name: "b", node: 1, class: "p20", milliCPU: 500},
		{name: "d", node: 2, class: "p20", milliCPU: 400}, {name: "e", node: 3, class: "p20", milliCPU: 500}, {name: "f", node: 3, class: "p20", milliCPU: 500}}
	vp := ours(victim, n)
	vp.Finalizers = []string{keepFinalizer} // keeps the victim visible while it terminates
	c.create(t, vp)
	for _, s := range setup {
		c.create(t, ours(s, n))
	}
	for _, name := range []string{"a", "b", "c", "d", "e", "f"} {
		waitRunningOn(t, c, name, "")
	}

	c.create(t, ours(spec{name: "high", class: "p1000", milliCPU: 500}, n))
	framework.Eventually(t, 30*time.Second, "high nominated to "+n[1], func(ctx context.Context) (bool, string, error) {
		p, err := c.client.CoreV1().Pods("default").Get(ctx, "high", metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		return p.Status.NominatedNodeName == n[1], fmt.Sprintf("nominated %q", p.Status.NominatedNodeName), nil
	})
	framework.Eventually(t, 30*time.Second, "victim c marked and deleted", func(ctx context.Context) (bool, string, error) {
		p, err := c.client.CoreV1().Pods("default").Get(ctx, "c", metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		cond := kube.PodCondition(p, v1.DisruptionTarget)
		return p.DeletionTimestamp != nil && cond != nil && cond.Status == v1.ConditionTrue && cond.Reason == v1.PodReasonPreemptionByScheduler &&
			cond.Message == "nodeshepherd-scheduler: preempting to accommodate a higher priority pod", fmt.Sprintf("%+v", p.Status.Conditions), nil
	})
	high := podGet(t, c, "high")
	_, msgs := framework.WaitEvents(t, c.client, "involvedObject.name=c,reason=Preempted", 1)
	if want := fmt.Sprintf("Preempted by pod %s on node %s", high.UID, n[1]); msgs[0] != want {
		t.Errorf("Preempted event %q, want %q", msgs[0], want)
	}
	for _, name := range []string{"a", "b", "d", "e", "f"} {
		if p := podGet(t, c, name); p.DeletionTimestamp != nil {
			t.Errorf("%s was preempted too", name)
		}
	}

	// The 200m left on node 2 is reserved for the nominated pod: a
	// lower-priority pod that fits nowhere else must not take it.
	c.create(t, ours(spec{name: "mid", class: "p100", never: true, milliCPU: 200}, n))
	waitUnschedulable(t, c, "mid", "0/3 nodes are available: 3 Insufficient cpu.")

	// The victim goes; the preemptor takes its room and runs.
	patch := `{"metadata":{"finalizers":null}}`
	if _, err := c.client.CoreV1().Pods("default").Patch(framework.Context(t), "c", types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	waitRunningOn(t, c, "high", n[1])
	framework.WaitEvents(t, c.client, "involvedObject.name=high,reason=Scheduled", 1)
	if p := podGet(t, c, "mid"); p.Spec.NodeName != "" {
		t.Errorf("mid was bound to %s", p.Spec.NodeName)
	}
	if got := c.ns.Metric(t, "scheduler_preemption_victims", nil); got != 1 {
		t.Errorf("scheduler_preemption_victims observed %v times, want 1", got)
	}
	if got := c.ns.Metric(t, "scheduler_preemption_attempts_total", nil); got < 1 {
		t.Errorf("scheduler_preemption_attempts_total = %v", got)
	}
}

// TestSchedulerPlacementAndBadInput: pods spread by least-allocated, node
// selectors and taints are honoured, pods for other schedulers are left alone,
// and pods that cannot fit anywhere get a clear FailedScheduling without
// stopping the queue.
func TestSchedulerPlacementAndBadInput(t *testing.T) {
	c := startPreemptionCluster(t, 3, false, func(s *scheduler.Config) { s.SchedulerName = scheduler.DefaultSchedulerName })
	n := c.nodes
	ctx := framework.Context(t)
	for i := range 6 {
		c.create(t, ours(spec{name: fmt.Sprintf("w%d", i), class: "p10", milliCPU: 300}, n))
	}
	c.create(t, ours(spec{name: "pinned", class: "p10", milliCPU: 100, onlyNode: 3}, n))
	other := ours(spec{name: "other", class: "p10", milliCPU: 100}, n)
	other.Spec.SchedulerName = "someone-else"
	c.create(t, other)

	perNode := map[string]int{}
	for i := range 6 {
		name := fmt.Sprintf("w%d", i)
		waitRunningOn(t, c, name, "")
		perNode[podGet(t, c, name).Spec.NodeName]++
	}
	for _, node := range n {
		if perNode[node] != 2 {
			t.Errorf("least-allocated should spread 6 equal pods 2 per node, got %v", perNode)
			break
		}
	}
	waitRunningOn(t, c, "pinned", n[2])
	_, msgs := framework.WaitEvents(t, c.client, "involvedObject.name=w0,reason=Scheduled", 1)
	if !strings.HasPrefix(msgs[0], "Successfully assigned default/w0 to ") {
		t.Errorf("Scheduled event %q", msgs[0])
	}

	bad := []struct {
		name, want string
		mut        func(*v1.Pod)
	}{
		{"unknown-resource", "0/3 nodes are available: 3 Insufficient example.com/dongle. preemption: 0/3 nodes are available: 3 Preemption is not helpful for scheduling.",
			func(p *v1.Pod) {
				// Extended resources need equal requests and limits.
				p.Spec.Containers[0].Resources.Requests["example.com/dongle"] = resource.MustParse("1")
				p.Spec.Containers[0].Resources.Limits = v1.ResourceList{"example.com/dongle": resource.MustParse("1")}
			}},
		{"too-big", "0/3 nodes are available: 3 Insufficient cpu. preemption: 0/3 nodes are available: 3 Preemption is not helpful for scheduling.",
			func(p *v1.Pod) { p.Spec.Containers[0].Resources.Requests[v1.ResourceCPU] = resource.MustParse("64") }},
		{"no-such-node", "0/3 nodes are available: 3 node(s) didn't match Pod's node affinity/selector.",
			func(p *v1.Pod) { p.Spec.NodeSelector = map[string]string{"kubernetes.io/hostname": "nowhere"} }},
		{"invalid-affinity", "pod default/invalid-affinity cannot be scheduled: invalid required node affinity: nodeSelectorTerms[0].matchExpressions[0].values[0]: Invalid value: \"many\"",
			func(p *v1.Pod) {
				// The API accepts a Gt value that is not a number; the
				// scheduler must say so rather than crash or match nothing silently.
				p.Spec.Affinity = &v1.Affinity{NodeAffinity: &v1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &v1.NodeSelector{
					NodeSelectorTerms: []v1.NodeSelectorTerm{{MatchExpressions: []v1.NodeSelectorRequirement{{Key: "cores", Operator: v1.NodeSelectorOpGt, Values: []string{"many"}}}}}}}}
			}},
		{"no-matching-label", "0/3 nodes are available: 3 node(s) didn't match Pod's node affinity/selector.",
			func(p *v1.Pod) { p.Spec.NodeSelector = map[string]string{"disk": "ssd"} }},
	}
	for _, b := range bad {
		p := ours(spec{name: b.name, class: "p10", milliCPU: 100}, n)
		b.mut(p)
		c.create(t, p)
	}
	for _, b := range bad {
		msg := waitUnschedulable(t, c, b.name, "")
		if !strings.HasPrefix(msg, b.want) {
			t.Errorf("%s: message %q, want %q", b.name, msg, b.want)
		}
		framework.WaitEvents(t, c.client, "involvedObject.name="+b.name+",reason=FailedScheduling", 1)
	}
	// The queue keeps going after them.
	c.create(t, ours(spec{name: "after", class: "p10", milliCPU: 100}, n))
	waitRunningOn(t, c, "after", "")
	if p, err := c.client.CoreV1().Pods("default").Get(ctx, "other", metav1.GetOptions{}); err != nil || p.Spec.NodeName != "" || len(p.Status.Conditions) > 0 {
		t.Errorf("a pod for another scheduler was touched: %+v %v", p.Status, err)
	}
}
