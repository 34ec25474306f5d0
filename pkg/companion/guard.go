package companion

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/pager"
	"k8s.io/klog/v2"

	"github.com/nodeshepherd/nodeshepherd/pkg/manager"
)

// EventSource is the component name on the events of the check.
const EventSource = "nodeshepherd"

// EventConflictingWriter is the reason of the Warning event on the object
// that shows the other writer, when a controller is refused or stopped.
const EventConflictingWriter = "ConflictingWriter"

// Guarded describes a controller that is not a companion.
type Guarded struct {
	Name string
	// Replaces is kube-controller-manager's name of the same controller, for
	// the error's advice ("" when it has none there).
	Replaces string
	Claims   []Claim
	// Allowed is --allow-conflicting-writers naming it.
	Allowed bool
	// Own is nodeshepherd's field manager, which a claim of any writer
	// (Claim.Writer "") leaves out; empty: the one of the manager's client
	// (FieldManager).
	Own string
}

// Guard wraps the constructor of a controller that is not a companion. The
// constructor first looks for the claims' writers in every Node (and Pod,
// if a claim is about pods; a list that fails is left to the informers), and refuses to build the controller while one
// of them is active: the manager then starts nothing and the process exits
// with the error, which names the controller, the evidence and the flag
// that overrides. Once it runs, the informers' updates are checked too; a
// writer that appears stops the controller, which then returns the error,
// and the manager stops as it does for any controller that returns (the
// process exits non-zero, /healthz says why; restarted, it is refused at
// start while the evidence stays). Each refusal is a Warning event
// ConflictingWriter on the object that shows the writer, an error in the
// log and nodeshepherd_conflicting_writer{controller,writer} = 1. In dry run
// or with --allow-conflicting-writers the evidence is only logged. A claim
// with a Lease has its Lease read at start and every leaseRecheck while the
// controller runs.
func Guard(g Guarded, build manager.Constructor) manager.Constructor {
	if len(g.Claims) == 0 {
		return build
	}
	return func(ctx manager.Context) (manager.Controller, error) {
		gd := &guard{Guarded: g, mctx: ctx, metric: conflictMetric(ctx.Registry), now: ctx.Clock.Now}
		if gd.Own == "" {
			gd.Own = FieldManager(ctx.RESTConfig)
		}
		// Constructors get no context: the check is bounded on its own.
		bg, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		found, err := gd.scan(bg)
		if err != nil {
			// Not a failure of its own: what cannot be listed now, the
			// informers deliver (and check) once they sync, or the manager
			// reports that they do not.
			klog.Background().Error(err, "Cannot check for other writers before starting; checking what the informers deliver", "controller", g.Name)
		}
		if len(found) > 0 {
			if g.Allowed || ctx.DryRun {
				klog.Background().Info("Another writer writes what this controller owns; running it anyway", "controller", g.Name,
					"allowConflictingWriters", g.Allowed, "dryRun", ctx.DryRun, "evidence", found[0].String(), "more", len(found)-1)
			} else {
				return nil, gd.refuse(bg, found, false)
			}
		}
		inner, err := build(ctx)
		if err != nil || g.Allowed || ctx.DryRun {
			return inner, err
		}
		gd.inner = inner
		gd.signal = make(chan struct{}, 1)
		onChange := func(old, obj any) {
			if o, ok := obj.(runtime.Object); ok {
				prev, _ := old.(runtime.Object)
				gd.observe(prev, o)
			}
		}
		handler := cache.ResourceEventHandlerFuncs{AddFunc: func(obj any) { onChange(nil, obj) }, UpdateFunc: onChange}
		if gd.wants(true) {
			if _, err := ctx.Informers.Core().V1().Nodes().Informer().AddEventHandler(handler); err != nil {
				return nil, err
			}
		}
		if gd.wants(false) {
			if _, err := ctx.Informers.Core().V1().Pods().Informer().AddEventHandler(handler); err != nil {
				return nil, err
			}
		}
		return gd, nil
	}
}

