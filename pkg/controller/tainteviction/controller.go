// Package tainteviction deletes pods that do not tolerate their node's
// NoExecute taints, after the smallest tolerationSeconds of the tolerations
// they use, as kube-controller-manager's taint-eviction-controller does.
package tainteviction

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	v1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/retry"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/nodeshepherd/nodeshepherd/pkg/controllerutil"
	"github.com/nodeshepherd/nodeshepherd/pkg/kube"
	"github.com/nodeshepherd/nodeshepherd/pkg/nodetopology"
)

// Name is the controller's name in --controllers.
const Name = "tainteviction"

// EventSource is the component name on events, upstream's.
const EventSource = "taint-eviction-controller"

// Strings written by the controller, upstream's.
const (
	EventTaintManagerEviction = "TaintManagerEviction"
	ReasonDeletionByTaint     = "DeletionByTaintManager"
	MessageDeletionByTaint    = "Taint manager: deleting due to NoExecute taint"
	workers                   = 8
)

// A failed deletion is retried after 100ms, doubling up to 30s, for as long
// as the pod must go (upstream gives up after five tries 10ms apart,
// kubernetes/kubernetes#140639).
const (
	retryInitial = 100 * time.Millisecond
	retryMax     = 30 * time.Second
)

func retryBackoff(attempts int) time.Duration {
	d := retryInitial
	for i := 1; i < attempts && d < retryMax; i++ {
		d *= 2
	}
	return min(d, retryMax)
}

// errPodGone: the pod to delete no longer exists, was replaced by another of
// the same name, or is already being deleted; nothing is left to do.
var errPodGone = errors.New("pod gone, replaced or already being deleted")

// Config of the controller.
type Config struct {
	DryRun bool
}

// Deps are the controller's collaborators.
type Deps struct {
	Client   kubernetes.Interface
	Nodes    coreinformers.NodeInformer
	Pods     coreinformers.PodInformer
	Recorder record.EventRecorder
	Registry prometheus.Registerer
	Clock    clock.WithTickerAndDelayedExecution
	// ProgressTimeout bounds a step (controllerutil.DefaultProgressTimeout when zero).
	ProgressTimeout time.Duration
}

// Controller is the taint eviction controller.
type Controller struct {
	*controllerutil.Base
	cfg        Config
	client     kubernetes.Interface
	clock      clock.WithTickerAndDelayedExecution
	recorder   record.EventRecorder
	dryRun     *controllerutil.DryRun
	nodeLister corelisters.NodeLister
	podLister  corelisters.PodLister
	podIndexer cache.Indexer
	synced     []cache.InformerSynced
	// runCtx is Run's context, set before any work starts: evictions in
	// flight end with it instead of outliving the controller.
	runCtx context.Context

	mu      sync.Mutex
	tainted map[string]*nodeTaints // node -> its NoExecute taints

	// Work for one node always lands on the same shard, so a node update
	// and a pod update of that node are never handled at the same time.
	shards  []workqueue.TypedRateLimitingInterface[item]
	workers *timedWorkers

	*metrics
}

// nodeTaints are a node's NoExecute taints, with the time this process first
// saw each one that carries no timeAdded.
type nodeTaints struct {
	taints []v1.Taint
	seen   map[taintID]time.Time
}

type taintID struct{ key, value string }

// item is queued work: a node (pod empty) or a pod on a node.
type item struct {
	node string
	pod  types.NamespacedName
}

// String names the item in logs.
func (it item) String() string {
	if it.pod.Name == "" {
		return "node " + it.node
	}
	return "pod " + podKey(it.pod) + " on node " + it.node
}

