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
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	fakecloud "github.com/nodeshepherd/nodeshepherd/pkg/cloudprovider/fake"
	"github.com/nodeshepherd/nodeshepherd/pkg/cloudprovider/providers"
	"github.com/nodeshepherd/nodeshepherd/pkg/cloudprovider/webhook"
	"github.com/nodeshepherd/nodeshepherd/pkg/controller/cloudnodelifecycle"
	"github.com/nodeshepherd/nodeshepherd/pkg/controllers"
	"github.com/nodeshepherd/nodeshepherd/pkg/fakenode"
	"github.com/nodeshepherd/nodeshepherd/pkg/kube"
	"github.com/nodeshepherd/nodeshepherd/pkg/owner"
	"github.com/nodeshepherd/nodeshepherd/test/framework"
)

func cloudConfig(provider string, rate float64, maxUnhealthy string) controllers.Config {
	c := fastLifecycle(100)
	c.CloudNodeLifecycle.Cloud = providers.Options{Name: provider, WebhookTimeout: 5 * time.Second}
	c.CloudNodeLifecycle.NodeDeletionRate, c.Shared.MaxUnhealthyNodes = rate, maxUnhealthy
	// Two consecutive "gone" answers over 2s: the confirmation path is real,
	// and the tests stay short (unit tests cover the defaults).
	c.CloudNodeLifecycle.DeletionConfirmations, c.CloudNodeLifecycle.DeletionDelay = 2, 2*time.Second
	return c
}

func nodeGone(client kubernetes.Interface, name string) func(context.Context) (bool, string, error) {
	return func(ctx context.Context) (bool, string, error) {
		_, err := client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), fmt.Sprint(err), nil
	}
}

func machine(t *testing.T, m *fakenode.Manager, action fakenode.Action, nodes ...string) {
	t.Helper()
	if _, err := m.Apply(framework.Context(t), fakenode.Fault{Action: action, Target: fakenode.Target{Nodes: nodes}}); err != nil {
		t.Fatal(err)
	}
}

// setMachineState writes the fake cloud's answer directly, as an
// inconsistent or failing cloud would.
func setMachineState(t *testing.T, client kubernetes.Interface, node, state string) {
	t.Helper()
	ctx := framework.Context(t)
	patch, _ := json.Marshal(map[string]any{"data": map[string]string{node: state}})
	_, err := client.CoreV1().ConfigMaps(fakecloud.ConfigMapNamespace).Patch(ctx, fakecloud.ConfigMapName, "application/merge-patch+json", patch, metav1.PatchOptions{})
	if apierrors.IsNotFound(err) {
		_, err = client.CoreV1().ConfigMaps(fakecloud.ConfigMapNamespace).Create(ctx, &v1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: fakecloud.ConfigMapName, Namespace: fakecloud.ConfigMapNamespace},
			Data:       map[string]string{node: state}}, metav1.CreateOptions{})
	}
	if err != nil {
		t.Fatal(err)
	}
}

func providerCalls(t *testing.T, ns *framework.NodeShepherd, question, result string) float64 {
	return ns.Metric(t, "nodeshepherd_cloud_provider_requests_total", map[string]string{"question": question, "result": result})
}

// TestMachineDeletedNodeRemovedAndPodsReplaced: a not-ready node whose
// machine is gone is deleted, and its pods are replaced on other nodes.
func TestMachineDeletedNodeRemovedAndPodsReplaced(t *testing.T) {
	asServiceAccount(t)
	cfg, client := lifecycleCluster(t)
	m := framework.StartFakeNodes(t, fastNodes(client, 4, false))
	framework.StartNodeShepherd(t, cfg, cloudConfig("fake", 100, "45%"), nil)
	names := m.NodeNames()
	waitNodesReady(t, client, names...)
	victim := names[0]
	ctx := framework.Context(t)
	dep := deployment("app", 2)
	dep.Spec.Template.Spec.Affinity = &v1.Affinity{NodeAffinity: &v1.NodeAffinity{PreferredDuringSchedulingIgnoredDuringExecution: []v1.PreferredSchedulingTerm{{
		Weight: 100, Preference: v1.NodeSelectorTerm{MatchExpressions: []v1.NodeSelectorRequirement{{Key: "kubernetes.io/hostname", Operator: v1.NodeSelectorOpIn, Values: []string{victim}}}},
	}}}}
	if _, err := client.AppsV1().Deployments("default").Create(ctx, dep, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, 60*time.Second, "app pods Running on the victim", appPodsOn(client, func(n string) bool { return n == victim }))

	machine(t, m, fakenode.MachineDelete, victim)
	framework.Eventually(t, 30*time.Second, "node deleted", nodeGone(client, victim))
	if n, msgs := framework.WaitEvents(t, client, "reason="+cloudnodelifecycle.EventDeletingNode, 1); n != 1 {
		t.Errorf("DeletingNode events: %v", msgs)
	}
	// The node lifecycle controller notices the deletion too.
	framework.WaitEvents(t, client, "reason=RemovingNode,involvedObject.name="+victim, 1)
	// kube-controller-manager's pod garbage collector removes the pods of
	// a deleted node (after its 40s quarantine); the ReplicaSet replaces them.
	framework.Eventually(t, 3*time.Minute, "app pods Running elsewhere", appPodsOn(client, func(n string) bool { return n != victim }))
}

