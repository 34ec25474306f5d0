// Package tainteviction deletes pods that do not tolerate their node's
// NoExecute taints, after the smallest tolerationSeconds of the tolerations
// they use, as kube-controller-manager's taint-eviction-controller does.
package tainteviction

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	v1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/retry"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/nodeshepherd/nodeshepherd/pkg/controller/nodelifecycle"
	"github.com/nodeshepherd/nodeshepherd/pkg/controllerutil"
	"github.com/nodeshepherd/nodeshepherd/pkg/kube"
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
	deleteRetries             = 5
)

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
}

// Controller is the taint eviction controller.
type Controller struct {
	cfg        Config
	client     kubernetes.Interface
	clock      clock.WithTickerAndDelayedExecution
	recorder   record.EventRecorder
	dryRun     *controllerutil.DryRun
	nodeLister corelisters.NodeLister
	podLister  corelisters.PodLister
	podIndexer cache.Indexer
	synced     []cache.InformerSynced

	taintsMu sync.Mutex
	tainted  map[string][]v1.Taint // node -> its NoExecute taints

	// Work for one node always lands on the same shard, so a node update
	// and a pod update of that node are never handled at the same time.
	shards  []workqueue.TypedRateLimitingInterface[item]
	workers *timedWorkers

	deletions        prometheus.Counter
	deletionDuration prometheus.Histogram
}

// item is queued work: a node (pod empty) or a pod on a node.
type item struct {
	node string
	pod  types.NamespacedName
}

// New builds the controller.
func New(cfg Config, d Deps) (*Controller, error) {
	if d.Clock == nil {
		d.Clock = clock.RealClock{}
	}
	c := &Controller{
		cfg: cfg, client: d.Client, clock: d.Clock, recorder: d.Recorder,
		dryRun:     controllerutil.NewDryRun(cfg.DryRun, Name, d.Registry, d.Recorder),
		nodeLister: d.Nodes.Lister(), podLister: d.Pods.Lister(), podIndexer: d.Pods.Informer().GetIndexer(),
		synced:  []cache.InformerSynced{d.Nodes.Informer().HasSynced, d.Pods.Informer().HasSynced},
		tainted: map[string][]v1.Taint{},
		deletions: prometheus.NewCounter(prometheus.CounterOpts{Subsystem: "taint_eviction_controller", Name: "pod_deletions_total",
			Help: "Total number of Pods deleted by TaintEvictionController since its start."}),
		// Upstream's buckets; unlike upstream, the value recorded is in seconds.
		deletionDuration: prometheus.NewHistogram(prometheus.HistogramOpts{Subsystem: "taint_eviction_controller", Name: "pod_deletion_duration_seconds",
			Help:    "Latency, in seconds, between the time when a taint effect has been activated for the Pod and its deletion via TaintEvictionController.",
			Buckets: []float64{0.005, 0.025, 0.1, 0.5, 1, 2.5, 10, 30, 60, 120, 180, 240}}),
	}
	d.Registry.MustRegister(c.deletions, c.deletionDuration)
	c.workers = newTimedWorkers(d.Clock, c.evict)
	for i := 0; i < workers; i++ {
		c.shards = append(c.shards, workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[item](),
			workqueue.TypedRateLimitingQueueConfig[item]{Name: fmt.Sprintf("noexec_taint_%d", i), Clock: d.Clock}))
	}
	if err := nodelifecycle.AddPodNodeNameIndexer(d.Pods.Informer()); err != nil {
		return nil, err
	}
	_, err := d.Nodes.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
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
	_, err = d.Pods.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
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
	return c, err
}

