package remediation

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"k8s.io/klog/v2"

	nscloud "github.com/nodeshepherd/nodeshepherd/pkg/cloudprovider"
	"github.com/nodeshepherd/nodeshepherd/pkg/controllerutil"
	"github.com/nodeshepherd/nodeshepherd/pkg/kube"
	"github.com/nodeshepherd/nodeshepherd/pkg/owner"
	rem "github.com/nodeshepherd/nodeshepherd/pkg/remediation"
)

// write moves the node to state next of policy p (nil: out of repair): the
// Taint steps' taints up to next's step are on the node, with their owner
// records, and none of this controller's when it leaves repair; the repair
// record (which the drain and outofservice controllers read) in the same
// patch, bound to the node's resourceVersion.
//
// Each attempt (its read and its patch) is bounded by kube.WriteTimeout. A
// patch into repair whose answer is lost may have landed: the node counts
// as in repair for the brakes until a read of it settles that (recheck),
// never as not in repair.
func (c *Controller) write(ctx context.Context, n *v1.Node, p *policy, next *rem.State, why string) error {
	return c.writeIf(ctx, n, p, next, why, nil, nil)
}

// errRecordMoved: the node's repair record as read before the write is not
// the one the decision was made on.
var errRecordMoved = errors.New("the repair record changed since the decision")

// writeIf is write, made only if check passes on the node as read (its
// error is returned as it is, and nothing is written); a repair that ends
// done writes last (rem.AnnotationLast) in the same patch.
//
// Every write is bound to the repair record of n, the node the decision
// was made on: a read that shows another (errRecordMoved) writes nothing.
// A write whose answer was lost can land after the list a decision was
// made on and before this read; writing over it would start its step again,
// with a new stepSince (chaos seed 200048).
func (c *Controller) writeIf(ctx context.Context, n *v1.Node, p *policy, next *rem.State, why string, check func(cur *v1.Node) error, last *rem.LastRepair) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		ctx, cancel := context.WithTimeout(ctx, kube.WriteTimeout)
		defer cancel()
		cur, err := c.client.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if !rem.SameRecord(n, cur) {
			return fmt.Errorf("node %s: %w", n.Name, errRecordMoved)
		}
		if check != nil {
			if err := check(cur); err != nil {
				return err
			}
		}
		m := cur.DeepCopy()
		now := c.clock.Now()
		var add, remove []v1.Taint
		want := map[string]bool{}
		if next != nil {
			for i, s := range p.spec.Steps[:next.Step+1] {
				if s.Action != rem.ActionTaint {
					continue
				}
				t := v1.Taint{Key: s.Taint.Key, Value: s.Taint.Value, Effect: s.Taint.Effect}
				want[owner.TaintKey(t)] = true
				add = append(add, t)
				if _, ok := owner.Of(m, owner.TaintKey(t)); !ok {
					owner.Set(m, owner.TaintKey(t), owner.Record{Controller: Name, Since: now.Truncate(1e9),
						Why:   fmt.Sprintf("remediation policy %s, step %d: %s", p.name, i+1, why),
						Until: fmt.Sprintf("the node is healthy for %v (policy %s)", p.spec.HealthyHold.Duration, p.name)}.Renewed(now))
				}
			}
		}
		// The keep-off taint (rem.KeepOffTaint), once put on before a step
		// that disrupts pods, stays until the repair ends.
		if next != nil && ownsKeepOff(m) {
			want[owner.TaintKey(rem.KeepOffTaint)] = true
		}
		recs, _ := owner.Read(m)
		for _, t := range m.Spec.Taints {
			if r, ok := recs[owner.TaintKey(t)]; ok && r.Controller == Name && !want[owner.TaintKey(t)] {
				remove = append(remove, t)
				owner.Remove(m, owner.TaintKey(t))
			}
		}
		m.Spec.Taints, _ = controllerutil.ChangeTaints(m.Spec.Taints, add, remove, now)
		if m.Annotations == nil {
			m.Annotations = map[string]string{}
		}
		if next != nil {
			action := next.Action
			if action == "" {
				action = p.spec.Steps[next.Step].Action
			}
			m.Annotations[rem.AnnotationState] = rem.EncodeState(p.name, action, *next)
			// Each write of a repair renews its records: the repair
			// record, and the owner records of the taints it keeps.
			renewRecords(m, now, func(owner.Record) bool { return true })
		} else {
			delete(m.Annotations, rem.AnnotationState)
		}
		if last != nil {
			m.Annotations[rem.AnnotationLast] = last.Encode()
		}
		ann := map[string]any{}
		for _, k := range []string{rem.AnnotationState, owner.Annotation, rem.AnnotationLast} {
			if v, ok := m.Annotations[k]; ok {
				ann[k] = v
			} else {
				ann[k] = nil
			}
		}
		taints := m.Spec.Taints
		if taints == nil {
			taints = []v1.Taint{}
		}
		// A merge patch: the taints are replaced as a whole, as read at
		// this resourceVersion.
		patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"resourceVersion": cur.ResourceVersion, "annotations": ann},
			"spec": map[string]any{"taints": taints}})
		if c.DryRun.Enabled() {
			c.DryRun.Report(ctx, cur, "remediate", string(patch))
			return nil
		}
		_, err = c.client.CoreV1().Nodes().Patch(ctx, n.Name, types.MergePatchType, patch, metav1.PatchOptions{})
		c.mu.Lock()
		switch {
		case err == nil || kube.Answered(err):
			delete(c.lost, n.Name)
		case next != nil:
			c.lost[n.Name] = true
		}
		c.mu.Unlock()
		return err
	})
}