// New builds the controller.
func New(cfg Config, d Deps) (*Controller, error) {
	b, err := controllerutil.NewBase(controllerutil.Setup{Name: Name, DryRun: cfg.DryRun, Registry: d.Registry, Recorder: d.Recorder,
		ProgressTimeout: d.ProgressTimeout}, &d.Clock)
	if err != nil {
		return nil, err
	}
	c := &Controller{
		Base: b, cfg: cfg, client: d.Client, clock: d.Clock, recorder: d.Recorder, dryRun: b.DryRun,
		nodeLister: d.Nodes.Lister(), podLister: d.Pods.Lister(), podIndexer: d.Pods.Informer().GetIndexer(),
		tainted: map[string]*nodeTaints{},
		metrics: newMetrics(d.Registry),
	}
	// Each deletion attempt is a step: one that never ends is reported.
	c.workers = newTimedWorkers(d.Clock, func(key string, w timedWork) bool {
		defer c.Begin("pod deletion " + key)()
		return c.evict(key, w)
	}, retryBackoff)
	c.metrics.registerPending(d.Registry, c.workers.Len)
	for i := 0; i < workers; i++ {
		c.shards = append(c.shards, controllerutil.Track(b, "item", workqueue.NewTypedRateLimitingQueueWithConfig(controllerutil.RetryLimiter[item](),
			workqueue.TypedRateLimitingQueueConfig[item]{Name: fmt.Sprintf("noexec_taint_%d", i), Clock: d.Clock})))
	}
	if err := nodetopology.AddPodNodeNameIndexer(d.Pods.Informer()); err != nil {
		return nil, err
	}
	// The workers start once both handlers have seen the first list (the
	// registrations' HasSynced): every node and pod is queued by then.
	nodeReg, err := d.Nodes.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) { c.enqueue(item{node: obj.(*v1.Node).Name}) },
		UpdateFunc: func(old, obj any) {
			o, n := old.(*v1.Node), obj.(*v1.Node)
			if !apiequality.Semantic.DeepEqual(noExecuteTaints(o.Spec.Taints), noExecuteTaints(n.Spec.Taints)) {
				c.enqueue(item{node: n.Name})
			}
		},
		DeleteFunc: func(obj any) {
			if n, ok := kube.Untombstone(obj).(*v1.Node); ok {
				c.enqueue(item{node: n.Name})
			}
		},
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
				c.onPod(nil, p)
			}
		},
	})
	if err != nil {
		return nil, err
	}
	c.synced = []cache.InformerSynced{nodeReg.HasSynced, podReg.HasSynced}
	return c, nil
}

func (c *Controller) onPod(old, pod *v1.Pod) {
	if old != nil && old.UID == pod.UID && old.Spec.NodeName == pod.Spec.NodeName {
		if apiequality.Semantic.DeepEqual(old.Spec.Tolerations, pod.Spec.Tolerations) {
			return
		}
	}
	node := pod.Spec.NodeName
	if node == "" && old != nil {
		node = old.Spec.NodeName
	}
	c.enqueue(item{node: node, pod: types.NamespacedName{Namespace: pod.Namespace, Name: pod.Name}})
}

func (c *Controller) enqueue(it item) {
	h := fnv.New32a()
	_, _ = h.Write([]byte(it.node))
	c.shards[h.Sum32()%uint32(len(c.shards))].Add(it)
}

// Run starts the workers and blocks until ctx ends; deletions under way
// finish before it returns.
func (c *Controller) Run(ctx context.Context) error {
	queues := make([]interface{ ShutDown() }, len(c.shards))
	for i, q := range c.shards {
		queues[i] = q
	}
	c.runCtx = klog.NewContext(ctx, klog.FromContext(ctx).WithName(Name)) // before any deletion can start
	return c.Base.Run(ctx, controllerutil.Work{Synced: c.synced, Queues: queues,
		Start: func(ctx context.Context) error {
			klog.FromContext(ctx).Info("Starting taint eviction controller", "dryRun", c.dryRun.Enabled())
			for _, q := range c.shards {
				controllerutil.Workers(ctx, c.Base, 1, q, "item", "Taint eviction: requeueing", c.handle)
			}
			return nil
		},
		Stop: c.workers.CancelAll})
}

// handle syncs one queued item: a node's taints or one pod on a node.
func (c *Controller) handle(ctx context.Context, it item) error {
	if it.pod.Name == "" {
		return c.handleNode(ctx, it.node)
	}
	c.handlePod(ctx, it)
	return nil
}

