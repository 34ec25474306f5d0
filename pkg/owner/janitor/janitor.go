// Package janitor lifts what a controller that no longer runs left on the
// Nodes: an owner record (package owner) whose expiry has passed goes, with
// the cordon or taint it owns, and so does a remediation repair record
// (nodeshepherd.io/remediation) whose expiry has passed, so that the drain
// stops holding a cordon for a repair nobody runs.
//
// A live owner renews its records with half of owner.Lease left, so only an
// orphan's reach their expiry; and the janitor never judges the records of
// a controller that runs in its own process (they are that controller's to
// renew and lift). Each lift is one Node patch bound to the resourceVersion
// it was judged on: a conflict (the owner renewed it meanwhile, someone
// uncordoned) reads the Node again and judges afresh. Each lift is said in
// an event on the Node (OwnerRecordExpired) and counted
// (nodeshepherd_owner_records_expired_total). A cordon or taint without a
// record is someone else's and is never touched.
//
// It runs in every process that runs one of the controllers that may carry
// it (pkg/controllers: their roles grant get and patch on Nodes), once per
// process, inside the first of them.
package janitor

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	v1 "k8s.io/api/core/v1"
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
	"github.com/nodeshepherd/nodeshepherd/pkg/owner"
	rem "github.com/nodeshepherd/nodeshepherd/pkg/remediation"
)

// Name names the janitor in logs, dry-run reports and health answers.
const Name = "owner-expiry"

// EventSource is the component name on its events.
const EventSource = "nodeshepherd-owner-expiry"

// EventExpired (Warning) says one lift: which record, whose, what went.
const EventExpired = "OwnerRecordExpired"

// RemediationName is the remediation controller's name, the owner of the
// repair records (controllers import no other controller; pkg/controllers'
// TestJanitorNamesMatch checks it).
const RemediationName = "remediation"

// Kinds of record, the record label of the metric.
const (
	KindCordon = "cordon"
	KindTaint  = "taint"
	KindRepair = "repair"
)

// Lift is one expired record to lift.
type Lift struct {
	// Controller owns the record; Key is its key in nodeshepherd.io/owners,
	// or rem.AnnotationState for the repair record.
	Controller, Key string
	// Expired is when it expired; Why what the record said.
	Expired time.Time
	Why     string
}

// Kind is the kind of record: KindCordon, KindTaint or KindRepair.
func (l Lift) Kind() string {
	switch l.Key {
	case owner.Cordon:
		return KindCordon
	case rem.AnnotationState:
		return KindRepair
	}
	return KindTaint
}

// what words what the lift takes off the node.
func (l Lift) what() string {
	switch l.Kind() {
	case KindCordon:
		return "the cordon"
	case KindRepair:
		return "the repair record " + rem.AnnotationState
	}
	return "the taint " + l.Key
}

// Due says what to lift on n at now: the expired owner records of the
// controllers that live does not name, and the expired repair record when
// the remediation controller is not live. next is the earliest later
// expiry among such records (zero: none), when to look again. An owners
// annotation or repair record that cannot be read is left alone: nothing is
// judged on what cannot be read.
func Due(n *v1.Node, live func(controller string) bool, now time.Time) (lifts []Lift, next time.Time) {
	later := func(t time.Time) {
		if next.IsZero() || t.Before(next) {
			next = t
		}
	}
	if recs, err := owner.Read(n); err == nil {
		for _, key := range owner.Keys(recs) {
			r := recs[key]
			switch {
			case r.Expires == nil || live(r.Controller):
			case r.Expired(now):
				lifts = append(lifts, Lift{Controller: r.Controller, Key: key, Expired: *r.Expires, Why: r.Why})
			default:
				later(*r.Expires)
			}
		}
	}
	if exp, ok, err := rem.RecordExpiry(n); ok && err == nil && exp != nil && !live(RemediationName) {
		if !now.Before(*exp) {
			why := ""
			if r, ok, err := rem.RequestOf(n); ok && err == nil {
				why = r.Why()
			}
			lifts = append(lifts, Lift{Controller: RemediationName, Key: rem.AnnotationState, Expired: *exp, Why: why})
		} else {
			later(*exp)
		}
	}
	return lifts, next
}

