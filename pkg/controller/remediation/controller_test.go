package remediation

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/go-logr/logr/funcr"

	dto "github.com/prometheus/client_model/go"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/types"

	nscloud "github.com/nodeshepherd/nodeshepherd/pkg/cloudprovider"
	"github.com/nodeshepherd/nodeshepherd/pkg/kube"
	"github.com/nodeshepherd/nodeshepherd/pkg/owner"
	rem "github.com/nodeshepherd/nodeshepherd/pkg/remediation"
)

var t0 = time.Date(2026, 11, 28, 10, 0, 0, 0, time.UTC)

// A taint-only policy: DiskPressure for 2m taints the node; healthy for
// 10m lifts the taint, with its owner record and the state.
func TestTaintStepAndDone(t *testing.T) {
	ctx := context.Background()
	n := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", Labels: map[string]string{"pool": "batch"}, CreationTimestamp: metav1.NewTime(t0.Add(-time.Hour))},
		Status: v1.NodeStatus{Conditions: []v1.NodeCondition{{Type: v1.NodeDiskPressure, Status: v1.ConditionTrue, LastTransitionTime: metav1.NewTime(t0.Add(-3 * time.Minute))}}}}
	client := fake.NewClientset(n)
	clk := clocktesting.NewFakeClock(t0)
	f := informers.NewSharedInformerFactory(client, 0)
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{rem.GroupVersionResource: "RemediationPolicyList"})
	c, err := New(Config{}, Deps{Client: client, Dynamic: dyn, Nodes: f.Core().V1().Nodes(), Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	f.Start(ctx.Done())
	cache.WaitForCacheSync(ctx.Done(), f.Core().V1().Nodes().Informer().HasSynced)
	c.onPolicy(&unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "nodeshepherd.io/v1alpha1", "kind": "RemediationPolicy", "metadata": map[string]any{"name": "taint-only"},
		"spec": map[string]any{
			"nodeSelector": map[string]any{"matchLabels": map[string]any{"pool": "batch"}},
			"unhealthy":    []any{map[string]any{"type": "DiskPressure", "status": "True", "for": "2m"}},
			"healthyHold":  "10m",
			"steps":        []any{map[string]any{"action": "Taint", "timeout": "24h", "taint": map[string]any{"key": "nodeshepherd.io/degraded", "effect": "NoSchedule"}}},
		}}}, false)
	if p := c.policies["taint-only"]; p == nil || p.refused != "" {
		t.Fatalf("policy %+v", p)
	}
	if err := c.sync(ctx, "n"); err != nil {
		t.Fatal(err)
	}
	got, _ := client.CoreV1().Nodes().Get(ctx, "n", metav1.GetOptions{})
	taint := v1.Taint{Key: "nodeshepherd.io/degraded", Effect: v1.TaintEffectNoSchedule}
	if kube.FindTaint(got, taint) == nil || got.Annotations[rem.AnnotationState] == "" {
		t.Fatalf("after the start: taints %v, annotations %v", got.Spec.Taints, got.Annotations)
	}
	if r, ok := owner.Of(got, owner.TaintKey(taint)); !ok || r.Controller != Name {
		t.Errorf("owner record %+v, %v", r, ok)
	}
	// Healthy for 10m (and a second): done, taint and state gone.
	got.Status.Conditions[0].Status, got.Status.Conditions[0].LastTransitionTime = v1.ConditionFalse, metav1.NewTime(t0.Add(-11*time.Minute))
	if _, err := client.CoreV1().Nodes().Update(ctx, got, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if !cache.WaitForCacheSync(ctx.Done(), func() bool {
		m, err := c.nodes.Get("n")
		return err == nil && m.Status.Conditions[0].Status == v1.ConditionFalse
	}) {
		t.Fatal("informer")
	}
	if err := c.sync(ctx, "n"); err != nil {
		t.Fatal(err)
	}
	got, _ = client.CoreV1().Nodes().Get(ctx, "n", metav1.GetOptions{})
	if kube.FindTaint(got, taint) != nil || got.Annotations[rem.AnnotationState] != "" || got.Annotations[owner.Annotation] != "" {
		t.Errorf("after the repair: taints %v, annotations %v", got.Spec.Taints, got.Annotations)
	}
}

// fakeRepairer records requests; err, when set, is its answer.
type fakeRepairer struct {
	mu       sync.Mutex
	ids      []string
	premises []nscloud.Premise
	errs     []error
}

