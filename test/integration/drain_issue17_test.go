package integration

import (
	"context"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/nodeshepherd/nodeshepherd/pkg/controller/drain"
	"github.com/nodeshepherd/nodeshepherd/pkg/controller/drain/rules"
	"github.com/nodeshepherd/nodeshepherd/pkg/fakenode"
	"github.com/nodeshepherd/nodeshepherd/pkg/kube"
	"github.com/nodeshepherd/nodeshepherd/pkg/manager"
	"github.com/nodeshepherd/nodeshepherd/test/framework"
)

// evictionLog records when the controller's client sends each eviction
// request, by pod name: the exact times, not the API's one-second stamps.
type evictionLog struct {
	mu   sync.Mutex
	sent map[string][]time.Time
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// recording returns cfg with a transport that logs eviction requests.
func (l *evictionLog) recording(cfg *rest.Config) *rest.Config {
	c := rest.CopyConfig(cfg)
	l.sent = map[string][]time.Time{}
	c.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(r *http.Request) (*http.Response, error) {
			if r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/eviction") {
				parts := strings.Split(r.URL.Path, "/")
				l.mu.Lock()
				l.sent[parts[len(parts)-2]] = append(l.sent[parts[len(parts)-2]], time.Now())
				l.mu.Unlock()
			}
			return rt.RoundTrip(r)
		})
	}
	return c
}

func (l *evictionLog) first(pod string) time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.sent[pod]) == 0 {
		return time.Time{}
	}
	return l.sent[pod][0]
}

// eventCount counts the node's events of reason, summing their counts,
// once at least want have arrived (or after a minute): events are sent
// asynchronously, after the write they report, so a count read at once may
// miss one. want 0 counts at once.
func eventCount(t *testing.T, client kubernetes.Interface, node, reason string, want int32) (int32, []string) {
	t.Helper()
	var n int32
	var msgs []string
	err := wait.PollUntilContextTimeout(framework.Context(t), 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		evs, err := client.CoreV1().Events(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{FieldSelector: nodeEvents(node, reason)})
		if err != nil {
			return false, err
		}
		n, msgs = 0, nil
		for _, e := range evs.Items {
			n += max(e.Count, 1)
			msgs = append(msgs, e.Message)
		}
		return n >= want, nil
	})
	if err != nil && !wait.Interrupted(err) {
		t.Fatal(err)
	}
	return n, msgs
}

// scheduledAt reads the drain's start from the DrainScheduled message.
func scheduledAt(t *testing.T, n *v1.Node) time.Time {
	t.Helper()
	c := kube.NodeCondition(n, drain.ConditionDrainScheduled)
	if c == nil {
		t.Fatalf("%s has no DrainScheduled condition", n.Name)
	}
	ts, _, _ := strings.Cut(strings.TrimPrefix(c.Message, "Drain activity scheduled "), " ")
	at, err := time.Parse(time.RFC3339Nano, ts)
	if err != nil || !strings.Contains(ts, ".") {
		t.Fatalf("%s: DrainScheduled message %q has no sub-second timestamp: %v", n.Name, c.Message, err)
	}
	return at
}

// pinDeployment creates a Deployment whose pods all land on node: the other
// nodes are cordoned meanwhile, as a human would.
func pinDeployment(t *testing.T, client kubernetes.Interface, others []string, d *appsv1.Deployment) {
	t.Helper()
	for _, n := range others {
		framework.SetUnschedulable(t, client, n, true)
	}
	createDeployment(t, client, d)
	framework.Eventually(t, 60*time.Second, d.Name+" ready", deploymentReady(client, d.Name, *d.Spec.Replicas))
	for _, n := range others {
		framework.SetUnschedulable(t, client, n, false)
	}
}

