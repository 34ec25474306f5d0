package nodelifecycle

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	coordinationv1 "k8s.io/api/coordination/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	coordinformers "k8s.io/client-go/informers/coordination/v1"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	coordlisters "k8s.io/client-go/listers/coordination/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/nodeshepherd/nodeshepherd/pkg/controllerutil"
	"github.com/nodeshepherd/nodeshepherd/pkg/kube"
	"github.com/nodeshepherd/nodeshepherd/pkg/nodetopology"
)

// Name is the controller's name in --controllers.
const Name = "nodelifecycle"

// EventSource is the component name on events, upstream's.
const EventSource = "node-controller"

// Event reasons.
const (
	EventRegisteredNode     = "RegisteredNode"
	EventRemovingNode       = "RemovingNode"
	EventNodeNotReady       = "NodeNotReady"
	EventReadinessRestored  = "PodReadinessRestored"
	EventAllNodesSilent     = "AllNodesSilent"
	EventNodesHeartbeating  = "NodeHeartbeatsResumed"
	nodeUpdateWorkers       = 8
	podUpdateWorkers        = 4
	noExecuteTaintingPeriod = 100 * time.Millisecond
)

// Deps are the controller's collaborators.
type Deps struct {
	Client   kubernetes.Interface
	Nodes    coreinformers.NodeInformer
	Pods     coreinformers.PodInformer
	Leases   coordinformers.LeaseInformer
	Recorder record.EventRecorder
	Registry prometheus.Registerer
	Clock    clock.WithTicker
	// ProgressTimeout bounds a step (controllerutil.DefaultProgressTimeout when zero).
	ProgressTimeout time.Duration
	// Ping checks that the API server answers; the controller stops judging
	// nodes while it cannot reach it (default: GET /readyz).
	Ping func(context.Context) error
}

// Controller is the node lifecycle controller.
type Controller struct {
	*controllerutil.Base
	// monitor is the monitor loop, counted from construction on: a Run
	// that never gets it going is as stuck as a loop that stopped.
	monitor  *controllerutil.Loop
	cfg      Config
	client   kubernetes.Interface
	clock    clock.WithTicker
	recorder record.EventRecorder
	metrics  *metrics
	dryRun   *controllerutil.DryRun
	ping     func(context.Context) error

	nodeLister  corelisters.NodeLister
	leaseLister coordlisters.LeaseLister
	podLister   corelisters.PodLister
	podIndexer  cache.Indexer
	synced      []cache.InformerSynced

	// mu guards the maps below. It is never held across API calls.
	mu           sync.Mutex
	health       map[string]*nodeHealth
	known        map[string]*v1.Node
	zoneStates   map[string]nodetopology.ZoneState
	zoneQueues   map[string]*zoneQueue
	zoneOfNode   map[string]string
	nextDeadline time.Time

	// overlay holds nodes as this controller last wrote them, until the
	// informer catches up (and, in dry run, as it would have written them).
	overlay *controllerutil.Overlay[*v1.Node]
	// nodeLocks serialize taint writes per node (striped).
	nodeLocks [64]sync.Mutex

	nodeQueue    workqueue.TypedRateLimitingInterface[string] // NoSchedule taints and labels
	podQueue     workqueue.TypedRateLimitingInterface[string] // pods bound to not-ready nodes
	markQueue    workqueue.TypedRateLimitingInterface[string] // nodes whose pods must be marked NotReady
	restoreQueue workqueue.TypedRateLimitingInterface[string] // pods whose readiness may be restored

	// Static stability: while every zone is in FullDisruption, the nodes
	// whose pods would have been marked NotReady are held here instead
	// (guarded by mu); released is when the hold ended.
	holding  bool
	held     map[string]bool
	released time.Time

	// Fresh reads that confirm silence (freshview.go), guarded by mu:
	// freshRead is when the last successful one was sent, freshTried the
	// last attempt; freshBeats are Ready heartbeats of nodes without a
	// Lease seen only by a fresh read; viewStale: the last read found
	// heartbeats the informers had missed.
	freshRead  time.Time
	freshTried time.Time
	// freshEarlyAt is when the last read sent early to confirm an expiry
	// went; freshEarly: the read about to be sent is one.
	freshEarlyAt time.Time
	freshEarly   bool
	freshBeats   map[string]metav1.Time
	viewStale    bool
	unsettled    map[string]bool // zones with unconfirmed suspects: no NoExecute taint

	// judged are the nodes that carried a NoExecute taint, already judged
	// dead, when every zone went down (allzones.go), guarded by mu.
	judged map[string]judgedTaint
	// restoring are the nodes judged dead before the all-zones mode that
	// wait in their zone's queue for their taint back (allzones.go).
	restoring map[string]judgedTaint

	markedMu sync.Mutex
	marked   map[types.UID]markedPod

	// lost are writes whose answer never came (writes.go).
	lost lostWrites

	contact *contact
}

