package nodeipam

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/nodeshepherd/nodeshepherd/pkg/controller/nodeipam/cidrset"
	"github.com/nodeshepherd/nodeshepherd/pkg/controllerutil"
	"github.com/nodeshepherd/nodeshepherd/pkg/kube"
)

// Name is the controller's name in --controllers.
const Name = "nodeipam"

// EventSource is the component name on events.
const EventSource = "cidrAllocator"

// Event reasons.
const (
	EventCIDRNotAvailable     = "CIDRNotAvailable"
	EventCIDRAssignmentFailed = "CIDRAssignmentFailed"
	workers                   = 4
)

// Deps are the controller's collaborators.
type Deps struct {
	Client   kubernetes.Interface
	Nodes    coreinformers.NodeInformer
	Recorder record.EventRecorder
	Registry prometheus.Registerer
	// ProgressTimeout bounds a step (controllerutil.DefaultProgressTimeout when zero).
	ProgressTimeout time.Duration
}

// Controller allocates pod CIDRs to nodes.
type Controller struct {
	*controllerutil.Base
	cfg        *Parsed
	dryRun     *controllerutil.DryRun
	client     kubernetes.Interface
	recorder   record.EventRecorder
	alloc      *Allocator
	nodeLister corelisters.NodeLister
	synced     cache.InformerSynced
	queue      workqueue.TypedRateLimitingInterface[string]

	// waiting holds nodes that found the range full; freed blocks wake them.
	waitingMu sync.Mutex
	waiting   map[string]bool
	// owned records which node holds which CIDRs, so a deleted node's blocks
	// are released even when the delete event carries a stale object.
	ownedMu  sync.Mutex
	owned    map[string][]string
	rejected map[string]bool // nodes with unusable CIDRs, reported once
	// unconfirmed are nodes whose podCIDRs write got no answer (a timeout,
	// a lost connection): it may have landed, so their CIDRs stay theirs
	// and the same write is sent again until it is answered.
	unconfirmed map[string]bool

	metrics *metrics
}

// New builds the controller.
func New(cfg Config, d Deps) (*Controller, error) {
	parsed, err := cfg.Parse()
	if err != nil {
		return nil, err
	}
	alloc, err := NewAllocator(parsed)
	if err != nil {
		return nil, err
	}
	var clk clock.WithTicker // the real one
	b, err := controllerutil.NewBase(controllerutil.Setup{Name: Name, DryRun: cfg.DryRun, Registry: d.Registry, Recorder: d.Recorder,
		ProgressTimeout: d.ProgressTimeout}, &clk)
	if err != nil {
		return nil, err
	}
	c := &Controller{
		Base: b, cfg: parsed, client: d.Client, recorder: d.Recorder, alloc: alloc, dryRun: b.DryRun,
		nodeLister: d.Nodes.Lister(),
		queue: controllerutil.Track(b, "node", workqueue.NewTypedRateLimitingQueueWithConfig(controllerutil.RetryLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "nodeipam"})),
		waiting: map[string]bool{}, owned: map[string][]string{}, rejected: map[string]bool{}, unconfirmed: map[string]bool{},
		metrics: newMetrics(d.Registry),
	}
	// The worker starts once the handler has seen the first list (its
	// registration's HasSynced): every node is queued by then.
	reg, err := d.Nodes.Informer().AddEventHandler(kube.NodeNameHandler(func(name string) { c.queue.Add(name) }))
	if err != nil {
		return nil, err
	}
	c.synced = reg.HasSynced
	return c, nil
}

