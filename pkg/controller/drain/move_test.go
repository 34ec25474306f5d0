package drain

import (
	"context"
	"errors"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	v1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
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

// A Deployment whose pods share a ReadWriteOnce or ReadWriteOncePod claim is
// not surged: the surge pod could not use the volume while the pod on the
// node holds it (issue 46 point 6). A ReadWriteMany claim, an ephemeral
// volume (one claim per pod) and a claim that does not exist do not stop it.
func TestExclusiveClaim(t *testing.T) {
	dep := func(vols ...v1.Volume) *appsv1.Deployment {
		d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "db"}}
		d.Spec.Template.Spec.Volumes = vols
		return d
	}
	claimVol := func(claim string) v1.Volume {
		return v1.Volume{Name: claim, VolumeSource: v1.VolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: claim}}}
	}
	ephemeral := v1.Volume{Name: "scratch", VolumeSource: v1.VolumeSource{Ephemeral: &v1.EphemeralVolumeSource{
		VolumeClaimTemplate: &v1.PersistentVolumeClaimTemplate{Spec: v1.PersistentVolumeClaimSpec{AccessModes: []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce}}}}}}
	claim := func(name string, modes ...v1.PersistentVolumeAccessMode) *v1.PersistentVolumeClaim {
		return &v1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name}, Spec: v1.PersistentVolumeClaimSpec{AccessModes: modes}}
	}
	claims := map[string]*v1.PersistentVolumeClaim{
		"rwo":  claim("rwo", v1.ReadWriteOnce),
		"rwop": claim("rwop", v1.ReadWriteOncePod),
		"both": claim("both", v1.ReadWriteOnce, v1.ReadWriteOncePod),
		"rwx":  claim("rwx", v1.ReadWriteMany),
		"rox":  claim("rox", v1.ReadOnlyMany),
	}
	for name, tc := range map[string]struct {
		d    *appsv1.Deployment
		want string
	}{
		"ReadWriteOnce": {dep(claimVol("rwx"), claimVol("rwo")),
			"Deployment ns/db's pods share PersistentVolumeClaim rwo (ReadWriteOnce): a surge pod could not use it while the pod here holds it"},
		"ReadWriteOncePod":        {dep(claimVol("rwop")), "PersistentVolumeClaim rwop (ReadWriteOncePod)"},
		"ReadWriteOncePod named":  {dep(claimVol("both")), "PersistentVolumeClaim both (ReadWriteOncePod)"},
		"ReadWriteMany":           {dep(claimVol("rwx"), claimVol("rox")), ""},
		"ephemeral (one per pod)": {dep(ephemeral), ""},
		"claim not found":         {dep(claimVol("missing")), ""},
		"no volumes":              {dep(), ""},
		"emptyDir":                {dep(v1.Volume{Name: "tmp", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}}), ""},
	} {
		got := exclusiveClaim(tc.d, claims)
		if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
			t.Errorf("%s: exclusiveClaim = %q, want %q", name, got, tc.want)
		}
	}
}

// Whether a budget allows a disruption with n pods, as the disruption
// controller counts (percentages rounded up).
func TestBudgetAllowsAt(t *testing.T) {
	pdb := func(minAvailable, maxUnavailable *intstr.IntOrString) *policyv1.PodDisruptionBudget {
		return &policyv1.PodDisruptionBudget{Spec: policyv1.PodDisruptionBudgetSpec{MinAvailable: minAvailable, MaxUnavailable: maxUnavailable}}
	}
	for _, tc := range []struct {
		b    *policyv1.PodDisruptionBudget
		n    int32
		want bool
	}{
		{pdb(ptr.To(intstr.FromInt32(1)), nil), 1, false},
		{pdb(ptr.To(intstr.FromInt32(1)), nil), 2, true},
		{pdb(ptr.To(intstr.FromString("50%")), nil), 1, false},
		{pdb(ptr.To(intstr.FromString("50%")), nil), 2, true},
		{pdb(ptr.To(intstr.FromString("100%")), nil), 5, false},
		{pdb(nil, ptr.To(intstr.FromInt32(0))), 5, false},
		{pdb(nil, ptr.To(intstr.FromString("0%"))), 5, false},
		{pdb(nil, ptr.To(intstr.FromString("10%"))), 2, true},
		{pdb(nil, nil), 3, false},
	} {
		if got := budgetAllowsAt(tc.b, tc.n); got != tc.want {
			t.Errorf("budgetAllowsAt(%+v, %d) = %v, want %v", tc.b.Spec, tc.n, got, tc.want)
		}
	}
}

