package fakenode

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	fakecloud "github.com/nodeshepherd/nodeshepherd/pkg/cloudprovider/fake"
)

// Stats counts the API writes of a Manager, for tests and benchmarks.
type Stats struct {
	LeaseRenewals, NodeStatusPosts, PodStatusPosts, PodDeletions, Errors int64
}

// Manager runs the simulated kubelets of one process.
type Manager struct {
	cfg   Config
	nodes map[string]*node // fixed after New
	names []string         // sorted

	podIndexer cache.Indexer
	nodeLister corelisters.NodeLister

	leaseQ  workqueue.TypedDelayingInterface[string]
	statusQ workqueue.TypedDelayingInterface[string]
	podQ    workqueue.TypedRateLimitingInterface[string]

	vols *volumes // nil without a CSI driver

	podsMu sync.Mutex
	pods   map[types.UID]*podState
	// claimWaits is, by pod UID, what a pod's resource claims were last
	// reported (an event) to wait for.
	claimWaits map[string]string

	// repairs carries out the fake cloud's repair requests (repair.go).
	repairs *fakecloud.Carrier

	ready chan struct{}
	stats struct {
		leases, statuses, podPosts, podDeletes, errors atomic.Int64
	}
}

const byNodeIndex = "byNode"

// New validates the configuration and prepares the nodes without touching the API.
func New(cfg Config) (*Manager, error) {
	cfg.Complete()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	m := &Manager{cfg: cfg, nodes: make(map[string]*node, cfg.Nodes), pods: map[types.UID]*podState{}, ready: make(chan struct{})}
	// One list of reported images per group, shared by its nodes.
	images := map[*NodeGroup][]v1.ContainerImage{nil: reportedImages(cfg.Images, cfg.NodeStatusMaxImages)}
	for g := range cfg.Groups {
		merged, err := mergeImages(cfg.Images, cfg.Groups[g].Images)
		if err != nil { // Validate has refused it
			return nil, err
		}
		images[&m.cfg.Groups[g]] = reportedImages(merged, cfg.NodeStatusMaxImages)
	}
	for i := 0; i < cfg.Nodes; i++ {
		name := cfg.nodeName(i)
		zone, group := m.cfg.zoneOf(i), m.cfg.groupOf(i)
		if group != nil {
			zone = group.Zone
		}
		lbls := map[string]string{
			"kubernetes.io/hostname":           name,
			"kubernetes.io/os":                 "linux",
			"kubernetes.io/arch":               "amd64",
			"topology.kubernetes.io/region":    cfg.Region,
			"topology.kubernetes.io/zone":      zone,
			"node.kubernetes.io/instance-type": "fake",
			ManagedLabel:                       "true",
		}
		maps.Copy(lbls, cfg.Labels)
		if group != nil {
			maps.Copy(lbls, group.Labels)
		}
		// Each kubelet's pod status sync has a phase of its own.
		n := &node{name: name, zone: zone, index: i, labels: lbls, ip: nodeIP(i), fullStatus: true, group: group, images: images[group],
			devices: m.cfg.nodeDevices(group), syncBase: cfg.Clock.Now().Add(randDuration(cfg.NodeStatusUpdateFrequency))}
		// Starting this process starts the machines: a Node that exists
		// already gets a new boot ID with the first full status.
		n.newBoot()
		m.nodes[name] = n
		m.names = append(m.names, name)
	}
	sort.Strings(m.names)
	m.repairs = m.newCarrier()
	return m, nil
}

// NodeNames returns the names of the simulated nodes, sorted.
func (m *Manager) NodeNames() []string { return append([]string(nil), m.names...) }

// Zone returns the zone of a simulated node.
func (m *Manager) Zone(name string) string {
	if n := m.nodes[name]; n != nil {
		return n.zone
	}
	return ""
}

// Group returns the name of node name's group ("" without node groups, or
// for an unknown node).
func (m *Manager) Group(name string) string {
	if n := m.nodes[name]; n != nil && n.group != nil {
		return n.group.Name
	}
	return ""
}

// Ready is closed once every node is registered and the workers run.
func (m *Manager) Ready() <-chan struct{} { return m.ready }

// Stats returns the write counters so far.
func (m *Manager) Stats() Stats {
	return Stats{LeaseRenewals: m.stats.leases.Load(), NodeStatusPosts: m.stats.statuses.Load(),
		PodStatusPosts: m.stats.podPosts.Load(), PodDeletions: m.stats.podDeletes.Load(), Errors: m.stats.errors.Load()}
}

