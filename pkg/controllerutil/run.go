package controllerutil

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/nodeshepherd/nodeshepherd/pkg/faulthook"
	"github.com/nodeshepherd/nodeshepherd/pkg/kube"
)

// DefaultProgressTimeout is how long one step of a controller (a work item,
// a turn of a loop) may take before the controller counts as stuck and the
// process gives up the Lease. A step makes a few API writes, each bounded by
// kube.WriteTimeout (15 s) and kube-apiserver's own 60 s request timeout, and
// the long passes (nodelifecycle's, cloudnodelifecycle's over every node)
// report progress node by node: two minutes is far above any of these, so
// only a step that waits on something that will not come reaches it.
const DefaultProgressTimeout = 2 * time.Minute

// MinProgressTimeout is the least --controller-progress-timeout accepted:
// one write that times out must not make a controller look stuck.
const MinProgressTimeout = kube.WriteTimeout + 5*time.Second

// Setup is what every controller's constructor starts from.
type Setup struct {
	Name string
	// Validate checks the configuration (nil: nothing to check).
	Validate func() error
	DryRun   bool
	Registry prometheus.Registerer
	Recorder record.EventRecorder
	// ProgressTimeout bounds a step (DefaultProgressTimeout when zero).
	ProgressTimeout time.Duration
}

// Base is what every controller has the same way: its configuration
// checked, a clock, the dry-run reporter, a Run that waits for the caches
// and shuts the queues down, and the tracking of its steps that its health
// check (Healthy, manager.HealthChecker) reads. Controllers embed it.
type Base struct {
	name    string
	clock   clock.WithTicker
	timeout time.Duration
	// DryRun reports what --dry-run does not write.
	DryRun *DryRun

	wg sync.WaitGroup

	mu    sync.Mutex
	steps map[stepID]step
	loops []*Loop
	next  uint64
}

type stepID struct {
	queue string
	key   any
}

type step struct {
	what  string
	since time.Time
}

// NewBase checks s, sets *clk to the real clock when it is nil and returns
// the base of controller s.Name.
func NewBase[C clock.WithTicker](s Setup, clk *C) (*Base, error) {
	if s.Validate != nil {
		if err := s.Validate(); err != nil {
			return nil, err
		}
	}
	if any(*clk) == nil {
		*clk = any(clock.RealClock{}).(C)
	}
	timeout := s.ProgressTimeout
	if timeout <= 0 {
		timeout = DefaultProgressTimeout
	}
	reg := s.Registry
	if reg == nil {
		reg = prometheus.NewRegistry() // unit tests: metrics nobody reads
	}
	return &Base{name: s.Name, clock: *clk, timeout: timeout, steps: map[stepID]step{},
		DryRun: NewDryRun(s.DryRun, s.Name, reg, s.Recorder)}, nil
}

// Work is what a controller's Run does around the shared parts.
type Work struct {
	// Synced are the informers to wait for.
	Synced []cache.InformerSynced
	// Queues are shut down when Run ends (their workers then return).
	Queues []interface{ ShutDown() }
	// Start starts the controller's goroutines (Go, Workers, Every) once
	// the caches synced; an error ends Run.
	Start func(ctx context.Context) error
	// Stop, when set, runs last, after the queues shut down and the
	// goroutines returned.
	Stop func()
}

// Run is every controller's Run: its logger named after it, a panic logged
// (and passed on to the manager, which names the controller), the caches
// waited for, then w.Start; once ctx ends the queues shut down, the
// goroutines are waited for and w.Stop runs.
func (b *Base) Run(ctx context.Context, w Work) error {
	defer utilruntime.HandleCrash()
	ctx = klog.NewContext(ctx, klog.FromContext(ctx).WithName(b.name))
	if w.Stop != nil {
		defer w.Stop()
	}
	defer b.wg.Wait()
	defer func() {
		for _, q := range w.Queues {
			q.ShutDown()
		}
	}()
	if !cache.WaitForNamedCacheSync(b.name, ctx.Done(), w.Synced...) {
		if ctx.Err() != nil {
			return nil // stopped before it started: not a failure
		}
		return fmt.Errorf("%s: caches did not sync", b.name)
	}
	if w.Start != nil {
		if err := w.Start(ctx); err != nil {
			return err
		}
	}
	<-ctx.Done()
	return nil
}

// Go runs f in a goroutine that Run waits for.
func (b *Base) Go(f func()) { b.wg.Go(f) }

// Workers starts n workers that sync q's keys (ProcessNext) until q shuts
// down; q must come from Track, so that each key is a step.
func Workers[T comparable](ctx context.Context, b *Base, n int, q workqueue.TypedRateLimitingInterface[T], logKey, failure string, sync func(context.Context, T) error) {
	for range n {
		b.Go(func() {
			for ProcessNext(ctx, q, logKey, failure, sync) {
			}
		})
	}
}

