// Package outofservice taints a node node.kubernetes.io/out-of-service:NoExecute
// once its death is confirmed (the cloud provider reports its machine shut
// down or gone, a fencing endpoint reports it powered off, a person annotates
// it, or a remediation policy reached a Fence step for its current boot) and
// it has been silent long enough, so that kube-controller-manager's pod
// garbage collector force-deletes its terminating pods and the attach-detach
// controller detaches their volumes at once (KEP-2268, non-graceful node
// shutdown). It takes the taint back when the node is Ready again after a
// reboot or its confirmation is withdrawn, never while the node is still
// silent. A person's confirmation, and a remediation policy's Fence, apply
// to the boot of the machine they were given for only. It writes only this
// taint and its own annotations (and removes a person's confirmation whose
// boot ended), so it can run next to kube-controller-manager's node
// lifecycle controller.
package outofservice

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	cloudprovider "k8s.io/cloud-provider"
	"k8s.io/component-helpers/node/topology"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/nodeshepherd/nodeshepherd/pkg/cloudprovider/webhook"
	"github.com/nodeshepherd/nodeshepherd/pkg/controllerutil"
	"github.com/nodeshepherd/nodeshepherd/pkg/kube"
	"github.com/nodeshepherd/nodeshepherd/pkg/nodetopology"
	"github.com/nodeshepherd/nodeshepherd/pkg/owner"
	"github.com/nodeshepherd/nodeshepherd/pkg/remediation"
)

// Name is the controller's name in --controllers.
const Name = "outofservice"

// EventSource is the component name on its events.
const EventSource = "out-of-service-controller"

// TaintValue is the taint's value, as fencing operators (medik8s) write it;
// kube-controller-manager looks at the key only.
const TaintValue = "nodeshutdown"

// Taint is what the controller adds: the key kube-controller-manager's pod
// GC and attach-detach controller look for, with the NoExecute effect that
// KEP-2268 documents (pods that do not tolerate it are evicted).
var Taint = v1.Taint{Key: v1.TaintNodeOutOfService, Value: TaintValue, Effect: v1.TaintEffectNoExecute}

// Annotations.
const (
	// AnnotationConfirm is a person's confirmation that the node's machine
	// is dead; its value is the reason, quoted in events.
	AnnotationConfirm = "nodeshepherd.io/out-of-service"
	// AnnotationConfirmationBootID is the node's boot ID the confirmation
	// was given for: recorded by the controller when it first sees the
	// confirmation (or set by the person in the same command). Once the node
	// reports another boot ID, the confirmation is removed.
	AnnotationConfirmationBootID = "nodeshepherd.io/out-of-service-confirmation-boot-id"
	// AnnotationBootID records the node's boot ID when it was tainted: the
	// taint is this controller's, and a new boot ID means a reboot.
	AnnotationBootID = "nodeshepherd.io/out-of-service-boot-id"
	// AnnotationConfirmedBy records what confirmed the death.
	AnnotationConfirmedBy = "nodeshepherd.io/out-of-service-confirmed-by"
)

// Event reasons.
const (
	EventTaintAdded   = "OutOfServiceTaintAdded"
	EventTaintRemoved = "OutOfServiceTaintRemoved"
	EventPending      = "OutOfServicePending"
	EventBlocked      = "OutOfServiceBlocked"
	// A person's confirmation recorded for the current boot, and removed
	// because the node has booted again.
	EventConfirmationRecorded = "OutOfServiceConfirmationRecorded"
	EventConfirmationExpired  = "OutOfServiceConfirmationExpired"
)

// providerTimeout bounds one question to the cloud provider.
const providerTimeout = 30 * time.Second

// Deps are the controller's collaborators; Cloud may be nil.
type Deps struct {
	Client kubernetes.Interface
	Nodes  coreinformers.NodeInformer
	Cloud  cloudprovider.Interface
	// Fencer replaces the endpoint of Config.Fencing (tests).
	Fencer   fencer
	Recorder record.EventRecorder
	Registry prometheus.Registerer
	Clock    clock.WithTicker
	// ProgressTimeout bounds a step (controllerutil.DefaultProgressTimeout when zero).
	ProgressTimeout time.Duration
}

