// Package drain is the condition-driven cordon and drain controller (seed
// 003): nodes whose conditions match the rules long enough are cordoned and
// drained through the Eviction API, the way Draino does, within budgets
// Draino lacks (concurrent drains, cordoned nodes, per group, a circuit
// breaker) and with its state kept on the Node so that restarts resume.
package drain

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/retry"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/nodeshepherd/nodeshepherd/pkg/controller/drain/budget"
	"github.com/nodeshepherd/nodeshepherd/pkg/controller/drain/rules"
	"github.com/nodeshepherd/nodeshepherd/pkg/controllerutil"
	"github.com/nodeshepherd/nodeshepherd/pkg/kube"
	"github.com/nodeshepherd/nodeshepherd/pkg/nodetopology"
	"github.com/nodeshepherd/nodeshepherd/pkg/remediation"
)

// Name is the controller's name in --controllers.
const Name = "drain"

// EventSource is the component name on the controller's events.
const EventSource = "nodeshepherd-drain"

// Event reasons: Draino's (all Warning, as Draino sends them), then
// nodeshepherd's own.
const (
	EventCordonStarting    = "CordonStarting"
	EventCordonSucceeded   = "CordonSucceeded"
	EventCordonFailed      = "CordonFailed"
	EventUncordonStarting  = "UncordonStarting"
	EventUncordonSucceeded = "UncordonSucceeded"
	EventUncordonFailed    = "UncordonFailed"
	EventDrainScheduled    = "DrainScheduled"
	EventDrainSchedFailed  = "DrainSchedulingFailed"
	EventDrainStarting     = "DrainStarting"
	EventDrainSucceeded    = "DrainSucceeded"
	EventDrainFailed       = "DrainFailed"

	// EventCordonWaiting and EventDrainWaiting: a budget holds the node back.
	EventCordonWaiting = "CordonWaiting"
	EventDrainWaiting  = "DrainWaiting"
	// EventDrainAborted: the drain stopped because the node was uncordoned by
	// someone else or no rule matches any more.
	EventDrainAborted = "DrainAborted"
	// EventDrainSkipped: a rule matches a node the controller leaves alone
	// (cordoned by someone else), said once per change.
	EventDrainSkipped = "DrainSkipped"
	// EventDrainForceDeleted (Warning): force-after deleted a pod whose
	// every eviction a PodDisruptionBudget refused.
	EventDrainForceDeleted = "DrainForceDeleted"
	// EventDrainBlocked (Warning): a drain past its timeout goes on because
	// only force-after can end it; names the pods and when the first is due.
	EventDrainBlocked = "DrainBlocked"
	// EventDrainMoving, EventDrainMoved, EventDrainMoveRefused (Normal):
	// move-before-evict surged a Deployment, scaled it back once the new
	// pods were available, or does not move a workload's pods, and why.
	EventDrainMoving      = "DrainMoving"
	EventDrainMoved       = "DrainMoved"
	EventDrainMoveRefused = "DrainMoveRefused"
)

// SkipCordonedByOther is the reason a matching node is left alone when
// someone else cordoned it (label of nodeshepherd_drain_nodes_skipped).
const SkipCordonedByOther = "cordoned-by-someone-else"

// BudgetMaintenanceWindow names the maintenance windows in DrainWaiting and
// nodeshepherd_drain_nodes_waiting.
const BudgetMaintenanceWindow = "maintenance-window"

// Deps are the controller's collaborators.
type Deps struct {
	Client   kubernetes.Interface
	Nodes    coreinformers.NodeInformer
	Pods     coreinformers.PodInformer
	Recorder record.EventRecorder
	Registry prometheus.Registerer
	Clock    clock.WithTicker
	// ProgressTimeout bounds a step (controllerutil.DefaultProgressTimeout when zero).
	ProgressTimeout time.Duration
}

// Controller is the drain controller.
type Controller struct {
	*controllerutil.Base
	cfg      Config
	rules    *rules.Rules
	client   kubernetes.Interface
	nodes    corelisters.NodeLister
	pods     cache.Indexer
	synced   []cache.InformerSynced
	recorder record.EventRecorder
	clock    clock.WithTicker
	dryRun   *controllerutil.DryRun
	queue    workqueue.TypedRateLimitingInterface[string]
	overlay  *controllerutil.Overlay[*v1.Node]
	metrics  *metrics

	mu      sync.Mutex
	running map[string]*runningDrain
	waiting map[string]waitInfo
	// skipped holds the matching nodes left alone, and why.
	skipped map[string]skipInfo
	// lastStart is when the latest drain sent its first eviction: the drain
	// buffer counts from it too, so that no drain's first eviction comes less
	// than the buffer after the previous one's. It is also written on the
	// node (AnnotationDrainStarted) for the next leader.
	lastStart time.Time
	// selected caches the selection of each node by resourceVersion (CEL is
	// not free and budgets look at every node).
	selected map[string]selection
	// dryWrites holds, in dry-run mode, the writes that would have been
	// made, so that budgets and later decisions see them.
	dryWrites controllerutil.DryRunWrites[*v1.Node]
	// said holds, per node, the events said since the cordon or the last
	// success (reason -> what it said, without its timestamps): a retry that
	// is scheduled, starts or fails the same way again is not said again.
	said map[string]map[string]string
	// stopping is closed when Run returns: drains then stop without writing,
	// so that the next leader resumes them.
	stopping chan struct{}
	// unreadable holds the nodes whose remediation record cannot be read,
	// with the error last logged (said once per change).
	unreadable map[string]string
	// lost holds, per node, the writes whose answer never came (a timeout,
	// a broken connection, a 5xx after which the write may have landed), as
	// they would have landed. The budgets count them as landed until a read
	// of the node settles them (settle): the informer alone may show a
	// landed cordon or drain long after the write.
	lost map[string][]lostWrite
	// holdUntil is when the start hold ends (cfg.StartHold after Run
	// started); fresh is set once every node was read afresh after it.
	holdUntil time.Time
	fresh     bool
}

// lostWrite is a write of a node whose answer was lost: the action (cordon,
// drain, ...) and the node as it was sent.
type lostWrite struct {
	action string
	sent   *v1.Node
}

// selection is a node's place in the budgets, by resourceVersion: taken by
// the rules' node selection, or asked to drain by a remediation request
// (which the selection does not restrict).
type selection struct {
	rv       string
	selected bool
	asked    bool
}

// waitInfo is why a node waits; action and budget are the decision (an event
// when they change), reason its current wording.
type waitInfo struct {
	action, budget, reason string
}

type skipInfo struct{ reason, message string }

type runningDrain struct {
	cancel context.CancelCauseFunc
	done   chan struct{}
}