// markedPod is a pod that carries a live MarkedCondition.
type markedPod struct {
	node          string
	restoreQueued bool
}

// New builds the controller; Run starts it.
func New(cfg Config, d Deps) (*Controller, error) {
	b, err := controllerutil.NewBase(controllerutil.Setup{Name: Name, Validate: cfg.Validate, DryRun: cfg.DryRun,
		Registry: d.Registry, Recorder: d.Recorder, ProgressTimeout: d.ProgressTimeout}, &d.Clock)
	if err != nil {
		return nil, err
	}
	c := &Controller{
		Base: b, monitor: b.Loop("node monitor loop", cfg.NodeMonitorPeriod),
		cfg: cfg, client: d.Client, clock: d.Clock, recorder: d.Recorder, metrics: newMetrics(d.Registry),
		dryRun:      b.DryRun,
		nodeLister:  d.Nodes.Lister(),
		leaseLister: d.Leases.Lister(),
		podLister:   d.Pods.Lister(),
		podIndexer:  d.Pods.Informer().GetIndexer(),
		health:      map[string]*nodeHealth{},
		known:       map[string]*v1.Node{},
		zoneStates:  map[string]nodetopology.ZoneState{},
		zoneQueues:  map[string]*zoneQueue{},
		zoneOfNode:  map[string]string{},
		held:        map[string]bool{},
		freshBeats:  map[string]metav1.Time{},
		judged:      map[string]judgedTaint{},
		restoring:   map[string]judgedTaint{},
		overlay:     controllerutil.NewOverlay[*v1.Node](),
		marked:      map[types.UID]markedPod{},
		ping:        d.Ping,
		contact:     newContact(d.Clock.Now(), contactGap, cfg.NodeMonitorGracePeriod),
	}
	if c.ping == nil {
		c.ping = func(ctx context.Context) error {
			return c.client.CoreV1().RESTClient().Get().AbsPath("/readyz").Do(ctx).Error()
		}
	}
	newQueue := func(name, what string) workqueue.TypedRateLimitingInterface[string] {
		return controllerutil.Track(b, what, workqueue.NewTypedRateLimitingQueueWithConfig(controllerutil.RetryLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: name, Clock: d.Clock}))
	}
	c.nodeQueue = newQueue("node_lifecycle_controller", "node")
	c.podQueue = newQueue("node_lifecycle_controller_pods", "pod")
	c.markQueue = newQueue("node_lifecycle_controller_mark_pods", "pods of node")
	c.restoreQueue = newQueue("node_lifecycle_controller_restore_readiness", "readiness of pod")

	if err := nodetopology.AddPodNodeNameIndexer(d.Pods.Informer()); err != nil {
		return nil, err
	}
	// The workers start once every handler has seen the first list (the
	// registrations' HasSynced, not the stores'): the handlers fill the
	// health records and the index of marked pods the workers judge from.
	nodeReg, err := d.Nodes.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { c.onNode(obj.(*v1.Node)) },
		UpdateFunc: func(_, obj any) { c.onNode(obj.(*v1.Node)) },
		DeleteFunc: func(obj any) {
			if n, ok := obj.(*v1.Node); ok {
				c.overlay.Forget(n.Name)
			}
		},
	})
	if err != nil {
		return nil, err
	}
	leaseReg, err := d.Leases.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { c.onLease(obj.(*coordinationv1.Lease)) },
		UpdateFunc: func(_, obj any) { c.onLease(obj.(*coordinationv1.Lease)) },
	})
	if err != nil {
		return nil, err
	}
	podReg, err := d.Pods.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) { c.onPod(nil, obj.(*v1.Pod)) },
		UpdateFunc: func(old, obj any) {
			c.onPod(old.(*v1.Pod), obj.(*v1.Pod))
		},
		DeleteFunc: func(obj any) {
			if p, ok := kube.Untombstone(obj).(*v1.Pod); ok {
				c.forgetMark(p)
			}
		},
	})
	c.synced = []cache.InformerSynced{nodeReg.HasSynced, podReg.HasSynced, leaseReg.HasSynced}
	return c, err
}