// Controller is the out-of-service controller.
type Controller struct {
	*controllerutil.Base
	cfg       Config
	client    kubernetes.Interface
	instances cloudprovider.InstancesV2 // nil without a provider
	fencer    fencer                    // nil without a fencing endpoint
	recorder  record.EventRecorder
	clock     clock.WithTicker
	dryRun    *controllerutil.DryRun
	nodes     corelisters.NodeLister
	synced    cache.InformerSynced
	queue     workqueue.TypedRateLimitingInterface[string]
	overlay   *controllerutil.Overlay[*v1.Node]
	dryWrites controllerutil.DryRunWrites[*v1.Node]
	metrics   *metrics

	mu sync.Mutex
	// said is, per node, the action and code of the last event: one event
	// per change of decision or reason, not one per re-check.
	said map[string]string
	// lost are the writes whose answer never came, by node: they may have
	// landed (see recheck).
	lost map[string]lostWrite
	// ignored is, per node, why its remediation record was last ignored:
	// logged once per change, not at every look.
	ignored map[string]string
	// unconfirmed is, per node, the boot it reported when this process
	// last saw it without a person's confirmation (confirm.go).
	unconfirmed map[string]sighting
	// fenceUntil is when this process's first budgeted write may be sent
	// (after its start, the previous leader's writes are settled: see
	// budgetCount); zero until Run starts.
	fenceUntil time.Time
}

// lostWrite is an update of a node whose answer was lost.
type lostWrite struct {
	sent *v1.Node // as sent; its resourceVersion is the one it started from
	v    verdict
	in   input
}

// New builds the controller.
func New(cfg Config, d Deps) (*Controller, error) {
	b, err := controllerutil.NewBase(controllerutil.Setup{Name: Name, Validate: cfg.Validate, DryRun: cfg.DryRun,
		Registry: d.Registry, Recorder: d.Recorder, ProgressTimeout: d.ProgressTimeout}, &d.Clock)
	if err != nil {
		return nil, err
	}
	c := &Controller{
		Base: b, cfg: cfg, client: d.Client, recorder: d.Recorder, clock: d.Clock, dryRun: b.DryRun,
		nodes: d.Nodes.Lister(),
		queue: controllerutil.Track(b, "node", workqueue.NewTypedRateLimitingQueueWithConfig(controllerutil.RetryLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: Name, Clock: d.Clock})),
		overlay: controllerutil.NewOverlay[*v1.Node](), metrics: newMetrics(d.Registry), said: map[string]string{},
		lost: map[string]lostWrite{}, ignored: map[string]string{}, unconfirmed: map[string]sighting{},
	}
	if cfg.Fencing.URL != "" {
		f, err := webhook.NewNamed(cfg.Fencing, fencingFlags)
		if err != nil {
			return nil, err
		}
		c.fencer = f
	}
	if d.Fencer != nil {
		c.fencer = d.Fencer
	}
	if d.Cloud != nil {
		instances, ok := d.Cloud.InstancesV2()
		if !ok {
			return nil, fmt.Errorf("cloud provider %q does not implement InstancesV2", d.Cloud.ProviderName())
		}
		c.instances = instances
	}
	// Each node is observed (confirm.go) before it is queued, so that a
	// sync never sees a confirmation whose absence it has not seen first.
	// The worker starts once the handler has seen the first list (its
	// registration's HasSynced, not the store's): every node observed first.
	reg, err := d.Nodes.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { c.onNode(obj) },
		UpdateFunc: func(_, obj any) { c.onNode(obj) },
		DeleteFunc: func(obj any) { c.onNode(obj) },
	})
	if err != nil {
		return nil, err
	}
	c.synced = reg.HasSynced
	return c, nil
}

