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
	cloudprovider "k8s.io/cloud-provider"
	clocktesting "k8s.io/utils/clock/testing"

	nscloud "github.com/nodeshepherd/nodeshepherd/pkg/cloudprovider"
	rem "github.com/nodeshepherd/nodeshepherd/pkg/remediation"
)

// fakeInstances answers from a table: "off" (shut down), "gone", "error";
// else running. It records the deadline of each question's context.
type fakeInstances struct {
	mu        sync.Mutex
	machines  map[string]string
	deadlines []time.Duration
}

func (f *fakeInstances) set(node, state string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.machines[node] = state
}

func (f *fakeInstances) state(ctx context.Context, n *v1.Node) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	d := time.Duration(-1)
	if dl, ok := ctx.Deadline(); ok {
		d = time.Until(dl)
	}
	f.deadlines = append(f.deadlines, d)
	if f.machines[n.Name] == "error" {
		return "", errors.New("injected provider error")
	}
	return f.machines[n.Name], nil
}

func (f *fakeInstances) InstanceExists(ctx context.Context, n *v1.Node) (bool, error) {
	s, err := f.state(ctx, n)
	return s != "gone", err
}

func (f *fakeInstances) InstanceShutdown(ctx context.Context, n *v1.Node) (bool, error) {
	s, err := f.state(ctx, n)
	return s == "off", err
}

func (f *fakeInstances) InstanceMetadata(context.Context, *v1.Node) (*cloudprovider.InstanceMetadata, error) {
	return &cloudprovider.InstanceMetadata{}, nil
}

// fencePolicy: a Fence step alone, 1m (a settle time of 30s).
var fencePolicy = map[string]any{
	"unhealthy":   []any{map[string]any{"type": "KernelDeadlock", "status": "True", "for": "1m"}},
	"healthyHold": "30s",
	"steps":       []any{map[string]any{"action": "Fence", "timeout": "1m"}},
}

// events are the recorded events of reason.
func (h *harness) events(reason string) []string {
	var out []string
	for {
		select {
		case e := <-h.recorder.Events:
			if strings.Contains(e, " "+reason+" ") {
				out = append(out, e)
			}
		default:
			return out
		}
	}
}

func (h *harness) record(t *testing.T) rem.Request {
	t.Helper()
	r, ok, err := rem.RequestOf(h.node(t, "n"))
	if err != nil || !ok {
		t.Fatalf("record %+v %v %v", r, ok, err)
	}
	return r
}

// Issue 46: the Fence step is a power-off request followed by the
// provider's confirmation. Reaching the step writes no confirmation; a
// "running" answer within the settle time is a power-off under way; after
// it, a veto, said once (not at every re-check) and shown in the status;
// the request is sent once per boot; once the provider answers the machine
// off the record confirms that boot.
func TestFenceWaitsForThePowerOff(t *testing.T) {
	r := &fakeRepairer{}
	h := newHarness(t, r, fencePolicy, deadlocked("n", "b1"))
	ctx := context.Background()
	if err := h.c.sync(ctx, "n"); err != nil {
		t.Fatal(err)
	}
	if rec := h.record(t); rec.Action != rem.ActionFence || rec.FenceBootID != "" {
		t.Fatalf("reaching the step confirmed the death: %+v", rec)
	}
	if len(r.ids) != 1 || r.ids[0] != "uid-n/b1/gpu/1/Fence" {
		t.Fatalf("requests %v", r.ids)
	}
	h.update(t, h.node(t, "n"))
	h.clk.Step(10 * time.Second)
	if err := h.c.sync(ctx, "n"); err != nil {
		t.Fatal(err)
	}
	if ev := h.events(EventFenceVetoed); len(ev) != 0 {
		t.Fatalf("vetoed within the settle time: %q", ev)
	}
	if w := h.c.fenceWords("n"); !strings.HasPrefix(w, "requested") {
		t.Errorf("fence words %q", w)
	}
	// Past the settle time (30s), still running: vetoed, said once.
	h.clk.Step(25 * time.Second)
	for range 3 {
		if err := h.c.sync(ctx, "n"); err != nil {
			t.Fatal(err)
		}
	}
	if ev := h.events(EventFenceVetoed); len(ev) != 1 || !strings.Contains(ev[0], "answers that the machine of node n runs") {
		t.Fatalf("veto events %q, want one", ev)
	}
	if rec := h.record(t); rec.FenceBootID != "" {
		t.Fatalf("confirmed while the provider answers running: %+v", rec)
	}
	st := h.c.count(h.c.policy("gpu"))
	if len(st.Repairs) != 1 || !strings.HasPrefix(st.Repairs[0].Fence, "vetoed:") {
		t.Errorf("status repairs %+v", st.Repairs)
	}
	if len(r.ids) != 1 {
		t.Errorf("the request was sent again: %v", r.ids)
	}
	// The machine goes off: confirmed for b1.
	h.inst.set("n", "off")
	if err := h.c.sync(ctx, "n"); err != nil {
		t.Fatal(err)
	}
	if rec := h.record(t); rec.FenceBootID != "b1" {
		t.Fatalf("not confirmed once off: %+v", rec)
	}
	if ev := h.events(EventStep); len(ev) != 1 || !strings.Contains(ev[0], "powered off") {
		t.Errorf("step events %q", ev)
	}
	h.update(t, h.node(t, "n"))
	if st := h.c.count(h.c.policy("gpu")); len(st.Repairs) != 1 || !strings.HasPrefix(st.Repairs[0].Fence, "powered off") {
		t.Errorf("status repairs %+v", st.Repairs)
	}
}

