package fake

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/retry"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
)

// Machines are the machines of one process that carries out the provider's
// repair requests (`nodeshepherd fakenodes`, hollow nodes): how each request
// changes one of them. Carrier does the rest, the same for every kind of
// machine: watching the requests, carrying each out once by ID, the
// replaced Node's objects, and marking requests done.
type Machines interface {
	// HasMachine says whether the node's machine is one of these; the
	// requests for other nodes are another process's.
	HasMachine(node string) bool
	// Reboot turns the node's machine off; it boots again on its own after
	// downtime, with a new boot ID. It returns once the machine is off.
	Reboot(ctx context.Context, node string, downtime time.Duration) error
	// PowerOff shuts the node's machine down for good (until a
	// machine-start): the provider answers InstanceShutdown true.
	PowerOff(ctx context.Context, node string) error
	// DeleteMachine deletes the node's machine (the provider answers that
	// it does not exist) and forgets its Node: nothing of the machine
	// writes to the API server after it returns.
	DeleteMachine(ctx context.Context, node string) error
	// StartReplacement starts a new machine for the node, with a new boot
	// ID, and returns that boot ID once it runs, before it registers.
	StartReplacement(ctx context.Context, node string) (bootID string, err error)
	// WaitRegistered returns once the new machine has registered its Node
	// anew (a new UID), which it does only once it reaches the API server,
	// or when ctx ends.
	WaitRegistered(ctx context.Context, node string) error
}

// How long repairs keep a machine off, unless told otherwise (the fake
// nodes' and the hollow nodes' defaults).
const (
	DefaultRebootDowntime  = 20 * time.Second
	DefaultReplaceDowntime = 30 * time.Second
)

// CarrierOptions are how the fake cloud carries out repair requests.
type CarrierOptions struct {
	Client kubernetes.Interface
	// RebootDowntime is how long a rebooted machine is off; ReplaceDowntime
	// how long a replaced machine's Node is gone before the new machine
	// starts and registers it.
	RebootDowntime, ReplaceDowntime time.Duration
	// Delay is how long the fake cloud takes to start carrying out a
	// request once it sees it (0: at once).
	Delay time.Duration
	// IgnorePowerOff: a power-off request is marked done and nothing
	// happens (a BMC that fails silently): the machine runs on.
	IgnorePowerOff bool
	// Clock times Delay and ReplaceDowntime and stamps requests done (a
	// real clock when nil).
	Clock clock.Clock
}

// Carrier carries out the fake cloud provider's repair requests on one
// process's Machines:
//
//   - reboot: the machine is off for RebootDowntime, then boots again, with
//     a new boot ID;
//   - replace: the machine and its Node go (and its Lease, and the pods bound
//     to it, as kube-controller-manager's pod garbage collector deletes the
//     pods of a deleted Node); after ReplaceDowntime a new machine registers
//     the Node anew: a new UID, a new boot ID, no pods;
//   - poweroff: the machine is shut down and stays off: the provider answers
//     InstanceShutdown true until a machine-start. With IgnorePowerOff the
//     request is marked done and nothing happens: the machine runs on.
//
// Each request is carried out once, by ID, and marked done in the
// ConfigMap, so a request sent again after a lost answer, or seen again by
// a restarted process, is not carried out twice.
//
// Its log lines ("Repair requested", "Rebooting", "Replacement machine
// started", "Machine replaced") go to the logger of the context given to
// Start; the chaos runner's repair truth reads them (test/chaos).
type Carrier struct {
	opts     CarrierOptions
	machines Machines

	mu    sync.Mutex
	doing map[string]string // node -> request ID in progress or done
	// running are the delayed requests and replacements under way.
	running sync.WaitGroup
}

// NewCarrier returns a Carrier of the requests for machines.
func NewCarrier(opts CarrierOptions, machines Machines) *Carrier {
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	return &Carrier{opts: opts, machines: machines, doing: map[string]string{}}
}

// Start watches the requests ConfigMap until ctx ends; it returns the
// handler's HasSynced (it has read the requests), and a stop that ends the watch and waits for the
// repairs under way (which end with ctx).
func (c *Carrier) Start(ctx context.Context) (cache.InformerSynced, func()) {
	f := informers.NewSharedInformerFactoryWithOptions(c.opts.Client, 0, informers.WithNamespace(ConfigMapNamespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", RequestsConfigMapName).String()
		}))
	inf := f.Core().V1().ConfigMaps().Informer()
	reg, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { c.OnRequests(ctx, obj.(*v1.ConfigMap)) },
		UpdateFunc: func(_, obj any) { c.OnRequests(ctx, obj.(*v1.ConfigMap)) },
	})
	if err != nil { // only an informer already stopped refuses a handler
		panic(fmt.Sprintf("fake cloud: watching the requests ConfigMap: %v", err))
	}
	f.Start(ctx.Done())
	return reg.HasSynced, func() {
		f.Shutdown()
		c.Wait()
	}
}

// Wait returns once the delayed requests and the replacements under way
// have ended.
func (c *Carrier) Wait() { c.running.Wait() }