// renewRecords moves to an owner.Lease from now the expiry of this
// controller's records on n that due says to renew: the owner records of
// its taints, and the repair record (n is changed). It reports whether it
// changed any.
func renewRecords(n *v1.Node, now time.Time, due func(owner.Record) bool) bool {
	changed := false
	recs, err := owner.Read(n)
	if err == nil {
		for _, key := range owner.Keys(recs) {
			if r := recs[key]; r.Controller == Name && due(r) {
				owner.Set(n, key, r.Renewed(now))
				changed = true
			}
		}
	}
	if exp, ok, err := rem.RecordExpiry(n); ok && err == nil && due(owner.Record{Expires: exp}) {
		changed = rem.SetRecordExpiry(n, owner.ExpiresAt(now)) || changed
	}
	return changed
}

// renewAt is when this controller's records on n are next due for renewal
// (owner.Record.RenewAt: zero for one due now); found is false when none of
// its records is on n.
func renewAt(n *v1.Node) (at time.Time, found bool) {
	consider := func(r owner.Record) {
		if t := r.RenewAt(); !found || t.Before(at) {
			at = t
		}
		found = true
	}
	if recs, err := owner.Read(n); err == nil {
		for _, r := range recs {
			if r.Controller == Name {
				consider(r)
			}
		}
	}
	if exp, ok, err := rem.RecordExpiry(n); ok && err == nil {
		consider(owner.Record{Expires: exp})
	}
	return at, found
}

// renew keeps this controller's records on the node from expiring while it
// runs (pkg/owner/janitor lifts an orphan's): those with less than half of
// owner.Lease left are renewed in one patch bound to the node's
// resourceVersion (a conflict reads the node again and judges afresh);
// otherwise the node is looked at again when the next renewal is due. A dry run
// writes nothing, so it renews nothing.
func (c *Controller) renew(ctx context.Context, n *v1.Node) error {
	if c.DryRun.Enabled() {
		return nil
	}
	at, found := renewAt(n)
	if !found {
		return nil
	}
	if now := c.clock.Now(); now.Before(at) {
		c.queue.AddAfter(n.Name, at.Sub(now))
		return nil
	}
	cur := n
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		ctx, cancel := context.WithTimeout(ctx, kube.WriteTimeout)
		defer cancel()
		if cur == nil {
			fresh, err := c.client.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			cur = fresh
		}
		read := cur
		cur = nil // a retry reads afresh
		m := read.DeepCopy()
		now := c.clock.Now()
		if !renewRecords(m, now, func(r owner.Record) bool { return r.RenewDue(now) }) {
			return nil
		}
		ann := map[string]any{}
		for _, k := range []string{owner.Annotation, rem.AnnotationState} {
			if v, ok := m.Annotations[k]; ok {
				ann[k] = v
			}
		}
		patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"resourceVersion": read.ResourceVersion, "annotations": ann}})
		_, err := c.client.CoreV1().Nodes().Patch(ctx, n.Name, types.MergePatchType, patch, metav1.PatchOptions{})
		return err
	})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("renewing the expiry of the records of node %s: %w", n.Name, err)
	}
	return nil // the node changed: its next look schedules the next renewal
}