type guard struct {
	Guarded
	mctx   manager.Context
	inner  manager.Controller
	metric *prometheus.GaugeVec
	now    func() time.Time

	// liveness is each writer's, from its Lease (used by one goroutine at
	// a time: the constructor, then Run), keyed by LiveLease and writer.
	liveness map[string]liveness
	// leaseDenied: the Leases of Lease claims that this identity may not
	// read, read no more.
	leaseDenied map[string]bool

	mu      sync.Mutex
	pending []Evidence
	signal  chan struct{}
}

type liveness struct {
	ok  bool
	why string
	at  time.Time
}

// leaseRecheck is how long a writer's liveness is taken as known.
const leaseRecheck = 10 * time.Second

// wants says whether a claim is about nodes (or pods).
func (g *guard) wants(nodes bool) bool {
	for _, c := range g.Claims {
		if (nodes && c.Node != nil) || (!nodes && c.Pod != nil) {
			return true
		}
	}
	return false
}

// wantsLeases says whether a claim is a Lease.
func (g *guard) wantsLeases() bool {
	for _, c := range g.Claims {
		if c.Lease != "" {
			return true
		}
	}
	return false
}

// leases returns the evidence of the claims' Leases: those held and renewed
// within their duration. A Lease this identity may not read is logged and
// not read again.
func (g *guard) leases(ctx context.Context) []Evidence {
	var out []Evidence
	for i := range g.Claims {
		c := &g.Claims[i]
		if c.Lease == "" || g.leaseDenied[c.Lease] {
			continue
		}
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		s := readLease(rctx, g.mctx.Client, c.Lease, g.now())
		cancel()
		if g.deny(ctx, s, c.Writer) {
			continue
		}
		if !s.live() {
			klog.FromContext(ctx).V(4).Info("Another writer's leader Lease shows no running writer", "controller", g.Name, "writer", c.Writer, "lease", s.why())
			continue
		}
		out = append(out, Evidence{Controller: g.Name, Object: s.lease, Kind: "lease", Name: LeaseNamespace + "/" + c.Lease, What: s.held(),
			Writer: c.Writer, claim: c})
	}
	return out
}

// errDenied stands for a Lease this identity may not read, once it was told so.
var errDenied = errors.New("forbidden to this identity, not read again")

// deny notes a Lease this identity may not read, with an error in the log,
// so that it is not asked for again (a 403 every leaseRecheck helps no one).
func (g *guard) deny(ctx context.Context, s leaseState, writer string) bool {
	if !s.forbidden() {
		return false
	}
	if g.leaseDenied == nil {
		g.leaseDenied = map[string]bool{}
	}
	g.leaseDenied[s.name] = true
	klog.FromContext(ctx).Error(s.err, "Cannot read another writer's leader Lease: only its writes seen being made show it running", "controller", g.Name,
		"lease", LeaseNamespace+"/"+s.name, "writer", writer)
	return true
}

// scan lists what the claims are about and returns the evidence of active
// writers.
func (g *guard) scan(ctx context.Context) ([]Evidence, error) {
	found := g.leases(ctx)
	visit := func(obj runtime.Object) error {
		found = append(found, check(g.Name, g.Own, g.Claims, obj)...)
		return nil
	}
	client := g.mctx.Client
	if g.wants(true) {
		p := pager.New(func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			return client.CoreV1().Nodes().List(ctx, opts)
		})
		if err := p.EachListItem(ctx, metav1.ListOptions{}, visit); err != nil {
			return nil, fmt.Errorf("listing nodes: %w", err)
		}
	}
	if g.wants(false) {
		p := pager.New(func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			return client.CoreV1().Pods("").List(ctx, opts)
		})
		if err := p.EachListItem(ctx, metav1.ListOptions{}, visit); err != nil {
			return nil, fmt.Errorf("listing pods: %w", err)
		}
	}
	return g.activeOnly(ctx, found), nil
}

