// Package readinessrestore is nodeshepherd's readiness restore on its own
// (seed 002), for clusters whose node lifecycle controller is
// kube-controller-manager's, as on a managed cluster: when a node falls
// silent, kube-controller-manager sets its pods' Ready condition False; when
// the node is back and its kubelet does not re-post a pod (the 1.15 kubelet
// of the incident never did), the pod stays out of every Service. This
// controller gives such a pod Ready=True back once its node has been Ready
// for --readiness-restore-delay, its containers and readiness gates are all
// ready, and nobody changed its readiness since. It restores only what
// kube-controller-manager took, as its managedFields show; nodeshepherd's
// own nodelifecycle controller restores what it marked itself. The rules
// are nodelifecycle's (pkg/podreadiness).
package readinessrestore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/pflag"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/nodeshepherd/nodeshepherd/pkg/companion"
	"github.com/nodeshepherd/nodeshepherd/pkg/controllerutil"
	"github.com/nodeshepherd/nodeshepherd/pkg/kube"
	"github.com/nodeshepherd/nodeshepherd/pkg/nodetopology"
	"github.com/nodeshepherd/nodeshepherd/pkg/podreadiness"
)

// Name is the controller's name in --controllers.
const Name = "readinessrestore"

// EventSource is the component name on its events.
const EventSource = "nodeshepherd-readinessrestore"

// EventReadinessRestored is the reason of the event on a restored pod,
// nodelifecycle's.
const EventReadinessRestored = "PodReadinessRestored"

// Config holds the controller's settings.
type Config struct {
	// Delay is how long a pod's node must have been Ready again before the
	// pod's readiness is restored: its kubelet's time to re-post it.
	Delay time.Duration
	// DryRun reports what would be restored and writes nothing.
	DryRun bool
}

// DefaultConfig returns nodelifecycle's --pod-readiness-restore-delay.
func DefaultConfig() Config { return Config{Delay: 10 * time.Second} }

// AddFlags registers the settings' flags.
func (c *Config) AddFlags(fs *pflag.FlagSet) {
	fs.DurationVar(&c.Delay, "readiness-restore-delay", c.Delay, "readinessrestore: how long a node must have been Ready again before Ready=True is restored on its pods that kube-controller-manager marked NotReady and their kubelet has not updated since (nodelifecycle's --pod-readiness-restore-delay, for a node lifecycle controller that is not nodeshepherd's).")
}

// Validate checks the settings, naming the flag.
func (c *Config) Validate() error {
	if c.Delay <= 0 {
		return fmt.Errorf("--readiness-restore-delay must be positive, got %v (leave readinessrestore out of --controllers to turn it off)", c.Delay)
	}
	return nil
}

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

// Controller restores the readiness kube-controller-manager took from pods
// of a node that came back.
type Controller struct {
	*controllerutil.Base
	cfg        Config
	client     kubernetes.Interface
	clock      clock.WithTicker
	recorder   record.EventRecorder
	dryRun     *controllerutil.DryRun
	restored   prometheus.Counter
	failed     prometheus.Counter
	nodeLister corelisters.NodeLister
	podLister  corelisters.PodLister
	podIndexer cache.Indexer
	synced     []cache.InformerSynced
	queue      workqueue.TypedRateLimitingInterface[string]

	// queued are the pods waiting in the queue, so that a node's every
	// update does not push its pods' checks further away.
	mu     sync.Mutex
	queued map[string]bool
	// lost are the restores whose answer never came, by pod key (guarded
	// by mu): the next read of the pod tells whether they landed; a pod
	// found gone takes its entry with it.
	lost map[string]lostRestore
}

// lostRestore is a restore whose answer was lost: the pod it was for, the
// Ready transition time it wrote, and its event's message.
type lostRestore struct {
	uid types.UID
	at  time.Time
	msg string
}