// ownsKeepOff: the node carries rem.KeepOffTaint, put on by this controller.
func ownsKeepOff(n *v1.Node) bool {
	if kube.FindTaint(n, rem.KeepOffTaint) == nil {
		return false
	}
	r, ok := owner.Of(n, owner.TaintKey(rem.KeepOffTaint))
	return ok && r.Controller == Name
}

// keepOff puts rem.KeepOffTaint on the node, with its owner record, bound
// to the node's resourceVersion; it reports whether it wrote (false: it
// was on already). Dry run: reported, not written.
func (c *Controller) keepOff(ctx context.Context, n *v1.Node, p *policy, step int) (bool, error) {
	wrote := false
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		ctx, cancel := context.WithTimeout(ctx, kube.WriteTimeout)
		defer cancel()
		cur, err := c.client.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if ownsKeepOff(cur) {
			return nil
		}
		m := cur.DeepCopy()
		now := c.clock.Now()
		m.Spec.Taints, _ = controllerutil.ChangeTaints(m.Spec.Taints, []v1.Taint{rem.KeepOffTaint}, nil, now)
		owner.Set(m, owner.TaintKey(rem.KeepOffTaint), owner.Record{Controller: Name, Since: now.Truncate(1e9),
			Why:   fmt.Sprintf("remediation policy %s: step %d (%s) disrupts pods; new pods are kept off while those a PodDisruptionBudget protects are evicted", p.name, step+1, p.spec.Steps[step].Action),
			Until: "the repair ends"}.Renewed(now))
		patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"resourceVersion": cur.ResourceVersion, "annotations": map[string]any{owner.Annotation: m.Annotations[owner.Annotation]}},
			"spec": map[string]any{"taints": m.Spec.Taints}})
		if c.DryRun.Enabled() {
			c.DryRun.Report(ctx, cur, "keep-off", string(patch))
			return nil
		}
		if _, err := c.client.CoreV1().Nodes().Patch(ctx, n.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			return err
		}
		wrote = true
		return nil
	})
	return wrote, err
}

// ask sends the provider the request of the Reboot or Replace step st is
// at (a Fence step: fence), once per boot the step was started for: a reboot that happened is
// never asked again, and a request whose answer was lost is sent again
// with the same ID, which the provider takes as the same request. An error
// or a timeout is no answer (retried with backoff); a refusal is one (said,
// and the step waits for its timeout).
func (c *Controller) ask(ctx context.Context, n *v1.Node, p *policy, st rem.State) error {
	i := st.Step
	// The recorded action, not whatever the ladder now has at that index
	// (Decide has settled an edit before this: Place).
	action := st.Action
	if action == rem.ActionFence {
		return c.fence(ctx, n, p, st)
	}
	if c.repairer == nil || (action != rem.ActionReboot && action != rem.ActionReplace) {
		return nil
	}
	if st.BootID != n.Status.NodeInfo.BootID {
		return nil // the machine has booted again since the step started
	}
	// From the step's recorded key ("2/Reboot"): a step moved by an edit
	// keeps its request's ID.
	id := nscloud.RequestID(n, p.name+"/"+st.Key)
	c.mu.Lock()
	done := c.requested[n.Name] == id
	c.mu.Unlock()
	if done {
		return nil
	}
	if ok, err := c.stillCalledFor(ctx, n, p, st); err != nil || !ok {
		return err
	}
	if c.DryRun.Enabled() {
		c.DryRun.Report(ctx, n, string(action), "request "+id)
		return nil
	}
	call := c.repairer.Reboot
	if action == rem.ActionReplace {
		call = c.repairer.Replace
		// The replacement counts against the brakes from before the
		// request, in this process and in the policy's status (a next
		// leader's count): the old Node may be gone before any sync sees
		// it at its Replace step.
		c.noteReplacement(n, rem.Request{Policy: p.name, Step: i, Action: action, Since: st.StepSince}, true, true)
		if err := c.writeStatus(ctx, p.name); err != nil {
			return fmt.Errorf("recording the replacement of node %s in policy %s's status before asking for it: %w", n.Name, p.name, err)
		}
	}
	// Bounded: a provider that never answers must not hold the worker.
	pctx, cancel := context.WithTimeout(ctx, providerTimeout)
	err := call(pctx, n, id, premise(st))
	cancel()
	var refused *nscloud.RefusedError
	switch {
	case errors.As(err, &refused):
		c.metrics.requests.WithLabelValues(string(action), "refused").Inc()
		c.eventOnce(n, EventProvider, fmt.Sprintf("Policy %s, step %d: %v; the step waits for its timeout", p.name, i+1, refused))
	case err != nil:
		c.metrics.requests.WithLabelValues(string(action), "error").Inc()
		return fmt.Errorf("%s of node %s (request %s): %w", action, n.Name, id, err)
	default:
		c.metrics.requests.WithLabelValues(string(action), "accepted").Inc()
		c.eventOnce(n, EventStep, fmt.Sprintf("Policy %s, step %d: the cloud provider accepted the %s (request %s)", p.name, i+1, action, id))
	}
	c.mu.Lock()
	c.requested[n.Name] = id
	c.mu.Unlock()
	return nil
}