// New builds the controller.
func New(cfg Config, d Deps) (*Controller, error) {
	r, err := cfg.Compile()
	if err != nil {
		return nil, err
	}
	b, err := controllerutil.NewBase(controllerutil.Setup{Name: Name, DryRun: cfg.DryRun, Registry: d.Registry, Recorder: d.Recorder,
		ProgressTimeout: d.ProgressTimeout}, &d.Clock)
	if err != nil {
		return nil, err
	}
	c := &Controller{
		Base: b, cfg: cfg, rules: r, client: d.Client, nodes: d.Nodes.Lister(), pods: d.Pods.Informer().GetIndexer(),
		recorder: d.Recorder, clock: d.Clock, dryRun: b.DryRun,
		queue: controllerutil.Track(b, "node", workqueue.NewTypedRateLimitingQueueWithConfig(controllerutil.RetryLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: Name, Clock: d.Clock})),
		overlay: controllerutil.NewOverlay[*v1.Node](), metrics: newMetrics(d.Registry),
		running: map[string]*runningDrain{}, waiting: map[string]waitInfo{}, skipped: map[string]skipInfo{}, selected: map[string]selection{},
		said: map[string]map[string]string{}, stopping: make(chan struct{}), unreadable: map[string]string{},
		lost: map[string][]lostWrite{},
	}
	if err := nodetopology.AddPodNodeNameIndexer(d.Pods.Informer()); err != nil {
		return nil, err
	}
	// The worker starts once the node handler has seen the first list (its
	// registration's HasSynced, not the store's): every node is queued then.
	nodeReg, err := d.Nodes.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) { c.onNode(nil, obj.(*v1.Node)) },
		UpdateFunc: func(old, obj any) {
			c.onNode(old.(*v1.Node), obj.(*v1.Node))
		},
		DeleteFunc: func(obj any) {
			if n, ok := kube.Untombstone(obj).(*v1.Node); ok {
				c.overlay.Forget(n.Name)
				c.queue.Add(n.Name)
			}
		},
	})
	if err != nil {
		return nil, err
	}
	c.synced = []cache.InformerSynced{nodeReg.HasSynced, d.Pods.Informer().HasSynced}
	return c, nil
}

// onNode queues the node on every change (a remediation request coming or
// going is an annotation change, and must be seen); a readiness change may
// open or close the circuit breaker, so nodes waiting on a budget are looked
// at again too.
func (c *Controller) onNode(old, n *v1.Node) {
	c.queue.Add(n.Name)
	if old == nil || kube.NodeReady(old) != kube.NodeReady(n) || old.Spec.Unschedulable != n.Spec.Unschedulable {
		c.requeueWaiting()
	}
}

func (c *Controller) requeueWaiting() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for name := range c.waiting {
		c.queue.Add(name)
	}
}

// Run works until ctx ends. One worker makes every decision, so that
// budgets are checked against the writes before them; drains run apart. The
// worker's write in flight finishes before Run returns (and the manager
// releases the Lease); then running drains stop.
func (c *Controller) Run(ctx context.Context) error {
	return c.Base.Run(ctx, controllerutil.Work{Synced: c.synced, Queues: []interface{ ShutDown() }{c.queue},
		Start: func(ctx context.Context) error {
			if !c.dryRun.Enabled() && c.cfg.StartHold > 0 { // a dry run writes nothing: no previous write to wait for
				c.mu.Lock()
				c.holdUntil = c.clock.Now().Add(c.cfg.StartHold)
				c.mu.Unlock()
			}
			conds := make([]string, len(c.rules.Conditions))
			for i, r := range c.rules.Conditions {
				conds[i] = r.String()
			}
			if len(conds) == 0 {
				klog.FromContext(ctx).Info("No drain rules: the drain controller drains only the nodes remediation policies ask it to")
			}
			klog.FromContext(ctx).Info("Starting drain controller", "conditions", conds, "maxConcurrentDrains", c.cfg.Budget.MaxConcurrentDrains,
				"maxCordonedNodes", c.cfg.Budget.MaxCordonedNodes, "groupByLabel", c.cfg.Budget.GroupByLabel,
				"drainBuffer", c.cfg.Budget.DrainBuffer, "maxUnhealthyNodes", c.cfg.Budget.MaxUnhealthyNodes, "dryRun", c.dryRun.Enabled())
			c.Every(ctx, "resync loop", c.cfg.ResyncPeriod, func(context.Context) { c.enqueueAll() })
			// A move whose drain stopped with the previous leader and will not
			// be resumed is undone (drains in flight resume theirs).
			// One that could not be undone (the API server refused) is tried
			// again soon, backing off, rather than at the next sweep.
			sweep := max(c.cfg.ResyncPeriod, 10*time.Minute)
			c.Every(ctx, "moves left behind", sweep, func(ctx context.Context) {
				for delay := time.Second; !c.sweepMoves(ctx, "") && delay < sweep; delay *= 2 {
					select {
					case <-ctx.Done():
						return
					case <-c.clock.After(delay):
					}
				}
			})
			controllerutil.Workers(ctx, c.Base, 1, c.queue, "node", "Syncing node; will retry", c.sync)
			return nil
		},
		Stop: func() { c.stopDrains(nil) }})
}

// stopDrains tells running drains that the controller stops (they stop
// without writing) and waits for them; with a non-nil cause they are also
// cancelled at once rather than at their next step.
func (c *Controller) stopDrains(cause error) {
	close(c.stopping)
	c.mu.Lock()
	running := make([]*runningDrain, 0, len(c.running))
	for _, r := range c.running {
		running = append(running, r)
	}
	c.mu.Unlock()
	for _, r := range running {
		if cause != nil {
			r.cancel(cause)
		}
		<-r.done
	}
}

// enqueueAll re-evaluates every node (a safety net for timers) and
// recounts the cordoned nodes from the objects.
func (c *Controller) enqueueAll() {
	nodes, _ := c.nodes.List(labels.Everything())
	cordoned := 0
	for _, n := range nodes {
		c.queue.Add(n.Name)
		if st := readState(c.view(n)); st.owned && st.cordoned {
			cordoned++
		}
	}
	c.metrics.cordonedNodes.Set(float64(cordoned))
}

// view is the node as the controller last wrote it (or, in dry-run, would
// have written it).
func (c *Controller) view(n *v1.Node) *v1.Node {
	n = c.overlay.Latest(n.Name, n)
	return c.dryWrites.Apply(n.Name, n)
}

func (c *Controller) isSelected(n *v1.Node) bool { return c.selection(n).selected }

// counted says whether the budgets count the node: the rules select it, a
// remediation request asks for its drain, or its cordon is held for one.
func (c *Controller) counted(n *v1.Node) bool {
	s := c.selection(n)
	return s.selected || s.asked
}