func replacePDB(t *testing.T, client kubernetes.Interface, app string, maxUnavailable int32) {
	t.Helper()
	if err := client.PolicyV1().PodDisruptionBudgets("default").Delete(framework.Context(t), app, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	createPDB(t, client, app, nil, ptr.To(intstr.FromInt32(maxUnavailable)))
}

// TestDrainDaemonSetPodEvictedOnce (issue 17, point 1): with
// --evict-daemonset-pods the real DaemonSet controller recreates its pod on
// the cordoned node; the drain evicts the DaemonSet's pod once, leaves the
// recreated one alone and completes, while a pod of another owner that
// appears mid-drain is still evicted.
func TestDrainDaemonSetPodEvictedOnce(t *testing.T) {
	cfg, client := lifecycleCluster(t)
	m := framework.StartFakeNodes(t, fastNodes(client, 3, false))
	names := m.NodeNames()
	sick := names[0]
	ns := framework.StartNodeShepherd(t, cfg, drainConfig(func(d *drain.Config) {
		d.EvictDaemonSetPods, d.EvictUnreplicatedPods, d.DrainTimeout = true, true, time.Minute
	}), nil)
	waitNodesReady(t, client, names...)
	ctx := framework.Context(t)
	pinDeployment(t, client, names[1:], deployment("web", 2))
	ds := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: "agent", Namespace: "default"}, Spec: appsv1.DaemonSetSpec{
		Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "agent"}},
		Template: v1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "agent"}},
			Spec: v1.PodSpec{Containers: []v1.Container{{Name: "a", Image: "registry.k8s.io/pause:3.10"}}}}}}
	if _, err := client.AppsV1().DaemonSets("default").Create(ctx, ds, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var original types.UID
	framework.Eventually(t, 60*time.Second, "agent Running on "+sick, func(ctx context.Context) (bool, string, error) {
		pods, err := podsOn(ctx, client, sick, "agent")
		if err != nil || len(pods) != 1 || pods[0].Status.Phase != v1.PodRunning {
			return false, fmt.Sprintf("%d agent pods", len(pods)), err
		}
		original = pods[0].UID
		return true, "", nil
	})
	// The web pods cannot leave until the budget is relaxed: the drain stays open.
	createPDB(t, client, "web", nil, ptr.To(intstr.FromInt32(0)))

	setCondition(t, m, fakenode.SetCondition, v1.ConditionTrue, sick)
	framework.Eventually(t, 30*time.Second, "drain in flight", drainCondition(client, sick, v1.ConditionTrue, "scheduled"))
	var replacement types.UID
	framework.Eventually(t, 30*time.Second, "the DaemonSet recreated its pod on "+sick, func(ctx context.Context) (bool, string, error) {
		pods, err := podsOn(ctx, client, sick, "agent")
		for _, p := range pods {
			if p.UID != original && p.Status.Phase == v1.PodRunning && p.DeletionTimestamp == nil {
				replacement = p.UID
				return true, "", nil
			}
		}
		return false, fmt.Sprintf("%d agent pods", len(pods)), err
	})
	// A pod of another owner (here none) that appears during the drain is evicted.
	createPod(t, client, "late", sick, nil)
	framework.Eventually(t, 30*time.Second, "the late pod evicted", func(ctx context.Context) (bool, string, error) {
		_, err := client.CoreV1().Pods("default").Get(ctx, "late", metav1.GetOptions{})
		return apierrors.IsNotFound(err), fmt.Sprint(err), nil
	})
	replacePDB(t, client, "web", 1)
	framework.Eventually(t, 60*time.Second, "drain completed", drainCondition(client, sick, v1.ConditionFalse, "| Completed: "))

	pods, err := podsOn(ctx, client, sick, "agent")
	if err != nil || len(pods) != 1 || pods[0].UID != replacement || pods[0].DeletionTimestamp != nil {
		var seen []string
		for _, p := range pods {
			seen = append(seen, fmt.Sprintf("%s uid=%s deleting=%v", p.Name, p.UID, p.DeletionTimestamp != nil))
		}
		t.Errorf("the recreated agent pod %s should be left running on %s: %v %v", replacement, sick, err, seen)
	}
	// One eviction each: the agent, the late pod, two web pods.
	if got := ns.Metric(t, "nodeshepherd_drain_evictions_total", map[string]string{"result": "evicted"}); got != 4 {
		t.Errorf("%v evictions accepted, want 4: the DaemonSet's pod must be evicted once per drain", got)
	}
	if n, _ := eventCount(t, client, sick, drain.EventDrainFailed, 0); n != 0 {
		t.Errorf("%d DrainFailed events", n)
	}
}

