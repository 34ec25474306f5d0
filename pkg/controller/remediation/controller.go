// Package remediation runs the repair ladder of the RemediationPolicy
// resources: pkg/remediation decides, this package acts. Each step is
// carried out by the part of nodeshepherd that owns it: Taint steps here
// (with owner records), Drain steps by the drain controller (its budgets
// and windows; it reads the node's repair record), Reboot and Replace by
// the cloud provider (cloudprovider.Repairer, with a request ID), Fence by
// the cloud provider too (cloudprovider.Fencer: a power-off request, then
// an answer that the machine is off, the provider's or the fencing
// endpoint's, and none that it runs, for the same boot: only then does the
// record confirm the death to the outofservice controller, which takes the
// node out of service; fence.go).
package remediation

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	cloudprovider "k8s.io/cloud-provider"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/prometheus/client_golang/prometheus"

	nscloud "github.com/nodeshepherd/nodeshepherd/pkg/cloudprovider"
	"github.com/nodeshepherd/nodeshepherd/pkg/cloudprovider/providers"
	"github.com/nodeshepherd/nodeshepherd/pkg/cloudprovider/webhook"
	"github.com/nodeshepherd/nodeshepherd/pkg/controllerutil"
	"github.com/nodeshepherd/nodeshepherd/pkg/kube"
	"github.com/nodeshepherd/nodeshepherd/pkg/owner"
	rem "github.com/nodeshepherd/nodeshepherd/pkg/remediation"
)

// Name is the controller's name in --controllers.
const Name = "remediation"

// EventSource is the component name on its events.
const EventSource = "nodeshepherd-remediation"

// AnnotationPaused on a policy pauses it like spec.paused.
const AnnotationPaused = "nodeshepherd.io/remediation-paused"

// Event reasons.
const (
	EventStarted   = "RemediationStarted"
	EventStep      = "RemediationStep"
	EventSkipped   = "RemediationStepSkipped"
	EventDone      = "RemediationDone"
	EventBlocked   = "RemediationBlocked"
	EventExhausted = "RemediationExhausted"
	EventConflict  = "RemediationConflict"
	EventRefused   = "RemediationPolicyRefused"
	EventEnded     = "RemediationEnded"
	EventProvider  = "RemediationProviderRefused"
	// EventFenceVetoed: the machine runs after a Fence's power-off request
	// (the provider says so, refused, or the node reports another boot).
	EventFenceVetoed = "FenceVetoed"
)

// Config holds the controller's settings.
type Config struct {
	DryRun bool
	// Cloud is cloudnodelifecycle's --cloud-provider (set by the
	// registry): its Repairer reboots and replaces.
	Cloud providers.Options
	// Fencing is outofservice's fencing endpoint (set by the registry;
	// empty URL: none): its PoweredOff answer confirms or vetoes a Fence
	// like the provider's InstancesV2.
	Fencing webhook.Config
}

// Deps are the controller's collaborators.
type Deps struct {
	Client   kubernetes.Interface
	Dynamic  dynamic.Interface
	Nodes    coreinformers.NodeInformer
	Recorder record.EventRecorder
	Registry prometheus.Registerer
	Clock    clock.WithTicker
	// Repairer reboots and replaces machines (nil: no provider can; the
	// ladder skips those steps, saying so).
	Repairer nscloud.Repairer
	// Fencer powers machines off; Instances (the provider's) and Fencing
	// (the fencing endpoint) say whether they are off. A policy with a Fence
	// step is refused without a Fencer, or without either of the others.
	Fencer    nscloud.Fencer
	Instances cloudprovider.InstancesV2
	Fencing   FencingEndpoint
	// FencingName names the fencing endpoint in messages (its URL).
	FencingName string
	// CloudName names the provider in messages.
	CloudName string
	// OutOfServiceMissing: the outofservice controller does not run in this
	// process, so a Fence's confirmed power-off would take nothing out of
	// service: a policy with a Fence step is refused (NeedsOutOfService).
	OutOfServiceMissing bool
	ProgressTimeout     time.Duration
}

// policy is a policy as the controller acts on it.
type policy struct {
	name string
	obj  *unstructured.Unstructured
	spec rem.PolicySpec
	// refused says why the controller does not act on it ("" when it does),
	// refusedReason the Accepted condition's reason.
	refused, refusedReason string
	paused                 bool
}

