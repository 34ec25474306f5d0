package remediation

import (
	"context"
	"fmt"
	"strings"

	v1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"

	"github.com/nodeshepherd/nodeshepherd/pkg/kube"
	rem "github.com/nodeshepherd/nodeshepherd/pkg/remediation"
)

// evictProtected evicts through the Eviction API the node's pods that a
// PodDisruptionBudget protects (rem.ToEvict), before a step that disrupts
// pods starts: the API server weighs each eviction against its budgets
// atomically, so two nodes' steps never spend one allowed disruption
// twice, as a look at the budgets' status could. New pods are kept off the
// node first (rem.KeepOffTaint). It returns the pods whose eviction was
// refused, with why, and whether the step must wait for a later look
// (settle: pods were evicted just now, and their replacements may have been
// bound here before the scheduler saw the keep-off taint); the step starts
// on a look that finds nothing to evict and nothing refused. machineOff says
// that look left protected pods to the taint manager because the provider
// answered the machine off: the step's requests then carry that premise.
func (c *Controller) evictProtected(ctx context.Context, n *v1.Node, p *policy, step int) (held []string, settle, machineOff bool, err error) {
	if _, err := c.keepOff(ctx, n, p, step); err != nil {
		return nil, false, false, fmt.Errorf("keeping new pods off node %s: %w", n.Name, err)
	}
	ctx, cancel := context.WithTimeout(ctx, kube.WriteTimeout)
	defer cancel()
	pods, err := c.client.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("spec.nodeName", n.Name).String()})
	if err != nil {
		return nil, false, false, fmt.Errorf("listing the pods of node %s: %w", n.Name, err)
	}
	var pdbs []policyv1.PodDisruptionBudget
	listed := map[string]bool{}
	for i := range pods.Items {
		ns := pods.Items[i].Namespace
		if listed[ns] {
			continue
		}
		l, err := c.client.PolicyV1().PodDisruptionBudgets(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, false, false, fmt.Errorf("listing the PodDisruptionBudgets of namespace %s: %w", ns, err)
		}
		listed[ns] = true
		pdbs = append(pdbs, l.Items...)
	}
	// A not-Ready node's not-Ready pods are left to the NoExecute taints
	// only when its machine is answered off (rem.ToEvict), as for a Fence:
	// by the provider or the fencing endpoint, neither answering it runs.
	off := false
	if !kube.NodeReady(n) {
		power, _ := c.power(ctx, n)
		off = power == rem.PowerOff
	}
	toEvict := rem.ToEvict(n, pods.Items, pdbs, off)
	// The answer is about the machine at that moment only: if it let pods
	// go unevicted, the step's requests say so, and a provider whose machine
	// has started again meanwhile refuses them (chaos seed 170030: a Reboot
	// sent 0.3 s after the answer took down a machine started 0.1 s after
	// it, and a web pod with it, while budget web allowed nothing).
	machineOff = off && len(rem.ToEvict(n, pods.Items, pdbs, false)) > len(toEvict)
	for _, pp := range toEvict {
		if c.DryRun.Enabled() {
			c.DryRun.Report(ctx, n, "evict", fmt.Sprintf("pod %s/%s (%s), before a step that disrupts it", pp.Pod.Namespace, pp.Pod.Name, strings.Join(pp.Budgets, ", ")))
			continue
		}
		ev := &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: pp.Pod.Name, Namespace: pp.Pod.Namespace},
			DeleteOptions: &metav1.DeleteOptions{Preconditions: metav1.NewUIDPreconditions(string(pp.Pod.UID))}}
		err := c.client.PolicyV1().Evictions(pp.Pod.Namespace).Evict(ctx, ev)
		switch {
		case err == nil || apierrors.IsNotFound(err):
			settle = settle || err == nil
			continue
		case apierrors.IsTooManyRequests(err):
			held = append(held, fmt.Sprintf("pod %s/%s (%s)", pp.Pod.Namespace, pp.Pod.Name, strings.Join(pp.Budgets, ", ")))
		default:
			// A pod replaced under its name, two budgets on one pod, a
			// lost answer: said, and tried again.
			held = append(held, fmt.Sprintf("pod %s/%s (%s): %v", pp.Pod.Namespace, pp.Pod.Name, strings.Join(pp.Budgets, ", "), err))
		}
	}
	return held, settle, machineOff, nil
}