// TestDrainBufferExactAndEventsOnce (issue 17, points 2 and 4): three nodes
// match at once with --drain-buffer=4s; the first eviction requests of
// consecutive drains, timed at the controller's client, are at least 4s
// apart (the schedule keeps sub-second precision); each node gets each
// event once, DrainWaiting included, however often it is re-checked.
func TestDrainBufferExactAndEventsOnce(t *testing.T) {
	const buffer = 4 * time.Second
	cfg, client := lifecycleCluster(t)
	m := framework.StartFakeNodes(t, fastNodes(client, 4, false))
	names := m.NodeNames()
	sick := names[:3]
	var log evictionLog
	framework.StartNodeShepherd(t, log.recording(cfg), drainConfig(func(d *drain.Config) {
		d.Budget.DrainBuffer, d.EvictUnreplicatedPods = buffer, true
	}), nil)
	waitNodesReady(t, client, names...)
	for _, n := range sick {
		createPod(t, client, "p-"+n, n, nil)
	}
	framework.Eventually(t, 30*time.Second, "pods Running", func(ctx context.Context) (bool, string, error) {
		for _, n := range sick {
			p, err := client.CoreV1().Pods("default").Get(ctx, "p-"+n, metav1.GetOptions{})
			if err != nil || p.Status.Phase != v1.PodRunning {
				return false, "p-" + n + " not Running", nil
			}
		}
		return true, "", nil
	})

	setCondition(t, m, fakenode.SetCondition, v1.ConditionTrue, sick...)
	for _, n := range sick {
		framework.Eventually(t, 60*time.Second, "drain of "+n+" completed", drainCondition(client, n, v1.ConditionFalse, "| Completed: "))
	}
	var firsts, starts []time.Time
	for _, n := range sick {
		at := log.first("p-" + n)
		if at.IsZero() {
			t.Fatalf("no eviction request for p-%s", n)
		}
		firsts = append(firsts, at)
		starts = append(starts, scheduledAt(t, getNode(t, client, n)))
	}
	sort.Slice(firsts, func(i, j int) bool { return firsts[i].Before(firsts[j]) })
	sort.Slice(starts, func(i, j int) bool { return starts[i].Before(starts[j]) })
	for i := 1; i < len(firsts); i++ {
		gap, scheduled := firsts[i].Sub(firsts[i-1]), starts[i].Sub(starts[i-1])
		t.Logf("drain %d: first eviction %v after the previous one's; scheduled %v after", i+1, gap, scheduled)
		if gap < buffer || scheduled < buffer {
			t.Errorf("drain %d began %v (scheduled %v) after the previous one, less than --drain-buffer=%v", i+1, gap, scheduled, buffer)
		}
	}

	waits := int32(0)
	for _, n := range sick {
		for _, reason := range []string{drain.EventCordonStarting, drain.EventCordonSucceeded, drain.EventDrainScheduled,
			drain.EventDrainStarting, drain.EventDrainSucceeded} {
			framework.WaitEvents(t, client, nodeEvents(n, reason), 1)
			if got, msgs := eventCount(t, client, n, reason, 1); got != 1 {
				t.Errorf("%s: %d %s events, want one: %q", n, got, reason, msgs)
			}
		}
		got, msgs := eventCount(t, client, n, drain.EventDrainWaiting, 0)
		if got > 1 {
			t.Errorf("%s: %d DrainWaiting events, want one per change of decision: %q", n, got, msgs)
		}
		for _, msg := range msgs {
			if !strings.Contains(msg, "--drain-buffer=4s") || strings.Contains(msg, " ago") {
				t.Errorf("%s: DrainWaiting %q should name the buffer without a changing age", n, msg)
			}
		}
		waits += got
	}
	if waits != 2 {
		t.Errorf("%d DrainWaiting events in all; the second and third node should each get one", waits)
	}
}