// storm is a pool's storm state, by policy name (not on the policy, which
// each read of the object replaces), seeded from and written to the
// policy's status so that a new leader keeps it: ended is when the pool's
// unhealthy share last went back under MaxUnhealthy (zero: never seen
// above), on whether it is above now.
type storm struct {
	on    bool
	ended time.Time
}

// Controller climbs the ladders.
type Controller struct {
	*controllerutil.Base
	client   kubernetes.Interface
	dynamic  dynamic.Interface
	clock    clock.WithTicker
	recorder record.EventRecorder
	repairer nscloud.Repairer
	// fencer powers off; instances and endpoint confirm (can).
	fencer       nscloud.Fencer
	instances    cloudprovider.InstancesV2
	endpoint     FencingEndpoint
	endpointName string
	cloudName    string
	// outOfServiceMissing is Deps.OutOfServiceMissing.
	outOfServiceMissing bool
	nodes               corelisters.NodeLister
	synced              []cache.InformerSynced
	queue               workqueue.TypedRateLimitingInterface[string]
	statusQ             workqueue.TypedRateLimitingInterface[string]
	factory             dynamicinformer.DynamicSharedInformerFactory
	metrics             *metrics

	mu       sync.Mutex
	policies map[string]*policy
	// said is the last message said per node and event reason (events once
	// per change of decision or reason).
	said map[string]map[string]string
	// verdicts is each node's last decision (for the status, metrics and
	// explain); requested the last provider request answered, by node.
	verdicts  map[string]nodeVerdict
	requested map[string]string
	// written is the last status written per policy.
	written map[string]rem.PolicyStatus
	// replacing are the nodes at a Replace step, by name: their Node goes
	// with the machine, and the one that registers anew under the name
	// (another UID) and is Ready ends the repair, said as done. Until then
	// each counts against the brakes (pending), and it is kept in the
	// policy's status for a new leader.
	replacing map[string]replacement
	// lost are the nodes whose write into repair got no answer (by name):
	// it may have landed, so each counts as in repair for the brakes until
	// a read of it settles it (sync).
	lost map[string]bool
	// fences is where each node's Fence stands (status), and fenceReqs
	// the answer to its power-off request, by node (fence.go).
	fences    map[string]string
	fenceReqs map[string]fenceRequest
	// storms is each pool's storm state (storm); the policy's status holds
	// it for the next leader.
	storms map[string]storm
	// holders is each node's last drainHolders answer, reused for
	// holdersEvery: a node waiting for its drain is looked at again on
	// every change of its Node, and its pods and budgets need not be.
	holders map[string]holdersRead
}

// providerTimeout bounds one repair request to the cloud provider (each
// of its own questions and writes included): an error or a timeout is no
// answer, and the request is sent again with the same ID.
const providerTimeout = kube.WriteTimeout

// evictSettle is how soon a node whose pre-eviction just evicted pods or
// kept new ones off is looked at again before its step starts.
const evictSettle = 2 * time.Second

// evictRetry is how soon a node held by refused evictions (evictProtected)
// is looked at again: a budget frees up as other pods become Ready.
const evictRetry = 5 * time.Second

// replacement is a node whose machine the provider was asked to replace.
type replacement struct {
	policy string
	uid    string
	zone   string
	step   int
	since  time.Time
	// asked: noted just before the provider was asked, and not yet seen
	// at its Replace step in the cache, which may lag the record's write:
	// a cached Node without the record is not a repair that ended.
	asked bool
}

// nodeVerdict is the last decision about a node under its policy.
type nodeVerdict struct {
	policy string
	d      rem.Decision
}