func (c *Controller) selection(n *v1.Node) selection {
	c.mu.Lock()
	if s, ok := c.selected[n.Name]; ok && s.rv == n.ResourceVersion {
		c.mu.Unlock()
		return s
	}
	c.mu.Unlock()
	ok, err := c.rules.Selector.Matches(n)
	if err != nil {
		klog.Background().V(2).Info("Node not selected", "node", n.Name, "err", err)
	}
	s := selection{rv: n.ResourceVersion, selected: ok, asked: requestCounted(n)}
	c.mu.Lock()
	c.selected[n.Name] = s
	c.mu.Unlock()
	return s
}

// requestCounted: a remediation request asks for the node's drain, or the
// drain controller's cordon of it is held for one.
func requestCounted(n *v1.Node) bool {
	if st := readState(n); st.forRequest {
		return true
	}
	r, _, err := remediation.RequestOf(n)
	return err == nil && r.Drain
}

// sync makes the one next decision for a node.
func (c *Controller) sync(ctx context.Context, name string) error {
	logger := klog.FromContext(ctx).WithValues("node", name)
	cached, err := c.nodes.Get(name)
	if apierrors.IsNotFound(err) {
		c.abort(name, errors.New("the node was deleted"))
		c.setWaiting(name, nil)
		c.setSkipped(name, nil, nil)
		c.mu.Lock()
		delete(c.selected, name)
		delete(c.unreadable, name)
		delete(c.lost, name)
		c.mu.Unlock()
		c.dryWrites.Forget(name)
		return nil
	}
	if err != nil {
		return err
	}
	// A write of the node whose answer was lost is settled first: nothing
	// is decided about the node on a copy that may miss it.
	if err := c.settle(ctx, cached); err != nil {
		return err
	}
	n := c.view(cached)
	now := c.clock.Now()
	st := readState(n)
	selected := c.isSelected(n)
	eval := c.rules.Evaluate(n, now)
	req := c.asked(ctx, n)
	// Requests are not subject to the rules' node selection: the
	// remediation policy has already chosen the node.
	ruleMatch := selected && len(eval.Matched) > 0

	if !st.owned {
		c.abort(name, errors.New("the node is not cordoned by the drain controller"))
		if !ruleMatch && !req.drain {
			c.setWaiting(name, nil)
			c.setSkipped(name, n, nil)
			if selected && !eval.Pending.IsZero() {
				c.queue.AddAfter(name, eval.Pending.Sub(now))
			}
			return c.forgetStarted(ctx, n, st, now)
		}
		var h holders
		if ruleMatch {
			h = ruleHolders(eval.Matched)
		}
		if req.drain {
			h.request = req.why
		}
		if n.Spec.Unschedulable {
			// Cordoned by someone else: theirs to handle, never ours; said once.
			c.setWaiting(name, nil)
			c.setSkipped(name, n, &skipInfo{reason: SkipCordonedByOther,
				message: "Cordoned by someone else; not drained although " + describeWanted(eval.Matched, h.request)})
			logger.V(4).Info("Node matches (or a remediation asks for its drain) but was cordoned by someone else; leaving it alone")
			return nil
		}
		c.setSkipped(name, n, nil)
		if held, err := c.holdBack(ctx, n, "cordon", now); held || err != nil {
			return err
		}
		if v := c.cfg.Budget.Cordon(c.cluster(), name); !v.Allowed {
			c.wait(n, "cordon", v)
			return nil
		}
		c.setWaiting(name, nil)
		return c.cordon(ctx, n, h)
	}

	c.setSkipped(name, n, nil)
	if !n.Spec.Unschedulable {
		// Someone uncordoned a node we cordoned: they take it over.
		c.abort(name, errors.New("the node was uncordoned by someone else"))
		c.setWaiting(name, nil)
		return c.release(ctx, n, false, "")
	}
	if recordLifted(n, st) {
		// The cordon is someone else's now: the drain's went with its
		// expired record, then the node was cordoned again. Never lifted
		// here; the node is forgotten, as when someone uncordons it.
		why := "the drain's cordon went with its expired owner record, and someone else cordoned the node since"
		c.abort(name, errors.New(why))
		c.setWaiting(name, nil)
		return c.release(ctx, n, false, why)
	}
	if n, err = c.renew(ctx, n, now); n == nil {
		return err
	}

	// Who still wants the cordon: the rules (ruleKeep; or ruleDue, when
	// their condition cleared less than --uncordon-after ago), the request.
	var ruleKeep bool
	var ruleDue time.Time
	ruleWhy := ""
	if st.forRules {
		since, cleared := clearedSince(n, c.rules.Conditions)
		gone := rulesGone(n, c.rules.Conditions)
		switch {
		case !cleared && selected:
			ruleKeep = true
		case !selected:
			// The configuration changed under the cordon: lifted at once.
			ruleWhy = "the drain rules' node selection no longer takes the node"
		case gone != "":
			ruleWhy = gone
		default:
			ruleWhy = "no drain condition matched for " + c.cfg.UncordonAfter.String()
			if due := since.Add(c.cfg.UncordonAfter); now.Before(due) {
				ruleDue = due
			}
		}
	} else {
		// A cordon taken for a request: a rule that matches now takes it
		// over when the request goes.
		ruleKeep = ruleMatch
	}
	requestEnded := st.forRequest && !req.drain && !req.unknown

	if !ruleKeep && ruleDue.IsZero() && !req.drain {
		if req.unknown {
			// The record may ask for the drain: while it cannot be read the
			// node stays as it is, neither released nor drained anew (a
			// drain in flight goes on). asked said so in the log.
			c.setWaiting(name, nil)
			return nil
		}
		why := ruleWhy
		if requestEnded {
			why = requestEndedWhy(st.request, req)
			if st.forRules && ruleWhy != "" {
				why = ruleWhy + "; " + why
			}
		}
		c.abort(name, errors.New(why))
		c.setWaiting(name, nil)
		return c.release(ctx, n, true, why)
	}

	// The cordon stays: its record follows who holds it now, so that the
	// owner record says why and the right end lifts it.
	switch {
	case requestEnded:
		h := holders{conditions: n.Annotations[AnnotationConditions]}
		if !st.forRules {
			h.conditions = formatConditions(eval.Matched) // the rules take it over
		}
		return c.reassign(ctx, n, h, "the remediation request ended; "+describeHolders(h)+" keeps the cordon")
	case st.forRules && !ruleKeep && ruleDue.IsZero() && req.drain:
		return c.reassign(ctx, n, holders{request: req.why}, ruleWhy+"; the remediation request ("+req.why+") keeps the cordon")
	}

	if !ruleKeep && !req.drain {
		// The rules' condition cleared, not yet for --uncordon-after: the
		// cordon waits, the drain stops.
		cause := errors.New("no drain condition matches the node any more")
		if !c.abort(name, cause) && st.phase == phaseInFlight {
			// A drain a previous process (a dead leader) had in flight:
			// none runs here to stop, and it is not resumed; said, as a
			// drain stopped here is (chaos seeds 40016, 50018: a leader
			// killed mid-drain, its condition cleared meanwhile).
			c.eventOnce(n, EventDrainAborted, cause.Error(), "Drain stopped: "+cause.Error())
		}
		c.setWaiting(name, nil)
		c.queue.AddAfter(name, ruleDue.Sub(now))
		return nil
	}
	if !ruleDue.IsZero() {
		c.queue.AddAfter(name, ruleDue.Sub(now)) // the request then holds the cordon alone
	}
	if c.cfg.SkipDrain {
		return nil
	}
	switch st.phase {
	case phaseInFlight:
		c.setWaiting(name, nil)
		c.ensureDrain(ctx, n, st.scheduledAt)
		return nil
	case phaseCompleted:
		return nil
	case phaseFailed:
		if due := c.retryDue(st); now.Before(due) {
			c.queue.AddAfter(name, due.Sub(now))
			return nil
		}
	}
	if !ruleMatch && !req.drain {
		// The condition came back but has not held long enough yet.
		if !eval.Pending.IsZero() {
			c.queue.AddAfter(name, eval.Pending.Sub(now))
		}
		return nil
	}
	if w := c.rules.Windows; !w.Open(now) {
		next := w.Next(now)
		c.wait(n, "drain", budget.Verdict{Budget: BudgetMaintenanceWindow, RetryAt: next,
			Reason: fmt.Sprintf("outside the maintenance windows (%s); the drain starts at %s", w, next.In(w.Loc).Format(time.RFC3339))})
		c.queue.AddAfter(name, next.Sub(now))
		return nil
	}
	if held, err := c.holdBack(ctx, n, "drain", now); held || err != nil {
		return err
	}
	v := c.cfg.Budget.StartDrain(c.cluster(), name, now)
	if !v.Allowed {
		c.wait(n, "drain", v)
		if !v.RetryAt.IsZero() {
			c.queue.AddAfter(name, v.RetryAt.Sub(now))
		}
		return nil
	}
	c.setWaiting(name, nil)
	return c.schedule(ctx, n, st, now)
}

