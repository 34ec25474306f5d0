package integration

import (
	"context"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/nodeshepherd/nodeshepherd/pkg/cloudprovider/webhook"
	"github.com/nodeshepherd/nodeshepherd/pkg/controller/outofservice"
	"github.com/nodeshepherd/nodeshepherd/pkg/controllers"
	"github.com/nodeshepherd/nodeshepherd/pkg/fakenode"
	"github.com/nodeshepherd/nodeshepherd/pkg/kube"
	"github.com/nodeshepherd/nodeshepherd/pkg/manager"
	"github.com/nodeshepherd/nodeshepherd/test/framework"
)

const oosAfter = 3 * time.Second

// oosConfig runs the node lifecycle controllers fast, with the outofservice
// controller's wait shortened and a budget of maxNodes.
func oosConfig(c controllers.Config, maxNodes int) controllers.Config {
	c.OutOfService.After, c.OutOfService.MaxNodes, c.OutOfService.MaxPercent = oosAfter, maxNodes, 100
	return c
}

// withOutOfService selects the controller, off under --controllers=*: it
// runs when named, as --controllers=*,outofservice does.
func withOutOfService(o *manager.Options) { o.Controllers = append(o.Controllers, outofservice.Name) }

func annotateOutOfService(t *testing.T, client kubernetes.Interface, node string, reason *string) {
	t.Helper()
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{outofservice.AnnotationConfirm: reason}}})
	if _, err := client.CoreV1().Nodes().Patch(framework.Context(t), node, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}

// readySince is the node's Ready condition's lastTransitionTime.
func readySince(t *testing.T, client kubernetes.Interface, node string) time.Time {
	t.Helper()
	c := kube.NodeCondition(getNode(t, client, node), v1.NodeReady)
	if c == nil {
		t.Fatalf("node %s has no Ready condition", node)
	}
	return c.LastTransitionTime.Time
}

func oosEvents(reason, node string) string {
	return "reason=" + reason + ",involvedObject.name=" + node
}