// onNode observes a node's event and queues it.
func (c *Controller) onNode(obj any) {
	n, ok := kube.Untombstone(obj).(*v1.Node)
	if !ok {
		return
	}
	c.observe(n)
	c.queue.Add(n.Name)
}

// Run works until ctx ends, with one worker so that every decision counts
// the writes before it against the budget.
func (c *Controller) Run(ctx context.Context) error {
	return c.Base.Run(ctx, controllerutil.Work{Synced: []cache.InformerSynced{c.synced}, Queues: []interface{ ShutDown() }{c.queue},
		Start: func(ctx context.Context) error {
			// Started once this process leads (the manager builds and runs
			// the controllers after it won the Lease): see settleBudget.
			c.mu.Lock()
			c.fenceUntil = c.clock.Now().Add(c.cfg.TakeoverWait)
			fence := c.fenceUntil
			c.mu.Unlock()
			klog.FromContext(ctx).Info("Starting out-of-service controller", "after", c.cfg.After, "maxNodes", c.cfg.MaxNodes,
				"maxPercent", c.cfg.MaxPercent, "cloudProvider", c.cfg.Cloud.Name, "dryRun", c.dryRun.Enabled(),
				"firstTaintNotBefore", fence)
			controllerutil.Workers(ctx, c.Base, 1, c.queue, "node", "Syncing node; will retry", c.sync)
			return nil
		}})
}

// view is the node as this controller last wrote it (or, in dry-run,
// would have written it).
func (c *Controller) view(n *v1.Node) *v1.Node {
	return c.dryWrites.Apply(n.Name, c.overlay.Latest(n.Name, n))
}

// sync decides about one node and acts.
func (c *Controller) sync(ctx context.Context, name string) error {
	cached, err := c.nodes.Get(name)
	if apierrors.IsNotFound(err) {
		c.forget(name)
		return nil
	}
	if err != nil {
		return err
	}
	if err := c.recheck(ctx, cached); err != nil {
		return err
	}
	all, err := c.nodes.List(labels.Everything())
	if err != nil {
		return err
	}
	n := c.view(cached)
	in := c.input(ctx, n, all)
	v := decide(in)
	if v.action == actTaint {
		if v, err = c.settleBudget(ctx, v, in, all); err != nil {
			return err
		}
	}
	c.report(ctx, n, v)
	switch v.action {
	case actTaint, actUntaint:
		if err := c.write(ctx, n, v, in); err != nil {
			return err
		}
	case actRecord, actExpire, actForget:
		if err := c.write(ctx, n, v, in); err != nil {
			return err
		}
		// The decision about the node follows, on the annotations written.
		c.queue.Add(name)
		return nil
	case actWait:
		c.queue.AddAfter(name, v.retryAt.Sub(c.clock.Now()))
	}
	// A silent node is looked at again: the provider's answer, the budget
	// or the zones may change without an event on this node.
	if !in.ready || v.action == actRefuse {
		c.queue.AddAfter(name, c.cfg.NodeMonitorPeriod)
	}
	return nil
}