// TestDrainBufferSurvivesLeaderChange (issue 32, point 6): the drain buffer
// counts from the previous drain's first eviction also in a process that
// did not make it (a restart, a new leader): that time is on the node
// (nodeshepherd.io/drain-started), not only in the memory of the process
// that drained. The schedule of the previous drain, a little earlier than
// its first eviction, is not enough.
func TestDrainBufferSurvivesLeaderChange(t *testing.T) {
	const buffer = 15 * time.Second
	cfg, client := lifecycleCluster(t)
	m := framework.StartFakeNodes(t, fastNodes(client, 3, false))
	names := m.NodeNames()
	first, second := names[0], names[1]
	var log evictionLog
	recorded := log.recording(cfg)
	conf := drainConfig(func(d *drain.Config) { d.Budget.DrainBuffer, d.EvictUnreplicatedPods = buffer, true })
	before := framework.StartNodeShepherd(t, recorded, conf, nil)
	waitNodesReady(t, client, names...)
	for _, n := range []string{first, second} {
		createPod(t, client, "p-"+n, n, nil)
	}
	framework.Eventually(t, 30*time.Second, "pods Running", func(ctx context.Context) (bool, string, error) {
		for _, n := range []string{first, second} {
			p, err := client.CoreV1().Pods("default").Get(ctx, "p-"+n, metav1.GetOptions{})
			if err != nil || p.Status.Phase != v1.PodRunning {
				return false, "p-" + n + " not Running", nil
			}
		}
		return true, "", nil
	})

	setCondition(t, m, fakenode.SetCondition, v1.ConditionTrue, first)
	framework.Eventually(t, 60*time.Second, "drain of "+first+" completed", drainCondition(client, first, v1.ConditionFalse, "| Completed: "))
	before.Stop()
	v := getNode(t, client, first).Annotations[drain.AnnotationDrainStarted]
	started, err := time.Parse(time.RFC3339Nano, v)
	if err != nil || !strings.Contains(v, ".") {
		t.Fatalf("%s = %q, want a time with sub-second precision: %v", drain.AnnotationDrainStarted, v, err)
	}
	if sent := log.first("p-" + first); sent.IsZero() || started.Before(sent) {
		t.Errorf("%s = %v is before the first eviction request (%v): a buffer counted from it would be short", drain.AnnotationDrainStarted, started, sent)
	}

	setCondition(t, m, fakenode.SetCondition, v1.ConditionTrue, second)
	framework.StartNodeShepherd(t, recorded, conf, nil)
	framework.Eventually(t, 2*buffer+30*time.Second, "drain of "+second+" completed", drainCondition(client, second, v1.ConditionFalse, "| Completed: "))
	gap := log.first("p-" + second).Sub(log.first("p-" + first))
	t.Logf("first eviction of the second drain %v after the first one's, across a restart", gap)
	if gap < buffer {
		t.Errorf("the drain after the restart began %v after the previous one, less than --drain-buffer=%v", gap, buffer)
	}
}