// A Deployment a HorizontalPodAutoscaler scales is not moved; the refusal
// says what would unblock the drain (issue 46 point 6): at the autoscaler's
// minimum, raising minReplicas by the pods on the node when the budget would
// then allow a disruption, else relaxing the budget.
func TestHPARefusalSaysWhatToDo(t *testing.T) {
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web"}, Spec: appsv1.DeploymentSpec{Replicas: ptr.To(int32(2))}}
	h := &autoscalingv2.HorizontalPodAutoscaler{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web-hpa"},
		Spec: autoscalingv2.HorizontalPodAutoscalerSpec{MinReplicas: ptr.To(int32(2)), MaxReplicas: 10}}
	budget := func(name string, minAvailable, maxUnavailable *intstr.IntOrString) *policyv1.PodDisruptionBudget {
		return &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: policyv1.PodDisruptionBudgetSpec{MinAvailable: minAvailable, MaxUnavailable: maxUnavailable}}
	}
	const owned = "Deployment shop/web's replicas are owned by HorizontalPodAutoscaler web-hpa, which would undo a surge"
	for name, tc := range map[string]struct {
		replicas int32
		pdbs     []*policyv1.PodDisruptionBudget
		here     int32
		want     string
	}{
		"at its minimum, minAvailable": {2, []*policyv1.PodDisruptionBudget{budget("web", ptr.To(intstr.FromInt32(2)), nil)}, 2,
			owned + " (replicas 2, the autoscaler's minReplicas, where PodDisruptionBudget web allows no disruption); to drain, raise the autoscaler's minReplicas from 2 to 4 (by its 2 pods on this node) until the drain is done, or relax PodDisruptionBudget web"},
		"at its minimum, maxUnavailable 0": {2, []*policyv1.PodDisruptionBudget{budget("web", nil, ptr.To(intstr.FromInt32(0)))}, 1,
			owned + " (replicas 2, the autoscaler's minReplicas, where PodDisruptionBudget web allows no disruption); raising minReplicas would not let PodDisruptionBudget web allow a disruption: to drain, relax it"},
		"at its minimum, two budgets, one never allows": {2, []*policyv1.PodDisruptionBudget{budget("a", ptr.To(intstr.FromInt32(1)), nil), budget("b", ptr.To(intstr.FromString("100%")), nil)}, 1,
			"raising minReplicas would not let PodDisruptionBudgets a, b allow a disruption: to drain, relax it"},
		"above its minimum": {3, []*policyv1.PodDisruptionBudget{budget("web", ptr.To(intstr.FromInt32(3)), nil)}, 1,
			owned + "; to drain, relax PodDisruptionBudget web"},
		"no budget found": {2, nil, 1, owned + " (replicas 2, the autoscaler's minReplicas, where a PodDisruptionBudget allows no disruption); raising minReplicas would not let"},
	} {
		d.Spec.Replicas = ptr.To(tc.replicas)
		if got := hpaRefusal(d, h, tc.pdbs, tc.here); !strings.Contains(got, tc.want) {
			t.Errorf("%s: hpaRefusal =\n%q, want\n%q", name, got, tc.want)
		}
	}
}

// When marking the pods to move fails halfway, what the move wrote is
// undone before the error returns: no pod keeps the lowest deletion cost
// without a move record (a later round would skip it). Only the cost the
// move wrote is taken back: one changed since stays (issue 46 point 6).
func TestMarkToMoveUndoesAFailedMark(t *testing.T) {
	costed := func(name, cost string) *v1.Pod {
		p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name}}
		if cost != "" {
			p.Annotations = map[string]string{annotationDeletionCost: cost}
		}
		return p
	}
	for name, tc := range map[string]struct {
		// changeA: someone sets a's cost while b's write fails.
		changeA string
		want    map[string]string
	}{
		"undone":                {"", map[string]string{"a": "", "b": "7", "c": "", "d": "3"}},
		"a changed since stays": {"42", map[string]string{"a": "42", "b": "7", "c": "", "d": "3"}},
	} {
		t.Run(name, func(t *testing.T) {
			client := fake.NewSimpleClientset(costed("a", ""), costed("b", "7"), costed("c", ""), costed("d", "3"))
			pods := v1.SchemeGroupVersion.WithResource("pods")
			client.PrependReactor("patch", "pods", func(a clienttesting.Action) (bool, runtime.Object, error) {
				pa := a.(clienttesting.PatchAction)
				if pa.GetName() != "c" || pa.GetPatchType() != types.MergePatchType {
					return false, nil, nil
				}
				if tc.changeA != "" {
					o, _ := client.Tracker().Get(pods, "ns", "a")
					p := o.(*v1.Pod).DeepCopy()
					p.Annotations[annotationDeletionCost] = tc.changeA
					if err := client.Tracker().Update(pods, p, "ns"); err != nil {
						t.Fatal(err)
					}
				}
				return true, nil, apierrors.NewInternalError(errors.New("injected"))
			})
			c := &Controller{client: client}
			err := c.markToMove(context.Background(), "ns", map[string]string{"a": "", "b": "7", "c": "", "d": "3"})
			if err == nil || !strings.Contains(err.Error(), "marking pod ns/c") {
				t.Fatalf("markToMove = %v, want the failed mark of c", err)
			}
			for name, want := range tc.want {
				p, err := client.CoreV1().Pods("ns").Get(context.Background(), name, metav1.GetOptions{})
				if err != nil {
					t.Fatal(err)
				}
				if got := p.Annotations[annotationDeletionCost]; got != want {
					t.Errorf("pod %s has cost %q after the failed mark, want %q", name, got, want)
				}
			}
		})
	}
}
