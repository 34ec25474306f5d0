package scheduler

import (
	"context"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
)

func TestExplainSummarisesAndDryRunsPreemption(t *testing.T) {
	tainted := node("n3", 4000, 110)
	tainted.Spec.Taints = []v1.Taint{{Key: "node.kubernetes.io/unreachable", Effect: v1.TaintEffectNoExecute}}
	snap := Snapshot{
		Nodes: []v1.Node{*node("n2", 1000, 110), *node("n1", 1000, 110), *tainted},
		Pods:  []v1.Pod{*pod("low", 10, 800, onNode("n1")), *pod("high", 1000, 800, onNode("n2"))},
	}
	pending := pod("hi", 100, 500)
	r, err := Explain(context.Background(), pending, snap)
	if err != nil {
		t.Fatal(err)
	}
	want := "0/3 nodes are available: 1 node(s) had untolerated taint(s), 2 Insufficient cpu."
	if r.Message != want {
		t.Errorf("message %q, want %q", r.Message, want)
	}
	if len(r.Nodes) != 3 || r.Nodes[0].Node != "n1" || r.Nodes[2].Node != "n3" || r.Nodes[2].PreemptionMayHelp || !r.Nodes[0].PreemptionMayHelp {
		t.Errorf("nodes %+v", r.Nodes)
	}
	if r.PreemptionNode != "n1" || len(r.Victims) != 1 || r.Victims[0].Name != "low" {
		t.Errorf("preemption %q victims %+v, want n1 [low]", r.PreemptionNode, r.Victims)
	}

	pending.Spec.PreemptionPolicy = nil
	never()(pending)
	r, err = Explain(context.Background(), pending, snap)
	if err != nil {
		t.Fatal(err)
	}
	if want := want + " preemption: not eligible due to preemptionPolicy=Never."; r.Message != want {
		t.Errorf("message %q, want %q", r.Message, want)
	}
}

func TestExplainHonoursNominations(t *testing.T) {
	other := pod("other", 1000, 600)
	other.Status.NominatedNodeName = "n1"
	snap := Snapshot{Nodes: []v1.Node{*node("n1", 1000, 110)}, Pods: []v1.Pod{*other}}
	r, err := Explain(context.Background(), pod("hi", 100, 500), snap)
	if err != nil {
		t.Fatal(err)
	}
	if r.Nodes[0].Fits {
		t.Errorf("n1 fits although a more important pod reserves it: %+v", r)
	}
	r, err = Explain(context.Background(), pod("top", 2000, 500), snap)
	if err != nil {
		t.Fatal(err)
	}
	if !r.Nodes[0].Fits || r.Message != "" {
		t.Errorf("a more important pod does not see the reservation: %+v", r)
	}
}

func TestExplainRefusesUnsupported(t *testing.T) {
	p := pod("claims", 0, 100)
	p.Spec.Volumes = []v1.Volume{{Name: "v", VolumeSource: v1.VolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: "c"}}}}
	r, err := Explain(context.Background(), p, Snapshot{Nodes: []v1.Node{*node("n1", 1000, 110)}})
	if err != nil {
		t.Fatal(err)
	}
	if r.Refused == "" || len(r.Nodes) != 0 {
		t.Errorf("want a refusal without the storage objects, got %+v", r)
	}
	if !UsesClaims(p) {
		t.Error("UsesClaims false for a claim volume")
	}
}

// TestExplainDRA: explain runs DynamicResources as the scheduler does when
// given the resource objects: a node with a free device fits, one without
// does not; with every device allocated no node fits, in kube-scheduler's
// words; a pod whose claim is not there yet is not tried; without the
// objects the pod is refused, not judged without its claims.
func TestExplainDRA(t *testing.T) {
	nodes := []v1.Node{*node("n1", 1000, 110), *node("n2", 1000, 110)}
	p := pod("p", 0, 100, withResourceClaims("one"))
	dra := func(objs ...*resourceapi.ResourceClaim) *DRASnapshot {
		d := &DRASnapshot{ResourceSlices: []resourceapi.ResourceSlice{*gpuSlice("n1", 2)}, DeviceClasses: []resourceapi.DeviceClass{*gpuClass("gpu", gpuExpr)}}
		for _, c := range objs {
			d.ResourceClaims = append(d.ResourceClaims, *c)
		}
		return d
	}
	r, err := Explain(context.Background(), p, Snapshot{Nodes: nodes, DRA: dra(gpuClaim("one", 1))})
	if err != nil {
		t.Fatal(err)
	}
	if r.Refused != "" || len(r.Nodes) != 2 || !r.Nodes[0].Fits || r.Nodes[1].Fits || r.Message != "" {
		t.Errorf("a free GPU on n1: %+v", r)
	}
	r, err = Explain(context.Background(), p, Snapshot{Nodes: nodes, DRA: dra(gpuClaim("one", 1),
		gpuClaim("a", 1, allocatedTo("n1", "gpu-0")), gpuClaim("b", 1, allocatedTo("n1", "gpu-1")))})
	if err != nil {
		t.Fatal(err)
	}
	if want := "0/2 nodes are available: 2 cannot allocate all claims."; len(r.Nodes) != 2 || r.Nodes[0].Fits || !strings.HasPrefix(r.Message, want) {
		t.Errorf("every GPU allocated: %+v, want a message starting %q", r, want)
	}
	// Held by pods of lower priority: preemption's dry run frees the
	// device only the victim holds.
	r, err = Explain(context.Background(), pod("hi", 10, 100, withResourceClaims("one")), Snapshot{Nodes: nodes,
		Pods: []v1.Pod{*pod("low", 1, 100, onNode("n1")), *pod("mid", 5, 100, onNode("n1"))},
		DRA: dra(gpuClaim("one", 1), gpuClaim("low-gpu", 1, allocatedTo("n1", "gpu-0"), reservedFor("low")),
			gpuClaim("mid-gpu", 1, allocatedTo("n1", "gpu-1"), reservedFor("mid")))})
	if err != nil {
		t.Fatal(err)
	}
	if r.PreemptionNode != "n1" || len(r.Victims) != 1 || r.Victims[0].Name != "low" {
		t.Errorf("preemption for a GPU: node %q, victims %+v; want n1, [low]", r.PreemptionNode, r.Victims)
	}
	r, err = Explain(context.Background(), p, Snapshot{Nodes: nodes, DRA: dra()})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(r.Refused, "not tried yet: ") || len(r.Nodes) != 0 {
		t.Errorf("a claim not there yet: %+v", r)
	}
	r, err = Explain(context.Background(), p, Snapshot{Nodes: nodes})
	if err != nil {
		t.Fatal(err)
	}
	if r.Refused == "" || !UsesResourceClaims(p) {
		t.Errorf("without the resource objects: %+v", r)
	}
}
