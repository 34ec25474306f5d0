// Package cloudnodelifecycle asks the infrastructure about every node that
// is not Ready: a node whose machine is gone is deleted (so its pods are
// cleaned up and replaced instead of waiting out their tolerations), a node
// whose machine is shut down gets the shutdown taint. It behaves like the
// cloud controller manager's node lifecycle controller, for any provider
// implementing k8s.io/cloud-provider's InstancesV2, with guards upstream
// lacks: provider errors never delete, deletions are rate-limited and stop
// during incidents.
package cloudnodelifecycle

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/pflag"
	"golang.org/x/time/rate"
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
	cloudprovider "k8s.io/cloud-provider"
	cloudproviderapi "k8s.io/cloud-provider/api"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/nodeshepherd/nodeshepherd/pkg/controllerutil"
	"github.com/nodeshepherd/nodeshepherd/pkg/kube"
	"github.com/nodeshepherd/nodeshepherd/pkg/owner"
)

// Name is the controller's name in --controllers.
const Name = "cloudnodelifecycle"

// EventSource is the component name on events, upstream's.
const EventSource = "cloud-node-lifecycle-controller"

// ShutdownTaint marks a node whose machine is shut down, as upstream does.
var ShutdownTaint = v1.Taint{Key: cloudproviderapi.TaintNodeShutdown, Effect: v1.TaintEffectNoSchedule}

// Event reasons.
const (
	EventDeletingNode    = "DeletingNode"
	EventDeletionBlocked = "NodeDeletionBlocked"
)

// Config holds the controller's settings.
type Config struct {
	// NodeMonitorPeriod is shared with the node lifecycle controller's flag.
	NodeMonitorPeriod time.Duration
	// NodeDeletionRate is nodes deleted per second at most (burst 1).
	NodeDeletionRate float64
	// MaxUnhealthyNodes stops deletions while more nodes than this are not
	// Ready: a count ("10") or a percentage of all nodes ("45%").
	MaxUnhealthyNodes string
	// DeletionConfirmations is how many consecutive "gone" answers the
	// provider must give, and DeletionDelay how long after the first of
	// them, before a node is deleted: one wrong answer (a cloud API blip, a
	// webhook bug) must not delete a node.
	DeletionConfirmations int
	DeletionDelay         time.Duration
	DryRun                bool
}

// DefaultConfig returns the defaults: one deletion per 10s, stop above 45 %,
// three "gone" answers over at least 20s.
func DefaultConfig() Config {
	return Config{NodeMonitorPeriod: 5 * time.Second, NodeDeletionRate: 0.1, MaxUnhealthyNodes: "45%",
		DeletionConfirmations: 3, DeletionDelay: 20 * time.Second}
}

// AddFlags registers the controller's own flags; --node-monitor-period and
// --max-unhealthy-nodes are shared settings (descriptor.Shared).
func (c *Config) AddFlags(fs *pflag.FlagSet) {
	fs.Float64Var(&c.NodeDeletionRate, "node-deletion-rate", c.NodeDeletionRate, "Nodes per second the cloudnodelifecycle controller may delete at most (0.1: one every 10s).")
	fs.IntVar(&c.DeletionConfirmations, "node-deletion-confirmations", c.DeletionConfirmations, "Consecutive answers that a node's machine is gone, one per --node-monitor-period, before the cloudnodelifecycle controller deletes the node (upstream: 1). An answer that the machine exists starts over; an error is no answer.")
	fs.DurationVar(&c.DeletionDelay, "node-deletion-delay", c.DeletionDelay, "Least time from the first answer that a node's machine is gone to the node's deletion (upstream: 0).")
}

// Validate checks the settings.
func (c *Config) Validate() error {
	var errs []error
	if !controllerutil.Finite(c.NodeDeletionRate) || c.NodeDeletionRate <= 0 {
		errs = append(errs, fmt.Errorf("--node-deletion-rate must be positive and finite, got %v", c.NodeDeletionRate))
	}
	if _, err := controllerutil.ParseLimit(c.MaxUnhealthyNodes, 100); err != nil {
		errs = append(errs, fmt.Errorf("--max-unhealthy-nodes: %w", err))
	}
	if c.NodeMonitorPeriod <= 0 {
		errs = append(errs, fmt.Errorf("--node-monitor-period must be positive, got %v", c.NodeMonitorPeriod))
	}
	if c.DeletionConfirmations < 1 {
		errs = append(errs, fmt.Errorf("--node-deletion-confirmations must be at least 1, got %d", c.DeletionConfirmations))
	}
	if c.DeletionDelay < 0 {
		errs = append(errs, fmt.Errorf("--node-deletion-delay must not be negative, got %v", c.DeletionDelay))
	}
	return errors.Join(errs...)
}

