package integration

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/nodeshepherd/nodeshepherd/pkg/controller/drain"
	"github.com/nodeshepherd/nodeshepherd/pkg/controllers"
	"github.com/nodeshepherd/nodeshepherd/pkg/fakenode"
	"github.com/nodeshepherd/nodeshepherd/pkg/kube"
	"github.com/nodeshepherd/nodeshepherd/pkg/manager"
	"github.com/nodeshepherd/nodeshepherd/test/framework"
)

const drainMinDuration = 3 * time.Second

// drainConfig runs node lifecycle (to lift the not-ready taints), taint
// eviction and drain with compressed timings.
func drainConfig(mut func(*drain.Config)) controllers.Config {
	c := fastLifecycle(100)
	d := &c.Drain
	d.Conditions = []string{"KernelDeadlock=True," + drainMinDuration.String()}
	d.UncordonAfter, d.RetryBackoff, d.DrainTimeout, d.MaxGracePeriod = 2*time.Second, 2*time.Second, 30*time.Second, 5*time.Second
	d.ResyncPeriod = time.Hour // durations must be re-checked by timers, not by resyncs
	d.Budget.MaxConcurrentDrains, d.Budget.MaxCordonedNodes = 0, "100%"
	// No previous leader's write can be in flight in these tests: no hold
	// (TestDrainBudgetLateWriteOfOldLeader tests it).
	d.StartHold = 0
	if mut != nil {
		mut(d)
	}
	return c
}

func setCondition(t *testing.T, m *fakenode.Manager, action fakenode.Action, status v1.ConditionStatus, nodes ...string) {
	t.Helper()
	f := fakenode.Fault{Action: action, Target: fakenode.Target{Nodes: nodes}, Condition: &fakenode.Condition{Type: "KernelDeadlock", Status: status}}
	if _, err := m.Apply(framework.Context(t), f); err != nil {
		t.Fatal(err)
	}
}

func createPDB(t *testing.T, client kubernetes.Interface, app string, minAvailable, maxUnavailable *intstr.IntOrString) {
	t.Helper()
	createPDBSelecting(t, client, app, &metav1.LabelSelector{MatchLabels: map[string]string{"app": app}}, minAvailable, maxUnavailable)
}