// OnRequests takes the requests ConfigMap as seen (Start calls it on each
// version): each request for one of the machines that is not done and not
// under way yet is carried out.
func (c *Carrier) OnRequests(ctx context.Context, cm *v1.ConfigMap) {
	logger := klog.FromContext(ctx)
	for name, s := range cm.Data {
		if !c.machines.HasMachine(name) {
			continue // another process's machine
		}
		r, err := ParseRequest(s)
		if err != nil {
			logger.Error(err, "Ignoring a repair request", "node", name)
			continue
		}
		if !c.take(name, r) {
			continue
		}
		rv := cm.ResourceVersion
		if d := c.opts.Delay; d > 0 {
			c.running.Go(func() {
				select {
				case <-ctx.Done():
					return
				case <-c.opts.Clock.After(d):
				}
				c.carryOut(ctx, name, r, rv)
			})
			continue
		}
		c.carryOut(ctx, name, r, rv)
	}
}

// take says whether request r for node is to be carried out now: not done,
// and not under way or carried out by this process already.
func (c *Carrier) take(node string, r Request) bool {
	if r.Done != nil {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.doing[node] == r.ID {
		return false
	}
	c.doing[node] = r.ID
	return true
}

// carryOut starts one repair request on node's machine; rv is the
// resourceVersion of the ConfigMap that carried the request.
func (c *Carrier) carryOut(ctx context.Context, node string, r Request, rv string) {
	logger := klog.FromContext(ctx)
	// resourceVersion: the ConfigMap's, for whoever orders the request
	// among the cluster's writes (the chaos checker's budgets rule). Said
	// when the machine is about to change, after any Delay.
	logger.Info("Repair requested", "node", node, "action", r.Action, "request", r.ID, "resourceVersion", rv)
	switch r.Action {
	case ActionReboot:
		if err := c.machines.Reboot(ctx, node, c.opts.RebootDowntime); err != nil {
			logger.Error(err, "Rebooting", "node", node)
		}
		c.markDone(ctx, node, r)
	case ActionReplace:
		c.running.Go(func() { c.replace(ctx, node, r) })
	case ActionPowerOff:
		if !c.opts.IgnorePowerOff {
			if err := c.machines.PowerOff(ctx, node); err != nil {
				logger.Error(err, "Powering off", "node", node)
			}
		}
		c.markDone(ctx, node, r)
	}
}

// replace deletes the machine and its Node, and starts a new machine after
// ReplaceDowntime; the request is done once the new machine has registered
// its Node.
func (c *Carrier) replace(ctx context.Context, node string, r Request) {
	logger := klog.FromContext(ctx)
	if err := c.machines.DeleteMachine(ctx, node); err != nil {
		logger.Error(err, "Deleting the replaced machine", "node", node)
	}
	DeleteNodeObjects(ctx, c.opts.Client, node)
	select {
	case <-ctx.Done():
		return
	case <-c.opts.Clock.After(c.opts.ReplaceDowntime):
	}
	// The new machine is running before it registers, so that the Node's
	// first Lease and status come from it.
	boot, err := c.machines.StartReplacement(ctx, node)
	if err != nil {
		logger.Error(err, "Starting the replacement machine", "node", node)
	}
	logger.Info("Replacement machine started", "node", node, "bootID", boot)
	if err := c.machines.WaitRegistered(ctx, node); err != nil {
		logger.Error(err, "Registering the new machine's Node", "node", node)
	}
	if ctx.Err() != nil {
		return
	}
	logger.Info("Machine replaced", "node", node, "bootID", boot)
	c.markDone(ctx, node, r)
}

// DeleteNodeObjects deletes what the API server holds of a node whose
// machine is gone for good: its Node, its Lease and the pods bound to it
// (at once, as kube-controller-manager's pod garbage collector deletes the
// pods of a deleted Node). Errors are logged: a replacement goes on.
func DeleteNodeObjects(ctx context.Context, client kubernetes.Interface, node string) {
	logger := klog.FromContext(ctx)
	if err := client.CoreV1().Nodes().Delete(ctx, node, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		logger.Error(err, "Deleting the replaced machine's Node", "node", node)
	}
	if err := client.CoordinationV1().Leases(v1.NamespaceNodeLease).Delete(ctx, node, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		logger.Error(err, "Deleting the replaced machine's Lease", "node", node)
	}
	pods, err := client.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("spec.nodeName", node).String()})
	if err != nil {
		logger.Error(err, "Listing the replaced machine's pods", "node", node)
		return
	}
	del := metav1.DeleteOptions{GracePeriodSeconds: ptr.To(int64(0))}
	for _, p := range pods.Items {
		if err := client.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, del); err != nil && !apierrors.IsNotFound(err) {
			logger.Error(err, "Deleting a pod of the replaced machine", "pod", klog.KObj(&p))
		}
	}
}

// markDone marks the request done in the ConfigMap, unless another has
// replaced it meanwhile.
func (c *Carrier) markDone(ctx context.Context, node string, r Request) {
	cms := c.opts.Client.CoreV1().ConfigMaps(ConfigMapNamespace)
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cm, err := cms.Get(ctx, RequestsConfigMapName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if cur, err := ParseRequest(cm.Data[node]); err != nil || cur.ID != r.ID {
			return nil
		}
		done := c.opts.Clock.Now().UTC()
		r.Done = &done
		b, _ := json.Marshal(r)
		patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"resourceVersion": cm.ResourceVersion},
			"data": map[string]string{node: string(b)}})
		_, err = cms.Patch(ctx, RequestsConfigMapName, types.MergePatchType, patch, metav1.PatchOptions{})
		return err
	})
	if err != nil {
		klog.FromContext(ctx).Error(err, "Marking a repair request done", "node", node, "request", r.ID)
	}
}