// input gathers what decide needs about n.
func (c *Controller) input(ctx context.Context, n *v1.Node, all []*v1.Node) input {
	in := input{now: c.clock.Now(), node: n.Name, ready: kube.NodeReady(n), after: c.cfg.After,
		bootID: n.Status.NodeInfo.BootID}
	zone := topology.GetZoneKey(n)
	in.zone = strings.Trim(strings.ReplaceAll(zone, ":\x00:", "/"), "/") // region/zone, for messages
	if cond := kube.NodeCondition(n, v1.NodeReady); cond != nil {
		in.silentSince = kube.NotBefore(cond.LastTransitionTime.Time)
	} else {
		in.silentSince = kube.NotBefore(n.CreationTimestamp.Time)
	}
	recorded, owned := n.Annotations[AnnotationBootID]
	tainted := kube.HasTaint(n, v1.TaintNodeOutOfService)
	in.owned, in.taintedByOther, in.recordedBootID = owned && tainted, tainted && !owned, recorded
	in.confirmationBootID, in.confirmationStamped = n.Annotations[AnnotationConfirmationBootID]
	if reason, ok := n.Annotations[AnnotationConfirm]; ok {
		person := confirmation{source: SourcePerson, detail: fmt.Sprintf("annotation %s=%q", AnnotationConfirm, reason)}
		// Without a recorded boot, it counts only if it was written
		// during the current boot (confirm.go).
		b := binding{ok: true}
		if !in.confirmationStamped {
			b = c.bindConfirmation(n)
		}
		if b.ok {
			in.confirmations = append(in.confirmations, person)
			in.bound = b.how
		} else {
			in.unbound = fmt.Sprintf("Not counting the confirmation by %s of node %s: it cannot be shown that it was written during the node's current boot (boot ID %q): %s. "+
				"It confirms nothing: remove the annotation and add it again, or name the boot it is for in annotation %s",
				person, n.Name, n.Status.NodeInfo.BootID, b.how, AnnotationConfirmationBootID)
		}
	}
	// The provider is asked only about silent nodes and nodes this
	// controller tainted: a Ready node needs no confirmation.
	if c.instances != nil && (!in.ready || in.owned) {
		in.provider = c.askProvider(ctx, n)
		switch in.provider {
		case providerDead:
			in.confirmations = append(in.confirmations, confirmation{source: SourceCloudProvider, detail: c.providerDetail(n)})
		}
	}
	if c.fencer != nil && (!in.ready || in.owned) {
		in.fencing = c.askFencer(ctx, n)
		if in.fencing == providerDead {
			in.confirmations = append(in.confirmations, confirmation{source: SourceFencing, detail: fmt.Sprintf("%s answers that the machine of %s is powered off", c.cfg.Fencing.URL, n.Name)})
		}
	}
	// Last: the metrics name the first source, and a remediation policy is
	// the weakest (it never overrides a disruption). A policy's Fence is a
	// power-off the remediation controller saw confirmed; it counts here
	// only while the provider or the fencing endpoint answers the machine
	// off too, and a "running" answer vetoes it (issue 46: never the
	// record alone).
	// Who answers that the machine runs, if anyone: a veto of every
	// confirmation (decideNode) and of a remediation Fence (below).
	switch {
	case in.provider == providerRunning:
		in.machineRuns = "the cloud provider " + c.cfg.Cloud.Name
	case in.fencing == providerRunning:
		in.machineRuns = "the fencing endpoint " + c.cfg.Fencing.URL
	}
	rc, ok, why := c.remediationConfirmation(n)
	if ok {
		switch {
		case in.provider == providerDead || in.fencing == providerDead:
			in.confirmations = append(in.confirmations, rc)
		case in.machineRuns != "":
			in.fenceVetoed = fmt.Sprintf("Not counting the Fence of %s for node %s: %s answers that the machine runs; a Fence confirms a death only while the machine is answered off",
				rc.detail, n.Name, in.machineRuns)
		default:
			why = fmt.Sprintf("Not counting the Fence of %s yet: no answer of the cloud provider or the fencing endpoint confirms the machine off", rc.detail)
		}
	}
	c.noteIgnored(ctx, n, why)
	// Zones and the budget, from every node as this controller sees it.
	views := make([]*v1.Node, len(all))
	var conds []*v1.NodeCondition
	maybe := c.maybeTainted()
	unsure := 0
	for i, other := range all {
		views[i] = c.view(other)
		if kube.HasTaint(views[i], v1.TaintNodeOutOfService) {
			in.outOfService++
		} else if maybe[other.Name] {
			unsure++
		}
		if !nodetopology.ExcludedFromDisruption(views[i]) {
			conds = append(conds, kube.NodeCondition(views[i], v1.NodeReady))
		}
	}
	c.metrics.nodes.Set(float64(in.outOfService))
	// A taint whose write got no answer may be on its node: it counts
	// against the budget until a read says otherwise.
	in.outOfService += unsure
	in.zoneState = nodetopology.StateNormal
	if s, ok := nodetopology.DisruptedZones(views, c.cfg.UnhealthyZoneThreshold)[zone]; ok {
		in.zoneState = s
	}
	_, in.clusterState = nodetopology.ComputeZoneState(conds, c.cfg.UnhealthyZoneThreshold)
	in.limit = c.cfg.limit(len(all))
	return in
}