// Run rebuilds occupancy from every existing node, then allocates.
func (c *Controller) Run(ctx context.Context) error {
	return c.Base.Run(ctx, controllerutil.Work{Synced: []cache.InformerSynced{c.synced}, Queues: []interface{ ShutDown() }{c.queue},
		Start: func(ctx context.Context) error {
			// Nothing is handed out before every existing allocation is known, so
			// a block is never given twice, across restarts and leader changes too.
			nodes, err := c.nodeLister.List(labels.Everything())
			if err != nil {
				return err
			}
			end := c.Begin("rebuilding the allocations of every node")
			occupied := 0
			for _, n := range nodes {
				if len(n.Spec.PodCIDRs) > 0 && c.occupy(ctx, n) {
					occupied++
				}
			}
			end()
			c.updateGauge()
			klog.FromContext(ctx).Info("Starting node IPAM controller", "clusterCIDRs", c.alloc.Ranges(), "nodes", len(nodes), "occupied", occupied, "dryRun", c.dryRun.Enabled())
			controllerutil.Workers(ctx, c.Base, workers, c.queue, "node", "Pod CIDR allocation failed, retrying", c.sync)
			return nil
		}})
}

// occupy records a node's existing CIDRs; invalid or taken ones get an
// event and the node is left unchanged.
func (c *Controller) occupy(ctx context.Context, n *v1.Node) bool {
	c.ownedMu.Lock()
	owned, known := c.owned[n.Name]
	var stale []string
	if known && c.unconfirmed[n.Name] {
		// The unanswered write is settled: ours landed, or another writer's
		// CIDRs did and ours are free again.
		delete(c.unconfirmed, n.Name)
		if !slices.Equal(owned, n.Spec.PodCIDRs) {
			delete(c.owned, n.Name)
			known, stale = false, owned
		}
	}
	rejected := c.rejected[n.Name]
	c.ownedMu.Unlock()
	if stale != nil {
		c.alloc.Release(stale)
	}
	if known || rejected {
		return known
	}
	if err := c.alloc.Occupy(n.Spec.PodCIDRs); err != nil {
		c.ownedMu.Lock()
		c.rejected[n.Name] = true
		c.ownedMu.Unlock()
		klog.FromContext(ctx).Info("Node has pod CIDRs this controller cannot accept; leaving it unchanged", "node", n.Name, "podCIDRs", n.Spec.PodCIDRs, "err", err)
		c.event(n, v1.EventTypeWarning, EventCIDRAssignmentFailed, fmt.Sprintf("Node %s has podCIDRs %v that cannot be used: %v", n.Name, n.Spec.PodCIDRs, err))
		return false
	}
	c.ownedMu.Lock()
	c.owned[n.Name] = n.Spec.PodCIDRs
	c.ownedMu.Unlock()
	return true
}

func (c *Controller) sync(ctx context.Context, name string) error {
	node, err := c.nodeLister.Get(name)
	if apierrors.IsNotFound(err) {
		c.release(name)
		return nil
	}
	if err != nil {
		return err
	}
	if len(node.Spec.PodCIDRs) > 0 {
		c.occupy(ctx, node)
		return nil
	}
	c.ownedMu.Lock()
	pending, unconfirmed := c.owned[name], c.unconfirmed[name]
	c.ownedMu.Unlock()
	if pending != nil && unconfirmed {
		// The last write of these CIDRs went unanswered: send it again
		// (the same CIDRs, so it is harmless if the first one landed).
		return c.writeCIDRs(ctx, node, pending)
	}
	if pending != nil {
		// Allocated and written; the informer has not caught up yet.
		return nil
	}
	cidrs, err := c.alloc.Allocate()
	if errors.Is(err, cidrset.ErrFull) {
		c.metrics.failures.Inc()
		c.waitingMu.Lock()
		first := !c.waiting[name]
		c.waiting[name] = true
		c.waitingMu.Unlock()
		if first {
			c.event(node, v1.EventTypeWarning, EventCIDRNotAvailable, fmt.Sprintf("Node %s status is now: CIDRNotAvailable (%v)", name, err))
			klog.FromContext(ctx).Info("No pod CIDR available", "node", name, "err", err)
		}
		return nil // woken when a block is released
	}
	if err != nil {
		return err
	}
	strs := make([]string, len(cidrs))
	for i, p := range cidrs {
		strs[i] = p.String()
	}
	if c.dryRun.Enabled() {
		c.dryRun.Report(ctx, node, "allocate-pod-cidrs", fmt.Sprintf("node %s: podCIDRs %s", name, strings.Join(strs, ",")))
		c.alloc.Release(strs)
		return nil
	}
	c.ownedMu.Lock()
	c.owned[name] = strs
	c.ownedMu.Unlock()
	return c.writeCIDRs(ctx, node, strs)
}