// TestOutOfServiceAnnotationForceDeletesPods: a partitioned node that a
// person confirms dead is tainted out of service once NotReady for the
// configured time (never sooner), and kube-controller-manager's pod GC then
// force-deletes the pod stuck Terminating on it. Withdrawing the
// confirmation keeps the taint while the node is silent and removes it
// once the node is Ready again.
func TestOutOfServiceAnnotationForceDeletesPods(t *testing.T) {
	asServiceAccount(t)
	cfg, client := lifecycleCluster(t)
	m := framework.StartFakeNodes(t, fastNodes(client, 3, false))
	ns := framework.StartNodeShepherd(t, cfg, oosConfig(fastLifecycle(100), 1), withOutOfService)
	names := m.NodeNames()
	waitNodesReady(t, client, names...)
	victim := names[0]
	ctx := framework.Context(t)

	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "stateful-0", Namespace: "default"},
		Spec: v1.PodSpec{NodeName: victim, Containers: []v1.Container{{Name: "c", Image: "example.com/app"}}}}
	// kube-controller-manager creates the default ServiceAccount pods need.
	framework.Eventually(t, 30*time.Second, "pod created", func(ctx context.Context) (bool, string, error) {
		_, err := client.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{})
		return err == nil, fmt.Sprint(err), nil
	})
	framework.Eventually(t, 30*time.Second, "pod Running", func(ctx context.Context) (bool, string, error) {
		p, err := client.CoreV1().Pods("default").Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		return p.Status.Phase == v1.PodRunning, string(p.Status.Phase), nil
	})

	partition(t, m, fakenode.Partition, fakenode.Target{Nodes: []string{victim}})
	framework.Eventually(t, 30*time.Second, "victim not Ready", nodeCondition(client, victim, v1.NodeReady, v1.ConditionUnknown))
	// The deletion no kubelet confirms: the pod stays Terminating.
	if err := client.CoreV1().Pods("default").Delete(ctx, pod.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if p, err := client.CoreV1().Pods("default").Get(ctx, pod.Name, metav1.GetOptions{}); err != nil || p.DeletionTimestamp == nil {
		t.Fatalf("pod not Terminating on the silent node: %v", err)
	}

	boot := getNode(t, client, victim).Status.NodeInfo.BootID
	annotateOutOfService(t, client, victim, ptr.To("power supply failed"))
	framework.Eventually(t, 30*time.Second, "out-of-service taint", nodeTainted(client, victim, outofservice.Taint, true))
	seen := time.Now()
	if due := kube.NotBefore(readySince(t, client, victim)).Add(oosAfter); seen.Before(due) {
		t.Errorf("tainted by %v, before NotReady since %v + %v", seen, readySince(t, client, victim), oosAfter)
	}
	n := getNode(t, client, victim)
	if n.Annotations[outofservice.AnnotationBootID] != boot || n.Annotations[outofservice.AnnotationConfirmationBootID] != boot ||
		!strings.Contains(n.Annotations[outofservice.AnnotationConfirmedBy], "power supply failed") {
		t.Errorf("annotations after the taint: %v", n.Annotations)
	}
	if cnt, msgs := framework.WaitEvents(t, client, oosEvents(outofservice.EventTaintAdded, victim), 1); cnt != 1 || !strings.Contains(msgs[0], `"power supply failed"`) {
		t.Errorf("%s events: %v", outofservice.EventTaintAdded, msgs)
	}

	// The real effect: kube-controller-manager's pod GC force-deletes the
	// terminating pod of a NotReady node with the out-of-service taint.
	framework.Eventually(t, 90*time.Second, "pod force-deleted by the pod GC", func(ctx context.Context) (bool, string, error) {
		_, err := client.CoreV1().Pods("default").Get(ctx, pod.Name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), fmt.Sprint(err), nil
	})

	// Withdrawn while silent: kept, said once.
	annotateOutOfService(t, client, victim, nil) // null removes it
	framework.WaitEvents(t, client, oosEvents(outofservice.EventBlocked, victim), 1)
	if n := getNode(t, client, victim); kube.FindTaint(n, outofservice.Taint) == nil {
		t.Fatal("taint removed while the node is still silent")
	}
	partition(t, m, fakenode.Heal, fakenode.Target{Nodes: []string{victim}})
	framework.Eventually(t, 30*time.Second, "taint removed once Ready", nodeTainted(client, victim, outofservice.Taint, false))
	if n := getNode(t, client, victim); !kube.NodeReady(n) || n.Annotations[outofservice.AnnotationBootID] != "" {
		t.Errorf("after take-back: Ready %v, annotations %v", kube.NodeReady(n), n.Annotations)
	}
	if got := ns.Metric(t, "nodeshepherd_outofservice_decisions_total", map[string]string{"action": "untaint", "reason": "confirmation-withdrawn"}); got != 1 {
		t.Errorf("decisions_total{untaint,confirmation-withdrawn} = %v", got)
	}
}

// TestOutOfServiceCloudProviderAndReboot: the fake cloud reports the
// machine shut down; the node is tainted without any annotation, and the
// taint goes when the machine boots again (a new boot ID) and is Ready.
func TestOutOfServiceCloudProviderAndReboot(t *testing.T) {
	cfg, client := lifecycleCluster(t)
	m := framework.StartFakeNodes(t, fastNodes(client, 3, false))
	framework.StartNodeShepherd(t, cfg, oosConfig(cloudConfig("fake", 100, "45%"), 1), withOutOfService)
	names := m.NodeNames()
	waitNodesReady(t, client, names...)
	victim := names[1]
	boot := getNode(t, client, victim).Status.NodeInfo.BootID

	machine(t, m, fakenode.MachineShutdown, victim)
	framework.Eventually(t, 30*time.Second, "out-of-service taint", nodeTainted(client, victim, outofservice.Taint, true))
	if due := kube.NotBefore(readySince(t, client, victim)).Add(oosAfter); time.Now().Before(due) {
		t.Errorf("tainted before NotReady + %v", oosAfter)
	}
	n := getNode(t, client, victim)
	if n.Annotations[outofservice.AnnotationBootID] != boot || !strings.Contains(n.Annotations[outofservice.AnnotationConfirmedBy], outofservice.SourceCloudProvider) {
		t.Errorf("annotations after the taint: %v", n.Annotations)
	}
	machine(t, m, fakenode.MachineStart, victim)
	framework.Eventually(t, 30*time.Second, "taint removed after the reboot", nodeTainted(client, victim, outofservice.Taint, false))
	n = getNode(t, client, victim)
	if !kube.NodeReady(n) || n.Status.NodeInfo.BootID == boot {
		t.Errorf("taint removed with Ready %v, boot ID %q", kube.NodeReady(n), n.Status.NodeInfo.BootID)
	}
	if _, msgs := framework.WaitEvents(t, client, oosEvents(outofservice.EventTaintRemoved, victim), 1); !strings.Contains(msgs[0], "after a reboot") {
		t.Errorf("%s events: %v", outofservice.EventTaintRemoved, msgs)
	}
}