// onNode refreshes the probe when the kubelet posted a new heartbeat, so
// that the grace period runs from when the heartbeat arrived, and queues the
// node for its NoSchedule taints and labels.
func (c *Controller) onNode(n *v1.Node) {
	c.nodeQueue.Add(n.Name)
	ready := kube.NodeCondition(n, v1.NodeReady)
	if ready == nil {
		return
	}
	now := c.clock.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	if rec := c.health[n.Name]; rec != nil && rec.hasReady && !rec.heartbeat.Equal(&ready.LastHeartbeatTime) {
		// A heartbeat older, on the kubelet's own clock, than a Lease
		// renewal already seen is no news: a watch that delivers it late
		// (lagging, or re-listing after a cut) would otherwise make a node
		// silent since that renewal look heard now, and its zone healthier
		// than it is (chaos seed 280003). The heartbeat has whole seconds:
		// it may be up to 1 s later than it reads.
		if rec.leaseRenew.IsZero() || ready.LastHeartbeatTime.Add(time.Second).After(rec.leaseRenew) {
			rec.heard(now)
		}
		if !rec.transition.Equal(&ready.LastTransitionTime) {
			rec.readyTransition = now
		}
		rec.heartbeat, rec.transition = ready.LastHeartbeatTime, ready.LastTransitionTime
	}
}

// onLease refreshes the probe on a newer lease renewal.
func (c *Controller) onLease(l *coordinationv1.Lease) {
	if l.Namespace != v1.NamespaceNodeLease || l.Spec.RenewTime == nil {
		return
	}
	c.contact.sawLease()
	now := c.clock.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	if rec := c.health[l.Name]; rec != nil && l.Spec.RenewTime.Time.After(rec.leaseRenew) {
		rec.leaseRenew = l.Spec.RenewTime.Time
		rec.heard(now)
	}
}

func (c *Controller) onPod(old, pod *v1.Pod) {
	c.trackMark(pod)
	if pod.Spec.NodeName == "" || (old != nil && old.Spec.NodeName == pod.Spec.NodeName) {
		return
	}
	if key, err := cache.MetaNamespaceKeyFunc(pod); err == nil {
		c.podQueue.Add(key)
	}
}

// latestNode is the freshest view of a node: the lister's copy, or this
// controller's own write if the informer has not delivered it yet.
func (c *Controller) latestNode(name string) (*v1.Node, error) {
	n, err := c.nodeLister.Get(name)
	if err != nil {
		return nil, err
	}
	return c.overlay.Latest(name, n), nil
}

// Run starts the workers and the monitor loop and blocks until ctx ends.
func (c *Controller) Run(ctx context.Context) error {
	return c.Base.Run(ctx, controllerutil.Work{Synced: c.synced,
		Queues: []interface{ ShutDown() }{c.nodeQueue, c.podQueue, c.markQueue, c.restoreQueue},
		Start: func(ctx context.Context) error {
			c.begin(c.clock.Now())
			klog.FromContext(ctx).Info("Starting node lifecycle controller", "dryRun", c.dryRun.Enabled(), "nodeMonitorPeriod", c.cfg.NodeMonitorPeriod,
				"nodeMonitorGracePeriod", c.cfg.NodeMonitorGracePeriod, "nodeEvictionRate", c.cfg.NodeEvictionRate)
			spawn := func(n int, f func(context.Context) bool) {
				for range n {
					c.Go(func() {
						for f(ctx) {
						}
					})
				}
			}
			spawn(nodeUpdateWorkers, c.processNode)
			spawn(podUpdateWorkers, c.processPod)
			spawn(podUpdateWorkers, c.processMark)
			spawn(1, c.processRestore)
			contact := c.Loop("API server contact loop", time.Second)
			c.Go(func() { c.watchContact(ctx, contact) })
			c.Go(func() { c.monitorLoop(ctx) })
			return nil
		}})
}

