package kube

import (
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestNotBefore(t *testing.T) {
	sec := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	if got := NotBefore(sec); !got.Equal(sec.Add(time.Second)) {
		t.Errorf("second-precision time: got %v, want %v", got, sec.Add(time.Second))
	}
	exact := sec.Add(400 * time.Millisecond)
	if got := NotBefore(exact); !got.Equal(exact) {
		t.Errorf("sub-second time: got %v, want it unchanged", got)
	}
	if got := NotBefore(time.Time{}); !got.IsZero() {
		t.Errorf("zero time: got %v", got)
	}
}

func TestPDBSelects(t *testing.T) {
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Labels: map[string]string{"app": "web"}}}
	pdb := func(ns string, sel *metav1.LabelSelector) *policyv1.PodDisruptionBudget {
		return &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Namespace: ns}, Spec: policyv1.PodDisruptionBudgetSpec{Selector: sel}}
	}
	for name, tc := range map[string]struct {
		b    *policyv1.PodDisruptionBudget
		want bool
	}{
		"matching labels":                 {pdb("a", &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}), true},
		"other labels":                    {pdb("a", &metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}}), false},
		"empty selector: every pod of ns": {pdb("a", &metav1.LabelSelector{}), true},
		"empty selector, other namespace": {pdb("b", &metav1.LabelSelector{}), false},
		"no selector: no pod":             {pdb("a", nil), false},
		"invalid selector":                {pdb("a", &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "app", Operator: "Bogus"}}}), false},
	} {
		if got := PDBSelects(tc.b, pod); got != tc.want {
			t.Errorf("%s: PDBSelects = %v, want %v", name, got, tc.want)
		}
	}
}
