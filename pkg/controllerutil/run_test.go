package controllerutil

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"
	testclock "k8s.io/utils/clock/testing"
)

func newTestBase(t *testing.T) (*Base, *testclock.FakeClock) {
	t.Helper()
	clk := testclock.NewFakeClock(time.Unix(1000, 0))
	c := clock.WithTicker(clk)
	b, err := NewBase(Setup{Name: "test", ProgressTimeout: time.Minute}, &c)
	if err != nil {
		t.Fatal(err)
	}
	return b, clk
}

func newQueue(b *Base) workqueue.TypedRateLimitingInterface[string] {
	return Track(b, "node", workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[string]()))
}

// TestHealthyIdleQueue: workers waiting on an empty queue are not stuck,
// however long they wait.
func TestHealthyIdleQueue(t *testing.T) {
	b, clk := newTestBase(t)
	q := newQueue(b)
	defer q.ShutDown()
	clk.Step(time.Hour)
	if err := b.Healthy(clk.Now()); err != nil {
		t.Fatalf("idle: %v", err)
	}
}

// TestHealthyStuckKey: a key taken and not done for longer than the bound
// is reported with its name and how long; done, the controller is healthy.
func TestHealthyStuckKey(t *testing.T) {
	b, clk := newTestBase(t)
	q := newQueue(b)
	defer q.ShutDown()
	q.Add("a")
	q.Add("b")
	a, _ := q.Get()
	clk.Step(30 * time.Second)
	bKey, _ := q.Get()
	q.Done(bKey)
	clk.Step(30 * time.Second)
	if err := b.Healthy(clk.Now()); err != nil {
		t.Fatalf("at the bound: %v", err)
	}
	clk.Step(10 * time.Second)
	err := b.Healthy(clk.Now())
	if err == nil || err.Error() != "busy on node a for 1m10s (bound 1m0s)" {
		t.Fatalf("stuck key: %v", err)
	}
	q.Done(a)
	if err := b.Healthy(clk.Now()); err != nil {
		t.Fatalf("after Done: %v", err)
	}
}

// TestHealthyStuckLoop: a loop is stuck once it has neither turned nor
// progressed for its period plus the bound; progress within a turn counts.
func TestHealthyStuckLoop(t *testing.T) {
	b, clk := newTestBase(t)
	l := b.Loop("monitor loop", 5*time.Second)
	clk.Step(50 * time.Second)
	l.Progressed()
	clk.Step(65 * time.Second)
	if err := b.Healthy(clk.Now()); err != nil {
		t.Fatalf("within period+bound: %v", err)
	}
	clk.Step(time.Second)
	err := b.Healthy(clk.Now())
	if err == nil || err.Error() != "the monitor loop has not turned for 1m6s (bound 1m5s)" {
		t.Fatalf("stuck loop: %v", err)
	}
	l.Turn()
	if err := b.Healthy(clk.Now()); err != nil {
		t.Fatalf("turned: %v", err)
	}
}

// TestHealthyStep: a step begun outside a queue is tracked the same way.
func TestHealthyStep(t *testing.T) {
	b, clk := newTestBase(t)
	end := b.Begin("pod deletion default/p")
	clk.Step(2 * time.Minute)
	if err := b.Healthy(clk.Now()); err == nil || !strings.Contains(err.Error(), "busy on pod deletion default/p for 2m0s") {
		t.Fatalf("stuck step: %v", err)
	}
	end()
	if err := b.Healthy(clk.Now()); err != nil {
		t.Fatalf("ended: %v", err)
	}
}

// TestNewBaseValidatesAndDefaults: a configuration error comes back as it
// is; a nil clock becomes the real one.
func TestNewBaseValidatesAndDefaults(t *testing.T) {
	bad := errors.New("--x must be positive")
	var c clock.WithTicker
	if _, err := NewBase(Setup{Name: "x", Validate: func() error { return bad }}, &c); !errors.Is(err, bad) {
		t.Fatalf("validate: %v", err)
	}
	b, err := NewBase(Setup{Name: "x"}, &c)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := c.(clock.RealClock); !ok || b.timeout != DefaultProgressTimeout || b.DryRun == nil {
		t.Fatalf("defaults: clock %T, timeout %v, dry run %v", c, b.timeout, b.DryRun)
	}
}

// TestRunStartsAndStops: Run waits for the caches, starts, and once ctx
// ends shuts the queues down, waits for the workers, then stops.
func TestRunStartsAndStops(t *testing.T) {
	b, _ := newTestBase(t)
	q := newQueue(b)
	var synced atomic.Bool
	processed := make(chan string, 1)
	var stopped atomic.Int32
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- b.Run(ctx, Work{
			Synced: []cache.InformerSynced{synced.Load},
			Queues: []interface{ ShutDown() }{q},
			Start: func(ctx context.Context) error {
				Workers(ctx, b, 2, q, "node", "failed", func(_ context.Context, key string) error { processed <- key; return nil })
				return nil
			},
			Stop: func() {
				if !q.ShuttingDown() {
					t.Error("Stop before the queues shut down")
				}
				stopped.Add(1)
			},
		})
	}()
	q.Add("a")
	synced.Store(true)
	if key := <-processed; key != "a" {
		t.Fatalf("processed %q", key)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if stopped.Load() != 1 {
		t.Fatalf("Stop ran %d times", stopped.Load())
	}
}
