package scheduler

import (
	"context"
	"testing"

	v1 "k8s.io/api/core/v1"
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