func podKey(p types.NamespacedName) string { return p.Namespace + "/" + p.Name }

// setTaints records a node's NoExecute taints; taints without timeAdded keep
// the time they were first seen.
func (c *Controller) setTaints(name string, taints []v1.Taint, now time.Time) *nodeTaints {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(taints) == 0 {
		delete(c.tainted, name)
		return nil
	}
	nt := newNodeTaints(taints, c.tainted[name], now)
	c.tainted[name] = nt
	return nt
}

// newNodeTaints keeps a node's NoExecute taints with, for each one without a
// timeAdded, when it was first seen: as old saw it when old had it, else now.
func newNodeTaints(taints []v1.Taint, old *nodeTaints, now time.Time) *nodeTaints {
	nt := &nodeTaints{taints: taints, seen: map[taintID]time.Time{}}
	for _, t := range taints {
		if t.TimeAdded != nil {
			continue
		}
		id := taintID{t.Key, t.Value}
		nt.seen[id] = now
		if old != nil {
			if at, ok := old.seen[id]; ok {
				nt.seen[id] = at
			}
		}
	}
	return nt
}

func (c *Controller) taintsOf(node string) *nodeTaints {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.tainted[node]
}

func (c *Controller) handleNode(ctx context.Context, name string) error {
	node, err := c.nodeLister.Get(name)
	if apierrors.IsNotFound(err) {
		// Pending deletions stay scheduled, as upstream.
		c.setTaints(name, nil, time.Time{})
		return nil
	}
	if err != nil {
		return err
	}
	now := c.clock.Now()
	nt := c.setTaints(name, noExecuteTaints(node.Spec.Taints), now)
	objs, err := c.podIndexer.ByIndex(nodetopology.ByNodeIndex, name)
	if err != nil {
		return err
	}
	for _, obj := range objs {
		pod := obj.(*v1.Pod)
		nn := types.NamespacedName{Namespace: pod.Namespace, Name: pod.Name}
		if nt == nil {
			c.cancel(nn)
			continue
		}
		if pod.DeletionTimestamp != nil {
			continue // already being deleted, e.g. by a leader before a failover: not evicted twice
		}
		c.processPod(ctx, pod, nt, now)
	}
	return nil
}

func (c *Controller) handlePod(ctx context.Context, it item) {
	key := podKey(it.pod)
	pod, err := c.podLister.Pods(it.pod.Namespace).Get(it.pod.Name)
	if err != nil {
		c.cancel(it.pod)
		return
	}
	if w, ok := c.workers.Get(key); ok && w.uid != pod.UID {
		// The pod was replaced under the same name: its deletion went with it.
		c.cancel(it.pod)
	}
	if pod.Spec.NodeName == "" || pod.Spec.NodeName != it.node || pod.DeletionTimestamp != nil {
		return
	}
	nt := c.taintsOf(it.node)
	if nt == nil {
		return
	}
	c.processPod(ctx, pod, nt, c.clock.Now())
}

// decision is when a pod must leave its node, if it must.
type decision struct {
	must  bool
	due   time.Time
	cause *v1.Taint // the taint whose toleration runs out first; nil: at once
}

// decide computes a pod's deletion time from the state of the API alone, so
// that every leader computes the same one: each NoExecute taint the pod
// tolerates for tolerationSeconds lets it stay that long after the later of
// the taint's timeAdded and the pod's arrival on the node; the first of these
// to run out is the deadline. An untolerated taint, or tolerationSeconds <= 0,
// means at once.
func (c *Controller) decide(logger klog.Logger, pod *v1.Pod, nt *nodeTaints, now time.Time) decision {
	var d decision
	arrived := podSince(pod)
	for i := range nt.taints {
		taint := &nt.taints[i]
		tol := usedToleration(logger, taint, pod.Spec.Tolerations)
		if tol == nil {
			return decision{must: true, due: now}
		}
		if tol.TolerationSeconds == nil {
			continue
		}
		if *tol.TolerationSeconds <= 0 {
			return decision{must: true, due: now}
		}
		start := nt.since(taint)
		if arrived.After(start) {
			start = arrived
		}
		due := start.Add(time.Duration(*tol.TolerationSeconds) * time.Second)
		if !d.must || due.Before(d.due) {
			d = decision{must: true, due: due, cause: taint}
		}
	}
	return d
}