func (r *fakeRepairer) answer(id string, pr nscloud.Premise) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ids = append(r.ids, id)
	r.premises = append(r.premises, pr)
	if len(r.errs) > 0 {
		err := r.errs[0]
		r.errs = r.errs[1:]
		return err
	}
	return nil
}
func (r *fakeRepairer) Reboot(_ context.Context, _ *v1.Node, id string, pr nscloud.Premise) error {
	return r.answer(id, pr)
}
func (r *fakeRepairer) Replace(_ context.Context, _ *v1.Node, id string, pr nscloud.Premise) error {
	return r.answer(id, pr)
}
func (r *fakeRepairer) PowerOff(_ context.Context, _ *v1.Node, id string, pr nscloud.Premise) error {
	return r.answer(id, pr)
}

type harness struct {
	c        *Controller
	client   *fake.Clientset
	clk      *clocktesting.FakeClock
	inst     *fakeInstances
	recorder *record.FakeRecorder
}

func newHarness(t *testing.T, repairer nscloud.Repairer, policy map[string]any, nodes ...*v1.Node) *harness {
	t.Helper()
	return newHarnessWith(t, repairer, nil, policy, nodes...)
}

// newHarnessWith is newHarness with tweak changing the controller's Deps
// before it is built (a fencing endpoint, no InstancesV2).
func newHarnessWith(t *testing.T, repairer nscloud.Repairer, tweak func(*Deps), policy map[string]any, nodes ...*v1.Node) *harness {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	objs := make([]runtime.Object, len(nodes))
	for i, n := range nodes {
		objs[i] = n
	}
	client := fake.NewClientset(objs...)
	clk := clocktesting.NewFakeClock(t0)
	f := informers.NewSharedInformerFactory(client, 0)
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{rem.GroupVersionResource: "RemediationPolicyList"})
	h := &harness{client: client, clk: clk, recorder: record.NewFakeRecorder(100)}
	d := Deps{Client: client, Dynamic: dyn, Nodes: f.Core().V1().Nodes(), Clock: clk, Repairer: repairer, Recorder: h.recorder}
	// A repairer that also powers off fences, with a provider that
	// answers about machines (running unless told).
	if fencer, ok := repairer.(nscloud.Fencer); ok {
		h.inst = &fakeInstances{machines: map[string]string{}}
		d.Fencer, d.Instances = fencer, h.inst
	}
	if tweak != nil {
		tweak(&d)
	}
	c, err := New(Config{}, d)
	if err != nil {
		t.Fatal(err)
	}
	h.c = c
	f.Start(ctx.Done())
	cache.WaitForCacheSync(ctx.Done(), f.Core().V1().Nodes().Informer().HasSynced)
	c.onPolicy(&unstructured.Unstructured{Object: map[string]any{"apiVersion": "nodeshepherd.io/v1alpha1", "kind": "RemediationPolicy",
		"metadata": map[string]any{"name": "gpu"}, "spec": policy}}, false)
	if p := c.policies["gpu"]; p == nil || p.refused != "" {
		t.Fatalf("policy %+v", p)
	}
	return h
}

