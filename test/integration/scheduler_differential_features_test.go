package integration

import (
	"fmt"
	"math/rand/v2"
	"slices"

	v1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
)

// The differential test's feature seeds add what the other seeds lack:
// container images on the nodes (ImageLocality's score: the best-scored
// nodes are compared), nodes that declare a feature and pods that need it
// (NodeDeclaredFeatures: a container restart rule that restarts all
// containers needs RestartAllContainersOnContainerExits), and required
// node affinity by matchFields metadata.name (as DaemonSet pods have). The
// additions draw from a generator of their own, after the usual features.
var diffFeatureSeeds = []uint64{6, 7}

// diffImages: a few images of very different sizes, so that where they
// are present weighs in the score.
var diffImages = map[string]int64{
	"registry.example.com/ml/trainer:1.0":   1800 << 20,
	"registry.example.com/web/frontend:2.3": 600 << 20,
	"registry.example.com/db/postgres:16":   350 << 20,
	"registry.example.com/tools/busybox:1":  5 << 20,
}

func diffAddFeatures(w *diffWorkload) {
	r := rand.New(rand.NewPCG(w.Seed, 2))
	images := slices.Sorted(func(yield func(string) bool) {
		for k := range diffImages {
			if !yield(k) {
				return
			}
		}
	})
	for _, n := range w.Nodes {
		for _, img := range images {
			if r.IntN(3) == 0 {
				n.Status.Images = append(n.Status.Images, v1.ContainerImage{Names: []string{img}, SizeBytes: diffImages[img]})
			}
		}
		if r.IntN(2) == 0 {
			n.Status.DeclaredFeatures = []string{parityFeature}
		}
	}
	for _, p := range w.Pods {
		if r.IntN(2) == 0 {
			p.Spec.Containers[0].Image = pick(r, images...)
		}
		if r.IntN(8) == 0 {
			p.Spec.RestartPolicy = v1.RestartPolicyNever
			p.Spec.Containers[0].RestartPolicy = ptr.To(v1.ContainerRestartPolicyNever)
			p.Spec.Containers[0].RestartPolicyRules = []v1.ContainerRestartRule{{Action: v1.ContainerRestartRuleActionRestartAllContainers,
				ExitCodes: &v1.ContainerRestartRuleOnExitCodes{Operator: v1.ContainerRestartRuleOnExitCodesOpIn, Values: []int32{42}}}}
		}
		if r.IntN(8) == 0 {
			// The API server takes one name per matchFields requirement;
			// a pod that may go to one of several nodes has a term each.
			name := func() string { return w.Nodes[r.IntN(len(w.Nodes))].Name }
			na := diffAffinity(p)
			if na.NodeAffinity == nil {
				na.NodeAffinity = &v1.NodeAffinity{}
			}
			sel := na.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution
			switch {
			case r.IntN(4) == 0 || sel != nil:
				// ANDed with what every term asks.
				req := v1.NodeSelectorRequirement{Key: "metadata.name", Operator: pick(r, v1.NodeSelectorOpIn, v1.NodeSelectorOpNotIn), Values: []string{name()}}
				if sel == nil {
					sel = &v1.NodeSelector{NodeSelectorTerms: []v1.NodeSelectorTerm{{}}}
					na.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution = sel
				}
				for i := range sel.NodeSelectorTerms {
					sel.NodeSelectorTerms[i].MatchFields = append(sel.NodeSelectorTerms[i].MatchFields, req)
				}
			default:
				sel = &v1.NodeSelector{}
				for range 1 + r.IntN(3) {
					sel.NodeSelectorTerms = append(sel.NodeSelectorTerms, v1.NodeSelectorTerm{MatchFields: []v1.NodeSelectorRequirement{
						{Key: "metadata.name", Operator: v1.NodeSelectorOpIn, Values: []string{name()}}}})
				}
				na.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution = sel
			}
		}
	}
}

// diffNeedsFeature: the pod needs the node to declare parityFeature.
func diffNeedsFeature(p *v1.Pod) bool {
	for _, c := range p.Spec.Containers {
		for _, rule := range c.RestartPolicyRules {
			if rule.Action == v1.ContainerRestartRuleActionRestartAllContainers {
				return true
			}
		}
	}
	return false
}

// fieldsMatch: a term's matchFields (metadata.name only) on node n.
func fieldsMatch(term v1.NodeSelectorTerm, n *v1.Node) bool {
	for _, req := range term.MatchFields {
		if req.Key != "metadata.name" {
			panic(fmt.Sprintf("matchFields key %q", req.Key))
		}
		in := slices.Contains(req.Values, n.Name)
		if in != (req.Operator == v1.NodeSelectorOpIn) {
			return false
		}
	}
	return true
}
