// Package scheduler is nodeshepherd's pod scheduler: a priority queue with
// backoff and an unschedulable pool, node filtering and scoring with
// kube-scheduler's default rules, binding through pods/binding, and
// preemption with kube-scheduler 1.37's DefaultPreemption semantics
// (eligibility, candidate sampling, PDB-aware victim selection, node choice,
// nominations). It schedules the pods whose spec.schedulerName is its name.
package scheduler

import (
	"context"
	"fmt"
	"math/rand"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	appsinformers "k8s.io/client-go/informers/apps/v1"
	coreinformers "k8s.io/client-go/informers/core/v1"
	policyinformers "k8s.io/client-go/informers/policy/v1"
	resourceinformers "k8s.io/client-go/informers/resource/v1"
	storageinformers "k8s.io/client-go/informers/storage/v1"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	policylisters "k8s.io/client-go/listers/policy/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/dynamic-resource-allocation/resourceclaim"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/nodeshepherd/nodeshepherd/pkg/controllerutil"
	"github.com/nodeshepherd/nodeshepherd/pkg/kube"
)

// Name is the controller's name in --controllers.
const Name = "scheduler"

// Deps are the scheduler's collaborators.
type Deps struct {
	Client   kubernetes.Interface
	Nodes    coreinformers.NodeInformer
	Pods     coreinformers.PodInformer
	PDBs     policyinformers.PodDisruptionBudgetInformer
	Recorder record.EventRecorder
	Registry prometheus.Registerer
	Clock    clock.WithTickerAndDelayedExecution
	DryRun   bool
	// ProgressTimeout bounds a step (controllerutil.DefaultProgressTimeout when zero).
	ProgressTimeout time.Duration
	// Rand seeds tie-breaking and the preemption offset; tests fix it.
	Rand *rand.Rand

	// Services and the controllers give pods without spread constraints
	// the selector of the default constraints; nil ones are not consulted.
	Services               coreinformers.ServiceInformer
	ReplicationControllers coreinformers.ReplicationControllerInformer
	ReplicaSets            appsinformers.ReplicaSetInformer
	StatefulSets           appsinformers.StatefulSetInformer
	// Namespaces resolves pod affinity's namespaceSelector; optional.
	Namespaces coreinformers.NamespaceInformer

	// Storage objects for volume scheduling (kube-scheduler's
	// VolumeBinding, VolumeZone, VolumeRestrictions and NodeVolumeLimits).
	// Without PersistentVolumeClaims, pods using claims are refused; with
	// it, the others are required too.
	PersistentVolumeClaims coreinformers.PersistentVolumeClaimInformer
	PersistentVolumes      coreinformers.PersistentVolumeInformer
	StorageClasses         storageinformers.StorageClassInformer
	CSINodes               storageinformers.CSINodeInformer
	CSIDrivers             storageinformers.CSIDriverInformer
	CSIStorageCapacities   storageinformers.CSIStorageCapacityInformer
	VolumeAttachments      storageinformers.VolumeAttachmentInformer

	// Resource objects for Dynamic Resource Allocation (kube-scheduler's
	// DynamicResources). Without ResourceClaims, pods with resource claims
	// are refused; with it, ResourceSlices and DeviceClasses are required
	// too. DeviceTaintRules is optional: without it their taints are not
	// seen.
	ResourceClaims   resourceinformers.ResourceClaimInformer
	ResourceSlices   resourceinformers.ResourceSliceInformer
	DeviceClasses    resourceinformers.DeviceClassInformer
	DeviceTaintRules resourceinformers.DeviceTaintRuleInformer
}