// Run registers the nodes and simulates them until ctx ends.
func (m *Manager) Run(ctx context.Context) error {
	logger := klog.FromContext(ctx).WithName("fakenodes")
	ctx = klog.NewContext(ctx, logger)
	c := m.cfg.Client

	m.leaseQ = workqueue.NewTypedDelayingQueueWithConfig(workqueue.TypedDelayingQueueConfig[string]{Name: "fakenode_lease", Clock: m.cfg.Clock})
	m.statusQ = workqueue.NewTypedDelayingQueueWithConfig(workqueue.TypedDelayingQueueConfig[string]{Name: "fakenode_status", Clock: m.cfg.Clock})
	m.podQ = workqueue.NewTypedRateLimitingQueueWithConfig(
		workqueue.NewTypedItemExponentialFailureRateLimiter[string](100*time.Millisecond, 10*time.Second),
		workqueue.TypedRateLimitingQueueConfig[string]{Name: "fakenode_pod", Clock: m.cfg.Clock})
	defer m.leaseQ.ShutDown()
	defer m.statusQ.ShutDown()
	defer m.podQ.ShutDown()

	start := m.cfg.Clock.Now()
	if err := m.ensureDeviceClasses(ctx); err != nil {
		return err
	}
	if err := m.registerAll(ctx); err != nil {
		return err
	}
	logger.Info("Registered fake nodes", "nodes", len(m.names), "after", m.cfg.Clock.Since(start).Round(time.Millisecond))

	// Only pods bound to a node are of interest; the handlers drop pods of nodes
	// this process does not simulate.
	podFactory := informers.NewSharedInformerFactoryWithOptions(c, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermNotEqualSelector("spec.nodeName", "").String()
	}))
	podInformer := podFactory.Core().V1().Pods().Informer()
	if err := podInformer.AddIndexers(cache.Indexers{byNodeIndex: func(obj any) ([]string, error) {
		return []string{obj.(*v1.Pod).Spec.NodeName}, nil
	}}); err != nil {
		return err
	}
	m.podIndexer = podInformer.GetIndexer()
	// The kubelets start once both handlers have seen the first list (the
	// registrations' HasSynced, not the stores'): the pod handler fills each
	// kubelet's pods.
	podReg, err := podInformer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    m.onPod,
		UpdateFunc: func(_, obj any) { m.onPod(obj) },
		DeleteFunc: m.onPodDelete,
	})
	if err != nil {
		return err
	}
	nodeFactory := informers.NewSharedInformerFactoryWithOptions(c, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.LabelSelector = labels.SelectorFromSet(labels.Set{ManagedLabel: "true"}).String()
	}))
	nodeInformer := nodeFactory.Core().V1().Nodes()
	m.nodeLister = nodeInformer.Lister()
	nodeReg, err := nodeInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		UpdateFunc: func(old, obj any) {
			m.onNode(obj.(*v1.Node))
			if m.vols != nil && attachedChanged(old.(*v1.Node), obj.(*v1.Node)) {
				if n := m.nodes[obj.(*v1.Node).Name]; n != nil {
					m.resyncPods(n, false)
				}
			}
		},
		AddFunc: func(obj any) { m.onNode(obj.(*v1.Node)) },
	})
	if err != nil {
		return err
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	volCtx, stopVolumes := context.WithCancel(ctx)
	defer stopVolumes()
	if err := m.startVolumes(volCtx, &wg); err != nil {
		return err
	}
	podFactory.Start(ctx.Done())
	nodeFactory.Start(ctx.Done())
	defer podFactory.Shutdown()
	defer nodeFactory.Shutdown()
	repairsSynced, stopRepairs := m.repairs.Start(ctx)
	defer stopRepairs()
	synced := []cache.InformerSynced{podReg.HasSynced, nodeReg.HasSynced, repairsSynced}
	if m.vols != nil {
		synced = append(synced, m.vols.synced...)
	}
	if !cache.WaitForNamedCacheSync("fakenodes", ctx.Done(), synced...) {
		return ctx.Err()
	}

	// Spread the first heartbeats over one interval, as independent kubelets are.
	for _, name := range m.names {
		m.leaseQ.AddAfter(name, randDuration(m.cfg.LeaseRenewInterval))
		m.statusQ.Add(name)
	}
	run := func(n int, f func(context.Context) bool) {
		for i := 0; i < n; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for f(ctx) {
				}
			}()
		}
	}
	run(m.cfg.Workers, m.processLease)
	run(max(1, m.cfg.Workers/4), m.processStatus)
	run(m.cfg.Workers, m.processPod)
	close(m.ready)
	logger.Info("Fake nodes running", "nodes", len(m.names), "leaseRenewInterval", m.cfg.LeaseRenewInterval,
		"nodeStatusReportFrequency", m.cfg.NodeStatusReportFrequency, "emulateStalePodStatus", m.cfg.EmulateStalePodStatus)
	<-ctx.Done()
	m.leaseQ.ShutDown()
	m.statusQ.ShutDown()
	m.podQ.ShutDown()
	stopVolumes()
	return nil
}

