package remediation

import (
	"context"
	"fmt"
	"reflect"
	"sort"
	"strconv"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/nodeshepherd/nodeshepherd/pkg/kube"
	rem "github.com/nodeshepherd/nodeshepherd/pkg/remediation"
)

// Conditions of a policy's status.
const (
	ConditionAccepted = "Accepted"
	ConditionBlocked  = "Blocked"
	ConditionPaused   = "Paused"
)

// statusDelay gathers a burst of node changes into one status write.
const statusDelay = 1e9

// maxConflictsNamed bounds status.conflicts (the metric counts them all).
const maxConflictsNamed = 20

// statusResync is how often a policy's status is counted again anyway.
const statusResync = 30e9

// count is the policy's status as the nodes show it now, and the metrics
// from the same count.
func (c *Controller) count(p *policy) rem.PolicyStatus {
	now := c.clock.Now()
	all, _ := c.nodes.List(labels.Everything())
	c.noteStorm(p, all, now)
	var st rem.PolicyStatus
	inStep := map[int]int{}
	var blockedWhy, blockedNode string
	exhausted := 0
	c.mu.Lock()
	verdicts := make(map[string]nodeVerdict, len(c.verdicts))
	for k, v := range c.verdicts {
		verdicts[k] = v
	}
	c.mu.Unlock()
	for _, n := range all {
		req, inRepair, _ := rem.RequestOf(n)
		ours := inRepair && req.Policy == p.name
		if p.refused == "" && p.spec.Selects(n) {
			if len(c.selecting(n)) > 1 {
				st.Conflicts = append(st.Conflicts, n.Name)
			}
			st.Nodes++
			if p.spec.Judge(n, now).Unhealthy {
				st.Unhealthy++
			}
		}
		v, decided := verdicts[n.Name]
		decided = decided && v.policy == p.name
		if decided && v.d.Verdict == rem.VerdictBlocked && !ours {
			st.Blocked++
			if blockedNode == "" || n.Name < blockedNode { // the same node named each time
				blockedNode, blockedWhy = n.Name, fmt.Sprintf("node %s: %s", n.Name, v.d.Reason)
			}
		}
		if !ours || req.Step >= len(p.spec.Steps) {
			continue
		}
		st.InRepair++
		inStep[req.Step]++
		if decided && v.d.Verdict == rem.VerdictExhausted {
			exhausted++
		}
		r := rem.NodeRepair{Node: n.Name, Step: int32(req.Step + 1), Action: req.Action, Since: metav1.NewTime(req.Since)}
		if req.Action == rem.ActionFence {
			switch w := c.fenceWords(n.Name); {
			case req.FenceBootID != "":
				r.Fence = fmt.Sprintf("powered off: confirmed for boot ID %q", req.FenceBootID)
			case w != "":
				r.Fence = w
			default:
				r.Fence = "requested: not yet looked at by this process"
			}
		}
		switch {
		case decided && v.d.Verdict == rem.VerdictExhausted:
			r.Next = "none: the last step timed out; a person decides"
		case decided && v.d.Verdict == rem.VerdictBlocked:
			r.Next = v.d.Reason // waiting for the drain, or paused
		default:
			r.Next = p.nextWords(req.Step, req.Since)
		}
		st.Repairs = append(st.Repairs, r)
	}
	sort.Slice(st.Repairs, func(i, j int) bool { return st.Repairs[i].Node < st.Repairs[j].Node })
	// Replacements whose new Node is not Ready yet count as in repair.
	pending, _ := c.pendingReplacements(p.name, "", all)
	st.InRepair += int32(pending)
	st.Replacing = c.replacements(p.name)
	m := c.metrics
	m.nodes.WithLabelValues(p.name).Set(float64(st.Nodes))
	m.unhealthy.WithLabelValues(p.name).Set(float64(st.Unhealthy))
	m.blocked.WithLabelValues(p.name).Set(float64(st.Blocked))
	m.exhausted.WithLabelValues(p.name).Set(float64(exhausted))
	m.conflicting.WithLabelValues(p.name).Set(float64(len(st.Conflicts)))
	sort.Strings(st.Conflicts) // the same names each count
	st.Conflicts = st.Conflicts[:min(len(st.Conflicts), maxConflictsNamed)]
	for i, s := range p.spec.Steps {
		m.inStep.WithLabelValues(p.name, strconv.Itoa(i+1), string(s.Action)).Set(float64(inStep[i]))
	}
	cond := func(t string, ok bool, reason, msg string) {
		s := metav1.ConditionFalse
		if ok {
			s = metav1.ConditionTrue
		}
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: t, Status: s, Reason: reason, Message: msg,
			ObservedGeneration: p.obj.GetGeneration(), LastTransitionTime: metav1.NewTime(now.Truncate(1e9))})
	}
	if p.refused != "" {
		reason := p.refusedReason
		if reason == "" {
			reason = "Invalid"
		}
		cond(ConditionAccepted, false, reason, p.refused)
	} else {
		cond(ConditionAccepted, true, "Valid", "the controller acts on this policy")
	}
	if st.Blocked > 0 {
		cond(ConditionBlocked, true, "BrakeHolds", fmt.Sprintf("%d node(s) blocked; %s", st.Blocked, blockedWhy))
	} else {
		cond(ConditionBlocked, false, "NoneBlocked", "no repair is held back")
	}
	if p.paused {
		cond(ConditionPaused, true, "Paused", "spec.paused or annotation "+AnnotationPaused+"=true: no new repair and no new step")
	} else {
		cond(ConditionPaused, false, "Running", "")
	}
	c.mu.Lock()
	storm := c.storms[p.name]
	c.mu.Unlock()
	st.Storm = storm.on
	if !storm.ended.IsZero() {
		t := metav1.NewTime(storm.ended)
		st.StormEnded = &t
	}
	st.ObservedGeneration = p.obj.GetGeneration()
	return st
}