// Scheduler is the controller.
type Scheduler struct {
	*controllerutil.Base
	cfg       Config
	client    kubernetes.Interface
	recorder  record.EventRecorder
	clock     clock.WithTickerAndDelayedExecution
	dryRun    *controllerutil.DryRun
	metrics   *metrics
	queue     *schedulingQueue
	cache     *cache
	pdbLister policylisters.PodDisruptionBudgetLister
	spread    *spreadEnv
	nsLister  corelisters.NamespaceLister
	synced    []toolscache.InformerSynced
	// volumes is nil when the storage informers were not given.
	volumes *volumeEnv
	// dra is nil when the resource informers were not given.
	dra *draEnv

	// rand and nextStart are used by the scheduling loop only.
	rand      *rand.Rand
	nextStart int

	// fit is NodeResourcesFit's configuration.
	fit *fitArgs
	// filterResults and filterDone are findNode's per-node buffers.
	filterResults []status
	filterDone    []bool
	feasibleBuf   []*nodeInfo
	rawBuf        []rawScore
	// preempting holds preemptors whose victims are being deleted.
	preemptMu  sync.Mutex
	preempting map[types.UID]*inflightPreemption
	// wg tracks binding and preemption goroutines.
	wg sync.WaitGroup
}

// New builds the scheduler and registers its informer handlers.
func New(cfg Config, d Deps) (*Scheduler, error) {
	b, err := controllerutil.NewBase(controllerutil.Setup{Name: Name, Validate: cfg.Validate, DryRun: d.DryRun,
		Registry: d.Registry, Recorder: d.Recorder, ProgressTimeout: d.ProgressTimeout}, &d.Clock)
	if err != nil {
		return nil, err
	}
	defaults, err := parseSpreadDefaults(cfg.DefaultPodTopologySpread)
	if err != nil {
		return nil, err
	}
	fit, err := cfg.fitArgs()
	if err != nil {
		return nil, err
	}
	if d.Rand == nil {
		d.Rand = rand.New(rand.NewSource(d.Clock.Now().UnixNano()))
	}
	s := &Scheduler{
		Base: b, cfg: cfg, client: d.Client, recorder: d.Recorder, clock: d.Clock,
		dryRun:  b.DryRun,
		metrics: newMetrics(d.Registry, cfg.SchedulerName),
		queue: newSchedulingQueue(queueConfig{InitialBackoff: cfg.PodInitialBackoff, MaxBackoff: cfg.PodMaxBackoff,
			MaxUnschedulable: cfg.PodMaxInUnschedulablePods}, d.Clock),
		cache:      newCache(),
		pdbLister:  d.PDBs.Lister(),
		rand:       d.Rand,
		preempting: map[types.UID]*inflightPreemption{},
	}
	s.spread = &spreadEnv{defaults: defaults}
	s.fit = fit
	if d.Services != nil {
		s.spread.services = d.Services.Lister()
		s.synced = append(s.synced, d.Services.Informer().HasSynced)
	}
	if d.ReplicationControllers != nil {
		s.spread.rcs = d.ReplicationControllers.Lister()
		s.synced = append(s.synced, d.ReplicationControllers.Informer().HasSynced)
	}
	if d.ReplicaSets != nil {
		s.spread.rss = d.ReplicaSets.Lister()
		s.synced = append(s.synced, d.ReplicaSets.Informer().HasSynced)
	}
	if d.StatefulSets != nil {
		s.spread.sss = d.StatefulSets.Lister()
		s.synced = append(s.synced, d.StatefulSets.Informer().HasSynced)
	}
	s.queue.onMove = func(event, queue string) { s.metrics.incoming.WithLabelValues(queue, event).Inc() }
	// The node and pod handlers fill the cache the scheduler judges from:
	// it starts once they have seen every object of the first list (their
	// registrations' HasSynced), not when the informers' stores have. A
	// scheduler that started on a synced store whose handler lagged (a busy
	// machine) saw a pending pod before the pods already on its node, and
	// bound it without preempting them (TestRunPreemptsTheLowestPriorityVictim
	// failed so beside make test-unit).
	nodeReg, err := d.Nodes.Informer().AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			s.cache.setNode(obj.(*v1.Node))
			s.queue.MoveAll("NodeAdd", nil)
		},
		UpdateFunc: func(oldObj, newObj any) { s.onNodeUpdate(oldObj.(*v1.Node), newObj.(*v1.Node)) },
		DeleteFunc: func(obj any) {
			if n, ok := kube.Untombstone(obj).(*v1.Node); ok {
				s.cache.removeNode(n.Name)
			}
		},
	})
	if err != nil {
		return nil, err
	}
	podReg, err := d.Pods.Informer().AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { s.onPod(nil, obj.(*v1.Pod)) },
		UpdateFunc: func(oldObj, newObj any) { s.onPod(oldObj.(*v1.Pod), newObj.(*v1.Pod)) },
		DeleteFunc: func(obj any) {
			if p, ok := kube.Untombstone(obj).(*v1.Pod); ok {
				s.onPodDelete(p)
			}
		},
	})
	if err != nil {
		return nil, err
	}
	s.synced = append(s.synced, nodeReg.HasSynced, podReg.HasSynced, d.PDBs.Informer().HasSynced)
	if d.Namespaces != nil {
		s.nsLister = d.Namespaces.Lister()
		s.synced = append(s.synced, d.Namespaces.Informer().HasSynced)
	}
	if err := s.watchStorage(d); err != nil {
		return nil, err
	}
	if err := s.watchDRA(d); err != nil {
		return nil, err
	}
	return s, nil
}