// writeCIDRs writes the node's podCIDRs, bounded by kube.WriteTimeout. A
// rejection frees the CIDRs; an unanswered write keeps them reserved for the
// node (it may have landed: giving them to another node could hand one block
// to two) and is sent again on the retry.
func (c *Controller) writeCIDRs(ctx context.Context, node *v1.Node, strs []string) error {
	name := node.Name
	patch, _ := json.Marshal(map[string]any{"spec": map[string]any{"podCIDR": strs[0], "podCIDRs": strs}})
	wctx, cancel := context.WithTimeout(ctx, kube.WriteTimeout)
	_, err := c.client.CoreV1().Nodes().Patch(wctx, name, types.StrategicMergePatchType, patch, metav1.PatchOptions{})
	cancel()
	if err != nil && !answered(err) {
		c.ownedMu.Lock()
		c.unconfirmed[name] = true
		c.ownedMu.Unlock()
		c.metrics.failures.Inc()
		return fmt.Errorf("writing podCIDRs %v of node %s got no answer; the CIDRs stay reserved for it and the write is retried: %w", strs, name, err)
	}
	c.ownedMu.Lock()
	delete(c.unconfirmed, name)
	// Still ours to free (a deleted node's CIDRs are freed by release).
	mine := err != nil && slices.Equal(c.owned[name], strs)
	if mine {
		delete(c.owned, name)
	}
	c.ownedMu.Unlock()
	if err != nil {
		if mine {
			c.alloc.Release(strs)
		}
		c.metrics.failures.Inc()
		if apierrors.IsNotFound(err) {
			return nil
		}
		c.event(node, v1.EventTypeWarning, EventCIDRAssignmentFailed, fmt.Sprintf("Node %s: writing podCIDRs %v failed: %v", name, strs, err))
		return err
	}

	c.waitingMu.Lock()
	delete(c.waiting, name)
	c.waitingMu.Unlock()
	c.metrics.allocations.Inc()
	c.updateGauge()
	klog.FromContext(ctx).V(2).Info("Allocated pod CIDRs", "node", name, "podCIDRs", strs)
	return nil
}

// release frees a deleted node's blocks and wakes nodes waiting for one.
func (c *Controller) release(name string) {
	c.ownedMu.Lock()
	cidrs, ok := c.owned[name]
	delete(c.owned, name)
	delete(c.rejected, name)
	delete(c.unconfirmed, name)
	c.ownedMu.Unlock()
	c.waitingMu.Lock()
	delete(c.waiting, name)
	var wake []string
	if ok {
		for n := range c.waiting {
			wake = append(wake, n)
		}
	}
	c.waitingMu.Unlock()
	if !ok {
		return
	}
	c.alloc.Release(cidrs)
	c.updateGauge()
	for _, n := range wake {
		c.queue.Add(n)
	}
}

func (c *Controller) updateGauge() {
	c.alloc.mu.Lock()
	defer c.alloc.mu.Unlock()
	for _, s := range c.alloc.sets {
		c.metrics.used.WithLabelValues(s.Cluster().String()).Set(float64(s.Used()))
	}
}

func (c *Controller) event(n *v1.Node, typ, reason, msg string) {
	controllerutil.NodeEvent(c.recorder, n, typ, reason, msg)
}

// answered is kube.Answered: an unanswered write may have landed.
func answered(err error) bool { return kube.Answered(err) }
