package remediation

import (
	"context"
	"errors"
	"fmt"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"

	nscloud "github.com/nodeshepherd/nodeshepherd/pkg/cloudprovider"
	rem "github.com/nodeshepherd/nodeshepherd/pkg/remediation"
)

// ReasonCannotFence is the Accepted=False reason of a policy with a Fence
// step when no provider can power machines off, or nothing can confirm it.
const ReasonCannotFence = "CannotFence"

// ReasonNeedsOutOfService is the Accepted condition's reason for a policy
// with a Fence step while the outofservice controller does not run.
const ReasonNeedsOutOfService = "NeedsOutOfService"

// fenceRequest is the answer to a node's power-off request.
type fenceRequest struct {
	id string
	// accepted is when the provider accepted it (zero: not yet); refused
	// its refusal.
	accepted time.Time
	refused  string
}

// FencingEndpoint says whether a node's machine is powered off: the
// outofservice controller's fencing endpoint (webhook.Provider, question
// PoweredOff), which confirms a Fence as the provider's InstancesV2 does.
type FencingEndpoint interface {
	PoweredOff(ctx context.Context, n *v1.Node) (bool, error)
}

// can is what the provider can do for a ladder. A Fence needs someone to
// power the machine off (the provider's PowerOff) and someone to say that
// it is off (the provider's InstancesV2, the fencing endpoint, or both).
func (c *Controller) can() rem.Capabilities {
	return rem.Capabilities{Reboot: c.repairer != nil, Replace: c.repairer != nil,
		Fence: c.fencer != nil && (c.instances != nil || c.endpoint != nil)}
}

// cannotFence words the refusal of a policy whose step i is a Fence.
func (c *Controller) cannotFence(i int) string {
	var why string
	switch {
	case c.fencer == nil && c.cloudName == "":
		why = "no --cloud-provider is configured"
	case c.fencer == nil:
		why = fmt.Sprintf("the cloud provider %q cannot power machines off (it has no PowerOff)", c.cloudName)
	default:
		why = fmt.Sprintf("%s cannot say that a machine is off (it has no InstancesV2), and no fencing endpoint is configured", c.providerWords())
	}
	return fmt.Sprintf("step %d (Fence) needs a cloud provider that powers machines off, and an answer that the machine is off, "+
		"from that provider or from the fencing endpoint (--out-of-service-fencing-webhook-url), and %s: "+
		"a Fence without a confirmed power-off could force-delete the pods of a machine that still runs; remove the step or configure such a provider", i+1, why)
}

// providerWords names the cloud provider in messages.
func (c *Controller) providerWords() string {
	if c.cloudName == "" {
		return "the cloud provider"
	}
	return fmt.Sprintf("the cloud provider %q", c.cloudName)
}

// endpointWords names the fencing endpoint in messages.
func (c *Controller) endpointWords() string {
	if c.endpointName == "" {
		return "the fencing endpoint"
	}
	return "the fencing endpoint " + c.endpointName
}

// errBootChanged: the node reports another boot than the one a Fence's
// confirmation is for; nothing is written.
var errBootChanged = errors.New("the node reports another boot")