// New builds the controller; Run starts it.
func New(cfg Config, d Deps) (*Controller, error) {
	reg := d.Registry
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	b, err := controllerutil.NewBase(controllerutil.Setup{Name: Name, DryRun: cfg.DryRun, Registry: reg, Recorder: d.Recorder,
		ProgressTimeout: d.ProgressTimeout}, &d.Clock)
	if err != nil {
		return nil, err
	}
	c := &Controller{Base: b, client: d.Client, dynamic: d.Dynamic, clock: d.Clock, recorder: d.Recorder, repairer: d.Repairer,
		fencer: d.Fencer, instances: d.Instances, endpoint: d.Fencing, endpointName: d.FencingName, cloudName: d.CloudName, outOfServiceMissing: d.OutOfServiceMissing, fences: map[string]string{}, fenceReqs: map[string]fenceRequest{},
		nodes: d.Nodes.Lister(), metrics: newMetrics(reg),
		policies: map[string]*policy{}, said: map[string]map[string]string{}, verdicts: map[string]nodeVerdict{},
		requested: map[string]string{}, storms: map[string]storm{}, written: map[string]rem.PolicyStatus{}, replacing: map[string]replacement{}, lost: map[string]bool{}, holders: map[string]holdersRead{},
		queue: controllerutil.Track(b, "node", workqueue.NewTypedRateLimitingQueueWithConfig(controllerutil.RetryLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "remediation", Clock: d.Clock})),
		statusQ: controllerutil.Track(b, "policy", workqueue.NewTypedRateLimitingQueueWithConfig(controllerutil.RetryLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "remediation_status", Clock: d.Clock})),
	}
	c.factory = dynamicinformer.NewDynamicSharedInformerFactory(d.Dynamic, 0)
	pinf := c.factory.ForResource(rem.GroupVersionResource).Informer()
	policyReg, err := pinf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { c.onPolicy(obj, false) },
		UpdateFunc: func(_, obj any) { c.onPolicy(obj, false) },
		DeleteFunc: func(obj any) { c.onPolicy(kube.Untombstone(obj), true) },
	})
	if err != nil {
		return nil, err
	}
	onNode := func(obj any) {
		if n, ok := kube.Untombstone(obj).(*v1.Node); ok {
			c.queue.Add(n.Name)
		}
	}
	nodeReg, err := d.Nodes.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: onNode,
		UpdateFunc: func(_, obj any) { onNode(obj) }, DeleteFunc: onNode})
	if err != nil {
		return nil, err
	}
	// The workers start once both handlers have seen the first list (the
	// registrations' HasSynced, not the stores'): the policy handler fills
	// the policies and the storm state a predecessor wrote, so a node judged
	// before it would be judged with no policy and no brake.
	c.synced = []cache.InformerSynced{nodeReg.HasSynced, policyReg.HasSynced}
	return c, nil
}

// onPolicy reads a policy; one the controller cannot act on is refused,
// with the reason on the policy (an event, its Accepted condition) and in
// the log.
func (c *Controller) onPolicy(obj any, deleted bool) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return
	}
	c.mu.Lock()
	if deleted {
		delete(c.policies, u.GetName())
		delete(c.written, u.GetName())
		delete(c.storms, u.GetName())
		for name, r := range c.replacing {
			if r.policy == u.GetName() {
				delete(c.replacing, name) // counted for no policy now
			}
		}
		c.metrics.forget(u.GetName())
	} else {
		var p rem.RemediationPolicy
		pol := &policy{name: u.GetName(), obj: u}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &p); err != nil {
			pol.refused = "unreadable: " + err.Error()
		} else if _, seen := c.storms[pol.name]; !seen {
			// A process that has just become leader takes the storm state
			// its predecessor wrote: the cooldown goes on across a failover.
			var s storm
			s.on = p.Status.Storm
			if p.Status.StormEnded != nil {
				s.ended = p.Status.StormEnded.Time
			}
			c.storms[pol.name] = s
			// And the replacements in flight, counted until their new
			// Node is Ready.
			for _, r := range p.Status.Replacing {
				if _, known := c.replacing[r.Node]; !known {
					c.replacing[r.Node] = replacement{policy: pol.name, uid: r.UID, zone: r.Zone, step: int(r.Step), since: r.Since.Time}
				}
			}
		}
		switch errs := p.Spec.Validate(field.NewPath("spec")); {
		case pol.refused != "":
		case len(errs) > 0:
			pol.refused = errs.ToAggregate().Error()
		default:
			if i, no := p.Spec.FenceRefusal(c.can()); no {
				// Refused up front, not found out at the step: a Fence is a
				// power-off that the provider confirms, and nothing else can
				// stand in for it.
				pol.refused, pol.refusedReason = c.cannotFence(i), ReasonCannotFence
			} else if i, no := p.Spec.FenceRefusal(rem.Capabilities{Fence: !c.outOfServiceMissing}); no {
				pol.refused, pol.refusedReason = fmt.Sprintf("step %d (Fence) needs the outofservice controller, which takes the powered-off node out of service "+
					"(its pods force-deleted, its volumes detached), and it does not run: run --controllers=*,remediation,outofservice", i+1), ReasonNeedsOutOfService
			} else {
				pol.spec = p.Spec
				pol.paused = p.Spec.Paused || u.GetAnnotations()[AnnotationPaused] == "true"
			}
		}
		if prev := c.policies[pol.name]; pol.refused != "" && (prev == nil || prev.refused != pol.refused) && c.recorder != nil {
			c.recorder.Event(u, v1.EventTypeWarning, EventRefused, "Not acting on this policy: "+pol.refused)
		}
		c.policies[pol.name] = pol
	}
	c.mu.Unlock()
	c.statusQ.Add(u.GetName())
	c.enqueueAll()
}