// A machine that has booted again since the request (the node reports
// another boot) is running: vetoed, even if the provider answers it off
// now; nothing is asked for the new boot by the same step.
func TestFenceOfAnotherBootVetoed(t *testing.T) {
	r := &fakeRepairer{}
	h := newHarness(t, r, fencePolicy, deadlocked("n", "b1"))
	ctx := context.Background()
	if err := h.c.sync(ctx, "n"); err != nil {
		t.Fatal(err)
	}
	n := h.node(t, "n")
	n.Status.NodeInfo.BootID = "b2"
	h.update(t, n)
	h.inst.set("n", "off")
	if err := h.c.sync(ctx, "n"); err != nil {
		t.Fatal(err)
	}
	if rec := h.record(t); rec.FenceBootID != "" {
		t.Fatalf("confirmed for another boot: %+v", rec)
	}
	if ev := h.events(EventFenceVetoed); len(ev) != 1 || !strings.Contains(ev[0], `reports boot ID "b2", not "b1"`) {
		t.Fatalf("veto events %q", ev)
	}
	if len(r.ids) != 1 {
		t.Errorf("requests %v", r.ids)
	}
}

// A provider's refusal is a veto (unless it answers the machine off); an
// error is no answer: asked again with the same ID, nothing decided.
func TestFenceRefusedOrUnanswered(t *testing.T) {
	r := &fakeRepairer{errs: []error{errors.New("timeout"), &nscloud.RefusedError{Step: "PowerOff", Node: "n", Message: "no BMC"}}}
	h := newHarness(t, r, fencePolicy, deadlocked("n", "b1"))
	ctx := context.Background()
	if err := h.c.sync(ctx, "n"); err == nil {
		t.Fatal("a provider error was taken for an answer")
	}
	h.update(t, h.node(t, "n"))
	if err := h.c.sync(ctx, "n"); err != nil {
		t.Fatal(err)
	}
	if len(r.ids) != 2 || r.ids[0] != r.ids[1] {
		t.Fatalf("requests %v, want the same ID twice", r.ids)
	}
	if ev := h.events(EventFenceVetoed); len(ev) != 1 || !strings.Contains(ev[0], "refused") || !strings.Contains(ev[0], "no BMC") {
		t.Fatalf("veto events %q", ev)
	}
	if rec := h.record(t); rec.FenceBootID != "" {
		t.Fatalf("confirmed after a refusal: %+v", rec)
	}
}

// Issue 45 (4d) for the Fence: the power-off request and the questions that
// confirm it are bounded.
func TestFenceCallsBounded(t *testing.T) {
	r := &deadlineRepairer{}
	h := newHarness(t, r, fencePolicy, deadlocked("n", "b1"))
	if err := h.c.sync(context.Background(), "n"); err != nil {
		t.Fatal(err)
	}
	if len(r.deadlines) != 1 || r.deadlines[0] <= 0 || r.deadlines[0] > providerTimeout {
		t.Fatalf("request deadlines %v, want one within %v", r.deadlines, providerTimeout)
	}
	if len(h.inst.deadlines) == 0 {
		t.Fatal("the provider was not asked whether the machine is off")
	}
	for _, d := range h.inst.deadlines {
		if d <= 0 || d > providerTimeout {
			t.Errorf("question deadlines %v, want each within %v", h.inst.deadlines, providerTimeout)
		}
	}
}

// Issue 46: a policy with a Fence step is refused, with the reason in its
// Accepted condition, when no provider can power off and confirm; a
// provider that reboots but cannot power off is no better. Nothing starts.
func TestFencePolicyRefusedWithoutAFencer(t *testing.T) {
	for _, tc := range []struct {
		name     string
		repairer nscloud.Repairer
		cloud    string
		want     string
	}{
		{"no provider", nil, "", "no --cloud-provider is configured"},
		{"a provider without PowerOff", &deadlineRepairerNoFence{}, "acme", `the cloud provider "acme" cannot`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := t.Context()
			client := fake.NewClientset(deadlocked("n", "b1"))
			f := informers.NewSharedInformerFactory(client, 0)
			dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{rem.GroupVersionResource: "RemediationPolicyList"})
			c, err := New(Config{}, Deps{Client: client, Dynamic: dyn, Nodes: f.Core().V1().Nodes(), Clock: clocktesting.NewFakeClock(t0),
				Repairer: tc.repairer, CloudName: tc.cloud})
			if err != nil {
				t.Fatal(err)
			}
			f.Start(ctx.Done())
			f.WaitForCacheSync(ctx.Done())
			c.onPolicy(&unstructured.Unstructured{Object: map[string]any{"apiVersion": "nodeshepherd.io/v1alpha1", "kind": "RemediationPolicy",
				"metadata": map[string]any{"name": "gpu"}, "spec": rebootPolicy}}, false)
			p := c.policy("gpu")
			if p == nil || p.refusedReason != ReasonCannotFence || !strings.Contains(p.refused, "step 3 (Fence)") || !strings.Contains(p.refused, tc.want) {
				t.Fatalf("policy %+v", p)
			}
			st := c.count(p)
			if len(st.Conditions) == 0 || st.Conditions[0].Type != ConditionAccepted || st.Conditions[0].Status != metav1.ConditionFalse || st.Conditions[0].Reason != ReasonCannotFence {
				t.Errorf("conditions %+v", st.Conditions)
			}
			if err := c.sync(ctx, "n"); err != nil {
				t.Fatal(err)
			}
			n, _ := client.CoreV1().Nodes().Get(ctx, "n", metav1.GetOptions{})
			if _, ok, _ := rem.RequestOf(n); ok {
				t.Error("a repair started under a refused policy")
			}
		})
	}
}

// deadlineRepairerNoFence reboots and replaces, and cannot power off.
type deadlineRepairerNoFence struct{ fakeRepairer }