func appPodsOn(client kubernetes.Interface, where func(string) bool) func(context.Context) (bool, string, error) {
	return func(ctx context.Context) (bool, string, error) {
		pods, err := client.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=app"})
		if err != nil {
			return false, "", err
		}
		ok := 0
		for i := range pods.Items {
			p := &pods.Items[i]
			if where(p.Spec.NodeName) && kube.PodReady(p) && p.DeletionTimestamp == nil {
				ok++
			}
		}
		return ok == 2 && len(pods.Items) == 2, fmt.Sprintf("%d of %d pods placed as wanted", ok, len(pods.Items)), nil
	}
}

func TestMachineShutdownTaint(t *testing.T) {
	asServiceAccount(t)
	cfg, client := lifecycleCluster(t)
	m := framework.StartFakeNodes(t, fastNodes(client, 3, false))
	framework.StartNodeShepherd(t, cfg, cloudConfig("fake", 100, "45%"), nil)
	names := m.NodeNames()
	waitNodesReady(t, client, names...)
	machine(t, m, fakenode.MachineShutdown, names[0])
	framework.Eventually(t, time.Minute, "shutdown taint", nodeTainted(client, names[0], cloudnodelifecycle.ShutdownTaint, true))
	// Its owner record came with it (issue 32, point 3), and goes with it.
	n := getNode(t, client, names[0])
	if rec, ok := owner.Of(n, owner.TaintKey(cloudnodelifecycle.ShutdownTaint)); !ok || rec.Controller != cloudnodelifecycle.Name ||
		!strings.Contains(rec.Why, "shut down") || rec.Until == "" || !rec.Since.Equal(kube.FindTaint(n, cloudnodelifecycle.ShutdownTaint).TimeAdded.Time) {
		t.Errorf("owner record of the shutdown taint: %+v, %v (annotation %q)", rec, ok, n.Annotations[owner.Annotation])
	}
	machine(t, m, fakenode.MachineStart, names[0])
	framework.Eventually(t, time.Minute, "node Ready again", nodeCondition(client, names[0], v1.NodeReady, v1.ConditionTrue))
	framework.Eventually(t, time.Minute, "shutdown taint removed", nodeTainted(client, names[0], cloudnodelifecycle.ShutdownTaint, false))
	if rec, ok := owner.Of(getNode(t, client, names[0]), owner.TaintKey(cloudnodelifecycle.ShutdownTaint)); ok {
		t.Errorf("owner record left after the taint went: %+v", rec)
	}
}

// TestCloudNeverDeletesOnDoubt: a Ready node reported missing, a not-ready
// node whose provider answers with errors: neither is deleted.
func TestCloudNeverDeletesOnDoubt(t *testing.T) {
	cfg, client := lifecycleCluster(t)
	m := framework.StartFakeNodes(t, fastNodes(client, 4, false))
	ns := framework.StartNodeShepherd(t, cfg, cloudConfig("fake", 100, "45%"), nil)
	names := m.NodeNames()
	waitNodesReady(t, client, names...)
	setMachineState(t, client, names[0], fakecloud.Deleted) // Ready, yet "gone"
	partition(t, m, fakenode.Partition, fakenode.Target{Nodes: names[1:2]})
	setMachineState(t, client, names[1], fakecloud.Error)
	framework.Eventually(t, 30*time.Second, "provider errors counted", func(context.Context) (bool, string, error) {
		v := providerCalls(t, ns, "InstanceExists", "error")
		return v >= 3, fmt.Sprintf("%v errors", v), nil
	})
	passesAfter(t, ns, 3)
	for _, n := range names[:2] {
		if ok, _, _ := nodeGone(client, n)(framework.Context(t)); ok {
			t.Errorf("%s was deleted", n)
		}
	}
}

