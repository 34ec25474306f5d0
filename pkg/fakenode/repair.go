package fakenode

import (
	"context"
	"encoding/json"
	"sync"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/retry"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	fakecloud "github.com/nodeshepherd/nodeshepherd/pkg/cloudprovider/fake"
)

// Repairs carries out the fake cloud provider's repair requests
// (cloudprovider/fake, nscloud.Repairer) on this process's machines:
//
//   - reboot: the machine is off for RebootDowntime, then boots again, with
//     a new boot ID (as the fault machine-shutdown with that duration);
//   - replace: the machine and its Node go (and its Lease, and the pods bound
//     to it, as kube-controller-manager's pod garbage collector deletes the
//     pods of a deleted Node); after ReplaceDowntime a new machine registers
//     the Node anew: a new UID, a new boot ID, no pods;
//   - poweroff: the machine is shut down and stays off (the fault
//     machine-shutdown without a duration): the fake cloud provider answers
//     InstanceShutdown true until a machine-start. With IgnorePowerOff the
//     request is marked done and nothing happens: the machine runs on.
//
// Each request is carried out once, by ID, and marked done in the
// ConfigMap, so a request sent again after a lost answer, or seen again by
// a restarted process, is not carried out twice.
type repairs struct {
	mu    sync.Mutex
	doing map[string]string // node -> request ID in progress or done
	// running are the replacements under way; Run waits for them.
	running sync.WaitGroup
}

// startRepairs watches the requests ConfigMap; it returns its informer's
// HasSynced.
func (m *Manager) startRepairs(ctx context.Context) (cache.InformerSynced, func()) {
	f := informers.NewSharedInformerFactoryWithOptions(m.cfg.Client, 0, informers.WithNamespace(fakecloud.ConfigMapNamespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", fakecloud.RequestsConfigMapName).String()
		}))
	inf := f.Core().V1().ConfigMaps().Informer()
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { m.onRepairs(ctx, obj.(*v1.ConfigMap)) },
		UpdateFunc: func(_, obj any) { m.onRepairs(ctx, obj.(*v1.ConfigMap)) },
	})
	f.Start(ctx.Done())
	return inf.HasSynced, func() {
		f.Shutdown()
		m.repairs.running.Wait()
	}
}

func (m *Manager) onRepairs(ctx context.Context, cm *v1.ConfigMap) {
	logger := klog.FromContext(ctx)
	for name, s := range cm.Data {
		n := m.nodes[name]
		if n == nil {
			continue // another process's machine
		}
		r, err := fakecloud.ParseRequest(s)
		if err != nil {
			logger.Error(err, "Ignoring a repair request", "node", name)
			continue
		}
		if r.Done != nil {
			continue
		}
		m.repairs.mu.Lock()
		if m.repairs.doing == nil {
			m.repairs.doing = map[string]string{}
		}
		busy := m.repairs.doing[name] == r.ID
		m.repairs.doing[name] = r.ID
		m.repairs.mu.Unlock()
		if busy {
			continue
		}
		rv := cm.ResourceVersion
		if d := m.cfg.RepairDelay; d > 0 {
			m.repairs.running.Go(func() {
				select {
				case <-ctx.Done():
					return
				case <-m.cfg.Clock.After(d):
				}
				m.carryOut(ctx, n, r, rv)
			})
			continue
		}
		m.carryOut(ctx, n, r, rv)
	}
}

// carryOut starts one repair request on node n's machine; rv is the
// resourceVersion of the ConfigMap that carried the request.
func (m *Manager) carryOut(ctx context.Context, n *node, r fakecloud.Request, rv string) {
	logger := klog.FromContext(ctx)
	name := n.name
	// resourceVersion: the ConfigMap's, for whoever orders the request
	// among the cluster's writes (the chaos checker's budgets rule). Said
	// when the machine is about to change, after any RepairDelay.
	logger.Info("Repair requested", "node", name, "action", r.Action, "request", r.ID, "resourceVersion", rv)
	switch r.Action {
	case fakecloud.ActionReboot:
		if _, err := m.Apply(ctx, Fault{Action: MachineShutdown, Target: Target{Nodes: []string{name}}, Duration: m.cfg.RebootDowntime}); err != nil {
			logger.Error(err, "Rebooting", "node", name)
		}
		m.repairDone(ctx, name, r)
	case fakecloud.ActionReplace:
		m.repairs.running.Go(func() { m.replace(ctx, n, r) })
	case fakecloud.ActionPowerOff:
		if !m.cfg.IgnorePowerOff {
			if _, err := m.Apply(ctx, Fault{Action: MachineShutdown, Target: Target{Nodes: []string{name}}}); err != nil {
				logger.Error(err, "Powering off", "node", name)
			}
		}
		m.repairDone(ctx, name, r)
	}
}