// Deps are the controller's collaborators.
type Deps struct {
	Client   kubernetes.Interface
	Nodes    coreinformers.NodeInformer
	Cloud    cloudprovider.Interface
	Recorder record.EventRecorder
	Registry prometheus.Registerer
	Clock    clock.WithTicker
	// ProgressTimeout bounds a step (controllerutil.DefaultProgressTimeout when zero).
	ProgressTimeout time.Duration
}

// Controller is the cloud node lifecycle controller.
type Controller struct {
	*controllerutil.Base
	cfg        Config
	client     kubernetes.Interface
	instances  cloudprovider.InstancesV2
	recorder   record.EventRecorder
	clock      clock.WithTicker
	dryRun     *controllerutil.DryRun
	nodeLister corelisters.NodeLister
	synced     cache.InformerSynced
	limiter    *rate.Limiter
	metrics    *metrics
	// gone counts, per node UID, the consecutive "gone" answers and when the
	// first came; blocked is the decision last said about a node's deletion
	// (the reason it was refused, or deletingSaid), so that each is an event
	// once per change, not once per pass or retry. Only the monitor
	// goroutine touches them.
	gone    map[types.UID]goneAnswers
	blocked map[types.UID]string
	// monitor is the loop of passes, from Run on.
	monitor *controllerutil.Loop
}

type goneAnswers struct {
	first time.Time
	count int
}

// New builds the controller; the provider must implement InstancesV2.
func New(cfg Config, d Deps) (*Controller, error) {
	b, err := controllerutil.NewBase(controllerutil.Setup{Name: Name, Validate: cfg.Validate, DryRun: cfg.DryRun,
		Registry: d.Registry, Recorder: d.Recorder, ProgressTimeout: d.ProgressTimeout}, &d.Clock)
	if err != nil {
		return nil, err
	}
	instances, ok := d.Cloud.InstancesV2()
	if !ok {
		return nil, fmt.Errorf("cloud provider %q does not implement InstancesV2", d.Cloud.ProviderName())
	}
	c := &Controller{
		Base: b, cfg: cfg, client: d.Client, instances: instances, recorder: d.Recorder, clock: d.Clock, dryRun: b.DryRun,
		nodeLister: d.Nodes.Lister(), synced: d.Nodes.Informer().HasSynced,
		limiter: rate.NewLimiter(rate.Limit(cfg.NodeDeletionRate), 1),
		metrics: newMetrics(d.Registry),
		gone:    map[types.UID]goneAnswers{}, blocked: map[types.UID]string{},
	}
	return c, nil
}

// Run checks every node each --node-monitor-period until ctx ends.
func (c *Controller) Run(ctx context.Context) error {
	return c.Base.Run(ctx, controllerutil.Work{Synced: []cache.InformerSynced{c.synced},
		Start: func(ctx context.Context) error {
			klog.FromContext(ctx).Info("Starting cloud node lifecycle controller", "nodeDeletionRate", c.cfg.NodeDeletionRate,
				"maxUnhealthyNodes", c.cfg.MaxUnhealthyNodes, "dryRun", c.dryRun.Enabled())
			c.monitor = c.Loop("node monitor loop", c.cfg.NodeMonitorPeriod)
			c.Go(func() {
				ticker := c.clock.NewTicker(c.cfg.NodeMonitorPeriod)
				defer ticker.Stop()
				for {
					c.monitor.Turn()
					c.monitorNodes(ctx)
					select {
					case <-ctx.Done():
						return
					case <-ticker.C():
					}
				}
			})
			return nil
		}})
}