func TestCloudDeletionRateAndIncidentGuard(t *testing.T) {
	cfg, client := lifecycleCluster(t)
	m := framework.StartFakeNodes(t, fastNodes(client, 10, false))
	ns := framework.StartNodeShepherd(t, cfg, cloudConfig("fake", 0.5, "45%"), nil)
	names := m.NodeNames()
	waitNodesReady(t, client, names...)

	// 3 of 10 gone: deleted, at most one every 2s (--node-deletion-rate=0.5).
	machine(t, m, fakenode.MachineDelete, names[:3]...)
	var times []time.Time
	framework.Eventually(t, 60*time.Second, "three nodes deleted", func(ctx context.Context) (bool, string, error) {
		gone := 0
		for _, n := range names[:3] {
			if ok, _, _ := nodeGone(client, n)(ctx); ok {
				gone++
			}
		}
		for len(times) < gone {
			times = append(times, time.Now())
		}
		return gone == 3, fmt.Sprintf("%d deleted", gone), nil
	})
	for i := 1; i < len(times); i++ {
		if d := times[i].Sub(times[i-1]); d < 1500*time.Millisecond {
			t.Errorf("deletions %d and %d only %v apart at 0.5 nodes/s", i, i+1, d)
		}
	}

	// An incident: 5 of the 7 nodes left are not Ready (71 % > 45 %); then
	// the cloud reports their machines gone. The guard holds. (Nodes that
	// fail one by one are deleted until the threshold is crossed.)
	partition(t, m, fakenode.Partition, fakenode.Target{Nodes: names[3:8]})
	for _, n := range names[3:8] {
		framework.Eventually(t, time.Minute, n+" Unknown", nodeCondition(client, n, v1.NodeReady, v1.ConditionUnknown))
	}
	for _, n := range names[3:8] {
		setMachineState(t, client, n, fakecloud.Deleted)
	}
	framework.Eventually(t, 30*time.Second, "incident guard active and blocking", func(context.Context) (bool, string, error) {
		active := ns.Metric(t, "nodeshepherd_cloudnodelifecycle_incident_guard_active", nil)
		blocked := ns.Metric(t, "nodeshepherd_cloudnodelifecycle_deletions_blocked_total", map[string]string{"reason": "incident-guard"})
		return active == 1 && blocked >= 10, fmt.Sprintf("active=%v blocked=%v", active, blocked), nil
	})
	for _, n := range names[3:8] {
		if ok, _, _ := nodeGone(client, n)(framework.Context(t)); ok {
			t.Errorf("%s deleted while the incident guard was active", n)
		}
	}
}

// fakeInfra is the webhook's side: machine states by node, and a delay.
type fakeInfra struct {
	mu    sync.Mutex
	state map[string]string
	delay time.Duration
	bad   bool // answer malformed JSON
}

func (f *fakeInfra) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var req webhook.Request
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.APIVersion != webhook.APIVersion {
		http.Error(w, "bad request", http.StatusBadRequest)
		return
	}
	f.mu.Lock()
	state, delay, bad := f.state[req.Node.Name], f.delay, f.bad
	f.mu.Unlock()
	time.Sleep(delay)
	if bad {
		_, _ = w.Write([]byte(`{"exists": "maybe"}`))
		return
	}
	resp := webhook.Response{APIVersion: webhook.APIVersion, Kind: "InstanceAnswer"}
	switch req.Question {
	case webhook.QuestionExists:
		resp.Exists = ptr.To(state != "deleted")
	case webhook.QuestionShutdown:
		resp.Shutdown = ptr.To(state == "shutdown")
	case webhook.QuestionMetadata:
		resp.Metadata = &webhook.Metadata{ProviderID: "infra://" + req.Node.Name}
	}
	_ = json.NewEncoder(w).Encode(resp)
}

func (f *fakeInfra) set(fn func(*fakeInfra)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn(f)
}

func TestWebhookProvider(t *testing.T) {
	cfg, client := lifecycleCluster(t)
	m := framework.StartFakeNodes(t, fastNodes(client, 6, false))
	names := m.NodeNames()
	infra := &fakeInfra{state: map[string]string{}}
	srv := httptest.NewTLSServer(infra)
	t.Cleanup(srv.Close)
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	c := cloudConfig(webhook.ProviderName, 100, "45%")
	c.CloudNodeLifecycle.Cloud.WebhookURL, c.CloudNodeLifecycle.Cloud.WebhookCAFile, c.CloudNodeLifecycle.Cloud.WebhookTimeout = srv.URL, caFile, 500*time.Millisecond
	ns := framework.StartNodeShepherd(t, cfg, c, nil)
	waitNodesReady(t, client, names...)

	// A webhook that times out, then one that answers nonsense: no deletion.
	infra.set(func(f *fakeInfra) { f.state[names[0]] = "deleted"; f.delay = 2 * time.Second })
	partition(t, m, fakenode.Partition, fakenode.Target{Nodes: names[:1]})
	framework.Eventually(t, 30*time.Second, "webhook timeouts counted", func(context.Context) (bool, string, error) {
		v := providerCalls(t, ns, "InstanceExists", "error")
		return v >= 2, fmt.Sprintf("%v errors", v), nil
	})
	infra.set(func(f *fakeInfra) { f.delay, f.bad = 0, true })
	before := providerCalls(t, ns, "InstanceExists", "error")
	framework.Eventually(t, 30*time.Second, "malformed answers counted", func(context.Context) (bool, string, error) {
		v := providerCalls(t, ns, "InstanceExists", "error")
		return v >= before+2, fmt.Sprintf("%v errors", v), nil
	})
	if ok, _, _ := nodeGone(client, names[0])(framework.Context(t)); ok {
		t.Fatal("node deleted on a timeout or a malformed answer")
	}

	// A real answer: gone → deleted; shut down → tainted.
	infra.set(func(f *fakeInfra) { f.bad = false; f.state[names[1]] = "shutdown" })
	partition(t, m, fakenode.Partition, fakenode.Target{Nodes: names[1:2]})
	framework.Eventually(t, 30*time.Second, "webhook: gone machine's node deleted", nodeGone(client, names[0]))
	framework.Eventually(t, 30*time.Second, "webhook: shutdown taint", nodeTainted(client, names[1], cloudnodelifecycle.ShutdownTaint, true))
}