func randDuration(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	return time.Duration(rand.Int64N(int64(d)))
}

// registerAll creates (or adopts) every Node and its Lease, in parallel,
// logging progress for large counts.
func (m *Manager) registerAll(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	var done atomic.Int64
	errs := make([]error, len(m.names))
	step := max(int64(len(m.names)/10), 100)
	workqueue.ParallelizeUntil(ctx, m.cfg.Workers, len(m.names), func(i int) {
		errs[i] = m.register(ctx, m.nodes[m.names[i]])
		if d := done.Add(1); d%step == 0 {
			logger.Info("Registering fake nodes", "done", d, "of", len(m.names))
		}
	})
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return ctx.Err()
}

func (m *Manager) register(ctx context.Context, n *node) error {
	now := metav1.NewTime(m.cfg.Clock.Now())
	obj := m.object(n, now)
	created, err := m.cfg.Client.CoreV1().Nodes().Create(ctx, obj, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		created, err = m.cfg.Client.CoreV1().Nodes().Get(ctx, n.name, metav1.GetOptions{})
	}
	if err != nil {
		return fmt.Errorf("registering node %s: %w", n.name, err)
	}
	n.mu.Lock()
	n.uid = created.UID
	// A new Node (a replaced machine, a new process) reports what a fresh
	// kubelet does: none of the faults' conditions, lasting or not.
	n.conditions, n.lasting = initialConditions(now), nil
	n.podCIDR = created.Spec.PodCIDR
	n.volumesInUse = nil
	n.mu.Unlock()
	if err := m.ensureCSINode(ctx, created); err != nil {
		return err
	}
	if err := m.publishDevices(ctx, created, n); err != nil {
		return err
	}
	if err := m.renewLease(ctx, n); err != nil {
		return err
	}
	if m.cfg.CutOffOnceRegistered {
		n.mu.Lock()
		n.partitioned = true
		n.mu.Unlock()
	}
	return nil
}

// --- leases ---------------------------------------------------------------

func (m *Manager) processLease(ctx context.Context) bool {
	name, quit := m.leaseQ.Get()
	if quit {
		return false
	}
	defer m.leaseQ.Done(name)
	n := m.nodes[name]
	next := wait.Jitter(m.cfg.LeaseRenewInterval, 0.04)
	n.mu.Lock()
	n.lastAttempt = m.cfg.Clock.Now()
	n.mu.Unlock()
	m.reconnect(n)
	if err := m.renewLease(ctx, n); err != nil {
		m.stats.errors.Add(1)
		klog.FromContext(ctx).V(2).Info("Lease renewal failed", "node", name, "err", err)
		// Like the kubelet, retry soon instead of waiting a whole interval.
		next = min(next, time.Second)
	}
	m.leaseQ.AddAfter(name, next)
	return true
}

func (m *Manager) renewLease(ctx context.Context, n *node) error {
	n.mu.Lock()
	if !n.healthy() || n.uid == "" {
		// Down, or a new machine whose Node is not registered yet: a
		// kubelet's Lease is owned by its Node.
		n.mu.Unlock()
		return nil
	}
	lease, uid := n.lease, n.uid
	n.mu.Unlock()
	now := metav1.NewMicroTime(m.cfg.Clock.Now())
	leases := m.cfg.Client.CoordinationV1().Leases(v1.NamespaceNodeLease)
	var out *coordinationv1.Lease
	var err error
	if lease != nil {
		l := lease.DeepCopy()
		l.Spec.RenewTime = &now
		out, err = leases.Update(ctx, l, metav1.UpdateOptions{})
	} else {
		out, err = leases.Get(ctx, n.name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			out, err = leases.Create(ctx, &coordinationv1.Lease{
				ObjectMeta: metav1.ObjectMeta{Name: n.name, Namespace: v1.NamespaceNodeLease,
					OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: n.name, UID: uid}}},
				Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(n.name),
					LeaseDurationSeconds: ptr.To(int32(m.cfg.LeaseDuration.Seconds())), RenewTime: &now},
			}, metav1.CreateOptions{})
		case err == nil:
			out.Spec.RenewTime = &now
			out.Spec.HolderIdentity = ptr.To(n.name)
			out.Spec.LeaseDurationSeconds = ptr.To(int32(m.cfg.LeaseDuration.Seconds()))
			out, err = leases.Update(ctx, out, metav1.UpdateOptions{})
		}
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if err != nil {
		// Conflict or NotFound: read the lease afresh next time.
		n.lease = nil
		return err
	}
	n.lease = out
	m.stats.leases.Add(1)
	return nil
}