// settleBudget checks a decision to taint against the budget as the API
// server has it, not as this process has seen it (issue 45, hole 4f).
// The informer's count can miss a taint written by another process whose
// answer had not landed when the informer listed: above all the previous
// leader's, sent before it lost the Lease and landing after this process
// took over and listed. The previous leader stops writing when it loses the
// Lease (its controllers' context ends; the manager), and each of its writes
// is bounded by kube.WriteTimeout, so every write it sent has landed or
// failed within kube.WriteTimeout after this process won the Lease. So the
// first taint waits until Config.TakeoverWait (kube.WriteTimeout) after the
// controller started (which is after the Lease was won), and every taint is
// counted afresh: the
// nodes tainted in a fresh list (a quorum read), in this process's view and
// among its unanswered writes, each node once. A list that fails decides
// nothing (retried).
func (c *Controller) settleBudget(ctx context.Context, v verdict, in input, all []*v1.Node) (verdict, error) {
	c.mu.Lock()
	fence := c.fenceUntil
	c.mu.Unlock()
	if now := c.clock.Now(); now.Before(fence) {
		return verdict{action: actWait, code: codeTakeover, retryAt: fence, message: fmt.Sprintf(
			"Node %s is confirmed dead by %s; it is tainted out of service no sooner than %s: this process has just started leading, and a write of the previous leader may land until kube.WriteTimeout (%v) after that, so the budget is counted then",
			in.node, describe(in.confirmations), fence.UTC().Format(time.RFC3339Nano), kube.WriteTimeout)}, nil
	}
	lctx, cancel := context.WithTimeout(ctx, kube.WriteTimeout)
	defer cancel()
	fresh, err := c.client.CoreV1().Nodes().List(lctx, metav1.ListOptions{})
	if err != nil {
		return v, fmt.Errorf("listing the nodes to count the out-of-service budget before tainting node %s: %w", in.node, err)
	}
	counted := map[string]bool{}
	maybe := c.maybeTainted()
	for _, o := range all {
		if kube.HasTaint(c.view(o), v1.TaintNodeOutOfService) || maybe[o.Name] {
			counted[o.Name] = true
		}
	}
	for i := range fresh.Items {
		if kube.HasTaint(&fresh.Items[i], v1.TaintNodeOutOfService) {
			counted[fresh.Items[i].Name] = true
		}
	}
	again := in
	again.outOfService, again.limit = len(counted), min(in.limit, c.cfg.limit(len(fresh.Items)))
	return decide(again), nil
}

// askProvider asks whether the node's machine is gone or shut down; an
// error or a timeout is never an answer.
func (c *Controller) askProvider(ctx context.Context, n *v1.Node) providerAnswer {
	qctx, cancel := context.WithTimeout(ctx, providerTimeout)
	defer cancel()
	logger := klog.FromContext(ctx)
	exists, err := c.instances.InstanceExists(qctx, n)
	if err != nil {
		c.metrics.providerErrors.Inc()
		logger.V(2).Info("Cloud provider could not say whether the machine exists", "node", n.Name, "err", err)
		return providerUnknown
	}
	if !exists {
		return providerDead
	}
	shutdown, err := c.instances.InstanceShutdown(qctx, n)
	if err != nil {
		c.metrics.providerErrors.Inc()
		logger.V(2).Info("Cloud provider could not say whether the machine is shut down", "node", n.Name, "err", err)
		return providerUnknown
	}
	if shutdown {
		return providerDead
	}
	return providerRunning
}