func (c *Controller) enqueueAll() {
	nodes, _ := c.nodes.List(labels.Everything())
	for _, n := range nodes {
		c.queue.Add(n.Name)
	}
}

// Run works until ctx ends.
func (c *Controller) Run(ctx context.Context) error {
	c.factory.Start(ctx.Done())
	defer c.factory.Shutdown()
	return c.Base.Run(ctx, controllerutil.Work{Synced: c.synced, Queues: []interface{ ShutDown() }{c.queue, c.statusQ},
		Start: func(ctx context.Context) error {
			controllerutil.Workers(ctx, c.Base, 1, c.queue, "node", "Remediating node; will retry", c.sync)
			controllerutil.Workers(ctx, c.Base, 1, c.statusQ, "policy", "Writing the remediation policy's status; will retry", c.writeStatus)
			return nil
		}})
}

// selecting returns the policies that select the node, acted on or not,
// by name.
func (c *Controller) selecting(n *v1.Node) []*policy {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []*policy
	for _, p := range c.policies {
		if p.refused == "" && p.spec.Selects(n) {
			out = append(out, p)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out
}

func (c *Controller) policy(name string) *policy {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.policies[name]
}

func (c *Controller) sync(ctx context.Context, name string) error {
	err := c.syncNode(ctx, name)
	if errors.Is(err, errRecordMoved) {
		// Decided on a view the API server has moved past (a write of
		// ours whose answer was lost landed late, another leader's):
		// judged again once the cache has caught up.
		c.queue.AddAfter(name, time.Second)
		return nil
	}
	return err
}

func (c *Controller) syncNode(ctx context.Context, name string) error {
	n, err := c.nodes.Get(name)
	if apierrors.IsNotFound(err) {
		c.forgetNode(name)
		return nil
	}
	if err != nil {
		return err
	}
	if err := c.recheck(ctx, n); err != nil {
		return err
	}
	if err := c.renew(ctx, n); err != nil {
		return err
	}
	req, inRepair, err := rem.RequestOf(n)
	if err != nil {
		c.eventOnce(n, EventBlocked, "Repair record unreadable, not acting on the node: "+err.Error())
		return nil
	}
	c.noteReplacement(n, req, inRepair, false)
	pols := c.selecting(n)
	if inRepair {
		// A repair under way belongs to its policy. It ends, visibly, when
		// the policy is deleted or stops selecting the node; a policy that
		// is refused (a bad edit) freezes it instead: nothing is undone on
		// the strength of a configuration the controller cannot read.
		p := c.policy(req.Policy)
		switch {
		case p == nil:
			return c.end(ctx, n, req.Policy, "policy "+req.Policy+" was deleted")
		case p.refused != "":
			c.eventOnce(n, EventBlocked, fmt.Sprintf("Policy %s: refused (%s); the repair at step %d waits", p.name, p.refused, req.Step+1))
			return nil
		case !p.spec.Selects(n):
			return c.end(ctx, n, p.name, "policy "+p.name+" no longer selects the node")
		}
		return c.climb(ctx, n, p)
	}
	switch {
	case len(pols) == 0:
		c.setVerdict(n.Name, "", nil)
		return nil
	case len(pols) > 1:
		c.setVerdict(n.Name, "", nil)
		c.eventOnce(n, EventConflict, fmt.Sprintf("Node selected by %d remediation policies (%s and %s): none repairs it until one alone selects it",
			len(pols), pols[0].name, pols[1].name))
		for _, p := range pols {
			c.statusQ.Add(p.name)
		}
		return nil
	}
	c.forgetSaid(n.Name, EventConflict)
	return c.climb(ctx, n, pols[0])
}

// decide is the policy's decision for n among nodes.
func (c *Controller) decide(p *policy, n *v1.Node, nodes []*v1.Node, now time.Time) (rem.Decision, rem.State, error) {
	// The record as written: its step may have moved or gone with an edit
	// of the ladder, which Decide settles (Place).
	st, err := rem.ReadRecord(n, p.name)
	if err != nil {
		return rem.Decision{}, st, err
	}
	if st.Step < 0 {
		// Most nodes are healthy: they need no count of the pool.
		if h := p.spec.Judge(n, now); !h.Unhealthy {
			return rem.Decision{Verdict: rem.VerdictNone, Step: -1, Reason: "healthy", Next: h.Pending}, st, nil
		}
	}
	pool := p.spec.PoolOf(p.name, n.Labels[v1.LabelTopologyZone], nodes, func(m *v1.Node) bool {
		_, ok, err := rem.RequestOf(m)
		// An unreadable record counts as a repair, and so does a write
		// into repair whose answer was lost.
		return ok || err != nil || c.maybeInRepair(m.Name)
	}, now)
	// A machine being replaced has no Node (or one not Ready yet): it still
	// counts, in the pool and in repair, until the new Node is Ready.
	pending, pendingZone := c.pendingReplacements(p.name, pool.Zone, nodes)
	pool.Nodes += pending
	pool.InRepair += pending
	pool.ZoneNodes += pendingZone
	pool.ZoneInRepair += pendingZone
	c.mu.Lock()
	pool.StormEnded = c.storms[p.name].ended
	c.mu.Unlock()
	// A cordon with a nodeshepherd record is the drain controller's (for a
	// rule, or for this repair); any other is a person's, left alone.
	_, byDrain := owner.Of(n, owner.Cordon)
	d := p.spec.Decide(rem.Input{Node: n, State: st, Pool: pool, Now: now, Paused: p.paused, Can: c.can(),
		CordonedByOther: n.Spec.Unschedulable && !byDrain, Drain: rem.DrainProgressOf(n), Last: lastRepair(n, p.name)})
	return d, st, nil
}

// climb makes the one next decision for a node of policy p.
func (c *Controller) climb(ctx context.Context, n *v1.Node, p *policy) error {
	now := c.clock.Now()
	all, err := c.nodes.List(labels.Everything())
	if err != nil {
		return err
	}
	d, st, err := c.decide(p, n, all, now)
	if err != nil {
		c.eventOnce(n, EventBlocked, "Repair record unreadable, not acting on the node: "+err.Error())
		return nil
	}
	if d.Verdict == rem.VerdictStart || d.Verdict == rem.VerdictAdvance {
		// Before acting, make sure what the cache shows is so: a stalled
		// watch or a process that has just become leader may hold a node's
		// old unhealthy condition, or miss the other nodes failing with it.
		// The decision is made again on a fresh list from the API server.
		lctx, cancel := context.WithTimeout(ctx, kube.WriteTimeout)
		fresh, err := c.client.CoreV1().Nodes().List(lctx, metav1.ListOptions{})
		cancel()
		if err != nil {
			return err
		}
		all = make([]*v1.Node, 0, len(fresh.Items))
		var cur *v1.Node
		for i := range fresh.Items {
			all = append(all, &fresh.Items[i])
			if fresh.Items[i].Name == n.Name {
				cur = &fresh.Items[i]
			}
		}
		if cur == nil {
			return nil
		}
		if !p.spec.Selects(cur) {
			// Out of the pool by now (a person relabelled it; chaos seed
			// 340016: a Reboot sent 5 s after): no step of this policy;
			// the next look, on a cache caught up, ends the repair.
			c.queue.AddAfter(n.Name, time.Second)
			return nil
		}
		c.noteStorm(p, all, now)
		again, _, err := c.decide(p, cur, all, now)
		if err != nil {
			return err
		}
		if again.Verdict != d.Verdict || again.Step != d.Step {
			c.queue.AddAfter(n.Name, time.Second) // the cache is behind; it catches up
			return nil
		}
		n = cur
	}
	machineOff := false
	if d.Verdict == rem.VerdictStart || d.Verdict == rem.VerdictAdvance {
		// A step that disrupts pods first has the budgets evict those they
		// protect (issue 46 point 2, with or without a Drain step before
		// it); a refusal holds the node where it is, said and retried.
		if step := p.spec.Steps[d.Step]; rem.Disrupts(step) {
			var held []string
			var settle bool
			var err error
			held, settle, machineOff, err = c.evictProtected(ctx, n, p, d.Step)
			if err != nil {
				return err
			}
			switch {
			case len(held) > 0:
				d = rem.WaitForEvictions(st.Step, d.Step, step, held)
				d.Next = now.Add(evictRetry)
			case settle:
				// Evicted just now, or new pods only just kept off: the
				// step starts on a later look that finds nothing to
				// evict (a replacement the scheduler bound here meanwhile
				// is evicted in turn). Not a wait to announce.
				d = rem.Decision{Verdict: rem.VerdictNone, Step: st.Step, Next: now.Add(evictSettle)}
			}
		}
	}
	c.setVerdict(n.Name, p.name, &d)
	if d.Verdict != rem.VerdictNone || st.Step >= 0 {
		defer c.statusQ.AddAfter(p.name, statusDelay)
	}
	for _, s := range d.Skipped {
		c.eventOnce(n, EventSkipped, fmt.Sprintf("Policy %s: skipping %s", p.name, s))
	}
	switch d.Verdict {
	case rem.VerdictStart, rem.VerdictAdvance:
		next := rem.State{Step: d.Step, Action: p.spec.Steps[d.Step].Action, Key: rem.StepKey(d.Step, p.spec.Steps[d.Step]),
			StepSince: now, RepairSince: st.RepairSince, BootID: n.Status.NodeInfo.BootID, Drain: st.Drain, FenceBootID: st.FenceBootID,
			MachineOff: machineOff}
		if st.ResumeAt > d.Step {
			next.ResumeAt = st.ResumeAt // still on the way to a recurrence's target
		}
		if d.Verdict == rem.VerdictStart {
			next.RepairSince, next.ResumeAt = now, d.ResumeAt
		}
		// A Fence step's FenceBootID is written only once the provider
		// confirms the machine off (fence.go), never on reaching the step.
		if p.spec.Steps[d.Step].Action == rem.ActionDrain {
			next.Drain = true
		}
		if err := c.write(ctx, n, p, &next, d.Reason); err != nil {
			return err
		}
		action := p.spec.Steps[d.Step].Action
		c.metrics.steps.WithLabelValues(p.name, string(action)).Inc()
		reason := EventStep
		if d.Verdict == rem.VerdictStart {
			reason = EventStarted
		}
		c.eventOnce(n, reason, fmt.Sprintf("Policy %s, step %d (%s): %s; %s", p.name, d.Step+1, action, d.Reason, p.nextWords(d.Step, now)))
		c.forgetSaid(n.Name, EventBlocked)
		c.queue.AddAfter(n.Name, p.spec.Steps[d.Step].Timeout.Duration)
		return c.ask(ctx, n, p, next)
	case rem.VerdictMoved:
		// The same step at another index: the record follows it, with its
		// key (the provider's request IDs) and times; nothing is started.
		moved := st
		moved.Step = d.Step
		if err := c.write(ctx, n, p, &moved, d.Reason); err != nil {
			return err
		}
		c.eventOnce(n, EventStep, fmt.Sprintf("Policy %s: %s", p.name, d.Reason))
		c.queue.Add(n.Name)
		return nil
	case rem.VerdictEnd:
		// Its step is gone: undone as a repair whose policy went, and the
		// node judged again under the ladder as it is now.
		if err := c.end(ctx, n, p.name, d.Reason); err != nil {
			return err
		}
		c.queue.AddAfter(n.Name, time.Second)
		return nil
	case rem.VerdictNone:
		if st.Step >= 0 {
			if err := c.ask(ctx, n, p, st); err != nil {
				return err
			}
		} else if ownsKeepOff(n) && d.Next.IsZero() {
			// Kept off for a step that did not start (the node healthy
			// again, the policy changed): nothing is coming, so lifted.
			if err := c.write(ctx, n, p, nil, "no step that disrupts pods is coming"); err != nil {
				return err
			}
		}
		c.forgetSaid(n.Name, EventBlocked)
	case rem.VerdictDone:
		// Remembered on the node: a fault back within the recurrence
		// window resumes above this step.
		last := rem.LastRepair{Policy: p.name, Step: st.Step, Key: st.Key, Ended: now}
		if err := c.writeIf(ctx, n, p, nil, d.Reason, nil, &last); err != nil {
			return err
		}
		c.eventOnce(n, EventDone, fmt.Sprintf("Policy %s: repaired at step %d (%s), %s", p.name, st.Step+1, p.spec.Steps[st.Step].Action, d.Reason))
		c.forget(n.Name)
	case rem.VerdictBlocked:
		if st.Step >= 0 && strings.HasPrefix(d.Reason, rem.WaitingForDrain) {
			// Which pods the drain still has to move, and which budget
			// keeps them: said in the event and the status.
			d.Reason += c.drainHoldersEvery(ctx, n)
			c.setVerdict(n.Name, p.name, &d)
		}
		c.eventOnce(n, EventBlocked, fmt.Sprintf("Policy %s: %s", p.name, d.Reason))
		if d.Next.IsZero() {
			// A brake lifts with other nodes' changes (they enqueue this
			// one through the policy's status) or with time (the cooldown).
			c.queue.AddAfter(n.Name, time.Minute)
		}
	case rem.VerdictExhausted:
		c.eventOnce(n, EventExhausted, fmt.Sprintf("Policy %s: %s; the node waits for a person", p.name, d.Reason))
		// A Fence left vetoed is still watched: a machine that goes off
		// later (a person, the provider) is fenced then.
		if err := c.ask(ctx, n, p, st); err != nil {
			return err
		}
	}
	if !d.Next.IsZero() {
		c.queue.AddAfter(n.Name, d.Next.Sub(now))
	}
	return nil
}

// nextWords says what comes after step i, started at now.
func (p *policy) nextWords(i int, now time.Time) string {
	at := now.Add(p.spec.Steps[i].Timeout.Duration).UTC().Format(time.RFC3339)
	if i+1 < len(p.spec.Steps) {
		return fmt.Sprintf("next: step %d (%s) at %s unless healthy for %v", i+2, p.spec.Steps[i+1].Action, at, p.spec.HealthyHold.Duration)
	}
	return fmt.Sprintf("the last step: a person is asked at %s unless healthy for %v", at, p.spec.HealthyHold.Duration)
}

// noteStorm keeps when the pool's unhealthy share last went back under
// MaxUnhealthy, for the cooldown, and says a storm once.
func (c *Controller) noteStorm(p *policy, nodes []*v1.Node, now time.Time) {
	if p.spec.Brakes.MaxUnhealthy == nil {
		return
	}
	pool := p.spec.PoolOf(p.name, "", nodes, func(*v1.Node) bool { return false }, now)
	on := pool.Unhealthy > rem.Limit(p.spec.Brakes.MaxUnhealthy, pool.Nodes)
	c.mu.Lock()
	s := c.storms[p.name]
	changed := s.on != on
	switch {
	case on:
		s.on = true
	case s.on:
		s.on, s.ended = false, now
	}
	c.storms[p.name] = s
	c.mu.Unlock()
	if changed {
		c.statusQ.Add(p.name) // into the status at once, for a next leader
	}
}

// end takes a repair back: taints, drain and fence requests go with the
// record.
func (c *Controller) end(ctx context.Context, n *v1.Node, policyName, why string) error {
	p := c.policy(policyName)
	if p == nil {
		p = &policy{name: policyName}
	}
	if err := c.write(ctx, n, p, nil, why); err != nil {
		return err
	}
	c.eventOnce(n, EventEnded, fmt.Sprintf("Repair ended without a verdict: %s", why))
	c.forget(n.Name)
	c.statusQ.Add(policyName)
	return nil
}

// noteReplacement keeps the nodes at a Replace step, and says a repair done
// when another Node (a new UID) has registered under the name of one.
func (c *Controller) noteReplacement(n *v1.Node, req rem.Request, inRepair, asked bool) {
	c.mu.Lock()
	r, had := c.replacing[n.Name]
	replaced := false
	switch {
	case inRepair && req.Action == rem.ActionReplace:
		c.replacing[n.Name] = replacement{policy: req.Policy, uid: string(n.UID), zone: n.Labels[v1.LabelTopologyZone], step: req.Step, since: req.Since, asked: asked}
		if !had || r.uid != string(n.UID) {
			c.statusQ.Add(req.Policy) // into the status, for a new leader
		}
		had = false
	case had && r.uid != string(n.UID) && kube.NodeReady(n):
		delete(c.replacing, n.Name)
		replaced = true
	case had && r.uid != string(n.UID):
		had = false // the new Node, not Ready yet: still counted
	case had && r.asked:
		had = false // the cache has not caught up with the record yet
	case had:
		delete(c.replacing, n.Name) // the repair ended otherwise
		had = false
	}
	c.mu.Unlock()
	if replaced && !inRepair {
		c.eventOnce(n, EventDone, fmt.Sprintf("Policy %s: repaired by replacement at step %d (Replace): node %s registered anew by a new machine", r.policy, r.step+1, n.Name))
		c.statusQ.AddAfter(r.policy, statusDelay)
	}
}

func (c *Controller) setVerdict(node, policy string, d *rem.Decision) {
	c.mu.Lock()
	defer c.mu.Unlock()
	prev, had := c.verdicts[node]
	if d == nil || d.Verdict == rem.VerdictNone && d.Step < 0 {
		delete(c.verdicts, node)
	} else {
		c.verdicts[node] = nodeVerdict{policy: policy, d: *d}
	}
	// The counts change with a node's verdict (blocked, exhausted).
	if had && (prev.policy != policy || d == nil || prev.d.Verdict != d.Verdict) {
		c.statusQ.AddAfter(prev.policy, statusDelay)
	}
}

func (c *Controller) forget(node string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.holders, node)
	delete(c.verdicts, node)
	delete(c.requested, node)
	delete(c.fences, node)
	delete(c.fenceReqs, node)
}

// maybeInRepair says whether a write of the node into repair got no answer
// and no read has settled it yet.
func (c *Controller) maybeInRepair(name string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lost[name]
}

// recheck settles a write of the node whose answer was lost with a read of
// the node (bounded): until the read succeeds nothing is decided about the
// node. The decision that follows is made as always (a start or a new step
// on a fresh list of the nodes), so a write that landed is not made twice.
func (c *Controller) recheck(ctx context.Context, n *v1.Node) error {
	if !c.maybeInRepair(n.Name) {
		return nil
	}
	rctx, cancel := context.WithTimeout(ctx, kube.WriteTimeout)
	defer cancel()
	if _, err := c.client.CoreV1().Nodes().Get(rctx, n.Name, metav1.GetOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("reading node %s again after a write whose answer was lost: %w", n.Name, err)
	}
	c.mu.Lock()
	delete(c.lost, n.Name)
	c.mu.Unlock()
	return nil
}

func (c *Controller) forgetNode(name string) {
	c.mu.Lock()
	delete(c.lost, name)
	delete(c.holders, name)
	prev, had := c.verdicts[name]
	delete(c.said, name)
	delete(c.verdicts, name)
	delete(c.requested, name)
	delete(c.fences, name)
	delete(c.fenceReqs, name)
	c.mu.Unlock()
	if had {
		c.statusQ.Add(prev.policy)
	}
}

func (c *Controller) forgetSaid(node, reason string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.said[node], reason)
}

