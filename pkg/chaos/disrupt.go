package chaos

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// podLife is one pod's stay on its node, in resourceVersions: from the
// first version seen bound there to the first seen terminating or gone
// (0: still there). etcd orders every write of the cluster, so comparing
// them with a repair request's tells which came first, where the watches'
// times (each stream lags on its own) and one-second timestamps cannot.
type podLife struct {
	pod          *v1.Pod // the last version seen
	bound, ended uint64
	// endedSeen is when the checker saw it end (at or after it did).
	endedSeen time.Time
}

// pendingDisrupt is a machine a controller's request takes down (a
// Reboot, a Replace, a Fence's power-off), judged once the pod watch has
// had the slack to catch up.
type pendingDisrupt struct {
	at      time.Time // when the machine was about to be taken down
	node    string
	rv      uint64 // the request's write
	what    string
	running bool // the machine possibly ran its pods just before
	// zero are the budgets that allowed no disruption at that moment.
	zero []*policyv1.PodDisruptionBudget
}

func resourceVersion(o metav1.Object) uint64 {
	rv, _ := strconv.ParseUint(o.GetResourceVersion(), 10, 64)
	return rv
}

// observeLife keeps a pod's podLife, seen at at; callers hold mu.
func (c *Checker) observeLife(at time.Time, p *v1.Pod, deleted bool) {
	if p.Spec.NodeName == "" {
		return
	}
	id := podID(p.UID, p.Namespace, p.Name)
	rv := resourceVersion(p)
	l := c.lives[id]
	if l == nil {
		l = &podLife{bound: rv}
		c.lives[id] = l
	}
	l.pod = p
	if l.ended == 0 && (deleted || p.DeletionTimestamp != nil) {
		l.ended, l.endedSeen = max(rv, l.bound), at
	}
}

// MachineTakenDown tells the checker that a controller's request (written
// at resourceVersion rv) takes node's machine down at about at: a reboot,
// a replacement or a power-off. Each pod that was on the node when the
// request was written, not evicted before it, on a machine that ran it,
// is disrupted by it; a budget that allowed no disruption then must not
// cover it, unless a NoExecute taint was due for it (taint eviction
// ignores budgets, upstream's too). The pdb rule of deletions cannot see
// this: a reboot deletes nothing, and a Replace's deletion of pods that a
// partition already made not Ready looks like one of dead pods (chaos seed
// 70016's path, a machine that ran behind the partition).
func (c *Checker) MachineTakenDown(at time.Time, node string, rv uint64, what string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	d := pendingDisrupt{at: at, node: node, rv: rv, what: what,
		running: c.truth.Ever(node, at.Add(-time.Millisecond), at.Add(-time.Millisecond), Machine.Running)}
	for _, b := range c.pdbs {
		if b.Status.DisruptionsAllowed == 0 {
			d.zero = append(d.zero, b)
		}
	}
	c.note(at, "machine of node %s taken down: %s (request written at resourceVersion %d)", node, what, rv)
	c.pendingDisrupt = append(c.pendingDisrupt, d)
}

// settleDisrupt judges the takedowns older than the slack; callers hold mu.
func (c *Checker) settleDisrupt(at time.Time) {
	var keep []pendingDisrupt
	for _, d := range c.pendingDisrupt {
		if at.Sub(d.at) <= c.limits.Slack {
			keep = append(keep, d)
			continue
		}
		c.checkDisrupt(d)
	}
	c.pendingDisrupt = keep
}

func (c *Checker) checkDisrupt(d pendingDisrupt) {
	if !d.running || d.rv == 0 || len(d.zero) == 0 {
		return // the machine was off: its pods ran nowhere
	}
	var ids []string
	for id, l := range c.lives {
		if l.pod.Spec.NodeName == d.node {
			ids = append(ids, id)
		}
	}
	sort.Strings(ids)
	for _, id := range ids {
		l := c.lives[id]
		p := l.pod
		if l.bound >= d.rv || l.ended != 0 && l.ended < d.rv {
			continue // bound after the request, or evicted before it
		}
		if reason, _ := disruption(p); l.ended != 0 && reason == reasonEvictionAPI && l.endedSeen.Before(d.at) {
			// Evicted through the Eviction API after the request but before
			// the machine went down: its budget was the API server's to
			// judge then, and the takedown found it gone (chaos seed 220005:
			// the eviction itself left the budget at 0 for the takedown).
			continue
		}
		var covering []string
		for _, b := range d.zero {
			if b.Namespace != p.Namespace || b.Spec.Selector == nil {
				continue
			}
			sel, err := metav1.LabelSelectorAsSelector(b.Spec.Selector)
			if err == nil && sel.Matches(labels.Set(p.Labels)) {
				covering = append(covering, b.Namespace+"/"+b.Name)
			}
		}
		if len(covering) == 0 || c.limits.ForceAllowed && c.forced[p.Namespace+"/"+p.Name] {
			continue
		}
		if c.taintDue(p, d.node, d.at) {
			continue
		}
		sort.Strings(covering)
		c.violate(d.at, InvPDB, "pod/"+p.Namespace+"/"+p.Name, "on node %s when %s took its running machine down (request written at resourceVersion %d; the pod bound at %d, %s), while PodDisruptionBudget %s allowed no disruption and no NoExecute taint was due for it",
			d.node, d.what, d.rv, l.bound, endedAt(l.ended), strings.Join(covering, ","))
	}
}

func endedAt(rv uint64) string {
	if rv == 0 {
		return "not evicted"
	}
	return fmt.Sprintf("terminating at %d", rv)
}

// taintDue says a NoExecute taint on node was due to evict p at at.
func (c *Checker) taintDue(p *v1.Pod, node string, at time.Time) bool {
	for _, s := range c.taintChain(node, at, at) {
		if due, ok := dueTime(p, s.taint); ok && !due.After(at) {
			return true
		}
	}
	return false
}