// TestOutOfServicePersonConfirmationVetoedByRunningMachine (issue 45, seed
// 70030): a person confirms a partitioned node dead while the cloud provider
// answers that its machine runs (in the seed, a machine started again and cut
// off before it could report its new boot, so the confirmation still looked
// bound to the boot the API showed). The provider's "running" is a veto: no
// taint, one OutOfServiceBlocked event saying why. Once the provider answers
// the machine shut down, the node is tainted. Before the fix the person's
// confirmation was taken whatever the provider answered.
func TestOutOfServicePersonConfirmationVetoedByRunningMachine(t *testing.T) {
	cfg, client := lifecycleCluster(t)
	m := framework.StartFakeNodes(t, fastNodes(client, 3, false))
	framework.StartNodeShepherd(t, cfg, oosConfig(cloudConfig("fake", 100, "45%"), 1), withOutOfService)
	names := m.NodeNames()
	waitNodesReady(t, client, names...)
	victim := names[1]

	partition(t, m, fakenode.Partition, fakenode.Target{Nodes: []string{victim}})
	framework.Eventually(t, 30*time.Second, "victim not Ready", nodeCondition(client, victim, v1.NodeReady, v1.ConditionUnknown))
	annotateOutOfService(t, client, victim, ptr.To("looks dead to me"))
	_, msgs := framework.WaitEvents(t, client, oosEvents(outofservice.EventBlocked, victim), 1)
	if !strings.Contains(msgs[0], "answers that the machine runs") {
		t.Errorf("%s events: %v", outofservice.EventBlocked, msgs)
	}
	due := kube.NotBefore(readySince(t, client, victim)).Add(oosAfter)
	never(t, time.Until(due)+5*time.Second, "the running machine tainted out of service", nodeTainted(client, victim, outofservice.Taint, true))
	if n, msgs := eventCount(t, client, victim, outofservice.EventBlocked, 1); n != 1 {
		t.Errorf("%d %s events (one per change of decision): %q", n, outofservice.EventBlocked, msgs)
	}

	machine(t, m, fakenode.MachineShutdown, victim)
	framework.Eventually(t, 30*time.Second, "tainted once the machine is off", nodeTainted(client, victim, outofservice.Taint, true))
}

// TestOutOfServiceBudgetRefusal: with a budget of one node, the second
// confirmed-dead node is refused, with one event saying why, and stays
// untainted.
func TestOutOfServiceBudgetRefusal(t *testing.T) {
	cfg, client := lifecycleCluster(t)
	m := framework.StartFakeNodes(t, fastNodes(client, 5, false))
	ns := framework.StartNodeShepherd(t, cfg, oosConfig(fastLifecycle(100), 1), withOutOfService)
	names := m.NodeNames()
	waitNodesReady(t, client, names...)
	dead := names[:2]
	partition(t, m, fakenode.Partition, fakenode.Target{Nodes: dead})
	for _, n := range dead {
		framework.Eventually(t, 30*time.Second, n+" not Ready", nodeCondition(client, n, v1.NodeReady, v1.ConditionUnknown))
		annotateOutOfService(t, client, n, ptr.To("rack power"))
	}
	framework.Eventually(t, 30*time.Second, "one node tainted, one refused", func(ctx context.Context) (bool, string, error) {
		evs, err := client.CoreV1().Events("default").List(ctx, metav1.ListOptions{FieldSelector: "reason=" + outofservice.EventBlocked})
		if err != nil {
			return false, "", err
		}
		return len(evs.Items) == 1, fmt.Sprintf("%d refusal events", len(evs.Items)), nil
	})
	tainted := 0
	for _, n := range dead {
		if kube.FindTaint(getNode(t, client, n), outofservice.Taint) != nil {
			tainted++
		}
	}
	if tainted != 1 {
		t.Fatalf("%d nodes tainted, the budget is 1", tainted)
	}
	evs, err := client.CoreV1().Events("default").List(framework.Context(t), metav1.ListOptions{FieldSelector: "reason=" + outofservice.EventBlocked})
	if err != nil {
		t.Fatal(err)
	}
	if e := evs.Items[0]; e.Count > 1 || !strings.Contains(e.Message, "the budget is 1") {
		t.Errorf("refusal event (count %d): %s", e.Count, e.Message)
	}
	if got := ns.Metric(t, "nodeshepherd_outofservice_refusals_total", map[string]string{"reason": "budget"}); got != 1 {
		t.Errorf("refusals_total{budget} = %v, want 1 (once per change of reason)", got)
	}
	if got := ns.Metric(t, "nodeshepherd_outofservice_nodes", nil); got != 1 {
		t.Errorf("nodeshepherd_outofservice_nodes = %v", got)
	}
}