// fencer confirms that a machine is powered off (webhook.Provider).
type fencer interface {
	PoweredOff(ctx context.Context, n *v1.Node) (bool, error)
}

// askFencer asks the fencing endpoint; an error or a timeout is never an answer.
func (c *Controller) askFencer(ctx context.Context, n *v1.Node) providerAnswer {
	qctx, cancel := context.WithTimeout(ctx, providerTimeout)
	defer cancel()
	off, err := c.fencer.PoweredOff(qctx, n)
	if err != nil {
		c.metrics.fencingErrors.Inc()
		klog.FromContext(ctx).V(2).Info("Fencing endpoint could not say whether the machine is powered off", "node", n.Name, "err", err)
		return providerUnknown
	}
	if off {
		return providerDead
	}
	return providerRunning
}

// remediationConfirmation is a remediation policy's confirmed Fence step
// (remediation.RequestOf: FenceBootID, written once the provider answered
// the machine off) as a confirmation; input counts it only while the
// provider or the fencing endpoint answers the machine off. It confirms
// the boot it was taken for only: once the node reports another boot ID, the machine the policy
// declared dead has started again, and it says nothing about this boot. A
// malformed record confirms nothing. Why a record is ignored is logged once
// per change.
func (c *Controller) remediationConfirmation(n *v1.Node) (_ confirmation, _ bool, why string) {
	r, ok, err := remediation.RequestOf(n)
	switch {
	case err != nil:
		why = fmt.Sprintf("Ignoring a malformed remediation record, which confirms nothing: %v", err)
	case ok && r.FenceBootID != "" && r.FenceBootID != n.Status.NodeInfo.BootID:
		why = fmt.Sprintf("Ignoring the Fence of %s: it was taken for boot ID %q, the node now reports boot ID %q", r.Why(), r.FenceBootID, n.Status.NodeInfo.BootID)
	}
	if why != "" {
		return confirmation{}, false, why
	}
	if !ok || r.FenceBootID == "" {
		return confirmation{}, false, "" // no repair, or not fenced (yet)
	}
	return confirmation{source: SourceRemediation, detail: fmt.Sprintf("%s, for boot ID %q", r.Why(), r.FenceBootID)}, true, ""
}

// noteIgnored logs why a node's remediation record is ignored ("" : it is
// not), once per change.
func (c *Controller) noteIgnored(ctx context.Context, n *v1.Node, why string) {
	c.mu.Lock()
	changed := c.ignored[n.Name] != why
	if why == "" {
		delete(c.ignored, n.Name)
	} else {
		c.ignored[n.Name] = why
	}
	c.mu.Unlock()
	if why != "" && changed {
		klog.FromContext(ctx).V(2).Info(why, "node", n.Name, "annotation", remediation.AnnotationState)
	}
}

// providerDetail words the provider's confirmation; it re-asks nothing:
// the answer is known to be dead, and the wording need not say which.
func (c *Controller) providerDetail(n *v1.Node) string {
	return fmt.Sprintf("%s reports the machine of %s shut down or gone", c.cfg.Cloud.Name, n.Name)
}

// report records the verdict in an event and the metrics when it differs
// from the last one said about the node.
func (c *Controller) report(ctx context.Context, n *v1.Node, v verdict) {
	key := v.action + "/" + v.code
	c.mu.Lock()
	changed := c.said[n.Name] != key
	c.said[n.Name] = key
	c.mu.Unlock()
	if !changed || v.action == actNothing {
		return
	}
	logger := klog.FromContext(ctx)
	switch v.action {
	case actWait:
		logger.Info(v.message, "node", n.Name)
		controllerutil.NodeEvent(c.recorder, n, v1.EventTypeNormal, EventPending, v.message)
	case actRefuse:
		logger.Info(v.message, "node", n.Name)
		c.metrics.refusals.WithLabelValues(v.code).Inc()
		controllerutil.NodeEvent(c.recorder, n, v1.EventTypeWarning, EventBlocked, v.message)
	}
	// Decisions are reported once written (write), so that a failed write
	// tried again is not announced twice.
}