// stillCalledFor says whether the request of the step under way (st) may be
// sent now: the step may have started long before (its request timed out, a
// new leader takes it over) and the node recovered meanwhile. The node must
// hold an unhealthy condition of the policy, in the cache and then on a
// fresh read from the API server (a stalled watch or a new leader's first
// list may be behind), still be selected, on the step's boot, with the
// record at that step (chaos seed 370007: a new leader sent a Replace 10 s
// after the node's condition had cleared). When not, nothing is sent and
// the node is looked at again: the ladder ends the repair after the healthy
// hold, or sends the request if the condition comes back first.
func (c *Controller) stillCalledFor(ctx context.Context, n *v1.Node, p *policy, st rem.State) (bool, error) {
	now := c.clock.Now()
	why := ""
	if !p.spec.Judge(n, now).Holding {
		why = "no unhealthy condition of the policy holds"
	} else {
		gctx, cancel := context.WithTimeout(ctx, kube.WriteTimeout)
		cur, err := c.client.CoreV1().Nodes().Get(gctx, n.Name, metav1.GetOptions{})
		cancel()
		switch {
		case apierrors.IsNotFound(err):
			why = "the Node is gone"
		case err != nil:
			return false, fmt.Errorf("reading node %s before sending its step's request: %w", n.Name, err)
		case !p.spec.Selects(cur):
			why = "the node read from the API server is out of the policy's pool"
		case cur.Status.NodeInfo.BootID != st.BootID:
			why = "the node read from the API server reports another boot"
		case !p.spec.Judge(cur, now).Holding:
			why = "the node read from the API server holds no unhealthy condition of the policy"
		default:
			rec, err := rem.ReadRecord(cur, p.name)
			if err != nil || rec.Step != st.Step || rec.Key != st.Key {
				why = "the node read from the API server has another repair record"
			}
		}
	}
	if why == "" {
		c.forgetSaid(n.Name, notSentKey)
		return true, nil
	}
	// Said once per reason: the node is looked at again every second.
	if c.saidAnew(n.Name, notSentKey, why) {
		klog.FromContext(ctx).Info("Not sending the step's request: "+why+"; looking again every second", "node", n.Name, "policy", p.name, "step", st.Step+1, "action", st.Action)
	}
	c.queue.AddAfter(n.Name, time.Second)
	return false, nil
}

// notSentKey keeps, among what was said of a node, stillCalledFor's last
// reason for holding a request back (a log line, no event).
const notSentKey = "(request held back)"

// premise is what the step's requests were decided on (State.MachineOff).
func premise(st rem.State) nscloud.Premise {
	if st.MachineOff {
		return nscloud.PremiseMachineOff
	}
	return nscloud.NoPremise
}