// begin is called when the caches have synced and the loops start.
func (c *Controller) begin(now time.Time) { c.contact.start(now) }

// progressed records that the monitor loop moved: at each step, and for
// each node a pass judges or taints, so that a long pass (thousands of
// nodes failing at once, writes throttled) is progress, not a hang.
func (c *Controller) progressed() { c.monitor.Progressed() }

// monitorLoop runs the health pass every monitor period and also the moment a
// node's grace period expires, then the NoExecute tainting pass; between
// passes it runs the tainting pass every 100ms for the rate limiters. Both run
// in this one goroutine, so zone states are always decided before a taint of
// the same pass is applied.
func (c *Controller) monitorLoop(ctx context.Context) {
	nextPass := c.clock.Now()
	timer := c.clock.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C():
		}
		c.monitor.Turn()
		timer.Reset(c.monitorStep(ctx, &nextPass))
	}
}

// monitorStep runs the health pass if it is due, then the tainting pass, and
// returns how long to wait for the next step.
func (c *Controller) monitorStep(ctx context.Context, nextPass *time.Time) time.Duration {
	logger := klog.FromContext(ctx)
	now := c.clock.Now()
	c.progressed()
	if !now.Before(*nextPass) {
		judge, reset := c.contact.check(now)
		if reset {
			logger.Info("Heartbeats visible again; giving every node a fresh grace period")
			c.resetAllProbes(now, nil)
		}
		if !judge {
			// Asked again at the next step, not a monitor period later: the
			// pass must run as soon as heartbeats are visible again.
			c.doNoExecuteTaintingPass(ctx)
			return noExecuteTaintingPeriod
		}
		start := c.clock.Now()
		if err := c.monitorNodeHealth(ctx); err != nil {
			logger.Error(err, "Error monitoring node health")
		}
		c.metrics.updateAllNodesHealth.Observe(c.clock.Since(start).Seconds())
		now = c.clock.Now()
		*nextPass = now.Add(c.cfg.NodeMonitorPeriod)
		c.mu.Lock()
		if d := c.nextDeadline; !d.IsZero() && d.Before(*nextPass) {
			*nextPass = d
		}
		c.mu.Unlock()
	}
	c.doNoExecuteTaintingPass(ctx)
	return max(min(nextPass.Sub(c.clock.Now()), noExecuteTaintingPeriod), 0)
}

// watchContact pings the API server every second; see contact for what the
// controller does while it cannot see heartbeats.
func (c *Controller) watchContact(ctx context.Context, loop *controllerutil.Loop) {
	logger := klog.FromContext(ctx)
	ticker := c.clock.NewTicker(time.Second)
	defer ticker.Stop()
	for {
		loop.Turn()
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := c.ping(pctx)
		cancel()
		if err == nil {
			if outage := c.contact.answered(c.clock.Now()); outage > 0 {
				logger.Info("API server reachable again; not judging nodes until their heartbeats are visible", "unreachableFor", outage.Round(time.Second))
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-ticker.C():
		}
	}
}

// contactGap is how long without an answer from the API server makes the
// controller stop judging nodes.
const contactGap = 3 * time.Second

// resetAllProbes gives every node a fresh grace period from now, but for
// the nodes in keep.
func (c *Controller) resetAllProbes(now time.Time, keep map[string]judgedTaint) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for name, rec := range c.health {
		if _, ok := keep[name]; ok {
			continue
		}
		rec.probe, rec.readyTransition, rec.renewedBefore = now, now, time.Time{}
	}
}
