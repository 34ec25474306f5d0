package remediation

import (
	"context"
	"errors"
	"testing"

	v1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"
	clocktesting "k8s.io/utils/clock/testing"

	nscloud "github.com/nodeshepherd/nodeshepherd/pkg/cloudprovider"
	rem "github.com/nodeshepherd/nodeshepherd/pkg/remediation"
)

// In dry run the evictions before a disruptive step and the keep-off
// taint are reported, never sent, and hold nothing (the step itself is
// only reported too).
func TestEvictProtectedDryRunSendsNothing(t *testing.T) {
	n := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n"}, Status: v1.NodeStatus{Conditions: []v1.NodeCondition{{Type: v1.NodeReady, Status: v1.ConditionTrue}}}}
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web-0", Namespace: "default", Labels: map[string]string{"app": "web"}},
		Spec: v1.PodSpec{NodeName: "n"}, Status: v1.PodStatus{Phase: v1.PodRunning}}
	pdb := &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default"},
		Spec: policyv1.PodDisruptionBudgetSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}}}
	client := fake.NewClientset(n, pod, pdb)
	f := informers.NewSharedInformerFactory(client, 0)
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{rem.GroupVersionResource: "RemediationPolicyList"})
	c, err := New(Config{DryRun: true}, Deps{Client: client, Dynamic: dyn, Nodes: f.Core().V1().Nodes(), Clock: clocktesting.NewFakeClock(t0)})
	if err != nil {
		t.Fatal(err)
	}
	pol := &policy{name: "p", spec: rem.PolicySpec{Steps: []rem.Step{{Action: rem.ActionReboot}}}}
	held, settle, _, err := c.evictProtected(context.Background(), n, pol, 0)
	if err != nil || len(held) != 0 || settle {
		t.Fatalf("dry run: held %q, settle %v, err %v; want nothing held", held, settle, err)
	}
	for _, a := range client.Actions() {
		if a.GetVerb() == "create" || a.GetVerb() == "patch" || a.GetVerb() == "update" {
			t.Errorf("dry run sent a %s of %s/%s", a.GetVerb(), a.GetResource().Resource, a.GetSubresource())
		}
	}
}

// Chaos seed 40004: a Replace deleted a web pod the scheduler had bound to
// the node 0.1 s after it evicted its predecessor. Before a step that
// disrupts pods, new pods are kept off the node (rem.KeepOffTaint, owned
// by the controller), and a look that evicted pods does not start the
// step: a later look does, once it finds none left (a replacement bound
// meanwhile is evicted in turn). The taint stays through the repair.
func TestDisruptiveStepKeepsNewPodsOffAndStartsOnAnEmptyLook(t *testing.T) {
	r := &fakeRepairer{}
	n := deadlocked("n", "b1")
	n.Status.Conditions = append(n.Status.Conditions, v1.NodeCondition{Type: v1.NodeReady, Status: v1.ConditionTrue})
	h := newHarness(t, r, rebootPolicy, n)
	ctx := context.Background()
	pdb := &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default"},
		Spec: policyv1.PodDisruptionBudgetSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}}}
	if _, err := h.client.PolicyV1().PodDisruptionBudgets("default").Create(ctx, pdb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	bind := func(name string) {
		pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID("uid-" + name), Labels: map[string]string{"app": "web"}},
			Spec: v1.PodSpec{NodeName: "n"}, Status: v1.PodStatus{Phase: v1.PodRunning}}
		if _, err := h.client.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	evictions := func() int {
		k := 0
		for _, a := range h.client.Actions() {
			if a.GetVerb() == "create" && a.GetSubresource() == "eviction" {
				k++
			}
		}
		return k
	}
	gone := func(name string) { // the API server's part of an eviction
		if err := h.client.CoreV1().Pods("default").Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	bind("web-0")
	if err := h.c.sync(ctx, "n"); err != nil {
		t.Fatal(err)
	}
	if evictions() != 1 || len(r.ids) != 0 {
		t.Fatalf("first look: %d evictions, requests %v; want web-0 evicted and no Reboot yet", evictions(), r.ids)
	}
	if !ownsKeepOff(h.node(t, "n")) {
		t.Fatalf("no keep-off taint owned by the controller before the evictions: %v", h.node(t, "n").Spec.Taints)
	}
	// Its replacement is bound to the same node before the next look.
	gone("web-0")
	bind("web-1")
	if err := h.c.sync(ctx, "n"); err != nil {
		t.Fatal(err)
	}
	if evictions() != 2 || len(r.ids) != 0 {
		t.Fatalf("second look: %d evictions, requests %v; want web-1 evicted in turn and still no Reboot", evictions(), r.ids)
	}
	gone("web-1")
	if err := h.c.sync(ctx, "n"); err != nil {
		t.Fatal(err)
	}
	if len(r.ids) != 1 || r.ids[0] != "uid-n/b1/gpu/1/Reboot" {
		t.Fatalf("a look that finds nothing to evict: requests %v, want the Reboot", r.ids)
	}
	if !ownsKeepOff(h.node(t, "n")) {
		t.Errorf("the keep-off taint went with the step's start: %v", h.node(t, "n").Spec.Taints)
	}
}

