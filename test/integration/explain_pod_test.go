package integration

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodeshepherd/nodeshepherd/pkg/controller/scheduler"
	"github.com/nodeshepherd/nodeshepherd/pkg/explain"
	"github.com/nodeshepherd/nodeshepherd/test/framework"
)

// explainCLI runs `nodeshepherd explain pod` with kubeconfig and returns its
// exit code, stdout and stderr.
func explainCLI(t *testing.T, kubeconfig string, args ...string) (int, string, string) {
	t.Helper()
	return framework.RunBinary(t, framework.Binary(t), append([]string{"explain", "pod", "--kubeconfig", kubeconfig}, args...)...)
}

func explainPodJSON(t *testing.T, kubeconfig, name string) *explain.PodExplanation {
	t.Helper()
	return explainJSON[explain.PodExplanation](t, "pod", "--kubeconfig", kubeconfig, "-n", "default", name)
}

// TestExplainPod: on one control plane with five 1-CPU fake nodes (two
// full, three tainted) and nodeshepherd's scheduler, `explain pod` says why a
// pod is Pending as the scheduler does (the same message, the per-node
// reasons counted), shows a preemptor's nomination and its victim, says a
// scheduled pod is bound, fails clearly for a missing pod, and makes no
// write request.
func TestExplainPod(t *testing.T) {
	c := startPreemptionCluster(t, 5, false, func(s *scheduler.Config) { s.SchedulerName = scheduler.DefaultSchedulerName })
	n := c.nodes
	ctx := framework.Context(t)
	const taintKey = "example.com/maintenance"
	for _, name := range n[2:] {
		patch := fmt.Sprintf(`{"spec":{"taints":[{"key":%q,"effect":"NoSchedule"}]}}`, taintKey)
		if _, err := c.client.CoreV1().Nodes().Patch(ctx, name, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// Nodes 1 and 2: 800m of 1 CPU taken, half by pods less important than
	// the preemptor; the low ones keep a finalizer so that a victim stays
	// terminating and the preemptor stays nominated.
	for i, name := range []string{"full-1", "full-2"} {
		c.create(t, ours(spec{name: name, node: i + 1, class: "p1000", milliCPU: 400}, n))
		low := ours(spec{name: fmt.Sprintf("low-%d", i+1), node: i + 1, class: "p10", milliCPU: 400}, n)
		low.Finalizers = []string{keepFinalizer}
		c.create(t, low)
	}
	t.Cleanup(func() {
		for _, name := range []string{"low-1", "low-2"} {
			_, _ = c.client.CoreV1().Pods("default").Patch(context.Background(), name, types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
		}
	})
	web := ours(spec{name: "web", class: "p20", milliCPU: 100}, n)
	web.Spec.NodeSelector = map[string]string{"kubernetes.io/hostname": n[2]}
	web.Spec.Tolerations = []v1.Toleration{{Key: taintKey, Operator: v1.TolerationOpExists}}
	c.create(t, web)
	for _, name := range []string{"full-1", "full-2", "low-1", "low-2", "web"} {
		waitRunningOn(t, c, name, "")
	}
	framework.WaitEvents(t, c.client, "involvedObject.name=web,reason=Scheduled", 1)

	proxy := framework.StartFaultProxy(t, c.cfg)
	kubeconfig := proxyKubeconfig(t, proxy, c.cfg)
	defer func() {
		writes := proxy.Count(func(r framework.ProxiedRequest) bool { return r.Method != http.MethodGet })
		if writes != 0 {
			t.Errorf("explain made %d requests other than GET: %+v", writes, proxy.Log())
		}
		if proxy.Count(func(framework.ProxiedRequest) bool { return true }) == 0 {
			t.Error("explain made no request through the proxy")
		}
	}()

	t.Run("pending for cpu and taints", func(t *testing.T) {
		c.create(t, ours(spec{name: "stuck", class: "p100", never: true, milliCPU: 500}, n))
		want := "0/5 nodes are available: 2 Insufficient cpu, 3 node(s) had untolerated taint(s). preemption: not eligible due to preemptionPolicy=Never."
		msg := waitUnschedulable(t, c, "stuck", "preemptionPolicy=Never")
		if msg != want {
			t.Errorf("scheduler wrote %q, want %q", msg, want)
		}
		e := explainPodJSON(t, kubeconfig, "stuck")
		if !e.Pending || e.Summary != msg || e.PodScheduled == nil || e.PodScheduled.Message != msg {
			t.Errorf("pending %v, summary %q, condition %+v; want the scheduler's %q", e.Pending, e.Summary, e.PodScheduled, msg)
		}
		counts := map[string]int{}
		for _, nf := range e.Nodes {
			if nf.Fits {
				t.Errorf("node %s fits", nf.Node)
			}
			for _, r := range nf.Reasons {
				counts[r]++
			}
		}
		if len(e.Nodes) != 5 || counts["Insufficient cpu"] != 2 || counts["node(s) had untolerated taint(s)"] != 3 {
			t.Errorf("nodes %+v, reason counts %v", e.Nodes, counts)
		}
		if e.Preemption != nil || e.PreemptionPolicy != string(v1.PreemptNever) {
			t.Errorf("preemption %+v, policy %s", e.Preemption, e.PreemptionPolicy)
		}
		if len(e.PreemptionAttempts) != 1 || e.PreemptionAttempts[0].Outcome != "not eligible due to preemptionPolicy=Never." {
			t.Errorf("preemption attempts %+v", e.PreemptionAttempts)
		}
		if !hasEvent(e, "FailedScheduling", msg) {
			t.Errorf("no FailedScheduling event with the message: %+v", e.Events)
		}
		code, table, stderr := explainCLI(t, kubeconfig, "-n", "default", "stuck")
		if code != 0 {
			t.Fatalf("table: exit %d: %s", code, stderr)
		}
		t.Logf("explain pod:\n%s", table)
		for _, s := range []string{"Pending: not bound to a node", "Evaluated now:", msg, "NODE", "FITS", "REASONS",
			n[0], "Insufficient cpu (preemption may help)", "Scheduling events:", "FailedScheduling"} {
			if !strings.Contains(table, s) {
				t.Errorf("table lacks %q:\n%s", s, table)
			}
		}
	})

	t.Run("nominated after preemption", func(t *testing.T) {
		c.create(t, ours(spec{name: "high", class: "p1000", milliCPU: 500}, n))
		var nominated string
		framework.Eventually(t, 30*time.Second, "high nominated", func(ctx context.Context) (bool, string, error) {
			p, err := c.client.CoreV1().Pods("default").Get(ctx, "high", metav1.GetOptions{})
			if err != nil {
				return false, "", err
			}
			nominated = p.Status.NominatedNodeName
			return nominated != "", "not nominated", nil
		})
		victim := map[string]string{n[0]: "low-1", n[1]: "low-2"}[nominated]
		if victim == "" {
			t.Fatalf("high nominated to %s, not a node with a victim", nominated)
		}
		framework.WaitEvents(t, c.client, "involvedObject.name="+victim+",reason=Preempted", 1)
		// The scheduler holds the preemptor while its victim terminates;
		// evaluated now, the victim still takes the room and blocks a
		// second preemption.
		e := explainPodJSON(t, kubeconfig, "high")
		if !e.Pending || e.NominatedNodeName != nominated {
			t.Errorf("pending %v nominated %q, want %s", e.Pending, e.NominatedNodeName, nominated)
		}
		want := "0/5 nodes are available: 2 Insufficient cpu, 3 node(s) had untolerated taint(s). preemption: not eligible due to a terminating pod on the nominated node."
		if e.Summary != want {
			t.Errorf("summary %q, want %q", e.Summary, want)
		}
		if e.PodScheduled == nil || e.PodScheduled.Status != v1.ConditionFalse {
			t.Errorf("PodScheduled %+v", e.PodScheduled)
		}
		if len(e.Victims) != 1 || e.Victims[0].Name != victim || e.Victims[0].Node != nominated || e.Victims[0].Count < 1 {
			t.Errorf("victims %+v, want %s on %s", e.Victims, victim, nominated)
		}
		if !hasEvent(e, "FailedScheduling", "") {
			t.Errorf("no FailedScheduling event: %+v", e.Events)
		}
		code, table, stderr := explainCLI(t, kubeconfig, "-n", "default", "high")
		if code != 0 {
			t.Fatalf("table: exit %d: %s", code, stderr)
		}
		t.Logf("explain pod:\n%s", table)
		for _, s := range []string{"Nominated node:  " + nominated, "Preemption attempts:", "preempted default/" + victim} {
			if !strings.Contains(table, s) {
				t.Errorf("table lacks %q:\n%s", s, table)
			}
		}
	})

	t.Run("scheduled", func(t *testing.T) {
		e := explainPodJSON(t, kubeconfig, "web")
		if e.Pending || e.NodeName != n[2] || e.Phase != v1.PodRunning || len(e.Nodes) != 0 || e.Summary != "" {
			t.Errorf("scheduled pod explained as %+v", e)
		}
		if !hasEvent(e, "Scheduled", "Successfully assigned default/web to "+n[2]) {
			t.Errorf("no Scheduled event: %+v", e.Events)
		}
		code, out, stderr := explainCLI(t, kubeconfig, "-n", "default", "web", "-o", "yaml")
		if code != 0 || !strings.Contains(out, "nodeName: "+n[2]) || !strings.Contains(out, "pending: false") {
			t.Errorf("yaml: exit %d %s\n%s", code, stderr, out)
		}
		// Without -n: the kubeconfig context's namespace, here none: default.
		code, out, _ = explainCLI(t, kubeconfig, "web")
		if code != 0 || !strings.Contains(out, fmt.Sprintf("Scheduled: bound to node %s, phase Running", n[2])) {
			t.Errorf("table: exit %d\n%s", code, out)
		}
	})

	t.Run("not found", func(t *testing.T) {
		code, out, stderr := explainCLI(t, kubeconfig, "-n", "default", "nope")
		if code != 1 || out != "" || !strings.Contains(stderr, `pod "nope" not found in namespace "default"`) {
			t.Errorf("exit %d, stdout %q, stderr %q", code, out, stderr)
		}
		code, _, stderr = explainCLI(t, kubeconfig, "-n", "default", "web", "-o", "wide")
		if code != 2 || !strings.Contains(stderr, "--output") {
			t.Errorf("-o wide: exit %d, stderr %q", code, stderr)
		}
	})
}

func hasEvent(e *explain.PodExplanation, reason, message string) bool {
	for _, ev := range e.Events {
		if ev.Reason == reason && (message == "" || ev.Message == message) && ev.Count >= 1 {
			return true
		}
	}
	return false
}