// --- node status ----------------------------------------------------------

func (m *Manager) processStatus(ctx context.Context) bool {
	name, quit := m.statusQ.Get()
	if quit {
		return false
	}
	defer m.statusQ.Done(name)
	next := m.cfg.NodeStatusUpdateFrequency
	if err := m.syncStatus(ctx, m.nodes[name]); err != nil {
		m.stats.errors.Add(1)
		klog.FromContext(ctx).V(2).Info("Node status update failed", "node", name, "err", err)
		next = min(next, time.Second)
	}
	m.statusQ.AddAfter(name, next)
	return true
}

// syncStatus posts the node's status when the kubelet's view differs from the
// API server's, when a fault changed it, or when the report frequency has
// passed: the kubelet's rule since NodeLease.
func (m *Manager) syncStatus(ctx context.Context, n *node) error {
	now := metav1.NewTime(m.cfg.Clock.Now())
	var inUse []v1.UniqueVolumeName
	if m.vols != nil {
		inUse = m.volumesInUse(n)
	}
	n.mu.Lock()
	if !n.healthy() {
		n.mu.Unlock()
		return nil
	}
	inUseChanged := m.vols != nil && !slices.Equal(inUse, n.volumesInUse)
	due := n.dirty || n.fullStatus || inUseChanged || now.Sub(n.lastReport) >= m.cfg.NodeStatusReportFrequency
	if !due {
		if apiNode, err := m.nodeLister.Get(n.name); err == nil && n.differsFrom(apiNode.Status.Conditions) {
			due = true
		}
	}
	if !due {
		n.mu.Unlock()
		return nil
	}
	conds := append([]v1.NodeCondition(nil), n.conditions...)
	for i := range conds {
		conds[i].LastHeartbeatTime = now
	}
	// A heartbeat patches only the conditions (merged by type): marshalling a
	// whole NodeStatus would blank node info and daemon endpoints.
	heartbeat := map[string]any{"conditions": conds}
	var status any = heartbeat
	if m.vols != nil {
		heartbeat["volumesInUse"] = inUse
	}
	if n.fullStatus {
		full := m.fullStatus(n, now)
		full.Conditions = conds
		// Empty images are omitted from a NodeStatus; written out (null),
		// they clear what an earlier process reported for an adopted Node.
		status = fullStatusPatch{NodeStatus: full, Images: full.Images}
		if m.vols != nil {
			// An empty volumesInUse is omitted from a NodeStatus; written
			// out, it clears what a previous boot reported.
			var fields map[string]any
			raw, err := json.Marshal(status)
			if err == nil {
				err = json.Unmarshal(raw, &fields)
			}
			if err != nil {
				n.mu.Unlock()
				return err
			}
			fields["volumesInUse"] = inUse
			status = fields
		}
	}
	n.mu.Unlock()
	patch, err := json.Marshal(map[string]any{"status": status})
	if err != nil {
		return err
	}
	if _, err := m.cfg.Client.CoreV1().Nodes().PatchStatus(ctx, n.name, patch); err != nil {
		if apierrors.IsNotFound(err) {
			// The Node was deleted (say, its machine was gone) and the
			// kubelet runs again: it registers anew, as a kubelet does.
			n.mu.Lock()
			n.fullStatus, n.lease = true, nil
			n.mu.Unlock()
			return m.register(ctx, n)
		}
		return err
	}
	m.stats.statuses.Add(1)
	n.mu.Lock()
	n.dirty, n.fullStatus, n.lastReport = false, false, now.Time
	if m.vols != nil {
		n.volumesInUse = inUse
	}
	n.mu.Unlock()
	if inUseChanged {
		// Volumes now reported in use may be mounted: their pods can start.
		m.resyncPods(n, false)
	}
	return nil
}

// fullStatusPatch is a full NodeStatus whose images are written even when
// empty.
type fullStatusPatch struct {
	v1.NodeStatus
	Images []v1.ContainerImage `json:"images"`
}

func (m *Manager) onNode(obj *v1.Node) {
	n := m.nodes[obj.Name]
	if n == nil {
		return
	}
	n.mu.Lock()
	n.podCIDR = obj.Spec.PodCIDR
	n.mu.Unlock()
}