// onNodeUpdate records a changed node and wakes the pods its change may help.
func (s *Scheduler) onNodeUpdate(old, node *v1.Node) {
	s.cache.setNode(node)
	switch {
	case nodeChangeMayHelp(old, node):
		s.queue.MoveAll("NodeUpdate", nil)
	case !slices.Equal(old.Status.DeclaredFeatures, node.Status.DeclaredFeatures):
		// Only NodeDeclaredFeatures' rejections may change.
		s.queue.MoveAll("NodeUpdate", func(p *queuedPod) bool { return p.featuresBound })
	}
}

// nodeChangeMayHelp is true for changes that can make a pod fit: capacity,
// labels, taints, cordon. Heartbeats do not wake the unschedulable pool.
func nodeChangeMayHelp(old, n *v1.Node) bool {
	return !equality.Semantic.DeepEqual(old.Status.Allocatable, n.Status.Allocatable) ||
		!equality.Semantic.DeepEqual(old.Labels, n.Labels) ||
		!equality.Semantic.DeepEqual(old.Spec.Taints, n.Spec.Taints) ||
		old.Spec.Unschedulable != n.Spec.Unschedulable
}

func terminal(p *v1.Pod) bool {
	return p.Status.Phase == v1.PodSucceeded || p.Status.Phase == v1.PodFailed
}

func (s *Scheduler) onPod(old, pod *v1.Pod) {
	if pod.Spec.NodeName != "" {
		if old != nil && old.Spec.NodeName == "" {
			s.queue.Delete(pod.UID)
			s.preemptMu.Lock()
			delete(s.preempting, pod.UID)
			s.preemptMu.Unlock()
		}
		if terminal(pod) {
			s.onPodDelete(pod)
			return
		}
		prev, cur := s.cache.setPod(pod)
		if prev != nil && shrunk(nil, &prev.request, &cur.request) {
			s.wakeOnShrink(pod.Spec.NodeName, prev, cur)
		}
		s.wakeSpreadBlocked(old, pod)
		if old == nil || old.Spec.NodeName == "" {
			s.queue.MoveAffinityBound("AssignedPodAdd")
		} else if !equality.Semantic.DeepEqual(old.Labels, pod.Labels) {
			s.queue.MoveAffinityBound("AssignedPodUpdate")
		}
		return
	}
	if pod.Spec.SchedulerName != s.cfg.SchedulerName {
		return
	}
	if pod.DeletionTimestamp != nil {
		s.queue.Delete(pod.UID)
		s.cache.unnominate(pod.UID)
		return
	}
	if s.cache.isAssigned(pod.UID) {
		return // assumed; the binding is in flight
	}
	if old == nil || old.Status.NominatedNodeName != pod.Status.NominatedNodeName {
		// Restores nominations after a restart; our own in-memory
		// nomination is not undone by an older copy of the pod.
		s.cache.nominate(newPodInfo(pod), pod.Status.NominatedNodeName)
	}
	if old == nil || !s.queue.Update(old, pod) {
		s.queue.Add(pod)
	}
	if old != nil && !resourceclaim.PodStatusEqual(old.Status.ResourceClaimStatuses, pod.Status.ResourceClaimStatuses) {
		// The ResourceClaim controller named the claims it made from the
		// pod's templates: the pod waited for them.
		s.queue.MoveAll("PodGeneratedResourceClaim", func(p *queuedPod) bool { return p.info.pod.UID == pod.UID })
	}
}

