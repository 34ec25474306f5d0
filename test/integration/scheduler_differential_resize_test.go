package integration

import (
	"encoding/json"
	"math/rand/v2"
	"strconv"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/nodeshepherd/nodeshepherd/test/framework"
)

// The differential test's resize seeds have in-place resizes: once placed,
// a pod in two reports that its kubelet allocated and actuated another
// CPU request than its spec asks (a resize under way: a downsize not yet
// actuated leaves the allocation above the spec, an upsize not yet
// allocated below it). Both schedulers count a placed pod's CPU as the
// larger of the two, so the room the next pods find depends on it. The
// allocation is an annotation of the generated pod (so it is part of the
// recorded inputs), written to the pod's status by the test once the pod is
// on kube-scheduler's node, on both runs, and again when a pod is put back.
var diffResizeSeeds = []uint64{8, 9}

// diffAllocatedAnnotation: the CPU (millicores) the pod's kubelet allocated.
const diffAllocatedAnnotation = "diff.nodeshepherd.io/allocated-cpu"

func diffAddResizes(w *diffWorkload) {
	r := rand.New(rand.NewPCG(w.Seed, 3))
	for _, p := range w.Pods {
		if r.IntN(2) != 0 {
			continue
		}
		spec := p.Spec.Containers[0].Resources.Requests[v1.ResourceCPU]
		milli := spec.MilliValue() * pick[int64](r, 1, 4, 6) / 2 // half, twice or three times the spec
		if p.Annotations == nil {
			p.Annotations = map[string]string{}
		}
		p.Annotations[diffAllocatedAnnotation] = strconv.FormatInt(milli, 10)
	}
}

// resize writes the pod's allocation to its status, as its kubelet would
// after accepting the resize, and keeps it on p (the checker's copy) so
// that the checker counts it and a pod put back gets it again. A pod
// without the annotation is left alone.
func (d *diffRun) resize(t *testing.T, p *v1.Pod) {
	t.Helper()
	milli, ok := p.Annotations[diffAllocatedAnnotation]
	if !ok {
		return
	}
	m, err := strconv.ParseInt(milli, 10, 64)
	if err != nil {
		t.Fatalf("pod %s: %s=%q: %v", diffKey(p), diffAllocatedAnnotation, milli, err)
	}
	q := *resource.NewMilliQuantity(m, resource.DecimalSI)
	c := p.Spec.Containers[0]
	p.Status = v1.PodStatus{Phase: v1.PodRunning, ContainerStatuses: []v1.ContainerStatus{{
		Name: c.Name, Image: c.Image, ImageID: c.Image, Ready: true, Started: ptr.To(true),
		State:              v1.ContainerState{Running: &v1.ContainerStateRunning{StartedAt: metav1.Now()}},
		AllocatedResources: v1.ResourceList{v1.ResourceCPU: q},
		Resources:          &v1.ResourceRequirements{Requests: v1.ResourceList{v1.ResourceCPU: q}},
	}}}
	d.writeStatus(t, p)
}

// writeStatus patches the pod's status as p has it (a pod put back was
// created with an empty one).
func (d *diffRun) writeStatus(t *testing.T, p *v1.Pod) {
	t.Helper()
	data, err := json.Marshal(map[string]any{"status": p.Status})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.client.CoreV1().Pods(p.Namespace).Patch(framework.Context(t), p.Name, types.StrategicMergePatchType, data, metav1.PatchOptions{}, "status"); err != nil {
		t.Fatalf("pod %s: writing its allocated resources: %v", diffKey(p), err)
	}
}

// diffRequest is what a placed pod counts for on its node: its spec's
// request, or what its kubelet allocated or actuated when that is more.
func diffRequest(p *v1.Pod, res v1.ResourceName) resource.Quantity {
	q := p.Spec.Containers[0].Resources.Requests[res].DeepCopy()
	for _, cs := range p.Status.ContainerStatuses {
		if a, ok := cs.AllocatedResources[res]; ok && a.Cmp(q) > 0 {
			q = a.DeepCopy()
		}
		if cs.Resources != nil {
			if a, ok := cs.Resources.Requests[res]; ok && a.Cmp(q) > 0 {
				q = a.DeepCopy()
			}
		}
	}
	return q
}