// createPDBSelecting creates the PodDisruptionBudget name in default with
// the selector ({} selects every pod of the namespace).
func createPDBSelecting(t *testing.T, client kubernetes.Interface, app string, sel *metav1.LabelSelector, minAvailable, maxUnavailable *intstr.IntOrString) {
	t.Helper()
	pdb := &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Name: app, Namespace: "default"},
		Spec: policyv1.PodDisruptionBudgetSpec{MinAvailable: minAvailable, MaxUnavailable: maxUnavailable, Selector: sel}}
	if _, err := client.PolicyV1().PodDisruptionBudgets("default").Create(framework.Context(t), pdb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The disruption controller must have computed the budget's status, or
	// every eviction is refused.
	framework.Eventually(t, 30*time.Second, "PDB status of "+app, func(ctx context.Context) (bool, string, error) {
		p, err := client.PolicyV1().PodDisruptionBudgets("default").Get(ctx, app, metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		return p.Status.ObservedGeneration == p.Generation && p.Status.ExpectedPods > 0, fmt.Sprintf("%+v", p.Status), nil
	})
}

func createDeployment(t *testing.T, client kubernetes.Interface, d *appsv1.Deployment) {
	t.Helper()
	if _, err := client.AppsV1().Deployments("default").Create(framework.Context(t), d, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func deploymentReady(client kubernetes.Interface, name string, want int32) func(context.Context) (bool, string, error) {
	return func(ctx context.Context) (bool, string, error) {
		d, err := client.AppsV1().Deployments("default").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		return d.Status.ReadyReplicas == want && d.Status.UpdatedReplicas == want, fmt.Sprintf("ready %d", d.Status.ReadyReplicas), nil
	}
}

// podsOn lists the pods of an app (all apps: "") bound to a node.
func podsOn(ctx context.Context, client kubernetes.Interface, node, app string) ([]v1.Pod, error) {
	opts := metav1.ListOptions{FieldSelector: "spec.nodeName=" + node}
	if app != "" {
		opts.LabelSelector = "app=" + app
	}
	l, err := client.CoreV1().Pods("").List(ctx, opts)
	if err != nil {
		return nil, err
	}
	return l.Items, nil
}

func drainCondition(client kubernetes.Interface, node string, status v1.ConditionStatus, marker string) func(context.Context) (bool, string, error) {
	return func(ctx context.Context) (bool, string, error) {
		n, err := client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		c := kube.NodeCondition(n, drain.ConditionDrainScheduled)
		if c == nil {
			return false, "no DrainScheduled condition", nil
		}
		return c.Status == status && strings.Contains(c.Message, marker) && c.Reason == "Draino", fmt.Sprintf("%+v", *c), nil
	}
}

func ownedByDrain(n *v1.Node) bool {
	_, ok := n.Annotations[drain.AnnotationConditions]
	return ok
}

func nodeEvents(node, reason string) string {
	return "involvedObject.kind=Node,involvedObject.name=" + node + ",reason=" + reason
}

// TestDrainCordonDrainUncordon is seed 003's story: KernelDeadlock for the
// minimum duration → cordon → drain through the Eviction API respecting a
// PDB → pods Running elsewhere → the condition clears → uncordon. DaemonSet,
// protected and controller-less pods stay; a human's cordon is left alone.
func TestDrainCordonDrainUncordon(t *testing.T) {
	asServiceAccount(t)
	cfg, client := lifecycleCluster(t)
	nodes := fastNodes(client, 5, false)
	nodes.NodeStatusReportFrequency = time.Hour // quiet Node objects: only timers can notice the duration
	m := framework.StartFakeNodes(t, nodes)
	ns := framework.StartNodeShepherd(t, cfg, drainConfig(nil), nil)
	names := m.NodeNames()
	sick, human := names[0], names[4]
	waitNodesReady(t, client, names...)
	ctx := framework.Context(t)

	// Every pod starts on the sick node: the others are cordoned meanwhile.
	for _, n := range names[1:] {
		framework.SetUnschedulable(t, client, n, true)
	}
	web := deployment("web", 6)
	createDeployment(t, client, web)
	protected := deployment("protected", 1)
	protected.Spec.Template.Annotations = map[string]string{drain.SafeToEvictAnnotation: "false"}
	createDeployment(t, client, protected)
	ds := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: "agent", Namespace: "default"}, Spec: appsv1.DaemonSetSpec{
		Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "agent"}},
		Template: v1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "agent"}},
			Spec: v1.PodSpec{Containers: []v1.Container{{Name: "a", Image: "registry.k8s.io/pause:3.10"}}}}}}
	if _, err := client.AppsV1().DaemonSets("default").Create(ctx, ds, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	createPod(t, client, "bare", sick, nil)
	framework.Eventually(t, 60*time.Second, "web and protected ready on "+sick, func(ctx context.Context) (bool, string, error) {
		ok1, msg1, err := deploymentReady(client, "web", 6)(ctx)
		ok2, msg2, _ := deploymentReady(client, "protected", 1)(ctx)
		agents, _ := podsOn(ctx, client, sick, "agent")
		return ok1 && ok2 && len(agents) == 1, msg1 + " " + msg2, err
	})
	createPDB(t, client, "web", ptr.To(intstr.FromInt32(5)), nil)
	for _, n := range names[1:4] {
		framework.SetUnschedulable(t, client, n, false)
	}

	setCondition(t, m, fakenode.SetCondition, v1.ConditionTrue, sick, human)
	var cordonedAt time.Time
	framework.Eventually(t, 30*time.Second, sick+" cordoned by the drain controller", func(ctx context.Context) (bool, string, error) {
		n, err := client.CoreV1().Nodes().Get(ctx, sick, metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		cordonedAt = time.Now()
		return n.Spec.Unschedulable && ownedByDrain(n), fmt.Sprintf("unschedulable=%v annotations=%v", n.Spec.Unschedulable, n.Annotations), nil
	})
	n := getNode(t, client, sick)
	if since := cordonedAt.Sub(kube.NodeCondition(n, "KernelDeadlock").LastTransitionTime.Time); since < drainMinDuration {
		t.Errorf("cordoned %v after the condition began; the minimum duration is %v", since, drainMinDuration)
	}
	if got := n.Annotations[drain.AnnotationConditions]; got != "KernelDeadlock=True,3s" {
		t.Errorf("ownership annotation %q", got)
	}
	framework.Eventually(t, 60*time.Second, "drain of "+sick+" completed", drainCondition(client, sick, v1.ConditionFalse, "| Completed: "))
	framework.Eventually(t, 60*time.Second, "web Running elsewhere", func(ctx context.Context) (bool, string, error) {
		left, err := podsOn(ctx, client, sick, "web")
		ok, msg, _ := deploymentReady(client, "web", 6)(ctx)
		return ok && len(left) == 0 && err == nil, fmt.Sprintf("%s, %d web pods on %s", msg, len(left), sick), err
	})
	for _, app := range []string{"agent", "protected"} {
		if pods, _ := podsOn(ctx, client, sick, app); len(pods) != 1 || pods[0].DeletionTimestamp != nil {
			t.Errorf("%s pod should stay on %s: %d pods", app, sick, len(pods))
		}
	}
	if _, err := client.CoreV1().Pods("default").Get(ctx, "bare", metav1.GetOptions{}); err != nil {
		t.Errorf("the pod without a controller should stay: %v", err)
	}
	// minAvailable=5 of 6: evictions were refused (429) while a replacement was not Ready.
	if blocked := ns.Metric(t, "nodeshepherd_drain_evictions_blocked_by_pdb_total", nil); blocked == 0 {
		t.Errorf("no eviction was refused by the PDB; the PDB was not exercised")
	}
	if got := ns.Metric(t, "nodeshepherd_drain_evictions_total", map[string]string{"result": "evicted"}); got != 6 {
		t.Errorf("%v evictions accepted, want 6 (one per web pod)", got)
	}
	for _, reason := range []string{drain.EventCordonStarting, drain.EventCordonSucceeded, drain.EventDrainScheduled, drain.EventDrainStarting, drain.EventDrainSucceeded} {
		framework.WaitEvents(t, client, nodeEvents(sick, reason), 1)
	}
	for _, metric := range []string{"draino_cordoned_nodes_total", "draino_drain_scheduled_nodes_total", "draino_drained_nodes_total"} {
		if got := ns.Metric(t, metric, map[string]string{"result": "succeeded"}); got != 1 {
			t.Errorf("%s{result=succeeded} = %v, want 1", metric, got)
		}
	}
	// The human's node: cordoned by hand, it is neither annotated nor drained.
	if h := getNode(t, client, human); ownedByDrain(h) || kube.NodeCondition(h, drain.ConditionDrainScheduled) != nil {
		t.Errorf("human-cordoned %s was taken over: %v", human, h.Annotations)
	}

	setCondition(t, m, fakenode.ClearCondition, "", sick, human)
	framework.Eventually(t, 30*time.Second, sick+" uncordoned", func(ctx context.Context) (bool, string, error) {
		n, err := client.CoreV1().Nodes().Get(ctx, sick, metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		return !n.Spec.Unschedulable && !ownedByDrain(n) && kube.NodeCondition(n, drain.ConditionDrainScheduled) == nil,
			fmt.Sprintf("unschedulable=%v annotations=%v", n.Spec.Unschedulable, n.Annotations), nil
	})
	framework.WaitEvents(t, client, nodeEvents(sick, drain.EventUncordonSucceeded), 1)
	if !getNode(t, client, human).Spec.Unschedulable {
		t.Errorf("the drain controller uncordoned %s, which a human cordoned", human)
	}
	if got := ns.Metric(t, "draino_uncordoned_nodes_total", map[string]string{"result": "succeeded"}); got != 1 {
		t.Errorf("draino_uncordoned_nodes_total = %v, want 1", got)
	}
}

// TestDrainMaxConcurrentDrains: ten sick nodes, at most two drains at once,
// all drained in the end.
func TestDrainMaxConcurrentDrains(t *testing.T) {
	cfg, client := lifecycleCluster(t)
	m := framework.StartFakeNodes(t, fastNodes(client, 14, false))
	names := m.NodeNames()
	ns := framework.StartNodeShepherd(t, cfg, drainConfig(func(d *drain.Config) { d.Budget.MaxConcurrentDrains = 2 }), nil)
	waitNodesReady(t, client, names...)
	createDeployment(t, client, deployment("web", 40))
	framework.Eventually(t, 60*time.Second, "web ready", deploymentReady(client, "web", 40))
	createPDB(t, client, "web", nil, ptr.To(intstr.FromInt32(3)))

	sick := names[:10]
	setCondition(t, m, fakenode.SetCondition, v1.ConditionTrue, sick...)
	var most atomic.Int32
	framework.Eventually(t, 3*time.Minute, "ten drains completed, two at a time", func(ctx context.Context) (bool, string, error) {
		// One List is one consistent snapshot; Gets one by one could see a
		// drain that ended and the next one that started as both in flight.
		list, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, "", err
		}
		inFlight, done := 0, 0
		for i := range list.Items {
			if c := kube.NodeCondition(&list.Items[i], drain.ConditionDrainScheduled); c != nil {
				if c.Status == v1.ConditionTrue {
					inFlight++
				} else if strings.Contains(c.Message, "Completed") {
					done++
				}
			}
		}
		if int32(inFlight) > most.Load() {
			most.Store(int32(inFlight))
		}
		if inFlight > 2 {
			return false, "", fmt.Errorf("%d drains in flight with --max-concurrent-drains=2", inFlight)
		}
		return done == len(sick), fmt.Sprintf("%d in flight, %d done", inFlight, done), nil
	})
	if most.Load() == 0 {
		t.Errorf("never saw a drain in flight")
	}
	if got := ns.Metric(t, "nodeshepherd_drain_nodes_waiting", nil); got != 0 {
		t.Errorf("%v nodes still waiting", got)
	}
	_, msgs := framework.WaitEvents(t, client, "reason="+drain.EventDrainWaiting, 1)
	if !strings.Contains(strings.Join(msgs, "\n"), "--max-concurrent-drains=2") {
		t.Errorf("DrainWaiting events do not name the budget: %q", msgs)
	}
	framework.Eventually(t, 60*time.Second, "web ready", deploymentReady(client, "web", 40))
}

// TestDrainCircuitBreaker: with 60 % of the nodes NotReady nothing is
// cordoned (nodes wait on the breaker); once they recover, work resumes.
func TestDrainCircuitBreaker(t *testing.T) {
	cfg, client := lifecycleCluster(t)
	m := framework.StartFakeNodes(t, fastNodes(client, 10, false))
	names := m.NodeNames()
	ns := framework.StartNodeShepherd(t, cfg, drainConfig(func(d *drain.Config) {
		// Long enough for all six partitioned nodes to be Unknown before the
		// first matches: they fail together, as in a real outage.
		d.Conditions = append(d.Conditions, "Ready=Unknown,5s")
	}), nil)
	waitNodesReady(t, client, names...)

	partition(t, m, fakenode.Partition, fakenode.Target{Nodes: names[:6]})
	for _, n := range names[:6] {
		framework.Eventually(t, 60*time.Second, n+" Unknown", nodeCondition(client, n, v1.NodeReady, v1.ConditionUnknown))
	}
	setCondition(t, m, fakenode.SetCondition, v1.ConditionTrue, names[8])
	// Seven nodes match (six Ready=Unknown, one KernelDeadlock); each waits on the breaker.
	framework.Eventually(t, 30*time.Second, "nodes waiting on the circuit breaker", func(ctx context.Context) (bool, string, error) {
		w := ns.Metric(t, "nodeshepherd_drain_nodes_waiting", map[string]string{"action": "cordon", "budget": "circuit-breaker"})
		return w == 7, fmt.Sprintf("%v waiting", w), nil
	})
	if ns.Metric(t, "nodeshepherd_drain_circuit_breaker_open", nil) != 1 {
		t.Errorf("breaker gauge not set")
	}
	for _, n := range names {
		if node := getNode(t, client, n); ownedByDrain(node) {
			t.Errorf("%s was cordoned with 60%% of the nodes NotReady", n)
		}
	}
	_, msgs := framework.WaitEvents(t, client, nodeEvents(names[8], drain.EventCordonWaiting), 1)
	if !strings.Contains(msgs[0], "circuit breaker") {
		t.Errorf("CordonWaiting says %q", msgs[0])
	}
	partition(t, m, fakenode.Heal, fakenode.Target{Nodes: names[:6]})
	framework.Eventually(t, 60*time.Second, names[8]+" cordoned once the cluster recovered", func(ctx context.Context) (bool, string, error) {
		n, err := client.CoreV1().Nodes().Get(ctx, names[8], metav1.GetOptions{})
		return err == nil && ownedByDrain(n), "", err
	})
}

// TestDrainBlockedByPDBFailsAndRetries: a PDB that never allows an
// eviction ends the drain in DrainFailed after the timeout; it is retried
// with backoff, and succeeds once the PDB allows it. The PDB selects with
// {}, which in policy/v1 is every pod of its namespace: it is named as the
// blocker of every pod of the node (issue 32, point 5). The retries that
// fail the same way are not said again: one DrainScheduled, DrainStarting
// and DrainFailed for them all (issue 32, point 4).
func TestDrainBlockedByPDBFailsAndRetries(t *testing.T) {
	cfg, client := lifecycleCluster(t)
	m := framework.StartFakeNodes(t, fastNodes(client, 3, false))
	names := m.NodeNames()
	ns := framework.StartNodeShepherd(t, cfg, drainConfig(func(d *drain.Config) { d.DrainTimeout = 4 * time.Second }), nil)
	waitNodesReady(t, client, names...)
	createDeployment(t, client, deployment("web", 6))
	framework.Eventually(t, 60*time.Second, "web ready", deploymentReady(client, "web", 6))
	createPDBSelecting(t, client, "everything", &metav1.LabelSelector{}, nil, ptr.To(intstr.FromInt32(0)))

	sick := names[0]
	onSick, _ := podsOn(framework.Context(t), client, sick, "web")
	if len(onSick) == 0 {
		t.Fatalf("no web pod on %s", sick)
	}
	setCondition(t, m, fakenode.SetCondition, v1.ConditionTrue, sick)
	framework.Eventually(t, 30*time.Second, "drain failed", drainCondition(client, sick, v1.ConditionFalse, "| Failed: "))
	_, msgs := framework.WaitEvents(t, client, nodeEvents(sick, drain.EventDrainFailed), 1)
	if !strings.Contains(msgs[0], "(PodDisruptionBudget everything refuses: 0 disruptions allowed") || !strings.Contains(msgs[0], "retrying at") {
		t.Errorf("DrainFailed message should name the PDB with the empty selector and the retry: %q", msgs[0])
	}
	for _, p := range onSick {
		if !strings.Contains(msgs[0], "default/"+p.Name) {
			t.Errorf("DrainFailed does not name the blocking pod %s: %q", p.Name, msgs[0])
		}
	}
	framework.Eventually(t, 30*time.Second, "a retry that fails again", func(ctx context.Context) (bool, string, error) {
		n, err := client.CoreV1().Nodes().Get(ctx, sick, metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		return n.Annotations[drain.AnnotationAttempts] == "2", "attempts " + n.Annotations[drain.AnnotationAttempts], nil
	})
	if ns.Metric(t, "nodeshepherd_drain_evictions_blocked_by_pdb_total", nil) == 0 {
		t.Errorf("no 429 counted")
	}
	// Allow one disruption at a time: the next retry drains the node.
	if err := client.PolicyV1().PodDisruptionBudgets("default").Delete(framework.Context(t), "everything", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	createPDBSelecting(t, client, "everything", &metav1.LabelSelector{}, nil, ptr.To(intstr.FromInt32(1)))
	framework.Eventually(t, 60*time.Second, "drain completed on retry", drainCondition(client, sick, v1.ConditionFalse, "| Completed: "))
	if got := ns.Metric(t, "draino_drained_nodes_total", map[string]string{"result": "failed"}); got < 2 {
		t.Errorf("draino_drained_nodes_total{result=failed} = %v, want >= 2", got)
	}
	// By now every event of the failed attempts has long been sent.
	framework.WaitEvents(t, client, nodeEvents(sick, drain.EventDrainSucceeded), 1)
	for _, reason := range []string{drain.EventDrainScheduled, drain.EventDrainStarting, drain.EventDrainFailed} {
		if got, msgs := eventCount(t, client, sick, reason, 1); got != 1 {
			t.Errorf("%d %s events over %v failed attempts, want one (nothing changed between them): %q", got, reason,
				ns.Metric(t, "draino_drained_nodes_total", map[string]string{"result": "failed"}), msgs)
		}
	}
}

// TestDrainResumesAfterRestart: a drain in flight when nodeshepherd stops
// is resumed by the next process, with its original schedule and without
// evicting any pod twice.
func TestDrainResumesAfterRestart(t *testing.T) {
	cfg, client := lifecycleCluster(t)
	m := framework.StartFakeNodes(t, fastNodes(client, 3, false))
	names := m.NodeNames()
	conf := drainConfig(func(d *drain.Config) { d.DrainTimeout = 5 * time.Minute })
	first := framework.StartNodeShepherd(t, cfg, conf, nil)
	waitNodesReady(t, client, names...)
	sick := names[0]
	createDeployment(t, client, deployment("web", 4))
	framework.Eventually(t, 60*time.Second, "web ready", deploymentReady(client, "web", 4))
	createPDB(t, client, "web", nil, ptr.To(intstr.FromInt32(0)))

	setCondition(t, m, fakenode.SetCondition, v1.ConditionTrue, sick)
	framework.Eventually(t, 30*time.Second, "drain in flight", drainCondition(client, sick, v1.ConditionTrue, "scheduled"))
	framework.Eventually(t, 30*time.Second, "evictions refused", func(ctx context.Context) (bool, string, error) {
		return first.Metric(t, "nodeshepherd_drain_evictions_blocked_by_pdb_total", nil) > 0, "", nil
	})
	before := kube.NodeCondition(getNode(t, client, sick), drain.ConditionDrainScheduled).Message
	first.Stop()
	if c := kube.NodeCondition(getNode(t, client, sick), drain.ConditionDrainScheduled); c.Status != v1.ConditionTrue {
		t.Fatalf("stopping wrote the drain's end: %+v", c)
	}
	onSick, _ := podsOn(framework.Context(t), client, sick, "web")
	if err := client.PolicyV1().PodDisruptionBudgets("default").Delete(framework.Context(t), "web", metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	createPDB(t, client, "web", nil, ptr.To(intstr.FromInt32(1)))

	second := framework.StartNodeShepherd(t, cfg, conf, func(o *manager.Options) {})
	framework.Eventually(t, 60*time.Second, "resumed drain completed", drainCondition(client, sick, v1.ConditionFalse, "| Completed: "))
	after := kube.NodeCondition(getNode(t, client, sick), drain.ConditionDrainScheduled).Message
	if !strings.HasPrefix(after, before) {
		t.Errorf("the drain was scheduled anew (%q) instead of resumed (%q)", after, before)
	}
	if got := second.Metric(t, "nodeshepherd_drain_evictions_total", map[string]string{"result": "evicted"}); int(got) != len(onSick) {
		t.Errorf("%v evictions accepted for %d pods: some pod was evicted twice or not at all", got, len(onSick))
	}
	if got := second.Metric(t, "draino_drain_scheduled_nodes_total", map[string]string{"result": "succeeded"}); got != 0 {
		t.Errorf("the second process scheduled %v drains; it should only resume", got)
	}
}

// TestDrainDryRun: events and metrics say what would happen; nothing is written.
func TestDrainDryRun(t *testing.T) {
	cfg, client := lifecycleCluster(t)
	m := framework.StartFakeNodes(t, fastNodes(client, 3, false))
	names := m.NodeNames()
	// Node lifecycle runs for real (it lifts the not-ready taints); drain in dry run.
	framework.StartNodeShepherd(t, cfg, drainConfig(nil), func(o *manager.Options) { o.Controllers = []string{"nodelifecycle"} })
	ns := framework.StartNodeShepherd(t, cfg, drainConfig(nil), func(o *manager.Options) {
		o.DryRun, o.Controllers = true, []string{drain.Name}
	})
	waitNodesReady(t, client, names...)
	createDeployment(t, client, deployment("web", 3))
	framework.Eventually(t, 60*time.Second, "web ready", deploymentReady(client, "web", 3))
	setCondition(t, m, fakenode.SetCondition, v1.ConditionTrue, names...)
	framework.Eventually(t, 30*time.Second, "dry-run cordons and evictions reported", func(ctx context.Context) (bool, string, error) {
		cordons := ns.Metric(t, "nodeshepherd_dry_run_actions_total", map[string]string{"controller": "drain", "action": "cordon"})
		evicts := ns.Metric(t, "nodeshepherd_dry_run_actions_total", map[string]string{"controller": "drain", "action": "evict"})
		return cordons == 3 && evicts == 3, fmt.Sprintf("%v cordons, %v evictions", cordons, evicts), nil
	})
	for _, n := range names {
		if node := getNode(t, client, n); node.Spec.Unschedulable || ownedByDrain(node) || kube.NodeCondition(node, drain.ConditionDrainScheduled) != nil {
			t.Errorf("dry run wrote to %s", n)
		}
	}
	framework.Eventually(t, time.Minute, "web untouched", deploymentReady(client, "web", 3))
	if got := ns.Metric(t, "nodeshepherd_drain_evictions_total", nil); got != 0 {
		t.Errorf("%v eviction requests in dry run", got)
	}
}

// TestDrainCordonLiftedWhenItsRuleIsRemoved (issue 32, point 3): a cordon
// whose owner no longer wants it is lifted, not left behind: nodeshepherd
// restarted with a configuration without the rule that cordoned the node
// uncordons it at once (not after --uncordon-after), with an event saying
// which rule it was, although the condition still holds.
func TestDrainCordonLiftedWhenItsRuleIsRemoved(t *testing.T) {
	cfg, client := lifecycleCluster(t)
	m := framework.StartFakeNodes(t, fastNodes(client, 2, false))
	names := m.NodeNames()
	sick := names[0]
	before := framework.StartNodeShepherd(t, cfg, drainConfig(func(d *drain.Config) { d.UncordonAfter = time.Hour }), nil)
	waitNodesReady(t, client, names...)
	setCondition(t, m, fakenode.SetCondition, v1.ConditionTrue, sick)
	framework.Eventually(t, 60*time.Second, "drain completed", drainCondition(client, sick, v1.ConditionFalse, "| Completed: "))
	before.Stop()

	framework.StartNodeShepherd(t, cfg, drainConfig(func(d *drain.Config) {
		d.Conditions, d.UncordonAfter = []string{"DiskPressure=True"}, time.Hour
	}), nil)
	framework.Eventually(t, 60*time.Second, sick+" uncordoned", func(ctx context.Context) (bool, string, error) {
		n, err := client.CoreV1().Nodes().Get(ctx, sick, metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		return !n.Spec.Unschedulable && !ownedByDrain(n), fmt.Sprintf("unschedulable %v, owned %v", n.Spec.Unschedulable, ownedByDrain(n)), nil
	})
	_, msgs := framework.WaitEvents(t, client, nodeEvents(sick, drain.EventUncordonStarting), 1)
	if want := "Uncordoning node: the drain rules that cordoned it (KernelDeadlock=True,3s) are no longer configured"; msgs[0] != want {
		t.Errorf("UncordonStarting says %q, want %q", msgs[0], want)
	}
}