func (s *Scheduler) onPodDelete(pod *v1.Pod) {
	if pod.Spec.NodeName == "" {
		s.queue.Delete(pod.UID)
		s.cache.unnominate(pod.UID)
		s.cache.removePod(pod.UID) // it may be assumed, its binding in flight
		return
	}
	s.cache.removePod(pod.UID)
	node := pod.Spec.NodeName
	// Room freed on a node helps pods nominated there, and pods that are not
	// nominated anywhere and that some node rejected for lack of room.
	s.queue.MoveAllSkipping("AssignedPodDelete", func(p *queuedPod) bool {
		return p.nominated == node || (p.nominated == "" && p.resourceBound)
	}, func(p *queuedPod) bool { return p.nominated == node })
	s.queue.MoveAffinityBound("AssignedPodDelete")
}

// wakeOnShrink wakes, when an assigned pod's counted requests went down (an
// in-place resize the kubelet allocated), the pods that lack room for a
// resource it freed: those nominated to its node and those nominated
// nowhere that some node rejected for lack of room, as kube-scheduler's
// NodeResourcesFit does on UpdatePodScaleDown.
func (s *Scheduler) wakeOnShrink(node string, prev, cur *podInfo) {
	s.queue.MoveAll("AssignedPodUpdate", func(p *queuedPod) bool {
		return (p.nominated == node || (p.nominated == "" && p.resourceBound)) && shrunk(&p.info.request, &prev.request, &cur.request)
	})
}

// Run schedules until ctx ends, one pod at a time; bindings and
// preemptions in flight finish before it returns.
func (s *Scheduler) Run(ctx context.Context) error {
	return s.Base.Run(ctx, controllerutil.Work{Synced: s.synced,
		Start: func(ctx context.Context) error {
			klog.FromContext(ctx).Info("Scheduling", "schedulerName", s.cfg.SchedulerName, "dryRun", s.dryRun.Enabled())
			s.Every(ctx, "queue flush loop", time.Second, s.flush)
			s.Go(func() {
				for {
					p, cycle, ok := s.queue.Pop(ctx)
					if !ok {
						return
					}
					end := s.Begin("scheduling pod " + p.info.pod.Namespace + "/" + p.info.pod.Name)
					s.scheduleOne(ctx, p, cycle)
					end()
				}
			})
			return nil
		},
		Stop: s.wg.Wait})
}

// flush moves the pods whose backoff ended and those the unschedulable
// pool held too long back to the active queue, and reports the pending pods.
func (s *Scheduler) flush(context.Context) {
	s.queue.flush()
	for q, n := range s.queue.Lens() {
		s.metrics.pending.WithLabelValues(q).Set(float64(n))
	}
}