// writeStatus writes the policy's status when it changed, keeping the
// conditions' transition times of the status on the server.
func (c *Controller) writeStatus(ctx context.Context, name string) error {
	p := c.policy(name)
	if p == nil {
		return nil
	}
	// Counts change with time too (a condition held long enough, a stale
	// heartbeat): looked at again every statusResync.
	defer c.statusQ.AddAfter(name, statusResync)
	st := c.count(p)
	// The read and the write, bounded together.
	ctx, cancel := context.WithTimeout(ctx, kube.WriteTimeout)
	defer cancel()
	cur, err := c.dynamic.Resource(rem.GroupVersionResource).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	var old rem.RemediationPolicy
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(cur.Object, &old); err != nil {
		return err
	}
	for i := range st.Conditions {
		if o := meta.FindStatusCondition(old.Status.Conditions, st.Conditions[i].Type); o != nil && o.Status == st.Conditions[i].Status {
			st.Conditions[i].LastTransitionTime = o.LastTransitionTime
		}
	}
	if reflect.DeepEqual(normal(old.Status), normal(st)) {
		return nil
	}
	obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&st)
	if err != nil {
		return err
	}
	cur.Object["status"] = obj
	if c.DryRun.Enabled() {
		c.DryRun.Report(ctx, cur, "status", fmt.Sprintf("%+v", st))
		return nil
	}
	_, err = c.dynamic.Resource(rem.GroupVersionResource).UpdateStatus(ctx, cur, metav1.UpdateOptions{})
	return err
}

// normal is a status as compared: times to the second, as stored.
func normal(s rem.PolicyStatus) rem.PolicyStatus {
	s.Repairs = append([]rem.NodeRepair(nil), s.Repairs...)
	s.Conditions = append([]metav1.Condition(nil), s.Conditions...)
	for i := range s.Repairs {
		s.Repairs[i].Since = metav1.NewTime(s.Repairs[i].Since.Truncate(1e9))
	}
	if s.StormEnded != nil {
		t := metav1.NewTime(s.StormEnded.Truncate(1e9))
		s.StormEnded = &t
	}
	for i := range s.Conditions {
		s.Conditions[i].LastTransitionTime = metav1.NewTime(s.Conditions[i].LastTransitionTime.Truncate(1e9))
	}
	if len(s.Repairs) == 0 {
		s.Repairs = nil
	}
	if len(s.Conditions) == 0 {
		s.Conditions = nil
	}
	return s
}

// replacements are the policy's machines being replaced, for its status.
func (c *Controller) replacements(policy string) []rem.Replacing {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []rem.Replacing
	for name, r := range c.replacing {
		if r.policy == policy {
			out = append(out, rem.Replacing{Node: name, UID: r.uid, Zone: r.zone, Step: int32(r.step), Since: metav1.NewTime(r.since)})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Node < out[j].Node })
	return out
}