// request is what the node's remediation record asks of the drain controller.
type request struct {
	// drain: the record asks for the node's drain; why words it.
	drain bool
	why   string
	// present: there is a record (asking for a drain or not).
	present bool
	// unknown: the record cannot be read. It asks nothing, and the node
	// is kept as it is: neither a drain started for it nor its cordon lifted.
	unknown bool
}

// asked reads the node's remediation request; an unreadable record is said
// in the log once per change of its error.
func (c *Controller) asked(ctx context.Context, n *v1.Node) request {
	r, ok, err := remediation.RequestOf(n)
	c.mu.Lock()
	said, had := c.unreadable[n.Name]
	switch {
	case err == nil:
		delete(c.unreadable, n.Name)
	case !had || said != err.Error():
		c.unreadable[n.Name] = err.Error()
	}
	c.mu.Unlock()
	if err != nil {
		if !had || said != err.Error() {
			klog.FromContext(ctx).V(2).Info("Remediation record unreadable: it asks nothing, and the node is kept as it is", "node", n.Name, "err", err)
		}
		return request{present: true, unknown: true}
	}
	if !ok {
		return request{}
	}
	return request{drain: r.Drain, why: r.Why(), present: true}
}

// requestEndedWhy says why a cordon held for a request is lifted.
func requestEndedWhy(recorded string, req request) string {
	if req.present {
		return "the remediation request (" + recorded + ") no longer asks for a drain"
	}
	return "the remediation's repair ended (" + recorded + ")"
}

// describeWanted says what wants the node's drain, for DrainSkipped.
func describeWanted(matched []rules.Condition, request string) string {
	var parts []string
	if len(matched) > 0 {
		parts = append(parts, describeMatched(matched))
	}
	if request != "" {
		parts = append(parts, request+" asks for it")
	}
	return strings.Join(parts, " and ")
}

// describeHolders names who holds the cordon, for the log.
func describeHolders(h holders) string {
	switch {
	case h.request != "" && h.conditions != "":
		return "the drain rules (" + h.conditions + ") and the remediation request (" + h.request + ")"
	case h.request != "":
		return "the remediation request (" + h.request + ")"
	}
	return "the drain rules (" + h.conditions + ")"
}

// cluster describes the nodes the budgets count: those the rules select and
// those remediation requests ask to drain.
func (c *Controller) cluster() budget.Cluster {
	all, _ := c.nodes.List(labels.Everything())
	var cl budget.Cluster
	views := make([]*v1.Node, 0, len(all))
	for _, cached := range all {
		n := c.view(cached)
		views = append(views, n)
		st := readState(n)
		cl.LastDrainStart = latestOf(cl.LastDrainStart, st.scheduledAt, st.startedAt)
		c.mu.Lock()
		if c.lastStart.After(cl.LastDrainStart) {
			cl.LastDrainStart = c.lastStart
		}
		c.mu.Unlock()
		if !c.counted(n) {
			continue
		}
		c.mu.Lock()
		_, running := c.running[n.Name]
		lost := c.lost[n.Name]
		c.mu.Unlock()
		cordoned, draining := st.owned && st.cordoned, st.owned && (st.phase == phaseInFlight || running)
		// A write whose answer was lost may have landed: it counts as
		// landed until a read of the node says (settle).
		for _, w := range lost {
			s := readState(w.sent)
			cordoned = cordoned || (s.owned && s.cordoned)
			draining = draining || (s.owned && s.phase == phaseInFlight)
		}
		cl.Nodes = append(cl.Nodes, budget.Node{
			Name: n.Name, Group: n.Labels[c.cfg.Budget.GroupByLabel], Ready: kube.NodeReady(n),
			Cordoned: cordoned, Draining: draining,
		})
	}
	cl.ZoneDisruption = zoneDisruption(nodetopology.DisruptedZones(views, c.cfg.UnhealthyZoneThreshold))
	c.metrics.breakerOpen.Set(map[bool]float64{true: 1}[c.cfg.Budget.Breaker(cl)])
	return cl
}

// wait records that a budget holds the node back, with an event when the
// action or the budget changes (not on every re-check, nor when only the
// figures in the wording do).
func (c *Controller) wait(n *v1.Node, action string, v budget.Verdict) {
	w := waitInfo{action: action, budget: v.Budget, reason: v.Reason}
	if c.setWaiting(n.Name, &w) {
		reason := EventCordonWaiting
		if action == "drain" {
			reason = EventDrainWaiting
		}
		controllerutil.NodeEvent(c.recorder, n, v1.EventTypeNormal, reason, fmt.Sprintf("Waiting to %s the node: %s", action, v.Reason))
		klog.Background().WithName(Name).Info("Node waits for a budget", "node", n.Name, "action", action, "budget", v.Budget, "reason", v.Reason)
	}
}