func (h *harness) node(t *testing.T, name string) *v1.Node {
	t.Helper()
	n, err := h.client.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// update writes the node and waits until the informer has it (the fake
// clientset keeps no resourceVersion: the object is compared).
func (h *harness) update(t *testing.T, n *v1.Node) {
	t.Helper()
	got, err := h.client.CoreV1().Nodes().Update(context.Background(), n, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !cache.WaitForCacheSync(t.Context().Done(), func() bool {
		m, err := h.c.nodes.Get(n.Name)
		return err == nil && equality.Semantic.DeepEqual(m, got)
	}) {
		t.Fatal("informer")
	}
}

var rebootPolicy = map[string]any{
	"unhealthy":   []any{map[string]any{"type": "KernelDeadlock", "status": "True", "for": "1m"}},
	"healthyHold": "2m",
	"steps": []any{map[string]any{"action": "Reboot", "timeout": "10m"}, map[string]any{"action": "Replace", "timeout": "30m"},
		map[string]any{"action": "Fence", "timeout": "10m"}},
}

func deadlocked(name, boot string) *v1.Node {
	return &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-" + name), CreationTimestamp: metav1.NewTime(t0.Add(-time.Hour))},
		Status: v1.NodeStatus{NodeInfo: v1.NodeSystemInfo{BootID: boot},
			Conditions: []v1.NodeCondition{{Type: "KernelDeadlock", Status: v1.ConditionTrue, LastTransitionTime: metav1.NewTime(t0.Add(-5 * time.Minute))}}}}
}

// A reboot is asked once per boot: an error is no answer and is asked
// again with the same ID; after the answer, re-checks ask nothing; once the
// node reports another boot, the step is never asked again.
func TestRebootAskedOncePerBoot(t *testing.T) {
	r := &fakeRepairer{errs: []error{errors.New("timeout")}}
	h := newHarness(t, r, rebootPolicy, deadlocked("n", "b1"))
	ctx := context.Background()
	if err := h.c.sync(ctx, "n"); err == nil {
		t.Fatal("a provider error was taken for an answer")
	}
	st, err := rem.ReadState(h.node(t, "n"), "gpu", 3)
	if err != nil || st.Step != 0 || st.BootID != "b1" {
		t.Fatalf("state %+v, %v", st, err)
	}
	h.update(t, h.node(t, "n")) // the informer sees the record
	for range 3 {
		if err := h.c.sync(ctx, "n"); err != nil {
			t.Fatal(err)
		}
	}
	want := "uid-n/b1/gpu/1/Reboot"
	if len(r.ids) != 2 || r.ids[0] != want || r.ids[1] != want {
		t.Fatalf("requests %v, want %q twice (the first failed)", r.ids, want)
	}
	n := h.node(t, "n")
	n.Status.NodeInfo.BootID = "b2"
	h.update(t, n)
	if err := h.c.sync(ctx, "n"); err != nil {
		t.Fatal(err)
	}
	if len(r.ids) != 2 {
		t.Errorf("asked again after the reboot: %v", r.ids)
	}
	// Still unhealthy at the timeout: Replace, for this boot.
	h.clk.Step(10*time.Minute + time.Second)
	if err := h.c.sync(ctx, "n"); err != nil {
		t.Fatal(err)
	}
	if len(r.ids) != 3 || r.ids[2] != "uid-n/b2/gpu/2/Replace" {
		t.Errorf("requests %v, want the replace for boot b2", r.ids)
	}
	var m dto.Metric
	if err := h.c.metrics.requests.WithLabelValues("Reboot", "error").Write(&m); err != nil || m.GetCounter().GetValue() != 1 {
		v := m.GetCounter().GetValue()
		t.Errorf("reboot errors counted %v", v)
	}
}

// behindController is a controller of policy gpu (rebootPolicy) whose
// informer feeds from another clientset than client, holding cached: a
// cache behind the API server.
func behindController(t *testing.T, client *fake.Clientset, cached *v1.Node, r *fakeRepairer) *Controller {
	t.Helper()
	return behindControllerOf(t, client, cached, r, rebootPolicy)
}

// behindControllerOf is behindController with the policy gpu's spec.
func behindControllerOf(t *testing.T, client *fake.Clientset, cached *v1.Node, r *fakeRepairer, spec map[string]any) *Controller {
	t.Helper()
	ctx := t.Context()
	f := informers.NewSharedInformerFactory(fake.NewClientset(cached), 0)
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{rem.GroupVersionResource: "RemediationPolicyList"})
	c, err := New(Config{}, Deps{Client: client, Dynamic: dyn, Nodes: f.Core().V1().Nodes(), Clock: clocktesting.NewFakeClock(t0), Repairer: r,
		Fencer: r, Instances: &fakeInstances{machines: map[string]string{}}})
	if err != nil {
		t.Fatal(err)
	}
	f.Start(ctx.Done())
	cache.WaitForCacheSync(ctx.Done(), f.Core().V1().Nodes().Informer().HasSynced)
	c.onPolicy(&unstructured.Unstructured{Object: map[string]any{"apiVersion": "nodeshepherd.io/v1alpha1", "kind": "RemediationPolicy",
		"metadata": map[string]any{"name": "gpu"}, "spec": spec}}, false)
	if p := c.policies["gpu"]; p == nil || p.refused != "" {
		t.Fatalf("policy %+v", p)
	}
	return c
}

// A cache that still shows a node unhealthy after it recovered starts no
// repair: the decision is made again on a fresh list. The informer here
// feeds from another clientset, which holds the node as it was.
func TestStaleCacheStartsNothing(t *testing.T) {
	ctx := t.Context()
	recovered := deadlocked("n", "b1")
	recovered.Status.Conditions[0].Status = v1.ConditionFalse
	client := fake.NewClientset(recovered)
	c := behindController(t, client, deadlocked("n", "b1"), &fakeRepairer{})
	if err := c.sync(ctx, "n"); err != nil {
		t.Fatal(err)
	}
	n, _ := client.CoreV1().Nodes().Get(ctx, "n", metav1.GetOptions{})
	if _, ok, _ := rem.RequestOf(n); ok {
		t.Error("a repair started on the cache's stale view")
	}
}

// A cache that still shows a node in the policy's pool after it left it
// sends no step: the fresh list decides selection too (chaos seed 340016: a
// Reboot sent to a node relabelled out of the pool 5 s before, the node
// watch lagging).
func TestStaleCacheStepsNothingOutOfThePool(t *testing.T) {
	ctx := t.Context()
	pool := map[string]any{}
	for k, v := range rebootPolicy {
		pool[k] = v
	}
	pool["nodeSelector"] = map[string]any{"matchLabels": map[string]any{"pool": "gpu"}}
	cached := deadlocked("n", "b1")
	cached.Labels = map[string]string{"pool": "gpu"}
	left := deadlocked("n", "b1") // relabelled: no pool label any more
	client := fake.NewClientset(left)
	r := &fakeRepairer{}
	c := behindControllerOf(t, client, cached, r, pool)
	if err := c.sync(ctx, "n"); err != nil {
		t.Fatal(err)
	}
	n, _ := client.CoreV1().Nodes().Get(ctx, "n", metav1.GetOptions{})
	if _, ok, _ := rem.RequestOf(n); ok || len(r.ids) != 0 {
		t.Errorf("a repair step on the cache's stale selection: record %v, requests %v", ok, r.ids)
	}
}