// since is when a taint was put on the node: its timeAdded rounded up to the
// next second (timeAdded has one-second precision, so the wait is never
// shorter than tolerationSeconds), or when this process first saw it (the
// only start kept in memory: a new leader starts such a countdown again).
func (nt *nodeTaints) since(t *v1.Taint) time.Time {
	if t.TimeAdded != nil && !t.TimeAdded.IsZero() {
		return kube.NotBefore(t.TimeAdded.Time)
	}
	return nt.seen[taintID{t.Key, t.Value}]
}

// podSince is when the pod came to be where its tolerations count: created
// or bound (a pod scheduled onto a node tainted long ago gets its whole
// tolerationSeconds), or its tolerations last changed. All three are read
// from the pod, never from this process's memory, so a new leader computes
// the deadline the old one had.
func podSince(pod *v1.Pod) time.Time {
	at := kube.NotBefore(pod.CreationTimestamp.Time)
	if s := kube.PodCondition(pod, v1.PodScheduled); s != nil && s.Status == v1.ConditionTrue {
		if t := kube.NotBefore(s.LastTransitionTime.Time); t.After(at) {
			at = t
		}
	}
	if t := tolerationsChanged(pod); t.After(at) {
		at = t
	}
	return at
}

// tolerationsChanged is no earlier than the last change to the pod's
// tolerations after its creation, from the API's own record: a pod's spec
// changes bump metadata.generation past 1, and the managedFields entry that
// owns spec.tolerations (an atomic list: whoever last changed it owns all
// of it) carries the time of that manager's last write, to the second. Its
// later writes (a label, say) move that time on, so the bound may be late,
// never early. Zero when the spec never changed or nothing owns the list
// (managedFields cleared by a client): the pod counts from its arrival.
func tolerationsChanged(pod *v1.Pod) time.Time {
	if pod.Generation == 1 {
		return time.Time{} // the spec is as created
	}
	var last time.Time
	for _, e := range pod.ManagedFields {
		if e.Subresource != "" || e.Time == nil || e.FieldsV1 == nil || !e.Time.After(last) {
			continue
		}
		var set struct {
			Spec map[string]json.RawMessage `json:"f:spec"`
		}
		if json.Unmarshal(e.FieldsV1.GetRawBytes(), &set) != nil {
			continue
		}
		if _, ok := set.Spec["f:tolerations"]; ok {
			last = e.Time.Time
		}
	}
	return kube.NotBefore(last)
}

// processPod schedules, keeps, moves or cancels one pod's deletion.
func (c *Controller) processPod(ctx context.Context, pod *v1.Pod, nt *nodeTaints, now time.Time) {
	logger := klog.FromContext(ctx)
	nn := types.NamespacedName{Namespace: pod.Namespace, Name: pod.Name}
	key := podKey(nn)
	d := c.decide(logger, pod, nt, now)
	w, ok := c.workers.Get(key)
	if ok && w.uid != pod.UID {
		c.cancel(nn)
		ok = false
	}
	if !d.must {
		c.cancel(nn)
		return
	}
	if ok {
		if w.started() || w.due.Equal(d.due) {
			return // a deletion under way goes on while the pod must go
		}
		// As upstream, a later deadline does not postpone one whose taint is
		// still there and still tolerated for a while: lengthening a
		// toleration does not delay the eviction.
		if d.due.After(w.due) && c.stillCounts(logger, w.cause, pod, nt) {
			return
		}
	}
	logger.V(2).Info("Scheduling deletion of pod for a NoExecute taint", "pod", key, "at", d.due, "taint", d.cause)
	c.workers.Add(key, &timedWork{uid: pod.UID, due: d.due, cause: d.cause, announced: new(atomic.Bool)})
}