// fencingEndpoint serves a fencing endpoint (HTTPS, its own CA) until the
// test ends: asked the question PoweredOff about a node, it answers
// poweredOff(node); any other question is refused. The configuration
// returned points --out-of-service-fencing-webhook-* at it.
func fencingEndpoint(t *testing.T, poweredOff func(node string) bool) webhook.Config {
	t.Helper()
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var q webhook.Request
		if err := json.NewDecoder(r.Body).Decode(&q); err != nil || q.Question != webhook.QuestionPoweredOff {
			http.Error(w, "bad question", http.StatusBadRequest)
			return
		}
		_ = json.NewEncoder(w).Encode(webhook.Response{APIVersion: webhook.APIVersion, Kind: "InstanceAnswer", PoweredOff: ptr.To(poweredOff(q.Node.Name))})
	}))
	t.Cleanup(srv.Close)
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	return webhook.Config{URL: srv.URL, CAFile: caFile, Timeout: 2 * time.Second}
}

// TestOutOfServiceFencingWebhook: a fencing endpoint (HTTPS, its own CA)
// answers that one partitioned node's machine is powered off and that
// another's is on: only the first is tainted, with the endpoint named as
// the confirmation; a second partitioned node confirmed by nothing is not.
func TestOutOfServiceFencingWebhook(t *testing.T) {
	cfg, client := lifecycleCluster(t)
	m := framework.StartFakeNodes(t, fastNodes(client, 5, false))
	names := m.NodeNames()
	fenced, running := names[0], names[1]
	c := oosConfig(fastLifecycle(100), 2)
	c.OutOfService.Fencing = fencingEndpoint(t, func(node string) bool { return node == fenced })
	ns := framework.StartNodeShepherd(t, cfg, c, withOutOfService)
	waitNodesReady(t, client, names...)

	partition(t, m, fakenode.Partition, fakenode.Target{Nodes: []string{fenced, running}})
	framework.Eventually(t, 30*time.Second, "out-of-service taint on the fenced node", nodeTainted(client, fenced, outofservice.Taint, true))
	if due := kube.NotBefore(readySince(t, client, fenced)).Add(oosAfter); time.Now().Before(due) {
		t.Errorf("tainted before NotReady + %v", oosAfter)
	}
	if by := getNode(t, client, fenced).Annotations[outofservice.AnnotationConfirmedBy]; !strings.Contains(by, outofservice.SourceFencing) {
		t.Errorf("confirmed-by %q, want the fencing webhook", by)
	}
	// Well past the wait, the node whose machine is on is left alone.
	framework.Eventually(t, 30*time.Second, "fencing decisions counted", func(context.Context) (bool, string, error) {
		v := ns.Metric(t, "nodeshepherd_outofservice_decisions_total", map[string]string{"action": "taint", "reason": outofservice.SourceFencing})
		return v == 1, fmt.Sprint(v), nil
	})
	if n := getNode(t, client, running); kube.FindTaint(n, outofservice.Taint) != nil {
		t.Errorf("node %s tainted although its machine is on", running)
	}
}