// apply takes the lifts off n (n is changed).
func apply(n *v1.Node, lifts []Lift) {
	for _, l := range lifts {
		if l.Key == rem.AnnotationState {
			delete(n.Annotations, rem.AnnotationState)
			continue
		}
		owner.Lift(n, l.Key)
	}
}

// Deps are the janitor's collaborators.
type Deps struct {
	Client   kubernetes.Interface
	Nodes    coreinformers.NodeInformer
	Recorder record.EventRecorder
	Registry prometheus.Registerer
	Clock    clock.WithTicker
	DryRun   bool
	// ProgressTimeout bounds a step (controllerutil.DefaultProgressTimeout when zero).
	ProgressTimeout time.Duration
	// Live are the controllers this process runs: their records are
	// theirs to renew and lift, never the janitor's.
	Live []string
}

// Janitor lifts expired records; Run starts it.
type Janitor struct {
	*controllerutil.Base
	client   kubernetes.Interface
	nodes    corelisters.NodeLister
	synced   []cache.InformerSynced
	recorder record.EventRecorder
	clock    clock.WithTicker
	live     []string
	queue    workqueue.TypedRateLimitingInterface[string]
	expired  *prometheus.CounterVec

	mu sync.Mutex
	// reported holds, in dry run, the lifts said per node (by key and
	// expiry), so that each is reported once and not at every change of
	// the Node.
	reported map[string]map[string]time.Time
}

// New builds the janitor.
func New(d Deps) (*Janitor, error) {
	reg := d.Registry
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	b, err := controllerutil.NewBase(controllerutil.Setup{Name: Name, DryRun: d.DryRun, Registry: reg, Recorder: d.Recorder,
		ProgressTimeout: d.ProgressTimeout}, &d.Clock)
	if err != nil {
		return nil, err
	}
	j := &Janitor{Base: b, client: d.Client, nodes: d.Nodes.Lister(),
		recorder: d.Recorder, clock: d.Clock, live: slices.Clone(d.Live), reported: map[string]map[string]time.Time{},
		queue: controllerutil.Track(b, "node", workqueue.NewTypedRateLimitingQueueWithConfig(controllerutil.RetryLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "owner_expiry", Clock: d.Clock})),
		expired: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "nodeshepherd", Subsystem: "owner", Name: "records_expired_total",
			Help: "Expired records of controllers that no longer run, lifted with what they owned, by the record's controller and kind (cordon, taint, repair: the remediation repair record)."},
			[]string{"controller", "record"}),
	}
	if err := reg.Register(j.expired); err != nil {
		return nil, err
	}
	add := func(obj any) {
		if n, ok := kube.Untombstone(obj).(*v1.Node); ok {
			j.queue.Add(n.Name)
		}
	}
	// It starts once the handler has seen the first list (its registration's
	// HasSynced): every node is queued by then.
	nodeReg, err := d.Nodes.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: add,
		UpdateFunc: func(_, obj any) { add(obj) }, DeleteFunc: add})
	if err != nil {
		return nil, err
	}
	j.synced = []cache.InformerSynced{nodeReg.HasSynced}
	return j, nil
}

// Run works until ctx ends.
func (j *Janitor) Run(ctx context.Context) error {
	return j.Base.Run(ctx, controllerutil.Work{Synced: j.synced, Queues: []interface{ ShutDown() }{j.queue},
		Start: func(ctx context.Context) error {
			klog.FromContext(ctx).Info("Lifting the expired owner records of controllers this process does not run", "runs", j.live, "lease", owner.Lease)
			controllerutil.Workers(ctx, j.Base, 1, j.queue, "node", "Lifting expired owner records; will retry", j.sync)
			return nil
		}})
}

func (j *Janitor) isLive(c string) bool { return slices.Contains(j.live, c) }

func (j *Janitor) sync(ctx context.Context, name string) error {
	n, err := j.nodes.Get(name)
	if apierrors.IsNotFound(err) {
		j.mu.Lock()
		delete(j.reported, name)
		j.mu.Unlock()
		return nil
	}
	if err != nil {
		return err
	}
	now := j.clock.Now()
	lifts, next := Due(n, j.isLive, now)
	if len(lifts) > 0 {
		if err := j.lift(ctx, n); err != nil {
			return err
		}
	}
	if !next.IsZero() {
		j.queue.AddAfter(name, next.Sub(now))
	}
	return nil
}