// stillCounts says whether the taint that set a deadline is still on the
// node and still tolerated only for a while.
func (c *Controller) stillCounts(logger klog.Logger, cause *v1.Taint, pod *v1.Pod, nt *nodeTaints) bool {
	if cause == nil {
		return false
	}
	for i := range nt.taints {
		t := &nt.taints[i]
		if t.Key == cause.Key && t.Value == cause.Value && t.TimeAdded.Equal(cause.TimeAdded) {
			tol := usedToleration(logger, t, pod.Spec.Tolerations)
			return tol != nil && tol.TolerationSeconds != nil
		}
	}
	return false
}

// cancel drops a pod's deletion, with upstream's event when one was pending.
func (c *Controller) cancel(pod types.NamespacedName) {
	if w, pending := c.workers.Cancel(podKey(pod)); pending && c.recorder != nil {
		c.recorder.Eventf(podRef(pod, w.uid), v1.EventTypeNormal, EventTaintManagerEviction, "Cancelling deletion of Pod %s", podKey(pod))
	}
}

func podRef(pod types.NamespacedName, uid types.UID) *v1.ObjectReference {
	return &v1.ObjectReference{APIVersion: "v1", Kind: "Pod", Namespace: pod.Namespace, Name: pod.Name, UID: uid}
}

// notDue says why a deletion is no longer wanted, from the informers' view
// just before each attempt, or "" when the pod must still go.
func (c *Controller) notDue(logger klog.Logger, nn types.NamespacedName, w timedWork) string {
	pod, err := c.podLister.Pods(nn.Namespace).Get(nn.Name)
	switch {
	case err != nil:
		return "pod gone"
	case pod.UID != w.uid:
		return "pod replaced by another of the same name"
	case pod.DeletionTimestamp != nil:
		return "pod already being deleted"
	}
	nt := c.taintsOf(pod.Spec.NodeName)
	if nt == nil {
		if _, err := c.nodeLister.Get(pod.Spec.NodeName); apierrors.IsNotFound(err) {
			return "" // the node is gone: its pods still go, as upstream
		}
		return "no NoExecute taint left on the node"
	}
	if !c.decide(logger, pod, nt, c.clock.Now()).must {
		return "pod tolerates its node's taints"
	}
	return ""
}

// evict marks the pod as a disruption target and deletes it (not through the
// Eviction API: PDBs do not hold back a node's NoExecute taint, as upstream).
// It returns true to be retried after a backoff.
func (c *Controller) evict(key string, w timedWork) bool {
	ctx := c.runCtx
	logger := klog.FromContext(ctx)
	ns, name, _ := cache.SplitMetaNamespaceKey(key)
	nn := types.NamespacedName{Namespace: ns, Name: name}
	if w.attempts > 0 && c.deletedByEarlierAttempt(nn, w.uid) {
		// An attempt whose answer was lost (a timeout, a dropped connection)
		// did delete the pod: it counts once, and nothing is sent again.
		c.counted(logger, key, w, "deleted by an earlier attempt whose answer was lost")
		return false
	}
	if why := c.notDue(logger, nn, w); why != "" {
		logger.V(2).Info("Not deleting pod", "pod", key, "reason", why)
		return false
	}
	announce := func() {
		// One event per eviction, not one per attempt.
		if c.recorder != nil && (w.announced == nil || w.announced.CompareAndSwap(false, true)) {
			c.recorder.Eventf(podRef(nn, w.uid), v1.EventTypeNormal, EventTaintManagerEviction, "Marking for deletion Pod %s", key)
		}
	}
	var err error
	if c.dryRun.Enabled() {
		err = c.reportDryRun(ctx, nn, w.uid, announce)
	} else {
		err = c.deletePod(ctx, nn, w.uid, announce)
	}
	var stale *errNotDue
	switch {
	case errors.As(err, &stale) && !stale.due.IsZero():
		// A later deadline (the taint came off and back): the deletion is
		// rescheduled for it; the informer's update, whenever it comes, finds
		// it there.
		logger.Info("Not deleting pod yet: the node read from the API server calls for it later (the informer's view was behind)", "pod", key, "reason", stale.why)
		c.workers.Add(key, &timedWork{uid: w.uid, due: stale.due, cause: stale.cause, announced: w.announced})
		return false
	case errors.As(err, &stale):
		// Not dropped: the informer's update may arrive while this attempt
		// runs and find the deletion under way. The next attempt asks the
		// informer first (notDue), which by then has most likely caught up;
		// not counted as a failure.
		logger.Info("Not deleting pod: the node read from the API server no longer calls for it (the informer's view was behind); checking again", "pod", key, "reason", stale.why,
			"retryIn", retryBackoff(w.attempts+1))
		return true
	case errors.Is(err, errPodGone):
		logger.V(2).Info("Not deleting pod", "pod", key, "reason", err)
		return false
	case err == nil && c.dryRun.Enabled():
		// Kept as reported: the pod stays, and judged again on the same
		// taints it is not reported again.
		c.workers.MarkDone(key, w.uid)
		return false
	}
	if err != nil && ctx.Err() != nil {
		// Shutting down: the pod is judged again by the next leader.
		return false
	}
	if err != nil {
		c.metrics.deletionErrors.Inc()
		attempt := w.attempts + 1
		next := retryBackoff(attempt)
		// Bounded: attempts 1, 2, 4, 8, then one line per 30s at most.
		if attempt&(attempt-1) == 0 || next == retryMax {
			logger.Error(err, "Failed to delete pod for a NoExecute taint; retrying", "pod", key, "attempt", attempt, "retryIn", next)
		}
		return true
	}
	c.counted(logger, key, w, "")
	return false
}