// activeOnly keeps the evidence of writers whose leader Lease does not show
// them stopped, and notes their liveness on it. A writer's Lease is read
// at most every leaseRecheck: stale evidence on a busy object costs no
// read per update. A Lease found live is its own evidence; a write seen
// being made shows its writer running.
func (g *guard) activeOnly(ctx context.Context, found []Evidence) []Evidence {
	var out []Evidence
	for _, e := range found {
		if e.Kind == "lease" {
			out = append(out, e)
			continue
		}
		if e.fresh {
			e.Writes = fmt.Sprintf("%s runs: it wrote this while nodeshepherd's %s controller ran", e.Writer, g.Name)
			out = append(out, e)
			continue
		}
		strict := e.claim != nil && e.claim.LiveLease
		key := e.Writer
		if strict {
			key = "live/" + key
		}
		now := g.now()
		v, seen := g.liveness[key]
		if !seen || now.Sub(v.at) > leaseRecheck {
			rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			if strict {
				s := leaseState{name: e.Writer, err: errDenied}
				if !g.leaseDenied[e.Writer] {
					s = readLease(rctx, g.mctx.Client, e.Writer, now)
					g.deny(ctx, s, e.Writer)
				}
				v.ok, v.why = s.live(), s.why()
				if !v.ok {
					v.why += ", so what it wrote is taken as history"
				}
			} else {
				v.ok, v.why = active(rctx, g.mctx.Client, e.Writer, now)
			}
			cancel()
			v.at = now
			if g.liveness == nil {
				g.liveness = map[string]liveness{}
			}
			g.liveness[key] = v
		}
		e.Writes = e.Writer + " runs: " + v.why
		if !v.ok {
			klog.FromContext(ctx).V(2).Info("Ignoring what a stopped writer wrote", "controller", g.Name, "evidence", e.String())
			continue
		}
		out = append(out, e)
	}
	return out
}

// observe checks an object the informers delivered; old is what they held
// before (nil for an object they did not hold). Evidence that old did not
// hold, or that its writer wrote again since (its managedFields time
// moved), is a write seen being made.
func (g *guard) observe(old, obj runtime.Object) {
	found := check(g.Name, g.Own, g.Claims, obj)
	if len(found) == 0 {
		return
	}
	if old != nil {
		// By field, not by what it holds: another writer's change of the
		// value is not a new write of this one.
		key := func(e Evidence) string { return e.Field.String() + "\x00" + e.Writer + "\x00" + e.At.String() }
		before := map[string]bool{}
		for _, e := range check(g.Name, g.Own, g.Claims, old) {
			before[key(e)] = true
		}
		for i, e := range found {
			found[i].fresh = !before[key(e)]
		}
	}
	g.mu.Lock()
	g.pending = append(g.pending, found...)
	g.mu.Unlock()
	select {
	case g.signal <- struct{}{}:
	default:
	}
}

// Run runs the controller until ctx ends or an active conflicting writer
// shows up; then it stops the controller and returns why.
func (g *guard) Run(ctx context.Context) error {
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var recheck <-chan time.Time
	if g.wantsLeases() {
		t := g.mctx.Clock.NewTicker(leaseRecheck)
		defer t.Stop()
		recheck = t.C()
	}
	done := make(chan error, 1)
	panicked := make(chan any, 1)
	go func() {
		// A panic is handed back to this goroutine, where the manager
		// recovers and reports it as the controller's.
		defer func() {
			if r := recover(); r != nil {
				panicked <- r
			}
		}()
		done <- g.inner.Run(cctx)
	}()
	for {
		select {
		case err := <-done:
			return err
		case r := <-panicked:
			panic(r)
		case <-g.signal:
		case <-recheck:
			g.mu.Lock()
			g.pending = append(g.pending, g.leases(ctx)...)
			g.mu.Unlock()
		}
		g.mu.Lock()
		found := g.pending
		g.pending = nil
		g.mu.Unlock()
		if found = g.activeOnly(ctx, found); len(found) == 0 || ctx.Err() != nil {
			continue
		}
		cancel()
		err := g.refuse(ctx, found, true)
		select {
		case inner := <-done:
			return errors.Join(err, inner)
		case r := <-panicked:
			panic(r)
		}
	}
}

// Healthy is the controller's own health check, if it has one.
func (g *guard) Healthy(now time.Time) error {
	if h, ok := g.inner.(manager.HealthChecker); ok {
		return h.Healthy(now)
	}
	return nil
}