// forgetSaid lets the next verdict about the node be reported again.
func (c *Controller) forgetSaid(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.said, name)
}

func (c *Controller) forget(name string) {
	c.mu.Lock()
	delete(c.lost, name)
	delete(c.ignored, name)
	delete(c.unconfirmed, name)
	c.mu.Unlock()
	c.forgetSaid(name)
	c.overlay.Forget(name)
	c.dryWrites.Forget(name)
}

// change applies the verdict's taint and annotations to n.
func change(n *v1.Node, v verdict, in input, now time.Time) {
	if n.Annotations == nil {
		n.Annotations = map[string]string{}
	}
	switch v.action {
	case actTaint:
		n.Spec.Taints, _ = controllerutil.ChangeTaints(n.Spec.Taints, []v1.Taint{Taint}, nil, now)
		n.Annotations[AnnotationBootID] = in.bootID
		n.Annotations[AnnotationConfirmedBy] = describe(in.confirmations)
		// No expiry (owner.Lease): the taint stands for a machine confirmed
		// dead, and only a judgement of the machine (this controller's, or
		// a person's) may take it off; a timer cannot tell that the machine
		// is still off, and lifting it would let the node's old pods and
		// volumes be taken as live.
		owner.Set(n, owner.TaintKey(Taint), owner.Record{Controller: Name, Since: now,
			Why:   "machine confirmed dead: " + describe(in.confirmations),
			Until: fmt.Sprintf("the node is Ready again after a reboot (a boot ID other than %q), or Ready and no longer confirmed dead", in.bootID)})
	case actUntaint:
		owner.Remove(n, owner.TaintKey(Taint))
		n.Spec.Taints, _ = controllerutil.ChangeTaints(n.Spec.Taints, nil, []v1.Taint{Taint}, now)
		delete(n.Annotations, AnnotationBootID)
		delete(n.Annotations, AnnotationConfirmedBy)
		if v.dropConfirmation {
			delete(n.Annotations, AnnotationConfirm)
			delete(n.Annotations, AnnotationConfirmationBootID)
		}
	case actRecord:
		n.Annotations[AnnotationConfirmationBootID] = v.confirmationBootID
	case actExpire:
		delete(n.Annotations, AnnotationConfirm)
		delete(n.Annotations, AnnotationConfirmationBootID)
	case actForget:
		delete(n.Annotations, AnnotationConfirmationBootID)
	}
}

// events are the reason and type of each written action's event; an
// action without one is only logged.
var events = map[string]struct{ reason, typ string }{
	actTaint:   {EventTaintAdded, v1.EventTypeNormal},
	actUntaint: {EventTaintRemoved, v1.EventTypeNormal},
	actRecord:  {EventConfirmationRecorded, v1.EventTypeNormal},
	actExpire:  {EventConfirmationExpired, v1.EventTypeWarning},
}