// setWaiting updates the waiting set and gauge; it says whether the
// decision (action, budget) changed.
func (c *Controller) setWaiting(name string, w *waitInfo) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	old, had := c.waiting[name]
	switch {
	case w == nil && !had:
		return false
	case w == nil:
		delete(c.waiting, name)
	case had && old.action == w.action && old.budget == w.budget:
		c.waiting[name] = *w // the wording may change; the decision did not
		return false
	default:
		c.waiting[name] = *w
	}
	c.metrics.waiting.Reset()
	for _, w := range c.waiting {
		c.metrics.waiting.WithLabelValues(w.action, w.budget).Inc()
	}
	return true
}

// setSkipped records that a matching node is left alone (nil: it is not),
// with one DrainSkipped event per change and the skipped-nodes gauge.
func (c *Controller) setSkipped(name string, n *v1.Node, s *skipInfo) {
	c.mu.Lock()
	old, had := c.skipped[name]
	switch {
	case s == nil && !had, s != nil && had && old.reason == s.reason:
		c.mu.Unlock()
		return
	case s == nil:
		delete(c.skipped, name)
	default:
		c.skipped[name] = *s
	}
	c.metrics.skipped.Reset()
	for _, s := range c.skipped {
		c.metrics.skipped.WithLabelValues(s.reason).Inc()
	}
	c.mu.Unlock()
	if s != nil && n != nil {
		controllerutil.NodeEvent(c.recorder, n, v1.EventTypeNormal, EventDrainSkipped, s.message)
		klog.Background().WithName(Name).Info("Node matches a drain rule but is left alone", "node", n.Name, "reason", s.reason)
	}
}

func describeMatched(cs []rules.Condition) string {
	parts := make([]string, len(cs))
	for i, r := range cs {
		parts[i] = string(r.Type) + "=" + string(r.Status)
	}
	return strings.Join(parts, " and ")
}

// retryDue is when a failed drain is tried again: after the backoff. (A
// drain that force-after can still end does not fail: it goes on.)
func (c *Controller) retryDue(st nodeState) time.Time { return st.retryAt(c.cfg.RetryBackoff) }

// forceAfter is the force-after in effect for the node: the shortest among
// the rules whose condition holds on it (each rule's own, else
// --drain-force-after) and, for a drain a remediation request asks for,
// --drain-force-after; 0 when none forces.
func (c *Controller) forceAfter(n *v1.Node) time.Duration {
	var out time.Duration
	if requestCounted(n) {
		out = c.cfg.ForceAfter
	}
	for _, r := range c.rules.Conditions {
		if cond := kube.NodeCondition(n, r.Type); cond == nil || cond.Status != r.Status {
			continue
		}
		fa := r.ForceAfter
		if fa == 0 {
			fa = c.cfg.ForceAfter
		}
		if fa > 0 && (out == 0 || fa < out) {
			out = fa
		}
	}
	return out
}

// BudgetStartHold names the start hold in CordonWaiting, DrainWaiting and
// nodeshepherd_drain_nodes_waiting.
const BudgetStartHold = "start-hold"

// holdBack holds back a new cordon or drain (action) of n until the hold
// after the start has passed and every node has been read afresh (a LIST from the API
// server, not the informer, which may lag): a cordon or drain schedule that
// a previous leader had in flight then shows in the view, and the budgets
// count it. The argument is in docs/drain.md ("Budgets across a leader
// change").
func (c *Controller) holdBack(ctx context.Context, n *v1.Node, action string, now time.Time) (bool, error) {
	c.mu.Lock()
	until, fresh := c.holdUntil, c.fresh
	c.mu.Unlock()
	if fresh || until.IsZero() {
		return false, nil
	}
	if now.Before(until) {
		c.wait(n, action, budget.Verdict{Budget: BudgetStartHold, RetryAt: until, Reason: fmt.Sprintf(
			"the controller started less than --drain-start-hold=%s ago: a cordon or drain a previous leader had in flight may still land; every node is read afresh at %s",
			c.cfg.StartHold, formatTime(until))})
		c.queue.AddAfter(n.Name, until.Sub(now))
		return true, nil
	}
	rctx, cancel := bounded(ctx)
	defer cancel()
	list, err := c.client.CoreV1().Nodes().List(rctx, metav1.ListOptions{})
	if err != nil {
		return true, fmt.Errorf("reading every node afresh after the start hold: %w", err)
	}
	for i := range list.Items {
		fresh := &list.Items[i]
		if cached, err := c.nodes.Get(fresh.Name); err == nil {
			c.overlay.Put(fresh.Name, cached.ResourceVersion, fresh) // newer than the informer's, until it catches up
		}
	}
	c.mu.Lock()
	c.fresh = true
	c.mu.Unlock()
	klog.FromContext(ctx).Info("Start hold over: every node read afresh; cordons and drains may start", "nodes", len(list.Items))
	// Decided again on the fresh copies, this node too (its own copy in
	// this pass is the one from before the read).
	c.requeueWaiting()
	c.queue.Add(n.Name)
	return true, nil
}

// errSkip ends a write whose precondition no longer holds on the fresh object.
var errSkip = errors.New("precondition no longer holds")

// errAnswerLost marks a write whose answer never came: it may have landed.
var errAnswerLost = errors.New("the write may have landed")