// scheduleOne runs one scheduling cycle for p.
func (s *Scheduler) scheduleOne(ctx context.Context, p *queuedPod, cycle int64) {
	logger := klog.FromContext(ctx)
	pod := p.info.pod
	start := s.clock.Now()
	if s.cache.isBound(pod.UID) {
		s.queue.Done(pod.UID) // bound meanwhile (a binding that reported an error had landed)
		return
	}
	if s.holdWhilePreempting(pod) {
		p.nominated = s.cache.nominatedNode(pod)
		s.queue.Requeue(p, cycle, false)
		return
	}
	refused := unsupported(pod, s.volumes != nil, s.dra != nil)
	if refused == "" {
		refused = s.volumes.unsupportedVolumes(pod)
	}
	if refused == "" {
		refused = s.dra.extendedResourceRefusal(p.info)
	}
	if refused != "" {
		s.refuse(ctx, p, cycle, reasonSchedulerError, refused, start)
		return
	}
	if msg := s.dra.preEnqueue(pod); msg != "" {
		// DynamicResources' PreEnqueue: kube-scheduler does not try the
		// pod, nor write anything, until its claims are there.
		logger.V(3).Info("Waiting for the pod's resource claims", "pod", klog.KObj(pod), "reason", msg)
		p.nominated = s.cache.nominatedNode(pod)
		s.queue.Gate(p, cycle)
		return
	}
	q, err := newPodQuery(p.info)
	if err != nil {
		s.refuse(ctx, p, cycle, v1.PodReasonUnschedulable, "pod "+pod.Namespace+"/"+pod.Name+" cannot be scheduled: "+err.Error(), start)
		return
	}
	q.fit = s.fit
	// DynamicResources' PreFilter reads the resource listers only: it runs
	// before the cache's lock is taken.
	dra, draMsg, err := s.dra.prefilter(ctx, pod)
	if refusal, ok := err.(*draRefusal); ok {
		s.refuse(ctx, p, cycle, reasonSchedulerError, refusal.msg, start)
		return
	}
	if err != nil {
		logger.Error(err, "Reading the pod's resource claims failed; retrying with backoff", "pod", klog.KObj(pod))
		s.metrics.attempts.WithLabelValues("error", s.cfg.SchedulerName).Inc()
		p.nominated = s.cache.nominatedNode(pod)
		s.queue.Requeue(p, cycle, true)
		return
	}
	q.dra = dra
	s.cache.mu.RLock()
	var node, preMsg string
	var statuses map[string]status
	numNodes := len(s.cache.list)
	if numNodes > 0 {
		if preMsg = q.prefilterNamed(); preMsg == "" {
			q.volumes, preMsg = s.volumes.prefilter(pod, s.cache)
		}
		if preMsg == "" {
			preMsg = draMsg
		}
	}
	if preMsg != "" {
		// A PreFilter rejection holds on every node, and preemption cannot
		// help.
		statuses = make(map[string]status, numNodes)
		for _, ni := range s.cache.list {
			statuses[ni.name()] = reject(unresolvable, preMsg)
		}
	} else {
		q.interPod = newAffinityState(s.cache, p.info, s.nsLister)
		node, statuses, numNodes = s.findNode(ctx, q)
	}
	var chosen *v1.Node
	if node != "" {
		chosen = s.cache.nodes[node].node
	}
	var out preemptOutcome
	if node == "" && numNodes > 0 {
		evalStart := s.clock.Now()
		s.metrics.preemptionAttempts.Inc()
		pdbs, _ := s.pdbLister.List(labels.Everything())
		pr := &preemptor{cfg: preemptionConfig{MinCandidateNodesPercentage: s.cfg.MinCandidateNodesPercentage,
			MinCandidateNodesAbsolute: s.cfg.MinCandidateNodesAbsolute, Parallelism: s.cfg.Parallelism},
			c: s.cache, pdbs: pdbs, rand: s.rand, now: evalStart}
		s.logNominatedNode(ctx, pod)
		out = pr.preempt(ctx, q, statuses, numNodes)
		s.metrics.preemptionEval.Observe(s.clock.Since(evalStart).Seconds())
	}
	s.cache.mu.RUnlock()

	if node != "" {
		vb, err := q.volumes.reserve(chosen)
		if err != nil {
			// The volumes chosen a moment ago are gone: try again later.
			logger.V(2).Info("Reserving volumes failed; retrying with backoff", "pod", klog.KObj(pod), "node", node, "err", err)
			s.metrics.attempts.WithLabelValues("error", s.cfg.SchedulerName).Inc()
			p.nominated = s.cache.nominatedNode(pod)
			s.queue.Requeue(p, cycle, true)
			return
		}
		claims, err := q.dra.reserve(node)
		if err != nil {
			logger.V(2).Info("Reserving resource claims failed; retrying with backoff", "pod", klog.KObj(pod), "node", node, "err", err)
			if vb != nil {
				s.volumes.forgetAssumed(vb)
			}
			s.metrics.attempts.WithLabelValues("error", s.cfg.SchedulerName).Inc()
			p.nominated = s.cache.nominatedNode(pod)
			s.queue.Requeue(p, cycle, true)
			return
		}
		s.cache.assume(p.info, node)
		s.queue.Done(pod.UID)
		s.metrics.attempts.WithLabelValues("scheduled", s.cfg.SchedulerName).Inc()
		s.metrics.attemptDuration.WithLabelValues("scheduled", s.cfg.SchedulerName).Observe(s.clock.Since(start).Seconds())
		logger.V(2).Info("Scheduled", "pod", klog.KObj(pod), "node", node, "attempts", p.attempts)
		if !vb.empty() || len(claims) > 0 {
			s.bindWithPrebind(ctx, p, chosen, vb, claims)
			return
		}
		s.bind(ctx, p, node)
		return
	}
	msg := "no nodes available to schedule pods"
	switch {
	case preMsg != "":
		msg = fmt.Sprintf("0/%d nodes are available: %s.", numNodes, preMsg)
	case numNodes > 0:
		msg = fitError(numNodes, statuses, "")
	}
	if out.msg != "" {
		msg += " " + preemptionTag + out.msg
	}
	if dra != nil && dra.leftOut != "" && draRejected(statuses) {
		msg += " " + dra.leftOut
	}
	for _, st := range statuses {
		if st.code == unschedulable {
			p.resourceBound = true
			break
		}
	}
	p.spreadBound = spreadRejected(statuses)
	p.affinityBound = affinityRejected(statuses)
	p.featuresBound = featuresRejected(statuses)
	if out.nominate != nil {
		s.cache.nominate(p.info, *out.nominate)
	}
	if out.chosen != nil {
		s.preempt(ctx, p.info, out.chosen)
	}
	s.fail(ctx, p, cycle, msg, out.nominate, start)
}