// Every runs f now and then every period until ctx ends, each turn a step
// of loop name.
func (b *Base) Every(ctx context.Context, name string, period time.Duration, f func(context.Context)) {
	l := b.Loop(name, period)
	b.Go(func() {
		t := b.clock.NewTicker(period)
		defer t.Stop()
		for {
			l.Turn()
			f(ctx)
			select {
			case <-ctx.Done():
				return
			case <-t.C():
			}
		}
	})
}

// Track returns q with every key, from Get to Done, a step of the
// controller (what names the queue's keys in Healthy's answer): a worker
// stuck on a key is reported, an idle one waiting in Get is not.
func Track[T comparable](b *Base, what string, q workqueue.TypedRateLimitingInterface[T]) workqueue.TypedRateLimitingInterface[T] {
	b.mu.Lock()
	b.next++
	id := fmt.Sprintf("%s#%d", what, b.next) // two queues may hold the same keys
	b.mu.Unlock()
	return &trackedQueue[T]{TypedRateLimitingInterface: q, b: b, id: id, what: what}
}

type trackedQueue[T comparable] struct {
	workqueue.TypedRateLimitingInterface[T]
	b        *Base
	id, what string
}

func (q *trackedQueue[T]) Get() (T, bool) {
	key, quit := q.TypedRateLimitingInterface.Get()
	if !quit {
		q.b.begin(stepID{q.id, key}, fmt.Sprintf("%s %v", q.what, key))
	}
	return key, quit
}

func (q *trackedQueue[T]) Done(key T) {
	q.b.end(stepID{q.id, key})
	q.TypedRateLimitingInterface.Done(key)
}

// Begin starts a step that is not a queue's key (what says what it is in
// Healthy's answer); the returned func ends it.
func (b *Base) Begin(what string) (end func()) {
	b.mu.Lock()
	b.next++
	id := stepID{"", b.next}
	b.mu.Unlock()
	b.begin(id, what)
	return func() { b.end(id) }
}

func (b *Base) begin(id stepID, what string) {
	b.mu.Lock()
	b.steps[id] = step{what: what, since: b.clock.Now()}
	b.mu.Unlock()
	faulthook.Hang(b.name) // tests only: the step never ends
}

func (b *Base) end(id stepID) {
	b.mu.Lock()
	delete(b.steps, id)
	b.mu.Unlock()
}

// Loop is a goroutine that turns every period and says so (Turn), and may
// also say that it moves on within a long turn (Progressed).
type Loop struct {
	name   string
	b      *Base
	period time.Duration
	last   atomic.Int64 // unix nanoseconds of the last sign of progress
}

// Loop registers a loop that turns every period; it counts as turning from
// now on.
func (b *Base) Loop(name string, period time.Duration) *Loop {
	l := &Loop{name: name, b: b, period: period}
	l.Progressed()
	b.mu.Lock()
	b.loops = append(b.loops, l)
	b.mu.Unlock()
	return l
}

// Turn records the start of a turn.
func (l *Loop) Turn() {
	if l == nil {
		return
	}
	l.Progressed()
	faulthook.Hang(l.b.name) // tests only: the turn never ends
}

// Progressed records progress within a turn (each node of a long pass), so
// that a long pass is not taken for a stuck one. A nil Loop (a pass that a
// unit test runs without Run) records nothing.
func (l *Loop) Progressed() {
	if l != nil {
		l.last.Store(l.b.clock.Now().UnixNano())
	}
}

// Healthy reports the step that has run longest, when it has run for more
// than the progress timeout, and a loop that has not turned or progressed
// for its period plus the timeout. A controller with nothing to do is
// healthy: no work is not stuck.
func (b *Base) Healthy(now time.Time) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	var problems []string
	var oldest *step
	busy := 0
	for _, s := range b.steps {
		if now.Sub(s.since) > b.timeout {
			busy++
			if oldest == nil || s.since.Before(oldest.since) {
				oldest = &s
			}
		}
	}
	if oldest != nil {
		msg := fmt.Sprintf("busy on %s for %v (bound %v)", oldest.what, now.Sub(oldest.since).Round(time.Second), b.timeout)
		if busy > 1 {
			msg += fmt.Sprintf(", and %d more steps over the bound", busy-1)
		}
		problems = append(problems, msg)
	}
	for _, l := range b.loops {
		bound := l.period + b.timeout
		if d := now.Sub(time.Unix(0, l.last.Load())); d > bound {
			problems = append(problems, fmt.Sprintf("the %s has not turned for %v (bound %v)", l.name, d.Round(time.Second), bound))
		}
	}
	if len(problems) == 0 {
		return nil
	}
	slices.Sort(problems)
	return fmt.Errorf("%s", strings.Join(problems, "; "))
}