// lift takes the expired records off the node in one patch bound to the
// resourceVersion they were judged on; after a conflict the node is read
// again and judged afresh (its owner may have renewed them meanwhile).
func (j *Janitor) lift(ctx context.Context, cached *v1.Node) error {
	cur := cached
	var done []Lift
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		ctx, cancel := context.WithTimeout(ctx, kube.WriteTimeout)
		defer cancel()
		if cur == nil {
			fresh, err := j.client.CoreV1().Nodes().Get(ctx, cached.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			cur = fresh
		}
		n := cur
		cur = nil // a retry reads afresh
		lifts, _ := Due(n, j.isLive, j.clock.Now())
		done = nil
		if len(lifts) == 0 {
			return nil
		}
		m := n.DeepCopy()
		apply(m, lifts)
		patch := liftPatch(n, m, lifts)
		if j.DryRun.Enabled() {
			j.reportOnce(ctx, n, lifts, patch)
			return nil
		}
		if _, err := j.client.CoreV1().Nodes().Patch(ctx, n.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			return err
		}
		done = lifts
		return nil
	})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("lifting expired records of node %s: %w", cached.Name, err)
	}
	for _, l := range done {
		msg := fmt.Sprintf("Lifted %s of controller %s (record %q): its record expired at %s without renewal, and %s does not run in this process (it renews its records while it runs)",
			l.what(), l.Controller, l.Key, l.Expired.UTC().Format(time.RFC3339), l.Controller)
		if l.Why != "" {
			msg += "; the record said: " + l.Why
		}
		j.expired.WithLabelValues(l.Controller, l.Kind()).Inc()
		controllerutil.NodeEvent(j.recorder, cached, v1.EventTypeWarning, EventExpired, msg)
		klog.FromContext(ctx).Info("Lifted an expired owner record", "node", cached.Name, "controller", l.Controller, "record", l.Key, "expired", l.Expired)
	}
	return nil
}

// reportOnce reports the lifts in dry run, once per record and expiry.
func (j *Janitor) reportOnce(ctx context.Context, n *v1.Node, lifts []Lift, patch []byte) {
	j.mu.Lock()
	said := j.reported[n.Name]
	if said == nil {
		said = map[string]time.Time{}
		j.reported[n.Name] = said
	}
	fresh := false
	for _, l := range lifts {
		if t, ok := said[l.Key]; !ok || !t.Equal(l.Expired) {
			said[l.Key], fresh = l.Expired, true
		}
	}
	j.mu.Unlock()
	if fresh {
		j.DryRun.Report(ctx, n, "lift-expired", string(patch))
	}
}

// liftPatch is the merge patch from n to m, the lifts taken off: the
// records' annotations, and the cordon or the taint list (replaced whole,
// as read at n's resourceVersion, which the patch requires).
func liftPatch(n, m *v1.Node, lifts []Lift) []byte {
	ann := map[string]any{}
	spec := map[string]any{}
	for _, l := range lifts {
		switch l.Kind() {
		case KindRepair:
			ann[rem.AnnotationState] = nil
			continue
		case KindCordon:
			spec["unschedulable"] = m.Spec.Unschedulable
		default:
			taints := m.Spec.Taints
			if taints == nil {
				taints = []v1.Taint{}
			}
			spec["taints"] = taints
		}
		if v, ok := m.Annotations[owner.Annotation]; ok {
			ann[owner.Annotation] = v
		} else {
			ann[owner.Annotation] = nil
		}
	}
	body := map[string]any{"metadata": map[string]any{"resourceVersion": n.ResourceVersion, "annotations": ann}}
	if len(spec) > 0 {
		body["spec"] = spec
	}
	b, _ := json.Marshal(body)
	return b
}

// Keys lists the lifts' keys in order, for messages and tests.
func Keys(lifts []Lift) []string {
	out := make([]string, len(lifts))
	for i, l := range lifts {
		out[i] = l.Key
	}
	sort.Strings(out)
	return out
}