// findNode filters nodes (the nominated node first) in parallel until
// enough feasible ones are found, then scores them. With no feasible node it
// returns every node's status.
func (s *Scheduler) findNode(ctx context.Context, q *podQuery) (string, map[string]status, int) {
	all := s.cache.list
	if len(all) == 0 {
		return "", nil, 0
	}
	nodes := all
	if q.named != nil {
		// Only the nodes the pod names are looked at (a DaemonSet's pod:
		// one node, whatever the cluster's size).
		nodes = make([]*nodeInfo, 0, q.named.Len())
		for _, ni := range all {
			if q.named.Has(ni.name()) {
				nodes = append(nodes, ni)
			}
		}
	}
	n := len(nodes)
	q.spread = newSpreadState(s.spread, q, s.cache)
	if nom := s.cache.nominatedTo[q.pod.UID]; nom != "" {
		if ni := s.cache.nodes[nom]; ni != nil && ni.node != nil && s.cache.filterWithNominated(q, ni).ok() {
			return nom, nil, n
		}
	}
	want := s.cfg.numFeasibleNodesToFind(n)
	start := 0
	if q.named == nil {
		start = s.nextStart % n
	}
	// Reused from cycle to cycle: at 5,000 nodes these were most of a
	// cycle's allocations (findNode runs on the one scheduling goroutine).
	if cap(s.filterResults) < n {
		s.filterResults, s.filterDone = make([]status, n), make([]bool, n)
	}
	results, done := s.filterResults[:n], s.filterDone[:n]
	clear(results)
	clear(done)
	var mu sync.Mutex
	found := 0
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	check := func(i int) {
		idx := (start + i) % n
		st := s.cache.filterWithNominated(q, nodes[idx])
		results[idx], done[idx] = st, true
		if st.ok() {
			mu.Lock()
			found++
			if found >= want {
				cancel()
			}
			mu.Unlock()
		}
	}
	chunk := max(1, n/(s.cfg.Parallelism*4))
	workqueue.ParallelizeUntil(ctx, s.cfg.Parallelism, n, check, workqueue.WithChunkSize(chunk))
	processed := 0
	feasible := s.feasibleBuf[:0]
	defer func() { s.feasibleBuf = feasible[:0] }()
	for i := range n {
		if done[i] {
			processed++
			if results[i].ok() {
				feasible = append(feasible, nodes[i])
			}
		}
	}
	if q.named == nil {
		s.nextStart = (start + processed) % n
	}
	if len(feasible) == 0 {
		statuses := make(map[string]status, len(all))
		for _, ni := range all {
			statuses[ni.name()] = reject(unresolvable, reasonNotNamed)
		}
		for i, ni := range nodes {
			statuses[ni.name()] = results[i]
		}
		return "", statuses, len(all)
	}
	if len(feasible) == 1 {
		return feasible[0].name(), nil, len(all)
	}
	sc := newScorer(q.podInfo)
	sc.fit = q.fit
	sc.interPod = affinityScores(s.cache, q.podInfo, s.nsLister)
	sc.images = newImageQuery(q.pod, len(all)) // the share of every node, not of those a pod names
	sc.volumes = q.volumes
	if cap(s.rawBuf) < len(feasible) {
		s.rawBuf = make([]rawScore, len(feasible))
	}
	raws := s.rawBuf[:len(feasible)]
	for i, ni := range feasible {
		raws[i] = sc.raw(ni)
	}
	// Highest score; ties broken uniformly at random (reservoir sampling).
	best, ties := 0, 1
	scores := total(raws)
	q.spread.score(feasible, scores)
	for i := 1; i < len(scores); i++ {
		switch {
		case scores[i] > scores[best]:
			best, ties = i, 1
		case scores[i] == scores[best]:
			ties++
			if s.rand.Intn(ties) == 0 {
				best = i
			}
		}
	}
	return feasible[best].name(), nil, len(all)
}

// logNominatedNode says, at -v=3, what keeps a nominated pod from its node.
// Callers hold the cache's read lock.
func (s *Scheduler) logNominatedNode(ctx context.Context, pod *v1.Pod) {
	logger := klog.FromContext(ctx).V(3)
	nom := s.cache.nominatedTo[pod.UID]
	if nom == "" || !logger.Enabled() {
		return
	}
	var nominated, pods []string
	for _, np := range s.cache.nominated[nom] {
		nominated = append(nominated, np.pod.Name)
	}
	if ni := s.cache.nodes[nom]; ni != nil {
		for _, x := range ni.pods {
			pods = append(pods, fmt.Sprintf("%s(terminating=%v,doomed=%v)", x.pod.Name, x.pod.DeletionTimestamp != nil, s.cache.doomed[x.pod.UID]))
		}
	}
	logger.Info("Nominated pod does not fit its node", "pod", klog.KObj(pod), "node", nom, "nominatedThere", nominated, "podsThere", pods)
}