// monitorNodes is one pass over every node.
func (c *Controller) monitorNodes(ctx context.Context) {
	logger := klog.FromContext(ctx)
	nodes, err := c.nodeLister.List(labels.Everything())
	if err != nil {
		logger.Error(err, "Listing nodes")
		return
	}
	notReady := 0
	for _, n := range nodes {
		if !kube.NodeReady(n) {
			notReady++
		}
	}
	limit, _ := controllerutil.ParseLimit(c.cfg.MaxUnhealthyNodes, len(nodes))
	guard := notReady > limit
	c.metrics.guardActive.Set(map[bool]float64{true: 1}[guard])
	c.forgetMissing(nodes)
	for _, n := range nodes {
		c.monitor.Progressed() // a pass over many nodes, each asked of the provider, is progress
		if err := c.checkNode(ctx, n, guard, notReady, len(nodes)); err != nil {
			logger.Error(err, "Checking node with the cloud provider; retrying next period", "node", n.Name)
		}
	}
}

func hasShutdownTaint(n *v1.Node) bool { return kube.FindTaint(n, ShutdownTaint) != nil }

// forgetMissing drops the memory of nodes that no longer exist.
func (c *Controller) forgetMissing(nodes []*v1.Node) {
	seen := make(map[types.UID]bool, len(nodes))
	for _, n := range nodes {
		seen[n.UID] = true
	}
	for uid := range c.gone {
		if !seen[uid] {
			delete(c.gone, uid)
		}
	}
	for uid := range c.blocked {
		if !seen[uid] {
			delete(c.blocked, uid)
		}
	}
}

// confirmedGone records one "gone" answer and says whether there have been
// enough of them, for long enough, to delete the node.
func (c *Controller) confirmedGone(n *v1.Node) (bool, goneAnswers) {
	g := c.gone[n.UID]
	if g.count == 0 {
		g.first = c.clock.Now()
	}
	g.count++
	c.gone[n.UID] = g
	return g.count >= c.cfg.DeletionConfirmations && !c.clock.Now().Before(g.first.Add(c.cfg.DeletionDelay)), g
}

// deletingSaid in blocked: DeletingNode was said for the node.
const deletingSaid = "deleting"

// refuse says why a deletion is not made, as an event the first time this
// reason holds for the node.
func (c *Controller) refuse(n *v1.Node, reason, msg string) {
	if c.blocked[n.UID] == reason {
		return
	}
	c.blocked[n.UID] = reason
	c.event(n, v1.EventTypeWarning, EventDeletionBlocked, msg)
}

// ask calls the provider and records the call.
func (c *Controller) ask(question string, f func() (bool, error)) (bool, error) {
	start := c.clock.Now()
	v, err := f()
	c.metrics.callDuration.WithLabelValues(question).Observe(c.clock.Since(start).Seconds())
	result := "ok"
	if err != nil {
		result = "error"
	}
	c.metrics.calls.WithLabelValues(question, result).Inc()
	return v, err
}

func (c *Controller) checkNode(ctx context.Context, n *v1.Node, guard bool, notReady, total int) error {
	if kube.NodeReady(n) {
		delete(c.gone, n.UID)
		delete(c.blocked, n.UID)
		if hasShutdownTaint(n) {
			return c.setShutdownTaint(ctx, n, false)
		}
		return nil
	}
	qctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	// An error or timeout is never an answer: nothing is deleted on it.
	exists, err := c.ask("InstanceExists", func() (bool, error) { return c.instances.InstanceExists(qctx, n) })
	if err != nil {
		return err
	}
	if !exists {
		ok, g := c.confirmedGone(n)
		if !ok {
			klog.FromContext(ctx).V(1).Info("Machine reported gone; waiting for confirmation before deleting the node", "node", n.Name,
				"answers", g.count, "of", c.cfg.DeletionConfirmations, "since", g.first, "delay", c.cfg.DeletionDelay)
			return nil
		}
		return c.deleteNode(ctx, n, guard, notReady, total)
	}
	delete(c.gone, n.UID)
	shutdown, err := c.ask("InstanceShutdown", func() (bool, error) { return c.instances.InstanceShutdown(qctx, n) })
	if err != nil {
		return err
	}
	if shutdown != hasShutdownTaint(n) {
		return c.setShutdownTaint(ctx, n, shutdown)
	}
	return nil
}