// replace deletes the machine and its Node, and registers a new one after
// ReplaceDowntime.
func (m *Manager) replace(ctx context.Context, n *node, r fakecloud.Request) {
	logger := klog.FromContext(ctx)
	m.applyTo(n, MachineDelete, nil)
	if err := m.publishMachines(ctx); err != nil {
		logger.Error(err, "Publishing machine states")
	}
	c := m.cfg.Client
	del := metav1.DeleteOptions{GracePeriodSeconds: ptr.To(int64(0))}
	if err := c.CoreV1().Nodes().Delete(ctx, n.name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		logger.Error(err, "Deleting the replaced machine's Node", "node", n.name)
	}
	if err := c.CoordinationV1().Leases(v1.NamespaceNodeLease).Delete(ctx, n.name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		logger.Error(err, "Deleting the replaced machine's Lease", "node", n.name)
	}
	pods, err := c.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("spec.nodeName", n.name).String()})
	if err != nil {
		logger.Error(err, "Listing the replaced machine's pods", "node", n.name)
	} else {
		for _, p := range pods.Items {
			if err := c.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, del); err != nil && !apierrors.IsNotFound(err) {
				logger.Error(err, "Deleting a pod of the replaced machine", "pod", klog.KObj(&p))
			}
		}
	}
	// The old Node's UID goes with it: until the new machine has registered
	// its Node, it renews no Lease (one owned by the old Node would be
	// garbage-collected under it).
	n.mu.Lock()
	n.lease, n.uid = nil, ""
	n.mu.Unlock()
	select {
	case <-ctx.Done():
		return
	case <-m.cfg.Clock.After(m.cfg.ReplaceDowntime):
	}
	// The new machine is running before it registers, so that the Node's
	// first Lease and status come from it.
	m.applyTo(n, MachineStart, nil)
	if err := m.publishMachines(ctx); err != nil {
		logger.Error(err, "Publishing machine states")
	}
	logger.Info("Replacement machine started", "node", n.name, "bootID", n.bootID())
	// A new machine registers its Node only once it reaches the API server:
	// one whose node is partitioned (its zone cut off, say) stays unknown
	// to the cluster until the partition heals, like any kubelet.
	for waited := false; ; waited = true {
		n.mu.Lock()
		if n.healthy() {
			n.fullStatus = true
			n.mu.Unlock()
			break
		}
		ch := make(chan struct{})
		n.reachable = ch
		n.mu.Unlock()
		if !waited {
			logger.Info("Replacement machine cannot reach the API server: registering its Node once it can", "node", n.name)
		}
		select {
		case <-ctx.Done():
			return
		case <-ch:
		}
	}
	if err := m.register(ctx, n); err != nil {
		logger.Error(err, "Registering the new machine's Node", "node", n.name)
	}
	m.statusQ.Add(n.name)
	logger.Info("Machine replaced", "node", n.name, "bootID", n.bootID())
	m.repairDone(ctx, n.name, r)
}

// repairDone marks the request done in the ConfigMap, unless another has
// replaced it meanwhile.
func (m *Manager) repairDone(ctx context.Context, name string, r fakecloud.Request) {
	cms := m.cfg.Client.CoreV1().ConfigMaps(fakecloud.ConfigMapNamespace)
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cm, err := cms.Get(ctx, fakecloud.RequestsConfigMapName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if cur, err := fakecloud.ParseRequest(cm.Data[name]); err != nil || cur.ID != r.ID {
			return nil
		}
		done := m.cfg.Clock.Now().UTC()
		r.Done = &done
		b, _ := json.Marshal(r)
		patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"resourceVersion": cm.ResourceVersion},
			"data": map[string]string{name: string(b)}})
		_, err = cms.Patch(ctx, fakecloud.RequestsConfigMapName, types.MergePatchType, patch, metav1.PatchOptions{})
		return err
	})
	if err != nil {
		klog.FromContext(ctx).Error(err, "Marking a repair request done", "node", name, "request", r.ID)
	}
}