// settle reads a node again (bounded) when a write of it got no answer, and
// puts what the API server holds in the view: a cordon or a drain's schedule
// that landed is then reported once, as written (no second write follows);
// one that did not is decided on anew. Until the read succeeds the writes
// stay counted by the budgets as landed, and nothing is decided about the
// node.
func (c *Controller) settle(ctx context.Context, cached *v1.Node) error {
	c.mu.Lock()
	lost := c.lost[cached.Name]
	c.mu.Unlock()
	if len(lost) == 0 {
		return nil
	}
	fresh, err := kube.ReadNodeAfterLostWrite(ctx, c.client, cached.Name)
	if err != nil {
		return err
	}
	c.mu.Lock()
	// Writes lost meanwhile (by a drain) stay for the next read.
	if rest := c.lost[cached.Name][len(lost):]; len(rest) > 0 {
		c.lost[cached.Name] = rest
	} else {
		delete(c.lost, cached.Name)
	}
	c.mu.Unlock()
	if fresh == nil || fresh.UID != cached.UID {
		return nil // gone: nothing to settle
	}
	c.overlay.Put(cached.Name, cached.ResourceVersion, fresh)
	st := readState(fresh)
	for _, w := range lost {
		sent := readState(w.sent)
		switch {
		case w.action == "cordon" && st.owned && st.cordoned && st.cordonedAt.Equal(sent.cordonedAt):
			c.metrics.cordoned.WithLabelValues(resultSucceeded).Inc()
			c.metrics.cordonedNodes.Inc()
			c.event(fresh, EventCordonSucceeded, "Cordoned node: "+holdersOf(fresh).short())
			klog.FromContext(ctx).Info("Cordoned node (the write's answer was lost; a read shows it landed)", "node", fresh.Name)
		case w.action == "drain" && st.phase == phaseInFlight && st.scheduledAt.Equal(sent.scheduledAt):
			c.metrics.scheduled.WithLabelValues(resultSucceeded).Inc()
			klog.FromContext(ctx).Info("Drain scheduled (the write's answer was lost; a read shows it landed)", "node", fresh.Name)
		case w.action == "cordon" && !st.cordoned:
			// The cordon failed after all (a 500 with nothing written): said once, as any failed cordon.
			c.metrics.cordoned.WithLabelValues(resultFailed).Inc()
			c.event(fresh, EventCordonFailed, "Cordoning node failed: the write's answer was lost and a read shows it did not land")
		default:
			klog.FromContext(ctx).V(2).Info("A write whose answer was lost did not land, or was overtaken; deciding anew", "node", fresh.Name, "action", w.action)
		}
	}
	return nil
}

// holdersOf reads what the node's cordon is held for.
func holdersOf(n *v1.Node) holders {
	return holders{conditions: n.Annotations[AnnotationConditions], request: n.Annotations[AnnotationRequest]}
}

// write changes a node, spec and metadata (status false, with a
// resourceVersion precondition, so that a human's concurrent cordon wins)
// or status (merged by condition type). check is re-run on a fresh copy
// after a conflict. In dry-run mode the change is only remembered.
func (c *Controller) write(ctx context.Context, n *v1.Node, status bool, action, msg string, check func(*v1.Node) bool, mutate func(*v1.Node)) (*v1.Node, error) {
	if c.dryRun.Enabled() {
		c.dryRun.Report(ctx, n, action, msg)
		c.dryWrites.Add(n.Name, mutate)
		return c.view(n), nil
	}
	// A request that never answers must not hold the controller's one worker.
	ctx, cancel := context.WithTimeout(ctx, kube.WriteTimeout)
	defer cancel()
	cur := n
	var out, sent *v1.Node
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		sent = nil
		if out != nil || cur == nil {
			fresh, err := c.client.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			cur = fresh
		}
		if !check(cur) {
			return errSkip
		}
		mod := cur.DeepCopy()
		mutate(mod)
		patch, err := twoWayPatch(cur, mod, !status)
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err // not sent: nothing may have landed
		}
		nodes := c.client.CoreV1().Nodes()
		if status {
			out, err = nodes.PatchStatus(ctx, n.Name, patch)
		} else {
			out, err = nodes.Patch(ctx, n.Name, types.StrategicMergePatchType, patch, metav1.PatchOptions{})
		}
		if err != nil {
			out = cur // next attempt reads afresh
			if !kube.Answered(err) {
				sent = mod // it may have landed
			}
		}
		return err
	})
	if err != nil && sent != nil {
		// Neither done nor failed: counted by the budgets as landed until a
		// read of the node settles it, before the next decision about it.
		c.mu.Lock()
		c.lost[n.Name] = append(c.lost[n.Name], lostWrite{action: action, sent: sent})
		c.mu.Unlock()
		return nil, fmt.Errorf("%s of node %s got no answer; the node is read again before anything else is decided about it: %w (%w)", action, n.Name, err, errAnswerLost)
	}
	if err != nil {
		return nil, err
	}
	if cur.ResourceVersion != n.ResourceVersion {
		c.overlay.Put(n.Name, n.ResourceVersion, cur) // read afresh after a conflict: cur supersedes n
	}
	c.overlay.Put(n.Name, cur.ResourceVersion, out)
	return out, nil
}

// twoWayPatch is the strategic merge patch from old to mod, with old's
// resourceVersion as a precondition when asked.
func twoWayPatch(old, mod *v1.Node, precondition bool) ([]byte, error) {
	a, err := json.Marshal(old)
	if err != nil {
		return nil, err
	}
	b, err := json.Marshal(mod)
	if err != nil {
		return nil, err
	}
	patch, err := strategicpatch.CreateTwoWayMergePatch(a, b, v1.Node{})
	if err != nil || !precondition {
		return patch, err
	}
	var m map[string]any
	if err := json.Unmarshal(patch, &m); err != nil {
		return nil, err
	}
	meta, _ := m["metadata"].(map[string]any)
	if meta == nil {
		meta = map[string]any{}
		m["metadata"] = meta
	}
	meta["resourceVersion"] = old.ResourceVersion
	return json.Marshal(m)
}

// onceEvents are said once per change of what they say (their key) until
// the step succeeds (settledBy), however often it is retried.
var onceEvents = map[string]bool{EventCordonStarting: true, EventCordonFailed: true, EventUncordonStarting: true,
	EventUncordonFailed: true, EventDrainSchedFailed: true, EventDrainScheduled: true, EventDrainStarting: true,
	EventDrainFailed: true, EventDrainBlocked: true, EventDrainMoving: true, EventDrainMoved: true, EventDrainMoveRefused: true, EventDrainAborted: true}

// settledBy: a success ends its attempts (nil: all of the node's).
var settledBy = map[string][]string{EventCordonSucceeded: nil, EventUncordonSucceeded: nil, EventDrainSucceeded: nil,
	EventDrainScheduled: {EventDrainSchedFailed}}

// event says msg, once per change of msg for the onceEvents.
func (c *Controller) event(n *v1.Node, reason, msg string) { c.eventOnce(n, reason, msg, msg) }

// eventOnce says msg unless reason is one of the onceEvents and was said
// with the same key (msg without its timestamps) since the step last
// succeeded.
func (c *Controller) eventOnce(n *v1.Node, reason, key, msg string) {
	c.mu.Lock()
	said := c.said[n.Name]
	if onceEvents[reason] {
		if v, ok := said[reason]; ok && v == key {
			c.mu.Unlock()
			return
		}
		if said == nil {
			said = map[string]string{}
			c.said[n.Name] = said
		}
		said[reason] = key
	}
	if clears, ok := settledBy[reason]; ok {
		if clears == nil {
			delete(c.said, n.Name)
		}
		for _, r := range clears {
			delete(said, r)
		}
	}
	c.mu.Unlock()
	typ := v1.EventTypeWarning // Draino sends all its events as warnings
	if reason == EventDrainAborted || reason == EventDrainSkipped || reason == EventDrainMoving || reason == EventDrainMoved || reason == EventDrainMoveRefused {
		typ = v1.EventTypeNormal
	}
	controllerutil.NodeEvent(c.recorder, n, typ, reason, msg)
}