func (c *Controller) onPod(old, pod *v1.Pod) {
	if old != nil && old.Spec.NodeName == pod.Spec.NodeName && apiequality.Semantic.DeepEqual(old.Spec.Tolerations, pod.Spec.Tolerations) {
		return
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

// Run starts the workers and blocks until ctx ends.
func (c *Controller) Run(ctx context.Context) error {
	defer utilruntime.HandleCrash()
	logger := klog.FromContext(ctx).WithName(Name)
	ctx = klog.NewContext(ctx, logger)
	logger.Info("Starting taint eviction controller", "dryRun", c.cfg.DryRun)
	defer c.workers.CancelAll()
	for _, q := range c.shards {
		defer q.ShutDown()
	}
	if !cache.WaitForNamedCacheSync(Name, ctx.Done(), c.synced...) {
		return fmt.Errorf("%s: caches did not sync", Name)
	}
	var wg sync.WaitGroup
	for _, q := range c.shards {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for c.process(ctx, q) {
			}
		}()
	}
	<-ctx.Done()
	for _, q := range c.shards {
		q.ShutDown()
	}
	wg.Wait()
	return nil
}

func (c *Controller) process(ctx context.Context, q workqueue.TypedRateLimitingInterface[item]) bool {
	it, quit := q.Get()
	if quit {
		return false
	}
	defer q.Done(it)
	var err error
	if it.pod.Name == "" {
		err = c.handleNode(ctx, it.node)
	} else {
		c.handlePod(ctx, it)
	}
	if err != nil {
		klog.FromContext(ctx).Error(err, "Taint eviction: requeueing", "node", it.node)
		q.AddRateLimited(it)
		return true
	}
	q.Forget(it)
	return true
}

func podKey(p types.NamespacedName) string { return p.Namespace + "/" + p.Name }

func (c *Controller) handleNode(ctx context.Context, name string) error {
	node, err := c.nodeLister.Get(name)
	if apierrors.IsNotFound(err) {
		// Pending deletions stay scheduled, as upstream.
		c.taintsMu.Lock()
		delete(c.tainted, name)
		c.taintsMu.Unlock()
		return nil
	}
	if err != nil {
		return err
	}
	taints := noExecuteTaints(node.Spec.Taints)
	c.taintsMu.Lock()
	if len(taints) == 0 {
		delete(c.tainted, name)
	} else {
		c.tainted[name] = taints
	}
	c.taintsMu.Unlock()
	objs, err := c.podIndexer.ByIndex(nodelifecycle.ByNodeIndex, name)
	if err != nil {
		return err
	}
	now := c.clock.Now()
	for _, obj := range objs {
		pod := obj.(*v1.Pod)
		nn := types.NamespacedName{Namespace: pod.Namespace, Name: pod.Name}
		if len(taints) == 0 {
			c.cancel(nn, pod.UID)
			continue
		}
		if pod.DeletionTimestamp != nil {
			continue // already being deleted, e.g. by a leader before a failover: not evicted twice
		}
		c.processPodOnNode(ctx, nn, pod.Spec.Tolerations, taints, now)
	}
	return nil
}

func (c *Controller) handlePod(ctx context.Context, it item) {
	pod, err := c.podLister.Pods(it.pod.Namespace).Get(it.pod.Name)
	if err != nil {
		c.cancel(it.pod, "")
		return
	}
	if pod.Spec.NodeName == "" || pod.Spec.NodeName != it.node || pod.DeletionTimestamp != nil {
		return
	}
	c.taintsMu.Lock()
	taints := c.tainted[it.node]
	c.taintsMu.Unlock()
	if len(taints) == 0 {
		return
	}
	c.processPodOnNode(ctx, it.pod, pod.Spec.Tolerations, taints, c.clock.Now())
}

// processPodOnNode schedules, keeps or cancels one pod's deletion.
func (c *Controller) processPodOnNode(ctx context.Context, pod types.NamespacedName, tolerations []v1.Toleration, taints []v1.Taint, now time.Time) {
	key := podKey(pod)
	allTolerated, used := usedTolerations(klog.FromContext(ctx), taints, tolerations)
	if !allTolerated {
		c.cancel(pod, "")
		c.workers.Add(key, now, now)
		return
	}
	minTime := minTolerationTime(used)
	if minTime < 0 {
		c.cancel(pod, "")
		return
	}
	if w := c.workers.Get(key); w != nil {
		if now.After(w.createdAt) {
			return // an existing schedule is kept when tolerations change
		}
		c.cancel(pod, "")
	}
	c.workers.Add(key, now, now.Add(minTime))
}

func (c *Controller) cancel(pod types.NamespacedName, uid types.UID) {
	if c.workers.Cancel(podKey(pod)) && c.recorder != nil {
		c.recorder.Eventf(podRef(pod, uid), v1.EventTypeNormal, EventTaintManagerEviction, "Cancelling deletion of Pod %s", podKey(pod))
	}
}

func podRef(pod types.NamespacedName, uid types.UID) *v1.ObjectReference {
	return &v1.ObjectReference{APIVersion: "v1", Kind: "Pod", Namespace: pod.Namespace, Name: pod.Name, UID: uid}
}

// evict marks the pod as a disruption target and deletes it (not through the
// Eviction API: PDBs do not hold back a node's NoExecute taint, as upstream).
func (c *Controller) evict(key string, w *timedWork) {
	ctx := klog.NewContext(context.Background(), klog.Background().WithName(Name))
	logger := klog.FromContext(ctx)
	ns, name, _ := cache.SplitMetaNamespaceKey(key)
	nn := types.NamespacedName{Namespace: ns, Name: name}
	if c.recorder != nil {
		c.recorder.Eventf(podRef(nn, ""), v1.EventTypeNormal, EventTaintManagerEviction, "Marking for deletion Pod %s", key)
	}
	if c.cfg.DryRun {
		c.dryRun.Report(ctx, &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}, "delete-pod",
			fmt.Sprintf("pod %s: does not tolerate its node's NoExecute taints", key))
		return
	}
	// Upstream's five attempts, 10ms apart at first; this runs on the timer's
	// own goroutine, so the wait holds up nothing else.
	err := retry.OnError(wait.Backoff{Steps: deleteRetries, Duration: 10 * time.Millisecond, Factor: 2}, func(error) bool { return true },
		func() error { return c.deletePod(ctx, nn) })
	if err != nil {
		logger.Error(err, "Failed to delete pod", "pod", key)
		return
	}
	c.deletions.Inc()
	c.deletionDuration.Observe(c.clock.Since(w.fireAt).Seconds())
	logger.Info("Deleted pod that does not tolerate its node's NoExecute taints", "pod", key)
}

func (c *Controller) deletePod(ctx context.Context, nn types.NamespacedName) error {
	pods := c.client.CoreV1().Pods(nn.Namespace)
	pod, err := pods.Get(ctx, nn.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	has := false
	for _, cond := range pod.Status.Conditions {
		if cond.Type == v1.DisruptionTarget && cond.Status == v1.ConditionTrue {
			has = true
		}
	}
	if !has {
		patch, _ := json.Marshal(map[string]any{"status": map[string]any{"conditions": []v1.PodCondition{{
			Type: v1.DisruptionTarget, Status: v1.ConditionTrue, Reason: ReasonDeletionByTaint, Message: MessageDeletionByTaint,
			LastTransitionTime: metav1.NewTime(c.clock.Now()),
		}}}})
		if _, err := pods.Patch(ctx, nn.Name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status"); err != nil {
			if apierrors.IsNotFound(err) {
				return nil
			}
			return err
		}
	}
	err = pods.Delete(ctx, nn.Name, metav1.DeleteOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}