// counted records a deletion this controller made.
func (c *Controller) counted(logger klog.Logger, key string, w timedWork, note string) {
	c.metrics.deletions.Inc()
	c.metrics.deletionDuration.Observe(c.clock.Since(w.due).Seconds())
	if note == "" {
		logger.Info("Deleted pod that does not tolerate its node's NoExecute taints", "pod", key, "attempts", w.attempts+1)
		return
	}
	logger.Info("Deleted pod that does not tolerate its node's NoExecute taints", "pod", key, "attempts", w.attempts, "note", note)
}

// deletedByEarlierAttempt says whether the pod (that UID) is being deleted
// and carries this controller's DisruptionTarget condition: after a failed
// attempt, that is the attempt's own deletion, whose answer never came.
func (c *Controller) deletedByEarlierAttempt(nn types.NamespacedName, uid types.UID) bool {
	pod, err := c.podLister.Pods(nn.Namespace).Get(nn.Name)
	if err != nil || pod.UID != uid || pod.DeletionTimestamp == nil {
		return false
	}
	cond := kube.PodCondition(pod, v1.DisruptionTarget)
	return cond != nil && cond.Status == v1.ConditionTrue && cond.Reason == ReasonDeletionByTaint
}

// errNotDue: the node's taints read from the API server do not call for
// the deletion now; it says why, and when they do call for it (zero: not).
type errNotDue struct {
	why   string
	due   time.Time
	cause *v1.Taint
}

func (e *errNotDue) Error() string { return e.why }