// cordonUntil says what lifts the drain's cordon held for h, for its owner
// record.
func (c *Controller) cordonUntil(h holders) string {
	rulesEnd := fmt.Sprintf("no drain rule's condition has held for --uncordon-after=%s (or the rule is removed, or the node leaves the rules' selection)", c.cfg.UncordonAfter)
	requestEnd := "the remediation's repair ends (its record " + remediation.AnnotationState + " goes or no longer asks for a drain)"
	switch {
	case h.request != "" && h.conditions != "":
		return rulesEnd + " and " + requestEnd + "; only the drain controller lifts it"
	case h.request != "":
		return "until " + requestEnd + "; only the drain controller lifts it"
	}
	return rulesEnd + "; only the drain controller lifts it"
}

func (c *Controller) cordon(ctx context.Context, n *v1.Node, h holders) error {
	why := h.short()
	c.event(n, EventCordonStarting, "Cordoning node: "+why)
	_, err := c.write(ctx, n, false, "cordon", "cordon the node: "+why,
		func(cur *v1.Node) bool {
			_, owned := cur.Annotations[AnnotationConditions]
			return !cur.Spec.Unschedulable && !owned
		},
		func(m *v1.Node) { cordon(m, h, c.clock.Now(), c.cordonUntil(h)) })
	switch {
	case errors.Is(err, errSkip):
		c.queue.Add(n.Name)
		return nil
	case errors.Is(err, errAnswerLost):
		return err // settled by a read at the next sync
	case err != nil:
		c.metrics.cordoned.WithLabelValues(resultFailed).Inc()
		c.event(n, EventCordonFailed, "Cordoning node failed: "+err.Error())
		return err
	}
	c.metrics.cordoned.WithLabelValues(resultSucceeded).Inc()
	c.metrics.cordonedNodes.Inc()
	c.event(n, EventCordonSucceeded, "Cordoned node: "+why)
	klog.FromContext(ctx).Info("Cordoned node", "node", n.Name, "conditions", h.conditions, "request", h.request)
	c.queue.Add(n.Name) // next: schedule the drain
	return nil
}

// reassign records that the cordon is now held for h (the rules took it over
// from an ended request, or the request from rules that let go): the cordon
// and its drain stay as they are; the owner record says the new why.
func (c *Controller) reassign(ctx context.Context, n *v1.Node, h holders, why string) error {
	_, err := c.write(ctx, n, false, "reassign-cordon", "keep the cordon: "+why,
		func(cur *v1.Node) bool {
			_, owned := cur.Annotations[AnnotationConditions]
			return owned && cur.Spec.Unschedulable
		},
		func(m *v1.Node) { setHolders(m, h, c.clock.Now(), c.cordonUntil(h)) })
	if err != nil && !errors.Is(err, errSkip) {
		return err
	}
	if err == nil {
		klog.FromContext(ctx).Info("Cordon kept for another reason", "node", n.Name, "why", why)
	}
	c.queue.Add(n.Name)
	return nil
}

// renew keeps the cordon's owner record from expiring while the controller
// runs: with less than half of owner.Lease left it is renewed, in a write
// bound to the node's resourceVersion, and the node is looked at again when
// the next renewal is due. It returns the node to go on with (nil: stop
// this sync, with err). A dry run writes nothing, so it renews nothing.
func (c *Controller) renew(ctx context.Context, n *v1.Node, now time.Time) (*v1.Node, error) {
	rec, ours, _ := cordonRecord(n)
	if !ours || c.dryRun.Enabled() {
		return n, nil
	}
	if rec.RenewDue(now) {
		out, err := c.write(ctx, n, false, "renew-cordon-record", "renew the expiry of the cordon's owner record",
			func(cur *v1.Node) bool {
				_, owned := cur.Annotations[AnnotationConditions]
				_, ours, _ := cordonRecord(cur)
				return owned && ours && cur.Spec.Unschedulable
			},
			func(m *v1.Node) { renewRecord(m, c.clock.Now()) })
		switch {
		case errors.Is(err, errSkip):
			c.queue.Add(n.Name) // changed meanwhile: decided anew
			return nil, nil
		case err != nil:
			return nil, err
		}
		n = out
		rec, _, _ = cordonRecord(n)
	}
	c.queue.AddAfter(n.Name, rec.RenewAt().Sub(now))
	return n, nil
}

// release gives the node up: uncordon it (no rule matches any more), or
// only drop ownership (someone uncordoned it). DrainScheduled goes too, so a
// later cordon starts afresh.
// why says why the cordon is lifted (without uncordon: why the node is
// forgotten, "" when someone uncordoned it).
func (c *Controller) release(ctx context.Context, n *v1.Node, uncordon bool, why string) error {
	owned := func(cur *v1.Node) bool { _, ok := cur.Annotations[AnnotationConditions]; return ok }
	action, msg := "release", "forget the node (it was uncordoned by someone else)"
	if uncordon {
		action, msg = "uncordon", "uncordon the node: "+why
		c.event(n, EventUncordonStarting, "Uncordoning node: "+why)
	}
	if kube.NodeCondition(n, ConditionDrainScheduled) != nil {
		if _, err := c.write(ctx, n, true, action+"-condition", "remove the DrainScheduled condition", owned, removeDrainCondition); err != nil && !errors.Is(err, errSkip) {
			return err
		}
	}
	_, err := c.write(ctx, n, false, action, msg, owned, func(m *v1.Node) { release(m, uncordon) })
	if errors.Is(err, errSkip) {
		return nil
	}
	if err != nil {
		if uncordon {
			c.metrics.uncordoned.WithLabelValues(resultFailed).Inc()
			c.event(n, EventUncordonFailed, "Uncordoning node failed: "+err.Error())
		}
		return err
	}
	c.metrics.cordonedNodes.Dec()
	if uncordon {
		c.metrics.uncordoned.WithLabelValues(resultSucceeded).Inc()
		c.event(n, EventUncordonSucceeded, "Uncordoned node")
		klog.FromContext(ctx).Info("Uncordoned node", "node", n.Name)
	} else if why != "" {
		klog.FromContext(ctx).Info("Node no longer handled", "node", n.Name, "why", why)
	} else {
		klog.FromContext(ctx).Info("Node uncordoned by someone else; no longer handled", "node", n.Name)
	}
	c.dryWrites.Forget(n.Name)
	c.requeueWaiting()
	c.sweepMoves(ctx, n.Name) // one its drain, stopped with a previous leader, left
	return nil
}