// fence carries out the Fence step st is at: it sends the provider the
// power-off request (once per boot, with a request ID: a lost answer is
// sent again with the same ID), asks whether the machine is off (power),
// and writes the record's FenceBootID, the confirmation outofservice acts
// on, only when the answer is off for the boot the request was for
// (rem.DecideFence). A "running" answer after the settle time, a refusal or
// another boot is a veto: said once per change (EventFenceVetoed), shown in
// the policy's status, and watched (the machine may still go off).
func (c *Controller) fence(ctx context.Context, n *v1.Node, p *policy, st rem.State) error {
	i := st.Step
	if st.FenceBootID != "" {
		c.setFence(n.Name, fmt.Sprintf("powered off: confirmed for boot ID %q", st.FenceBootID))
		return nil
	}
	if !c.can().Fence {
		return nil // the policy is refused (cannotFence); never reached
	}
	now := c.clock.Now()
	// The request names the boot the step was started for.
	boot := n.DeepCopy()
	boot.Status.NodeInfo.BootID = st.BootID
	id := nscloud.RequestID(boot, p.name+"/"+st.Key)
	in := rem.FenceInput{Node: n.Name, RequestBoot: st.BootID, NodeBoot: n.Status.NodeInfo.BootID, Now: now,
		Settle: rem.FenceSettle(p.spec.Steps[i].Timeout.Duration)}
	if in.NodeBoot == in.RequestBoot {
		req, err := c.powerOff(ctx, n, p, st, id)
		if err != nil {
			return err
		}
		in.Accepted, in.Refused = req.accepted, req.refused
		if !req.accepted.IsZero() || req.refused != "" {
			in.Power, in.By = c.power(ctx, n)
		}
	}
	d := rem.DecideFence(in)
	c.setFence(n.Name, d.Message)
	prefix := fmt.Sprintf("Policy %s, step %d (Fence): ", p.name, i+1)
	switch d.Outcome {
	case rem.FenceConfirmed:
		next := st
		next.FenceBootID = st.BootID
		err := c.writeIf(ctx, n, p, &next, "the machine is powered off", func(cur *v1.Node) error {
			// Bound to the boot, and to the step as read: a record that
			// moved on, or a machine that has booted again, confirms nothing.
			if cur.Status.NodeInfo.BootID != st.BootID {
				return errBootChanged
			}
			if now, err := rem.ReadRecord(cur, p.name); err != nil || now.Step != st.Step || now.Key != st.Key || !now.StepSince.Equal(st.StepSince) {
				return fmt.Errorf("node %s: the repair record changed meanwhile (%+v, %v)", n.Name, now, err)
			}
			return nil
		}, nil)
		if errors.Is(err, errBootChanged) {
			c.queue.Add(n.Name) // judged again on the new boot
			return nil
		}
		if err != nil {
			return err
		}
		c.metrics.fences.WithLabelValues(p.name, "powered-off").Inc()
		c.forgetSaid(n.Name, EventFenceVetoed)
		c.eventOnce(n, EventStep, prefix+d.Message+"; the record now confirms the death of that boot to the outofservice controller")
		c.statusQ.AddAfter(p.name, statusDelay)
		return nil
	case rem.FenceVetoed:
		if c.eventOnce(n, EventFenceVetoed, prefix+d.Message+"; the node stays at this step and is not taken out of service") {
			c.metrics.fences.WithLabelValues(p.name, "vetoed").Inc()
			c.statusQ.AddAfter(p.name, statusDelay)
		}
	}
	// Waiting (no answer yet, or a question that failed) keeps the last
	// veto said: no answer is no new decision.
	if !d.Next.IsZero() {
		c.queue.AddAfter(n.Name, d.Next.Sub(now))
	}
	return nil
}

// powerOff sends the power-off request once per ID (a request whose
// answer was lost is sent again, the same ID); the answer is kept.
func (c *Controller) powerOff(ctx context.Context, n *v1.Node, p *policy, st rem.State, id string) (fenceRequest, error) {
	i, pr := st.Step, premise(st)
	c.mu.Lock()
	req, ok := c.fenceReqs[n.Name]
	c.mu.Unlock()
	if ok && req.id == id {
		return req, nil
	}
	if ok, err := c.stillCalledFor(ctx, n, p, st); err != nil || !ok {
		return fenceRequest{}, err
	}
	if c.DryRun.Enabled() {
		// Reported once; no answer follows, so the Fence waits.
		c.DryRun.Report(ctx, n, string(rem.ActionFence), "power-off request "+id)
		c.mu.Lock()
		c.fenceReqs[n.Name] = fenceRequest{id: id}
		c.mu.Unlock()
		return fenceRequest{id: id}, nil
	}
	// Bounded: a provider that never answers must not hold the worker.
	pctx, cancel := context.WithTimeout(ctx, providerTimeout)
	err := c.fencer.PowerOff(pctx, n, id, pr)
	cancel()
	req = fenceRequest{id: id}
	var refused *nscloud.RefusedError
	switch {
	case errors.As(err, &refused):
		c.metrics.requests.WithLabelValues(string(rem.ActionFence), "refused").Inc()
		req.refused = refused.Message
		if req.refused == "" {
			req.refused = "no reason given"
		}
	case err != nil:
		c.metrics.requests.WithLabelValues(string(rem.ActionFence), "error").Inc()
		return req, fmt.Errorf("power-off of node %s (request %s): %w", n.Name, id, err)
	default:
		c.metrics.requests.WithLabelValues(string(rem.ActionFence), "accepted").Inc()
		req.accepted = c.clock.Now()
		c.eventOnce(n, EventStep, fmt.Sprintf("Policy %s, step %d: the cloud provider accepted the power-off (request %s); the node is fenced once an answer says that the machine is off", p.name, i+1, id))
	}
	c.mu.Lock()
	c.fenceReqs[n.Name] = req
	c.mu.Unlock()
	return req, nil
}

