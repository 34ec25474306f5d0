package remediation

import (
	"testing"

	v1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

func TestToEvict(t *testing.T) {
	node := func(ready v1.ConditionStatus) *v1.Node {
		return &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n"}, Status: v1.NodeStatus{Conditions: []v1.NodeCondition{{Type: v1.NodeReady, Status: ready}}}}
	}
	pod := func(name string, ready bool, mut func(*v1.Pod)) v1.Pod {
		st := v1.ConditionFalse
		if ready {
			st = v1.ConditionTrue
		}
		p := v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", Labels: map[string]string{"app": "web"}},
			Spec:   v1.PodSpec{NodeName: "n"},
			Status: v1.PodStatus{Phase: v1.PodRunning, Conditions: []v1.PodCondition{{Type: v1.PodReady, Status: st}}}}
		if mut != nil {
			mut(&p)
		}
		return p
	}
	pdbs := []policyv1.PodDisruptionBudget{
		{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default"}, Spec: policyv1.PodDisruptionBudgetSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "other", Namespace: "other"}, Spec: policyv1.PodDisruptionBudgetSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}}},
	}
	pods := []v1.Pod{
		pod("b-ready", true, nil),
		pod("a-unready", false, nil),
		pod("unprotected", true, func(p *v1.Pod) { p.Labels = map[string]string{"app": "db"} }),
		pod("elsewhere", true, func(p *v1.Pod) { p.Spec.NodeName = "m" }),
		pod("terminating", true, func(p *v1.Pod) { p.DeletionTimestamp = ptr.To(metav1.Now()) }),
		pod("done", true, func(p *v1.Pod) { p.Status.Phase = v1.PodSucceeded }),
		pod("daemon", true, func(p *v1.Pod) {
			p.OwnerReferences = []metav1.OwnerReference{{Kind: "DaemonSet", Name: "d", Controller: ptr.To(true)}}
		}),
		pod("mirror", true, func(p *v1.Pod) { p.Annotations = map[string]string{v1.MirrorPodAnnotationKey: "x"} }),
	}
	names := func(ps []Protected) []string {
		var out []string
		for _, p := range ps {
			out = append(out, p.Pod.Name)
			if len(p.Budgets) != 1 || p.Budgets[0] != "PodDisruptionBudget default/web" {
				t.Errorf("%s: budgets %q, want only default/web", p.Pod.Name, p.Budgets)
			}
		}
		return out
	}
	// On a Ready node every protected pod that runs is evicted first, Ready
	// or not, in name order.
	if got := names(ToEvict(node(v1.ConditionTrue), pods, pdbs, false)); len(got) != 2 || got[0] != "a-unready" || got[1] != "b-ready" {
		t.Errorf("Ready node: %q, want [a-unready b-ready]", got)
	}
	// On a node that is not Ready whose machine the provider answers off,
	// its pods that are not Ready went down with it: a Fence of a dead
	// machine does not wait on them.
	if got := names(ToEvict(node(v1.ConditionUnknown), pods, pdbs, true)); len(got) != 1 || got[0] != "b-ready" {
		t.Errorf("node not Ready, machine off: %q, want [b-ready]", got)
	}
	// Without that answer (chaos seed 70016: a partitioned machine that
	// runs), they may come back: their budgets decide too.
	if got := names(ToEvict(node(v1.ConditionUnknown), pods, pdbs, false)); len(got) != 2 || got[0] != "a-unready" || got[1] != "b-ready" {
		t.Errorf("node not Ready, machine not answered off: %q, want [a-unready b-ready]", got)
	}
	if got := ToEvict(node(v1.ConditionTrue), pods, nil, false); len(got) != 0 {
		t.Errorf("no budgets: %d pods to evict, want none", len(got))
	}
}