// write adds or removes the taint with its annotations, or changes a
// person's confirmation, in one update, with the node's resourceVersion as
// precondition (a conflict is retried from the informer's newer copy).
func (c *Controller) write(ctx context.Context, n *v1.Node, v verdict, in input) error {
	now := c.clock.Now()
	action, msg := v.action, v.message
	if c.dryRun.Enabled() {
		c.dryWrites.Add(n.Name, func(obj *v1.Node) { change(obj, v, in, now) })
		c.dryRun.Report(ctx, n, "out-of-service-"+action, msg)
	} else {
		updated := n.DeepCopy()
		change(updated, v, in, now)
		// Bounded (kube.WriteTimeout). The update carries the resourceVersion
		// it started from, so it never lands twice; one whose answer is lost
		// is neither done nor failed until a read of the node says (recheck).
		wctx, cancel := context.WithTimeout(ctx, kube.WriteTimeout)
		written, err := c.client.CoreV1().Nodes().Update(wctx, updated, metav1.UpdateOptions{FieldManager: Name})
		cancel()
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil && !kube.Answered(err) {
			c.mu.Lock()
			c.lost[n.Name] = lostWrite{sent: updated, v: v, in: in}
			c.mu.Unlock()
			c.forgetSaid(n.Name)
			return fmt.Errorf("%s node %s got no answer; the node is read again before anything else is decided about it: %w", action, n.Name, err)
		}
		if err != nil {
			c.forgetSaid(n.Name)
			return fmt.Errorf("%s node %s: %w", action, n.Name, err)
		}
		c.overlay.Put(n.Name, n.ResourceVersion, written)
		if e, ok := events[action]; ok {
			controllerutil.NodeEvent(c.recorder, n, e.typ, e.reason, msg)
		}
	}
	c.wrote(ctx, n, v, in)
	return nil
}

// wrote logs and counts a decision written (or, in dry run, reported).
func (c *Controller) wrote(ctx context.Context, n *v1.Node, v verdict, in input) {
	klog.FromContext(ctx).Info(v.message, "node", n.Name)
	label := v.code // why a removal or a confirmation's change; what confirmed a taint
	if v.action == actTaint && len(in.confirmations) > 0 {
		label = in.confirmations[0].source
	}
	c.metrics.decisions.WithLabelValues(v.action, label).Inc()
}

// recheck settles a write of the node whose answer was lost, from a read of
// the node (bounded): if it landed it is reported and counted as written
// (once: no second write follows, the decision is made on the node read);
// if not, the decision is made anew on the node read. Until the read
// succeeds nothing is decided about the node.
func (c *Controller) recheck(ctx context.Context, cached *v1.Node) error {
	c.mu.Lock()
	l, ok := c.lost[cached.Name]
	c.mu.Unlock()
	if !ok {
		return nil
	}
	fresh, err := kube.ReadNodeAfterLostWrite(ctx, c.client, cached.Name)
	if err != nil {
		return err
	}
	c.mu.Lock()
	delete(c.lost, cached.Name)
	c.mu.Unlock()
	if fresh == nil || fresh.UID != l.sent.UID {
		return nil // gone: nothing to settle
	}
	if !landed(fresh, l.sent) {
		c.overlay.Put(cached.Name, cached.ResourceVersion, fresh)
		return nil
	}
	c.overlay.Put(cached.Name, l.sent.ResourceVersion, fresh)
	if e, ok := events[l.v.action]; ok {
		controllerutil.NodeEvent(c.recorder, fresh, e.typ, e.reason, l.v.message)
	}
	c.wrote(ctx, fresh, l.v, l.in)
	return nil
}

// ownAnnotations are the annotations a write of this controller may change.
var ownAnnotations = []string{AnnotationBootID, AnnotationConfirmedBy, AnnotationConfirm, AnnotationConfirmationBootID}

// landed says whether node, read after the update sent, carries what sent
// changed: the taint and this controller's annotations as sent (the update
// changes nothing else this controller decides on).
func landed(node, sent *v1.Node) bool {
	if kube.HasTaint(node, v1.TaintNodeOutOfService) != kube.HasTaint(sent, v1.TaintNodeOutOfService) {
		return false
	}
	for _, k := range ownAnnotations {
		a, aok := node.Annotations[k]
		b, bok := sent.Annotations[k]
		if a != b || aok != bok {
			return false
		}
	}
	return true
}

// maybeTainted are the nodes whose taint write got no answer.
func (c *Controller) maybeTainted() map[string]bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string]bool{}
	for name, l := range c.lost {
		if kube.HasTaint(l.sent, v1.TaintNodeOutOfService) {
			out[name] = true
		}
	}
	return out
}
