package drain

import (
	"context"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

// How many pods a Deployment may surge by, as the deployment controller
// resolves maxSurge (percentages rounded up), and why none.
func TestMaxSurge(t *testing.T) {
	dep := func(replicas int32, strategy appsv1.DeploymentStrategy) *appsv1.Deployment {
		return &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web"},
			Spec: appsv1.DeploymentSpec{Replicas: ptr.To(replicas), Strategy: strategy}}
	}
	rolling := func(surge intstr.IntOrString) appsv1.DeploymentStrategy {
		return appsv1.DeploymentStrategy{Type: appsv1.RollingUpdateDeploymentStrategyType, RollingUpdate: &appsv1.RollingUpdateDeployment{MaxSurge: &surge}}
	}
	for name, tc := range map[string]struct {
		d    *appsv1.Deployment
		want int32
		why  string
	}{
		"default 25% of 1, rounded up": {dep(1, appsv1.DeploymentStrategy{}), 1, ""},
		"default 25% of 3":             {dep(3, appsv1.DeploymentStrategy{}), 1, ""},
		"50% of 10":                    {dep(10, rolling(intstr.FromString("50%"))), 5, ""},
		"absolute 2":                   {dep(3, rolling(intstr.FromInt32(2))), 2, ""},
		"maxSurge 0":                   {dep(3, rolling(intstr.FromInt32(0))), 0, "has maxSurge 0, which allows no surge"},
		"Recreate":                     {dep(3, appsv1.DeploymentStrategy{Type: appsv1.RecreateDeploymentStrategyType}), 0, "uses the Recreate strategy"},
	} {
		got, why := maxSurge(tc.d)
		if got != tc.want || (tc.why == "") != (why == "") || !strings.Contains(why, tc.why) {
			t.Errorf("%s: maxSurge = %d, %q; want %d, %q", name, got, why, tc.want, tc.why)
		}
	}
}

// Pods that no Deployment owns are not moved, and the drain says why.
func TestOwnerDeploymentNamesWhatCannotSurge(t *testing.T) {
	c := &Controller{}
	pod := func(owner *metav1.OwnerReference) *v1.Pod {
		p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p"}}
		if owner != nil {
			owner.Controller = ptr.To(true)
			p.OwnerReferences = []metav1.OwnerReference{*owner}
		}
		return p
	}
	for want, p := range map[string]*v1.Pod{
		"a pod without a controller":                       pod(nil),
		"StatefulSet ns/db: its pods cannot surge":         pod(&metav1.OwnerReference{Kind: "StatefulSet", Name: "db"}),
		"Job ns/batch: only a Deployment's pods are moved": pod(&metav1.OwnerReference{Kind: "Job", Name: "batch"}),
	} {
		d, why, err := c.ownerDeployment(context.Background(), p)
		if d != nil || err != nil || !strings.Contains(why, want) {
			t.Errorf("ownerDeployment = %v, %q, %v; want %q", d, why, err, want)
		}
	}
}

func TestReadMove(t *testing.T) {
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{}}}
	for v, ok := range map[string]bool{
		`{"node":"n1","replicas":1,"surge":1,"pods":{"web-1":""},"since":"2026-11-27T10:00:00.000000000Z"}`: true,
		`{"node":"","replicas":1,"surge":1}`:   false,
		`{"node":"n1","replicas":1,"surge":0}`: false,
		`not json`:                             false,
	} {
		d.Annotations[AnnotationMove] = v
		if got := readMove(d); (got != nil) != ok {
			t.Errorf("readMove(%s) = %+v, want a record: %v", v, got, ok)
		}
	}
}

func TestGitOpsOwner(t *testing.T) {
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"argocd.argoproj.io/instance": "shop"}}}
	if got := gitOpsOwner(d); got != "Argo CD application shop" {
		t.Errorf("gitOpsOwner = %q", got)
	}
	d.Labels = map[string]string{"kustomize.toolkit.fluxcd.io/name": "apps"}
	if got := gitOpsOwner(d); got != "Flux Kustomization apps" {
		t.Errorf("gitOpsOwner = %q", got)
	}
	// Argo CD's default tracking label (issue 46 point 6).
	d.Labels = map[string]string{"app.kubernetes.io/instance": "shop"}
	if got := gitOpsOwner(d); !strings.Contains(got, "Argo CD application or Helm release shop") {
		t.Errorf("gitOpsOwner = %q for Argo CD's default tracking label", got)
	}
	d.Labels = nil
	if got := gitOpsOwner(d); got != "" {
		t.Errorf("gitOpsOwner = %q for a Deployment nothing manages", got)
	}
}

// The opt-in annotation takes "true" or "false"; anything else is refused,
// named, rather than read as either.
func TestOptIn(t *testing.T) {
	for v, want := range map[string]bool{"true": true, "false": false} {
		if on, bad := optIn("Namespace shop", v); on != want || bad != "" {
			t.Errorf("optIn(%q) = %v, %q", v, on, bad)
		}
	}
	if on, bad := optIn("Namespace shop", "yes"); on || !strings.Contains(bad, `Namespace shop has nodeshepherd.io/move-before-evict="yes", which is neither "true" nor "false"`) {
		t.Errorf("optIn(yes) = %v, %q", on, bad)
	}
}
