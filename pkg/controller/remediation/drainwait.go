package remediation

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"

	"github.com/nodeshepherd/nodeshepherd/pkg/kube"
)

// holdersEvery is how long a node's drainHolders answer is reused.
const holdersEvery = 15 * time.Second

// holdersRead is one drainHolders answer and when it was read.
type holdersRead struct {
	at   time.Time
	text string
}

// drainHoldersEvery is drainHolders read at most once every holdersEvery
// per node.
func (c *Controller) drainHoldersEvery(ctx context.Context, n *v1.Node) string {
	now := c.clock.Now()
	c.mu.Lock()
	h, ok := c.holders[n.Name]
	c.mu.Unlock()
	if ok && now.Sub(h.at) < holdersEvery {
		return h.text
	}
	text := c.drainHolders(ctx, n)
	c.mu.Lock()
	c.holders[n.Name] = holdersRead{at: now, text: text}
	c.mu.Unlock()
	return text
}

// drainHolders says which of the node's pods a disruptive step would still
// kill, read from the API server (bounded): those a PodDisruptionBudget
// protects, by budget, and how many others ("" when it cannot tell, or none
// is left).
func (c *Controller) drainHolders(ctx context.Context, n *v1.Node) string {
	ctx, cancel := context.WithTimeout(ctx, kube.WriteTimeout)
	defer cancel()
	pods, err := c.client.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("spec.nodeName", n.Name).String()})
	if err != nil {
		return ""
	}
	pdbs := map[string][]policyv1.PodDisruptionBudget{}
	byBudget := map[string][]string{}
	others := 0
	for i := range pods.Items {
		p := &pods.Items[i]
		if p.Status.Phase == v1.PodSucceeded || p.Status.Phase == v1.PodFailed {
			continue
		}
		if o := metav1.GetControllerOf(p); o != nil && o.Kind == "DaemonSet" {
			continue // the drain leaves them; they run on every node
		}
		if _, mirror := p.Annotations[v1.MirrorPodAnnotationKey]; mirror {
			continue
		}
		list, ok := pdbs[p.Namespace]
		if !ok {
			if l, err := c.client.PolicyV1().PodDisruptionBudgets(p.Namespace).List(ctx, metav1.ListOptions{}); err == nil {
				list = l.Items
			}
			pdbs[p.Namespace] = list
		}
		protected := false
		for j := range list {
			if b := &list[j]; kube.PDBSelects(b, p) {
				protected = true
				key := fmt.Sprintf("PodDisruptionBudget %s/%s (%d disruptions allowed)", b.Namespace, b.Name, b.Status.DisruptionsAllowed)
				byBudget[key] = append(byBudget[key], p.Name)
			}
		}
		if !protected {
			others++
		}
	}
	var parts []string
	keys := make([]string, 0, len(byBudget))
	for k := range byBudget {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		names := byBudget[k]
		sort.Strings(names)
		parts = append(parts, fmt.Sprintf("%s protected by %s: %s", podCount(len(names)), k, strings.Join(names, ", ")))
	}
	if others > 0 {
		parts = append(parts, podCount(others)+" not protected by a budget")
	}
	if len(parts) == 0 {
		return ""
	}
	return "; left on the node: " + strings.Join(parts, "; ")
}

func podCount(n int) string {
	if n == 1 {
		return "1 pod"
	}
	return fmt.Sprintf("%d pods", n)
}
