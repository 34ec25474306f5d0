package remediation

import (
	"context"
	"testing"

	v1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	clocktesting "k8s.io/utils/clock/testing"

	rem "github.com/nodeshepherd/nodeshepherd/pkg/remediation"
)

// In dry run the evictions before a disruptive step are reported, never
// sent, and hold nothing (the step itself is only reported too).
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
	held, err := c.evictProtected(context.Background(), n)
	if err != nil || len(held) != 0 {
		t.Fatalf("dry run: held %q, err %v; want nothing held", held, err)
	}
	for _, a := range client.Actions() {
		if a.GetVerb() == "create" {
			t.Errorf("dry run sent a %s of %s/%s", a.GetVerb(), a.GetResource().Resource, a.GetSubresource())
		}
	}
}