// New builds the controller; Run starts it.
func New(cfg Config, d Deps) (*Controller, error) {
	reg := d.Registry
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	b, err := controllerutil.NewBase(controllerutil.Setup{Name: Name, Validate: cfg.Validate, DryRun: cfg.DryRun,
		Registry: reg, Recorder: d.Recorder, ProgressTimeout: d.ProgressTimeout}, &d.Clock)
	if err != nil {
		return nil, err
	}
	c := &Controller{Base: b, cfg: cfg, client: d.Client, clock: d.Clock, recorder: d.Recorder, dryRun: b.DryRun,
		restored: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "nodeshepherd", Subsystem: Name, Name: "pod_readiness_restored_total",
			Help: "Pods given Ready=True back after kube-controller-manager marked them NotReady and their node recovered."}),
		failed: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "nodeshepherd", Subsystem: Name, Name: "pod_readiness_restore_errors_total",
			Help: "Failed attempts to give a pod Ready=True back (conflicts with the kubelet and deleted pods excluded); each is retried with backoff."}),
		nodeLister: d.Nodes.Lister(), podLister: d.Pods.Lister(), podIndexer: d.Pods.Informer().GetIndexer(),
		queue: controllerutil.Track(b, "pod", workqueue.NewTypedRateLimitingQueueWithConfig(controllerutil.RetryLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "readiness_restore", Clock: d.Clock})),
		queued: map[string]bool{},
	}
	for _, m := range []prometheus.Collector{c.restored, c.failed} {
		if err := reg.Register(m); err != nil {
			return nil, err
		}
	}
	if err := nodetopology.AddPodNodeNameIndexer(d.Pods.Informer()); err != nil {
		return nil, err
	}
	onNode := func(obj any) {
		if n, ok := obj.(*v1.Node); ok {
			c.onNode(n)
		}
	}
	nodeReg, err := d.Nodes.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: onNode, UpdateFunc: func(_, obj any) { onNode(obj) }})
	if err != nil {
		return nil, err
	}
	onPod := func(obj any) {
		if p, ok := obj.(*v1.Pod); ok {
			c.onPod(p)
		}
	}
	podReg, err := d.Pods.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: onPod, UpdateFunc: func(_, obj any) { onPod(obj) }})
	if err != nil {
		return nil, err
	}
	// The worker starts once both handlers have seen the first list (the
	// registrations' HasSynced): the marked pods are queued by then.
	c.synced = []cache.InformerSynced{nodeReg.HasSynced, podReg.HasSynced}
	return c, nil
}

// readyPath is the Ready condition's status in managedFields.
var readyPath = companion.ConditionPath(string(v1.PodReady), "status")

// markedAt tells whether kube-controller-manager set the pod's Ready
// condition False (it is the last writer of its status, as managedFields
// show; the kubelet and nodeshepherd write under other names), and when.
func markedAt(pod *v1.Pod) (time.Time, bool) {
	ready := kube.PodCondition(pod, v1.PodReady)
	if ready == nil || ready.Status != v1.ConditionFalse || pod.DeletionTimestamp != nil {
		return time.Time{}, false
	}
	writer, ok := companion.LastWriter(pod, readyPath)
	if !ok || !companion.WrittenBy(writer, companion.KubeControllerManager) {
		return time.Time{}, false
	}
	return ready.LastTransitionTime.Time, true
}

// onNode queues the marked pods of a node that is Ready.
func (c *Controller) onNode(n *v1.Node) {
	if !kube.NodeReady(n) {
		return
	}
	objs, err := c.podIndexer.ByIndex(nodetopology.ByNodeIndex, n.Name)
	if err != nil {
		return
	}
	for _, obj := range objs {
		c.consider(obj.(*v1.Pod), n)
	}
}

// onPod queues a marked pod whose node is Ready (a pod marked after its
// node's last update, or changed since).
func (c *Controller) onPod(p *v1.Pod) {
	if p.Spec.NodeName == "" {
		return
	}
	if n, err := c.nodeLister.Get(p.Spec.NodeName); err == nil && kube.NodeReady(n) {
		c.consider(p, n)
	}
}

// consider queues a check of the pod, Delay from now, if it is marked and
// its node reported Ready since the mark.
func (c *Controller) consider(p *v1.Pod, n *v1.Node) {
	at, ok := markedAt(p)
	if !ok || !podreadiness.ReportedSince(n, at) {
		return
	}
	key, err := cache.MetaNamespaceKeyFunc(p)
	if err != nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.queued[key] {
		c.queued[key] = true
		c.queue.AddAfter(key, c.cfg.Delay)
	}
}

// Run starts the worker and blocks until ctx ends.
func (c *Controller) Run(ctx context.Context) error {
	return c.Base.Run(ctx, controllerutil.Work{Synced: c.synced, Queues: []interface{ ShutDown() }{c.queue},
		Start: func(ctx context.Context) error {
			klog.FromContext(ctx).Info("Starting readiness restore controller", "delay", c.cfg.Delay, "dryRun", c.dryRun.Enabled())
			controllerutil.Workers(ctx, c.Base, 1, c.queue, "pod", "Failed to restore pod readiness, retrying", c.sync)
			return nil
		}})
}