// confirm decides again on the node's NoExecute taints read from the API
// server (a GET, which is a quorum read), not from the informer: nil when
// the pod must go now, errNotDue when it need not, or the read's error.
//
// Why: the informer's view of a node can be behind the API server's (a new
// leader's cache right after takeover, a node watch that stalls), and a
// deletion decided on it can fire after the taint came off: a chaos run saw
// a new leader mark a pod 28 ms after the node lifecycle controller had
// removed the node's unreachable taint. Reading the node right before the
// pod is marked leaves only the few milliseconds until the patch. Taints
// without timeAdded keep the time this process first saw them; one it has
// not seen yet counts from now (the informer's update brings it later).
func (c *Controller) confirm(ctx context.Context, pod *v1.Pod) error {
	node, err := c.client.CoreV1().Nodes().Get(ctx, pod.Spec.NodeName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil // the node is gone: its pods still go, as upstream
	}
	if err != nil {
		return fmt.Errorf("reading node %s to confirm its NoExecute taints: %w", pod.Spec.NodeName, err)
	}
	now := c.clock.Now()
	taints := noExecuteTaints(node.Spec.Taints)
	if len(taints) == 0 {
		return &errNotDue{why: "no NoExecute taint left on node " + node.Name}
	}
	fresh := newNodeTaints(taints, c.taintsOf(node.Name), now)
	d := c.decide(klog.FromContext(ctx), pod, fresh, now)
	switch {
	case !d.must:
		return &errNotDue{why: "the pod tolerates node " + node.Name + "'s NoExecute taints"}
	case d.due.After(now):
		return &errNotDue{why: fmt.Sprintf("node %s's NoExecute taints call for it at %s, not yet", node.Name, d.due.Format(time.RFC3339)),
			due: d.due, cause: d.cause}
	}
	return nil
}

// reportDryRun is the dry run's deletion: confirmed as a real one is, then
// announced and reported, not made.
func (c *Controller) reportDryRun(ctx context.Context, nn types.NamespacedName, uid types.UID, announce func()) error {
	ctx, cancel := context.WithTimeout(ctx, kube.WriteTimeout)
	defer cancel()
	pod, err := c.podLister.Pods(nn.Namespace).Get(nn.Name)
	if err != nil || pod.UID != uid {
		return errPodGone
	}
	if err := c.confirm(ctx, pod); err != nil {
		return err
	}
	announce()
	c.dryRun.Report(ctx, &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: nn.Namespace, Name: nn.Name, UID: uid}}, "delete-pod",
		fmt.Sprintf("pod %s: does not tolerate its node's NoExecute taints", podKey(nn)))
	return nil
}

// deletePod sets the DisruptionTarget condition and deletes the pod, both
// only on the pod with the given UID: the status patch carries the
// resourceVersion of the pod read and checked, the delete a UID precondition.
// Before the patch the node's taints are confirmed from the API server
// (confirm) and the eviction announced, unless the pod already carries this
// controller's mark.
func (c *Controller) deletePod(ctx context.Context, nn types.NamespacedName, uid types.UID, announce func()) error {
	// A request that never answers must not hold the pod's deletion: after
	// WriteTimeout the attempt fails and is retried.
	ctx, cancel := context.WithTimeout(ctx, kube.WriteTimeout)
	defer cancel()
	pods := c.client.CoreV1().Pods(nn.Namespace)
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		pod, err := pods.Get(ctx, nn.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return errPodGone
		}
		if err != nil {
			return err
		}
		if pod.UID != uid || pod.DeletionTimestamp != nil {
			return errPodGone
		}
		if err := c.confirm(ctx, pod); err != nil {
			return err
		}
		cond := kube.PodCondition(pod, v1.DisruptionTarget)
		// A pod marked by an earlier attempt (this process's, or a leader's
		// that died before its delete) was announced before it was marked:
		// one event per eviction, so only the delete is left to do.
		if cond == nil || cond.Status != v1.ConditionTrue || cond.Reason != ReasonDeletionByTaint {
			announce()
		}
		if cond == nil || cond.Status != v1.ConditionTrue {
			patch, _ := json.Marshal(map[string]any{
				"metadata": map[string]any{"resourceVersion": pod.ResourceVersion},
				"status": map[string]any{"conditions": []v1.PodCondition{{
					Type: v1.DisruptionTarget, Status: v1.ConditionTrue, Reason: ReasonDeletionByTaint, Message: MessageDeletionByTaint,
					LastTransitionTime: metav1.NewTime(c.clock.Now()),
				}}}})
			if _, err := pods.Patch(ctx, nn.Name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status"); err != nil {
				if apierrors.IsNotFound(err) {
					return errPodGone
				}
				return err // a conflict re-reads the pod
			}
		}
		err = pods.Delete(ctx, nn.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
		if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
			return errPodGone // only a UID mismatch conflicts: another pod of that name
		}
		return err
	})
}