// Chaos seed 170030: the Reboot step found the machine off, left the
// node's not-Ready web pod to the taint manager, and its request reached
// the provider after a person had started the machine again, which then
// rebooted it with the pod while budget web allowed nothing. A step started
// on that answer records it (State.MachineOff) and its requests carry it,
// also when sent again after a lost answer, for the provider to refuse
// them if the machine runs; a step that relied on nothing carries nothing.
func TestStepDecidedOnAnOffMachineCarriesThePremise(t *testing.T) {
	for _, tc := range []struct {
		machine string
		want    nscloud.Premise
	}{{"off", nscloud.PremiseMachineOff}, {"", nscloud.NoPremise}} {
		t.Run("machine="+tc.machine, func(t *testing.T) {
			r := &fakeRepairer{errs: []error{errors.New("timeout")}}
			n := deadlocked("n", "b1")
			n.Status.Conditions = append(n.Status.Conditions, v1.NodeCondition{Type: v1.NodeReady, Status: v1.ConditionUnknown})
			h := newHarness(t, r, rebootPolicy, n)
			h.inst.machines["n"] = tc.machine
			ctx := context.Background()
			pdb := &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default"},
				Spec: policyv1.PodDisruptionBudgetSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}}}
			pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web-0", Namespace: "default", UID: "uid-web-0", Labels: map[string]string{"app": "web"}},
				Spec: v1.PodSpec{NodeName: "n"}, Status: v1.PodStatus{Phase: v1.PodRunning,
					Conditions: []v1.PodCondition{{Type: v1.PodReady, Status: v1.ConditionFalse}}}}
			if _, err := h.client.PolicyV1().PodDisruptionBudgets("default").Create(ctx, pdb, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			if _, err := h.client.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			// Until the Reboot is sent: a running machine's pod is evicted
			// first (the fake clientset's eviction leaves it: deleted here).
			for i := 0; i < 5 && len(r.ids) == 0; i++ {
				_ = h.c.sync(ctx, "n") // the first request's answer is lost
				if tc.machine == "" {
					_ = h.client.CoreV1().Pods("default").Delete(ctx, "web-0", metav1.DeleteOptions{})
				}
			}
			// The record the first attempt wrote reaches the informer.
			if !cache.WaitForCacheSync(t.Context().Done(), func() bool {
				m, err := h.c.nodes.Get("n")
				return err == nil && m.Annotations[rem.AnnotationState] != ""
			}) {
				t.Fatal("informer")
			}
			if err := h.c.sync(ctx, "n"); err != nil { // sent again, answered
				t.Fatal(err)
			}
			if len(r.premises) != 2 || r.ids[0] != r.ids[1] {
				t.Fatalf("requests %v with premises %q, want one sent twice", r.ids, r.premises)
			}
			for _, got := range r.premises {
				if got != tc.want {
					t.Errorf("premise %q, want %q", got, tc.want)
				}
			}
			st, err := rem.ReadState(h.node(t, "n"), "gpu", 3)
			if err != nil || st.Step != 0 || st.MachineOff != (tc.want == nscloud.PremiseMachineOff) {
				t.Errorf("state %+v, %v", st, err)
			}
		})
	}
}