// sync decides on one pod, read from the API server (not the cache, so the
// decision never rests on a status older than the node's recovery) and
// written back with that resourceVersion: a kubelet write in between makes
// the update fail, and the kubelet's status wins.
func (c *Controller) sync(ctx context.Context, key string) error {
	c.mu.Lock()
	delete(c.queued, key)
	c.mu.Unlock()
	ns, name, _ := cache.SplitMetaNamespaceKey(key)
	// One sync's read and write are bounded: an answer that never comes is
	// an error, retried with backoff; the retry reads the pod again, so a
	// write that landed unanswered is seen, not assumed.
	ctx, cancel := context.WithTimeout(ctx, kube.WriteTimeout)
	defer cancel()
	pod, err := c.client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		c.takeLost(key, "")
		return nil
	}
	if err != nil {
		return err
	}
	if l, ok := c.takeLost(key, pod.UID); ok {
		if r := kube.PodCondition(pod, v1.PodReady); r != nil && r.Status == v1.ConditionTrue && r.LastTransitionTime.Unix() == l.at.Unix() {
			// The restore whose answer was lost landed: it counts, once.
			c.done(ctx, pod, l.msg)
			return nil
		}
	}
	at, ok := markedAt(pod)
	if !ok {
		return nil
	}
	node, err := c.nodeLister.Get(pod.Spec.NodeName)
	if err != nil {
		node = nil
	}
	logger := klog.FromContext(ctx).WithValues("pod", klog.KObj(pod), "node", pod.Spec.NodeName)
	if verdict, why := podreadiness.Decide(pod, node, at); verdict != podreadiness.Restore {
		// The next update of the pod or its node asks again.
		logger.V(2).Info("Not restoring pod readiness", "why", why)
		return nil
	}
	msg := fmt.Sprintf("Node %s is Ready again and its kubelet did not re-post this pod's status within %s; restored Ready=True (set False by %s at %s)",
		pod.Spec.NodeName, c.cfg.Delay, companion.KubeControllerManager, at.UTC().Format(time.RFC3339))
	if c.dryRun.Enabled() {
		c.dryRun.Report(ctx, pod, "restore-pod-readiness", fmt.Sprintf("pod %s: %s", key, msg))
		return nil
	}
	p := pod.DeepCopy()
	now := metav1.NewTime(c.clock.Now())
	for i := range p.Status.Conditions {
		if p.Status.Conditions[i].Type == v1.PodReady {
			p.Status.Conditions[i].Status, p.Status.Conditions[i].LastTransitionTime = v1.ConditionTrue, now
			p.Status.Conditions[i].Reason, p.Status.Conditions[i].Message = "", ""
		}
	}
	written, err := c.client.CoreV1().Pods(ns).UpdateStatus(ctx, p, metav1.UpdateOptions{})
	if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
		// Someone (the kubelet) wrote the pod since the read: its update
		// tells the informer, which asks again if it is still marked.
		return nil
	}
	if err != nil {
		c.failed.Inc()
		if !kube.Answered(err) {
			c.mu.Lock()
			if c.lost == nil {
				c.lost = map[string]lostRestore{}
			}
			c.lost[key] = lostRestore{uid: pod.UID, at: now.Time, msg: msg}
			c.mu.Unlock()
		}
		return errors.Join(fmt.Errorf("restoring readiness of pod %s", key), err)
	}
	c.done(ctx, written, msg)
	return nil
}

// done counts and reports a restore that landed.
func (c *Controller) done(ctx context.Context, written *v1.Pod, msg string) {
	c.restored.Inc()
	if c.recorder != nil {
		c.recorder.Event(written, v1.EventTypeNormal, EventReadinessRestored, msg)
	}
	klog.FromContext(ctx).Info("Restored pod readiness after its node recovered", "pod", klog.KObj(written), "node", written.Spec.NodeName)
}

// takeLost forgets the restore of the pod key whose answer was lost, and
// returns it if it was for the pod uid (a pod of the same name created
// since is another pod).
func (c *Controller) takeLost(key string, uid types.UID) (lostRestore, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	l, ok := c.lost[key]
	delete(c.lost, key)
	return l, ok && l.uid == uid
}