// power asks everyone who can say whether the node's machine is off: the
// provider (InstancesV2) and the fencing endpoint (PoweredOff). An answer
// that it runs wins over one that it is off: they disagree only when one is
// wrong, and a wrong "off" lets the pods of a running machine be
// force-deleted, while a wrong "runs" only waits (the veto is watched). An
// error or a timeout is no answer. by names who gave the answer returned
// (for PowerUnknown, who was asked), for the messages.
func (c *Controller) power(ctx context.Context, n *v1.Node) (p rem.Power, by []string) {
	var asked, on, off []string
	note := func(who string, answer rem.Power) {
		asked = append(asked, who)
		switch answer {
		case rem.PowerOn:
			on = append(on, who)
		case rem.PowerOff:
			off = append(off, who)
		}
	}
	if c.instances != nil {
		note(c.providerWords(), c.providerPower(ctx, n))
	}
	if c.endpoint != nil {
		note(c.endpointWords(), c.endpointPower(ctx, n))
	}
	switch {
	case len(on) > 0:
		return rem.PowerOn, on
	case len(off) > 0:
		return rem.PowerOff, off
	}
	return rem.PowerUnknown, asked
}

// providerPower asks the provider whether the node's machine is off (gone,
// or shut down). Bounded like a request.
func (c *Controller) providerPower(ctx context.Context, n *v1.Node) rem.Power {
	qctx, cancel := context.WithTimeout(ctx, providerTimeout)
	defer cancel()
	logger := klog.FromContext(ctx)
	exists, err := c.instances.InstanceExists(qctx, n)
	if err != nil {
		logger.V(2).Info("Cloud provider could not say whether the machine exists", "node", n.Name, "err", err)
		return rem.PowerUnknown
	}
	if !exists {
		return rem.PowerOff
	}
	shutdown, err := c.instances.InstanceShutdown(qctx, n)
	if err != nil {
		logger.V(2).Info("Cloud provider could not say whether the machine is shut down", "node", n.Name, "err", err)
		return rem.PowerUnknown
	}
	if shutdown {
		return rem.PowerOff
	}
	return rem.PowerOn
}

// endpointPower asks the fencing endpoint whether the node's machine is
// powered off. Bounded like the provider's questions (the endpoint's own
// --out-of-service-fencing-webhook-timeout may be shorter).
func (c *Controller) endpointPower(ctx context.Context, n *v1.Node) rem.Power {
	qctx, cancel := context.WithTimeout(ctx, providerTimeout)
	defer cancel()
	off, err := c.endpoint.PoweredOff(qctx, n)
	switch {
	case err != nil:
		klog.FromContext(ctx).V(2).Info("Fencing endpoint could not say whether the machine is powered off", "node", n.Name, "err", err)
		return rem.PowerUnknown
	case off:
		return rem.PowerOff
	}
	return rem.PowerOn
}

func (c *Controller) setFence(node, msg string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.fences[node] = msg
}

func (c *Controller) fenceWords(node string) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.fences[node]
}