// schedule records the drain on the node (DrainScheduled=True) and starts it.
func (c *Controller) schedule(ctx context.Context, n *v1.Node, st nodeState, now time.Time) error {
	msg := scheduledMessage(now)
	owned := func(cur *v1.Node) bool {
		_, ok := cur.Annotations[AnnotationConditions]
		return ok && cur.Spec.Unschedulable
	}
	out, err := c.write(ctx, n, true, "drain", "drain the node", owned,
		func(m *v1.Node) { setDrainCondition(m, v1.ConditionTrue, msg, now) })
	if errors.Is(err, errSkip) {
		c.queue.Add(n.Name)
		return nil
	}
	if errors.Is(err, errAnswerLost) {
		return err // settled by a read at the next sync; then resumed if it landed
	}
	if err != nil {
		c.metrics.scheduled.WithLabelValues(resultFailed).Inc()
		c.event(n, EventDrainSchedFailed, "Scheduling the drain failed: "+err.Error())
		return err
	}
	if st.retryNow && st.phase == phaseFailed {
		// Draino leaves its retry annotation in place; so do we, it is the user's.
		klog.FromContext(ctx).Info("Retrying failed drain on request", "node", n.Name, "annotation", AnnotationRetry)
	}
	c.metrics.scheduled.WithLabelValues(resultSucceeded).Inc()
	// Once per cordon (the retries of a failed drain are not news; their
	// DrainFailed is, when the failure changes).
	said := "Will drain node after " + formatTime(now)
	if st.forRequest {
		said += " for " + st.request
	}
	c.eventOnce(n, EventDrainScheduled, "scheduled", said)
	c.ensureDrain(ctx, out, now)
	return nil
}

// abort stops a running drain (no-op when none runs).
func (c *Controller) abort(name string, cause error) bool {
	c.mu.Lock()
	r := c.running[name]
	c.mu.Unlock()
	if r != nil {
		r.cancel(cause)
	}
	return r != nil
}

// ensureDrain starts the node's drain unless it runs already: after a
// restart or a leader change, DrainScheduled=True on a node we own means
// the drain was in flight, and it resumes.
func (c *Controller) ensureDrain(ctx context.Context, n *v1.Node, scheduled time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.running[n.Name]; ok {
		return
	}
	dctx, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
	r := &runningDrain{cancel: cancel, done: make(chan struct{})}
	c.running[n.Name] = r
	c.metrics.inFlight.Set(float64(len(c.running)))
	go func() {
		defer close(r.done)
		defer func() {
			c.mu.Lock()
			delete(c.running, n.Name)
			c.metrics.inFlight.Set(float64(len(c.running)))
			c.mu.Unlock()
			c.queue.Add(n.Name)
			c.requeueWaiting()
		}()
		select {
		case <-c.stopping:
			return
		default:
		}
		stop := context.AfterFunc(ctx, func() { cancel(errStopping) })
		defer stop()
		c.drain(dctx, n, scheduled)
	}()
}

// errStopping ends drains when the controller stops (lost leadership,
// shutdown): nothing is written, the next leader resumes.
var errStopping = errors.New("the controller is stopping")

func isStopping(ctx context.Context) bool { return errors.Is(context.Cause(ctx), errStopping) }

// NodeDecision is the drain controller's current decision about a node and
// why, for an explain command (not written yet) and for tests.
type NodeDecision struct {
	// State is none, skipped, waiting, cordoned, draining, drained or failed.
	State string
	// Reason says why, in the words of the events (for skipped: the
	// nodeshepherd_drain_nodes_skipped reason, then the message).
	Reason string
}

// Explain returns the decision about a node as the controller holds it now;
// for a node drained for a remediation request, the reason says so.
func (c *Controller) Explain(name string) NodeDecision {
	c.mu.Lock()
	s, skipped := c.skipped[name]
	w, waiting := c.waiting[name]
	_, running := c.running[name]
	c.mu.Unlock()
	var n *v1.Node
	if cached, err := c.nodes.Get(name); err == nil {
		n = c.view(cached)
	} else if !skipped && !waiting && !running {
		return NodeDecision{State: "none", Reason: err.Error()}
	}
	switch {
	case skipped:
		return NodeDecision{State: "skipped", Reason: s.reason + ": " + s.message}
	case waiting:
		return NodeDecision{State: "waiting", Reason: forRequest(n, fmt.Sprintf("waiting to %s (%s): %s", w.action, w.budget, w.reason))}
	case running:
		return NodeDecision{State: "draining", Reason: forRequest(n, "")}
	}
	st := readState(n)
	if !st.owned {
		return NodeDecision{State: "none"}
	}
	msg := ""
	if cond := kube.NodeCondition(n, ConditionDrainScheduled); cond != nil {
		msg = cond.Message
	}
	switch st.phase {
	case phaseCompleted:
		return NodeDecision{State: "drained", Reason: forRequest(n, msg)}
	case phaseFailed:
		return NodeDecision{State: "failed", Reason: forRequest(n, msg)}
	case phaseInFlight:
		return NodeDecision{State: "draining", Reason: forRequest(n, msg)}
	}
	return NodeDecision{State: "cordoned", Reason: forRequest(n, n.Annotations[AnnotationConditions])}
}

// forRequest adds to reason that the node is cordoned and drained for a
// remediation request: the one its cordon is held for, else the one that
// asks for it.
func forRequest(n *v1.Node, reason string) string {
	if n == nil {
		return reason
	}
	why := ""
	if st := readState(n); st.owned && st.forRequest {
		why = "cordoned and drained for the remediation request: " + st.request
	} else if r, _, err := remediation.RequestOf(n); err == nil && r.Drain {
		why = "cordoned and drained for the remediation request: " + r.Why()
	}
	switch {
	case why == "":
		return reason
	case reason == "":
		return why
	}
	return reason + "; " + why
}

// forgetStarted removes AnnotationDrainStarted from a node no longer
// cordoned by the drain controller once the drain buffer, which counts from
// it, no longer needs it: a finished drain leaves nothing of the
// controller's on the node (as Draino leaves nothing).
func (c *Controller) forgetStarted(ctx context.Context, n *v1.Node, st nodeState, now time.Time) error {
	if _, ok := n.Annotations[AnnotationDrainStarted]; !ok {
		return nil
	}
	if until := st.startedAt.Add(c.cfg.Budget.DrainBuffer); !st.startedAt.IsZero() && now.Before(until) {
		c.queue.AddAfter(n.Name, until.Sub(now))
		return nil
	}
	notOwned := func(cur *v1.Node) bool { _, o := cur.Annotations[AnnotationConditions]; return !o }
	_, err := c.write(ctx, n, false, "forget-drain-started", "remove "+AnnotationDrainStarted+": the drain buffer no longer counts from it", notOwned,
		func(m *v1.Node) { delete(m.Annotations, AnnotationDrainStarted) })
	if errors.Is(err, errSkip) {
		return nil
	}
	return err
}