// A step under way whose request was not sent (its provider call timed out,
// a new leader takes it over) sends nothing to a node that recovered
// meanwhile: not when the cache shows it healthy, nor when only a fresh
// read does (chaos seed 370007: a new leader sent a Replace 10 s after the
// node's condition had cleared). Once the condition holds again on both,
// the request goes, with the step's ID.
// TestRequestHeldBackSaidOncePerReason: a request held back is looked at
// again every second; its log line is said once per reason, not per look.
func TestRequestHeldBackSaidOncePerReason(t *testing.T) {
	first := &fakeRepairer{errs: []error{errors.New("timeout")}}
	h := newHarness(t, first, rebootPolicy, deadlocked("n", "b1"))
	if err := h.c.sync(t.Context(), "n"); err == nil {
		t.Fatal("a provider error was taken for an answer")
	}
	inRepair := h.node(t, "n")
	recovered := inRepair.DeepCopy()
	recovered.Status.Conditions[0].Status = v1.ConditionFalse
	recovered.Status.Conditions[0].LastTransitionTime = metav1.NewTime(t0)
	var mu sync.Mutex
	var held []string
	logger := funcr.New(func(_, args string) {
		if strings.Contains(args, "Not sending the step's request") {
			mu.Lock()
			held = append(held, args)
			mu.Unlock()
		}
	}, funcr.Options{})
	ctx := klog.NewContext(t.Context(), logger)
	r := &fakeRepairer{}
	client := fake.NewClientset(recovered.DeepCopy())
	c := behindControllerOf(t, client, inRepair.DeepCopy(), r, rebootPolicy)
	for range 3 {
		if err := c.sync(ctx, "n"); err != nil {
			t.Fatal(err)
		}
	}
	mu.Lock()
	if len(held) != 1 {
		t.Errorf("held back 3 times for one reason, said %d times: %q", len(held), held)
	}
	mu.Unlock()
	// Another reason is said again.
	if err := client.CoreV1().Nodes().Delete(ctx, "n", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := c.sync(ctx, "n"); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(held) != 2 || !strings.Contains(held[1], "the Node is gone") {
		t.Errorf("a new reason: said %q, want a second line naming it", held)
	}
	if len(r.ids) != 0 {
		t.Errorf("request sent: %v", r.ids)
	}
}

func TestUnsentRequestNotSentToARecoveredNode(t *testing.T) {
	ctx := t.Context()
	// Into repair at step 1 (Reboot); the provider call fails: no answer.
	first := &fakeRepairer{errs: []error{errors.New("timeout")}}
	h := newHarness(t, first, rebootPolicy, deadlocked("n", "b1"))
	if err := h.c.sync(ctx, "n"); err == nil {
		t.Fatal("a provider error was taken for an answer")
	}
	inRepair := h.node(t, "n")
	if st, err := rem.ReadState(inRepair, "gpu", 3); err != nil || st.Step != 0 {
		t.Fatalf("state %+v, %v", st, err)
	}
	recovered := inRepair.DeepCopy()
	recovered.Status.Conditions[0].Status = v1.ConditionFalse
	recovered.Status.Conditions[0].LastTransitionTime = metav1.NewTime(t0)

	for _, tc := range []struct {
		name        string
		cached, api *v1.Node
	}{
		{"the cache shows it recovered", recovered, recovered},
		{"only a fresh read shows it recovered", inRepair, recovered},
	} {
		r := &fakeRepairer{}
		c := behindControllerOf(t, fake.NewClientset(tc.api.DeepCopy()), tc.cached.DeepCopy(), r, rebootPolicy)
		if err := c.sync(ctx, "n"); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if len(r.ids) != 0 {
			t.Errorf("%s: request sent to a recovered node: %v", tc.name, r.ids)
		}
	}
	// Unhealthy on both: a new leader sends the step's request.
	r := &fakeRepairer{}
	c := behindControllerOf(t, fake.NewClientset(inRepair.DeepCopy()), inRepair.DeepCopy(), r, rebootPolicy)
	if err := c.sync(ctx, "n"); err != nil {
		t.Fatal(err)
	}
	if len(r.ids) != 1 || r.ids[0] != first.ids[0] {
		t.Errorf("the step's request: sent %v, want once with %v", r.ids, first.ids)
	}
}