// saidAnew records msg as the last said of node for reason and reports
// whether it differs from the one before.
func (c *Controller) saidAnew(node, reason, msg string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	said := c.said[node]
	if said == nil {
		said = map[string]string{}
		c.said[node] = said
	}
	if said[reason] == msg {
		return false
	}
	said[reason] = msg
	return true
}

// eventOnce says msg on the node unless it said the same for reason last;
// it returns whether it said it.
func (c *Controller) eventOnce(n *v1.Node, reason, msg string) bool {
	if !c.saidAnew(n.Name, reason, msg) {
		return false
	}
	typ := v1.EventTypeNormal
	switch reason {
	case EventBlocked, EventExhausted, EventConflict, EventProvider, EventSkipped, EventFenceVetoed:
		typ = v1.EventTypeWarning
	}
	controllerutil.NodeEvent(c.recorder, n, typ, reason, msg)
	klog.Background().WithName(Name).Info(msg, "node", n.Name, "reason", reason)
	return true
}

// pendingReplacements counts the policy's replacements whose new Node is not
// Ready yet and which no Node of nodes carries as in repair (the old Node is
// gone, or a new one is not Ready): in the pool and in zone.
func (c *Controller) pendingReplacements(policy, zone string, nodes []*v1.Node) (pool, inZone int) {
	byName := make(map[string]*v1.Node, len(nodes))
	for _, n := range nodes {
		byName[n.Name] = n
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for name, r := range c.replacing {
		if r.policy != policy {
			continue
		}
		if n, ok := byName[name]; ok && (string(n.UID) == r.uid || kube.NodeReady(n)) {
			continue // the old Node, counted by its record; or back and Ready
		}
		pool++
		if r.zone == zone {
			inZone++
		}
	}
	return pool, inZone
}

// lastRepair is the node's last repair under the policy (nil: none).
func lastRepair(n *v1.Node, policy string) *rem.LastRepair {
	if l, ok := rem.LastRepairOf(n, policy); ok {
		return &l
	}
	return nil
}