func (c *Controller) deleteNode(ctx context.Context, n *v1.Node, guard bool, notReady, total int) error {
	logger := klog.FromContext(ctx)
	if guard {
		c.metrics.blocked.WithLabelValues("incident-guard").Inc()
		msg := fmt.Sprintf("Not deleting node %s although its machine is gone: %d of %d nodes are not Ready (more than --max-unhealthy-nodes=%s)",
			n.Name, notReady, total, c.cfg.MaxUnhealthyNodes)
		logger.Info(msg)
		c.refuse(n, "incident-guard", msg)
		return nil
	}
	if !c.limiter.AllowN(c.clock.Now(), 1) {
		c.metrics.blocked.WithLabelValues("rate-limit").Inc()
		logger.V(2).Info("Node deletion postponed by --node-deletion-rate", "node", n.Name)
		return nil
	}
	msg := fmt.Sprintf("Deleting node %s because it does not exist in the cloud provider", n.Name)
	if c.dryRun.Enabled() {
		c.dryRun.Report(ctx, n, "delete-node", msg)
		return nil
	}
	if c.blocked[n.UID] != deletingSaid {
		// Once: a delete that fails is retried every pass.
		c.blocked[n.UID] = deletingSaid
		c.event(n, v1.EventTypeNormal, EventDeletingNode, msg)
	}
	// Bounded; a delete whose answer is lost is sent again on the retry,
	// where NotFound (it landed) or a UID conflict ends it.
	wctx, cancel := context.WithTimeout(ctx, kube.WriteTimeout)
	err := c.client.CoreV1().Nodes().Delete(wctx, n.Name, metav1.DeleteOptions{Preconditions: metav1.NewUIDPreconditions(string(n.UID))})
	cancel()
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil
	}
	if err != nil && !kube.Answered(err) {
		// No answer: a read says whether it landed (the informer would
		// drop the node before any retry, and the deletion go uncounted).
		rctx, cancel := context.WithTimeout(ctx, kube.WriteTimeout)
		cur, gerr := c.client.CoreV1().Nodes().Get(rctx, n.Name, metav1.GetOptions{})
		cancel()
		if gerr == nil && cur.UID == n.UID && cur.DeletionTimestamp == nil {
			return fmt.Errorf("deleting node %s got no answer and it is still there: %w", n.Name, err)
		}
		if gerr != nil && !apierrors.IsNotFound(gerr) {
			return fmt.Errorf("deleting node %s got no answer, nor did the read to check it: %w", n.Name, errors.Join(err, gerr))
		}
		err = nil // gone (or replaced by a new node of the name): it landed
	}
	if err != nil {
		return fmt.Errorf("deleting node %s: %w", n.Name, err)
	}
	c.metrics.deleted.Inc()
	logger.Info("Deleted node whose machine no longer exists", "node", n.Name)
	return nil
}

func (c *Controller) setShutdownTaint(ctx context.Context, n *v1.Node, on bool) error {
	add, remove, action := []v1.Taint{ShutdownTaint}, []v1.Taint(nil), "added"
	if !on {
		add, remove, action = nil, []v1.Taint{ShutdownTaint}, "removed"
	}
	if c.dryRun.Enabled() {
		c.dryRun.Report(ctx, n, "shutdown-taint-"+action, fmt.Sprintf("node %s: shutdown taint %s", n.Name, action))
		return nil
	}
	// Bounded; the patch carries the taint list it was computed from, so a
	// retry after a lost answer re-reads the node and finds what landed.
	wctx, cancel := context.WithTimeout(ctx, kube.WriteTimeout)
	defer cancel()
	written, err := controllerutil.PatchTaints(wctx, c.client, n.Name, func() (*v1.Node, error) { return n, nil },
		func(*v1.Node) ([]v1.Taint, []v1.Taint) { return add, remove }, c.clock.Now(),
		// No expiry (owner.Lease): the taint states what the provider
		// reports, and the provider's cloud-controller-manager keeps the
		// same taint when this controller does not run.
		func(*v1.Node, v1.Taint) owner.Record {
			return owner.Record{Controller: Name, Why: "the cloud provider reports the machine shut down",
				Until: "the provider reports the machine running (or the Node is deleted with its machine)"}
		})
	if err != nil {
		return err
	}
	if written != nil {
		c.metrics.taints.WithLabelValues(action).Inc()
		klog.FromContext(ctx).Info("Shutdown taint "+action, "node", n.Name)
	}
	return nil
}

func (c *Controller) event(n *v1.Node, typ, reason, msg string) {
	controllerutil.NodeEvent(c.recorder, n, typ, reason, msg)
}