// TestDrainSkipsHumanCordonVisibly (issue 17, point 3): a node someone else
// cordoned that matches a rule is left alone, and said so once: a
// DrainSkipped event, the nodeshepherd_drain_nodes_skipped gauge. Once
// uncordoned, it is the controller's like any other.
func TestDrainSkipsHumanCordonVisibly(t *testing.T) {
	cfg, client := lifecycleCluster(t)
	m := framework.StartFakeNodes(t, fastNodes(client, 3, false))
	names := m.NodeNames()
	human, other := names[0], names[1]
	ns := framework.StartNodeShepherd(t, cfg, drainConfig(nil), nil)
	waitNodesReady(t, client, names...)
	framework.SetUnschedulable(t, client, human, true)

	setCondition(t, m, fakenode.SetCondition, v1.ConditionTrue, human)
	_, msgs := framework.WaitEvents(t, client, nodeEvents(human, drain.EventDrainSkipped), 1)
	if want := "Cordoned by someone else; not drained although KernelDeadlock=True"; msgs[0] != want {
		t.Errorf("DrainSkipped says %q, want %q", msgs[0], want)
	}
	if got := ns.Metric(t, "nodeshepherd_drain_nodes_skipped", map[string]string{"reason": drain.SkipCordonedByOther}); got != 1 {
		t.Errorf("nodes_skipped{reason=%s} = %v, want 1", drain.SkipCordonedByOther, got)
	}
	// Re-checks (any update of the node) say nothing new. One worker takes
	// nodes in order: once the other node is cordoned, these were looked at.
	for i := range 3 {
		patch := fmt.Sprintf(`{"metadata":{"labels":{"touched":"%d"}}}`, i)
		if _, err := client.CoreV1().Nodes().Patch(framework.Context(t), human, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	setCondition(t, m, fakenode.SetCondition, v1.ConditionTrue, other)
	framework.Eventually(t, 30*time.Second, other+" cordoned", func(ctx context.Context) (bool, string, error) {
		n, err := client.CoreV1().Nodes().Get(ctx, other, metav1.GetOptions{})
		return err == nil && ownedByDrain(n), "", err
	})
	framework.WaitEvents(t, client, nodeEvents(other, drain.EventCordonSucceeded), 1)
	if got, msgs := eventCount(t, client, human, drain.EventDrainSkipped, 1); got != 1 {
		t.Errorf("%d DrainSkipped events, want one: %q", got, msgs)
	}
	if n := getNode(t, client, human); ownedByDrain(n) || kube.NodeCondition(n, drain.ConditionDrainScheduled) != nil {
		t.Errorf("the human's node was taken over")
	}

	// The human uncordons it: now it is the controller's to cordon.
	framework.SetUnschedulable(t, client, human, false)
	framework.Eventually(t, 30*time.Second, human+" cordoned by the controller", func(ctx context.Context) (bool, string, error) {
		n, err := client.CoreV1().Nodes().Get(ctx, human, metav1.GetOptions{})
		return err == nil && ownedByDrain(n) && n.Spec.Unschedulable, "", err
	})
	if got := ns.Metric(t, "nodeshepherd_drain_nodes_skipped", nil); got != 0 {
		t.Errorf("nodes_skipped = %v after the node was taken over", got)
	}
}

// TestDrainBlockedByPDBExplainedThenForced (issue 17, point 5; issue 32,
// point 2): a PodDisruptionBudget that never allows a disruption holds the
// drain past its timeout; as only force-after can end it, the drain goes on
// and says so once (DrainBlocked: each blocking pod, its budget and the
// budget's counts, and when force-after falls due) instead of failing and
// starting a new count on the retry. Once every eviction of a pod has been
// refused for the rule's force-after (the least, 1m), it is deleted (Warning
// event per pod, metric) and the drain completes; a pod protected by
// --protected-pod-annotation stays. As the ServiceAccount: the rollout
// check reads the pods' ReplicaSet and Deployment.
func TestDrainBlockedByPDBExplainedThenForced(t *testing.T) {
	asServiceAccount(t)
	const forceAfter = rules.MinForceAfter
	cfg, client := lifecycleCluster(t)
	m := framework.StartFakeNodes(t, fastNodes(client, 3, false))
	names := m.NodeNames()
	sick := names[0]
	ns := framework.StartNodeShepherd(t, cfg, drainConfig(func(d *drain.Config) {
		d.Conditions = []string{"KernelDeadlock=True," + drainMinDuration.String() + ",force-after=" + forceAfter.String()}
		d.DrainTimeout, d.RetryBackoff = 3*time.Second, time.Hour // only force-after brings the retry forward
		d.ProtectedPodAnnotations = []string{"team/keep"}
	}), nil)
	waitNodesReady(t, client, names...)
	keep := deployment("keep", 1)
	keep.Spec.Template.Annotations = map[string]string{"team/keep": "yes"}
	pinDeployment(t, client, names[1:], keep)
	pinDeployment(t, client, names[1:], deployment("web", 2))
	createPDB(t, client, "web", nil, ptr.To(intstr.FromInt32(0)))
	createPDB(t, client, "keep", nil, ptr.To(intstr.FromInt32(0)))
	webPods, _ := podsOn(framework.Context(t), client, sick, "web")
	if len(webPods) != 2 {
		t.Fatalf("%d web pods on %s", len(webPods), sick)
	}

	setCondition(t, m, fakenode.SetCondition, v1.ConditionTrue, sick)
	_, msgs := framework.WaitEvents(t, client, nodeEvents(sick, drain.EventDrainBlocked), 1)
	text := msgs[0]
	podNames := make([]string, 0, len(webPods))
	for _, p := range webPods {
		podNames = append(podNames, "default/"+p.Name)
	}
	sort.Strings(podNames)
	if want := strings.Join(podNames, ", ") + " (PodDisruptionBudget web refuses: 0 disruptions allowed, currentHealthy 2, desiredHealthy 2, expectedPods 2, maxUnavailable 0)"; !strings.Contains(text, want) {
		t.Errorf("DrainBlocked does not name the blocking pods and why (%q): %q", want, text)
	}
	if strings.Contains(text, "keep-") {
		t.Errorf("DrainBlocked names the protected pod: %q", text)
	}
	if !strings.Contains(text, "--drain-timeout=3s") || !strings.Contains(text, "force-after=1m0s deletes a pod once every eviction of it has been refused for that long (the first at ") {
		t.Errorf("DrainBlocked should say the timeout passed and when force-after applies: %q", text)
	}
	n := getNode(t, client, sick)
	if c := kube.NodeCondition(n, drain.ConditionDrainScheduled); c == nil || c.Status != v1.ConditionTrue {
		t.Errorf("a drain that only force-after can end must go on, not fail: %+v", c)
	}
	if _, ok := n.Annotations[drain.AnnotationBlockedSince]; !ok {
		t.Errorf("no %s annotation", drain.AnnotationBlockedSince)
	}
	for _, name := range podNames {
		if !strings.Contains(n.Annotations[drain.AnnotationBlocked], `"pod":"`+name+`"`) {
			t.Errorf("%s does not record %s: %q", drain.AnnotationBlocked, name, n.Annotations[drain.AnnotationBlocked])
		}
	}

	framework.Eventually(t, 2*forceAfter, "drain completed by force-after", drainCondition(client, sick, v1.ConditionFalse, "| Completed: "))
	if got, msgs := eventCount(t, client, sick, drain.EventDrainFailed, 0); got != 0 {
		t.Errorf("%d DrainFailed events for a drain that force-after ended: %q", got, msgs)
	}
	if got, msgs := eventCount(t, client, sick, drain.EventDrainBlocked, 1); got != 1 {
		t.Errorf("%d DrainBlocked events, want one (the blockers did not change): %q", got, msgs)
	}
	_, forced := framework.WaitEvents(t, client, nodeEvents(sick, drain.EventDrainForceDeleted), 2)
	for _, p := range webPods {
		if !strings.Contains(strings.Join(forced, "\n"), "Deleting pod default/"+p.Name+" despite its PodDisruptionBudget") {
			t.Errorf("no DrainForceDeleted event names %s: %q", p.Name, forced)
		}
	}
	evs, _ := client.CoreV1().Events("default").List(framework.Context(t), metav1.ListOptions{FieldSelector: nodeEvents(sick, drain.EventDrainForceDeleted)})
	for _, e := range evs.Items {
		if e.Type != v1.EventTypeWarning {
			t.Errorf("DrainForceDeleted is %s, want Warning", e.Type)
		}
	}
	if got := ns.Metric(t, "nodeshepherd_drain_force_deletions_total", nil); got != 2 {
		t.Errorf("force_deletions_total = %v, want 2", got)
	}
	if pods, _ := podsOn(framework.Context(t), client, sick, "keep"); len(pods) != 1 || pods[0].DeletionTimestamp != nil {
		t.Errorf("the protected pod must stay: %+v", pods)
	}
	framework.Eventually(t, 60*time.Second, "web Running elsewhere", deploymentReady(client, "web", 2))
}

// TestDrainMaintenanceWindow (issue 17, point 6): with a window opening 20s
// from now, a matching node is cordoned at once, waits with a DrainWaiting
// event saying when the drain will start, and is drained from then on.
func TestDrainMaintenanceWindow(t *testing.T) {
	cfg, client := lifecycleCluster(t)
	m := framework.StartFakeNodes(t, fastNodes(client, 2, false))
	names := m.NodeNames()
	sick := names[0]
	opens := time.Now().UTC().Add(20 * time.Second).Truncate(time.Second)
	spec := "* " + opens.Format("15:04:05") + "-" + opens.Add(time.Hour).Format("15:04:05")
	ns := framework.StartNodeShepherd(t, cfg, drainConfig(func(d *drain.Config) {
		d.Windows, d.WindowTimeZone = []string{spec}, "UTC"
	}), nil)
	waitNodesReady(t, client, names...)

	setCondition(t, m, fakenode.SetCondition, v1.ConditionTrue, sick)
	framework.Eventually(t, 30*time.Second, sick+" cordoned", func(ctx context.Context) (bool, string, error) {
		n, err := client.CoreV1().Nodes().Get(ctx, sick, metav1.GetOptions{})
		return err == nil && ownedByDrain(n), "", err
	})
	if now := time.Now(); !now.Before(opens) {
		t.Fatalf("the cordon came at %v, after the window opened (%v): the test proves nothing", now, opens)
	}
	_, msgs := framework.WaitEvents(t, client, nodeEvents(sick, drain.EventDrainWaiting), 1)
	if want := "the drain starts at " + opens.Format(time.RFC3339); !strings.Contains(msgs[0], want) || !strings.Contains(msgs[0], spec) {
		t.Errorf("DrainWaiting says %q, want the window %q and %q", msgs[0], spec, want)
	}
	if got := ns.Metric(t, "nodeshepherd_drain_nodes_waiting", map[string]string{"action": "drain", "budget": drain.BudgetMaintenanceWindow}); got != 1 && time.Now().Before(opens) {
		t.Errorf("nodes_waiting{budget=maintenance-window} = %v", got)
	}
	framework.Eventually(t, 30*time.Second, "drain completed", drainCondition(client, sick, v1.ConditionFalse, "| Completed: "))
	if at := scheduledAt(t, getNode(t, client, sick)); at.Before(opens) {
		t.Errorf("the drain started at %v, before the window opened at %v", at, opens)
	}
	if got, _ := eventCount(t, client, sick, drain.EventDrainWaiting, 1); got != 1 {
		t.Errorf("%d DrainWaiting events, want one", got)
	}
}

// TestDrainForceAfterDryRunOnlyReports (issue 17, point 5b): with --dry-run
// the evictions are server-side dry runs, so a PodDisruptionBudget's refusal
// is real; force-after then reports the pods it would delete and deletes
// nothing.
func TestDrainForceAfterDryRunOnlyReports(t *testing.T) {
	cfg, client := lifecycleCluster(t)
	m := framework.StartFakeNodes(t, fastNodes(client, 2, false))
	names := m.NodeNames()
	sick := names[0]
	conf := drainConfig(func(d *drain.Config) { d.ForceAfter, d.DrainTimeout = rules.MinForceAfter, 2*time.Minute })
	framework.StartNodeShepherd(t, cfg, conf, func(o *manager.Options) { o.Controllers = []string{"nodelifecycle"} })
	ns := framework.StartNodeShepherd(t, cfg, conf, func(o *manager.Options) { o.DryRun, o.Controllers = true, []string{drain.Name} })
	waitNodesReady(t, client, names...)
	pinDeployment(t, client, names[1:], deployment("web", 2))
	createPDB(t, client, "web", nil, ptr.To(intstr.FromInt32(0)))
	before, _ := podsOn(framework.Context(t), client, sick, "web")

	setCondition(t, m, fakenode.SetCondition, v1.ConditionTrue, sick)
	framework.Eventually(t, 2*rules.MinForceAfter, "force deletions reported", func(ctx context.Context) (bool, string, error) {
		got := ns.Metric(t, "nodeshepherd_dry_run_actions_total", map[string]string{"controller": "drain", "action": "force-delete"})
		return got == 2, fmt.Sprintf("%v reported", got), nil
	})
	if got := ns.Metric(t, "nodeshepherd_drain_force_deletions_total", nil); got != 0 {
		t.Errorf("force_deletions_total = %v in dry run", got)
	}
	after, _ := podsOn(framework.Context(t), client, sick, "web")
	if len(after) != len(before) || len(after) != 2 {
		t.Fatalf("web pods on %s: %d before, %d after", sick, len(before), len(after))
	}
	for _, p := range after {
		if p.DeletionTimestamp != nil {
			t.Errorf("dry run deleted %s", p.Name)
		}
	}
	if n := getNode(t, client, sick); n.Spec.Unschedulable || ownedByDrain(n) {
		t.Errorf("dry run wrote to %s", sick)
	}
}
