package controllerutil

import (
	"context"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
)

var (
	dryRunCounter = prometheus.CounterOpts{Namespace: "nodeshepherd", Name: "dry_run_actions_total",
		Help: "Writes a controller in --dry-run mode would have made, by controller and action."}
)

// DryRun reports what a controller would write when it runs with --dry-run:
// a log line, an event and a counter. Nothing is written but the event.
type DryRun struct {
	enabled    bool
	controller string
	counter    *prometheus.CounterVec
	recorder   record.EventRecorder
}

// EventDryRun is the event reason of dry-run reports.
const EventDryRun = "DryRun"

// NewDryRun returns the reporter of one controller.
func NewDryRun(enabled bool, controller string, reg prometheus.Registerer, recorder record.EventRecorder) *DryRun {
	// Every controller shares the one counter; the first registers it.
	counter := prometheus.NewCounterVec(dryRunCounter, []string{"controller", "action"})
	if err := reg.Register(counter); err != nil {
		are, ok := err.(prometheus.AlreadyRegisteredError)
		if !ok {
			panic(err)
		}
		counter = are.ExistingCollector.(*prometheus.CounterVec)
	}
	return &DryRun{enabled: enabled, controller: controller, counter: counter, recorder: recorder}
}

// Enabled tells whether the controller runs with --dry-run; every dry-run
// branch of a controller asks here (a nil reporter is not in dry run).
func (d *DryRun) Enabled() bool { return d != nil && d.enabled }

// Report records one action that was not written.
func (d *DryRun) Report(ctx context.Context, obj runtime.Object, action, message string) {
	klog.FromContext(ctx).Info("Dry run: not writing", "controller", d.controller, "action", action, "detail", message)
	d.counter.WithLabelValues(d.controller, action).Inc()
	if d.recorder != nil && obj != nil {
		d.recorder.Eventf(obj, v1.EventTypeNormal, EventDryRun, "Would %s: %s", action, message)
	}
}

// DryRunWrites remembers, per object, the changes a controller in dry-run
// mode would have written, and applies them to every later view of the
// object: the informer never delivers them, yet budgets and later decisions
// must see them. Unlike an Overlay entry they outlive newer versions of the
// object, until Forget. The zero value is ready to use.
type DryRunWrites[T runtime.Object] struct {
	mu      sync.Mutex
	changes map[string][]func(T)
}

// Add remembers one change to the object under key.
func (w *DryRunWrites[T]) Add(key string, change func(T)) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.changes == nil {
		w.changes = map[string][]func(T){}
	}
	w.changes[key] = append(w.changes[key], change)
}

// Apply returns obj with the remembered changes applied, in order, to a
// copy; obj itself when there are none.
func (w *DryRunWrites[T]) Apply(key string, obj T) T {
	w.mu.Lock()
	changes := w.changes[key]
	w.mu.Unlock()
	if len(changes) == 0 {
		return obj
	}
	out := obj.DeepCopyObject().(T)
	for _, change := range changes {
		change(out)
	}
	return out
}

// Forget drops the changes to the object under key (deleted, or no longer
// the controller's).
func (w *DryRunWrites[T]) Forget(key string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.changes, key)
}