// refuse reports the evidence by event, metric and log, and returns the error.
func (g *guard) refuse(ctx context.Context, found []Evidence, running bool) error {
	first := found[0]
	g.metric.WithLabelValues(g.Name, first.Writer).Set(1)
	verb, did := "refusing to run", "not started"
	if running {
		verb, did = "stopped", "stopped"
	}
	does, why := "writes what it owns", "Two writers would undo each other's work"
	advice := fmt.Sprintf("run nodeshepherd without %s (companion mode, docs/companion.md)", g.Name)
	if g.Replaces != "" && first.Writer == KubeControllerManager {
		advice = fmt.Sprintf("turn it off in %s (--controllers=*,-%s) or %s", first.Writer, g.Replaces, advice)
	}
	if c := first.claim; c != nil {
		does, why = cmp.Or(c.Does, does), cmp.Or(c.Why, why)
		if c.Advice != nil {
			advice = c.Advice(first.Writer)
		}
	}
	more := ""
	if len(found) > 1 {
		more = fmt.Sprintf(" (and %d more)", len(found)-1)
	}
	msg := fmt.Sprintf("%s controller %s: %s %s: %s%s. %s: %s, or pass --allow-conflicting-writers=%s to run it anyway",
		verb, g.Name, first.Writer, does, first, more, why, advice, g.Name)
	seen := map[string]bool{}
	for _, e := range found {
		if key := e.Kind + "/" + e.Name; !seen[key] && len(seen) < 5 {
			seen[key] = true
			text := fmt.Sprintf("%s last wrote %s here, so it manages them", e.Writer, e.What)
			if e.Kind == "lease" {
				text = fmt.Sprintf("%s holds this Lease (%s), so it runs", e.Writer, e.What)
			}
			g.event(ctx, e, fmt.Sprintf("nodeshepherd's %s controller %s: %s (--allow-conflicting-writers=%s overrides)", g.Name, did, text, g.Name))
		}
	}
	err := errors.New(msg)
	klog.FromContext(ctx).Error(err, "Conflicting writer", "controller", g.Name, "writer", first.Writer)
	return err
}

// conflictMetric registers nodeshepherd_conflicting_writer once per registry.
func conflictMetric(reg prometheus.Registerer) *prometheus.GaugeVec {
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "nodeshepherd", Name: "conflicting_writer",
		Help: "1 when the controller was refused or stopped because writer, another field manager (kube-controller-manager, kube-scheduler), writes what it owns or serves the same scheduler name."},
		[]string{"controller", "writer"})
	if reg == nil {
		return g
	}
	if err := reg.Register(g); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			return are.ExistingCollector.(*prometheus.GaugeVec)
		}
	}
	return g
}

// event writes a Warning event on the evidence's object at once, not
// through the manager's asynchronous recorder: a refused process exits
// right after, and the event must not go with it.
func (g *guard) event(ctx context.Context, e Evidence, msg string) {
	meta, ok := e.Object.(metav1.Object)
	if !ok {
		return
	}
	ref := v1.ObjectReference{APIVersion: "v1", Kind: "Node", Name: meta.GetName(), UID: meta.GetUID()}
	ns := metav1.NamespaceDefault // where events of cluster-scoped objects go
	switch e.Kind {
	case "pod":
		ref.Kind, ref.Namespace, ns = "Pod", meta.GetNamespace(), meta.GetNamespace()
	case "lease":
		ref.APIVersion, ref.Kind, ref.Namespace, ns = "coordination.k8s.io/v1", "Lease", meta.GetNamespace(), meta.GetNamespace()
	}
	now := metav1.NewTime(g.now())
	ev := &v1.Event{ObjectMeta: metav1.ObjectMeta{GenerateName: meta.GetName() + ".", Namespace: ns}, InvolvedObject: ref,
		Reason: EventConflictingWriter, Message: msg, Type: v1.EventTypeWarning, Source: v1.EventSource{Component: EventSource},
		FirstTimestamp: now, LastTimestamp: now, Count: 1, ReportingController: EventSource}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if _, err := g.mctx.Client.CoreV1().Events(ns).Create(ctx, ev, metav1.CreateOptions{}); err != nil {
		klog.FromContext(ctx).Error(err, "Writing the ConflictingWriter event", "object", e.Kind+"/"+e.Name)
	}
}
