package remediation

import (
	"fmt"
	"sort"
	"strings"

	v1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeshepherd/nodeshepherd/pkg/kube"
)

// WaitingForEvictions begins the reason of a node held before a step that
// disrupts pods while pods a PodDisruptionBudget protects are still on it.
const WaitingForEvictions = "waiting for evictions"

// KeepOffTaint keeps new pods off a node from the moment a step that
// disrupts pods is prepared (its protected pods evicted) to the end of the
// repair: without it, the replacement of an evicted pod may be bound to
// the same node before the step, which then disrupts it outside its budget
// (chaos seed 40004: a Replace deleted a web pod bound there 0.1 s after
// the eviction of its predecessor).
var KeepOffTaint = v1.Taint{Key: "nodeshepherd.io/remediation-disrupts", Effect: v1.TaintEffectNoSchedule}

// Protected is a pod a step that disrupts pods must first evict, with the
// budgets that select it.
type Protected struct {
	Pod     *v1.Pod
	Budgets []string
}

// ToEvict is which of the node's pods a step that disrupts pods (Disrupts)
// must first evict through the Eviction API, so that the budgets decide:
// those a PodDisruptionBudget selects that still run (not finished, not
// already being deleted), other than DaemonSet and mirror pods, which the
// drain leaves too. machineOff says the provider answers the node's machine
// off (gone or shut down): then the pods that are not Ready on a node that
// is not Ready went down with it and are left to the taint manager's
// NoExecute taints, or a Fence of a dead machine would wait on them for
// ever. Without that answer they may still run behind a partition and come
// back, so their budgets decide too (chaos seed 70016: a Replace of an
// unreachable, running machine deleted a web pod while budget web allowed
// nothing).
func ToEvict(n *v1.Node, pods []v1.Pod, pdbs []policyv1.PodDisruptionBudget, machineOff bool) []Protected {
	deadMachine := machineOff && !kube.NodeReady(n)
	var out []Protected
	for i := range pods {
		p := &pods[i]
		if p.Spec.NodeName != n.Name || p.DeletionTimestamp != nil || p.Status.Phase == v1.PodSucceeded || p.Status.Phase == v1.PodFailed {
			continue
		}
		if o := metav1.GetControllerOf(p); o != nil && o.Kind == "DaemonSet" {
			continue
		}
		if _, mirror := p.Annotations[v1.MirrorPodAnnotationKey]; mirror {
			continue
		}
		if deadMachine && !kube.PodReady(p) {
			continue
		}
		var budgets []string
		for j := range pdbs {
			if b := &pdbs[j]; kube.PDBSelects(b, p) {
				budgets = append(budgets, fmt.Sprintf("PodDisruptionBudget %s/%s", b.Namespace, b.Name))
			}
		}
		if len(budgets) > 0 {
			sort.Strings(budgets)
			out = append(out, Protected{Pod: p, Budgets: budgets})
		}
	}
	sort.Slice(out, func(i, j int) bool {
		return out[i].Pod.Namespace+"/"+out[i].Pod.Name < out[j].Pod.Namespace+"/"+out[j].Pod.Name
	})
	return out
}

// WaitForEvictions is the Blocked decision of a node held at step (-1:
// before its repair starts) because step next would disrupt the pods in
// held, whose evictions the API server refused.
func WaitForEvictions(step, next int, st Step, held []string) Decision {
	return Decision{Verdict: VerdictBlocked, Step: step,
		Reason: fmt.Sprintf("%s: step %d (%s) disrupts pods and starts only once those a PodDisruptionBudget protects are evicted; refused: %s",
			WaitingForEvictions, next+1, st.Action, strings.Join(held, "; "))}
}
