package tainteviction

import (
	"context"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	testingclock "k8s.io/utils/clock/testing"
)

type recorder struct {
	mu    sync.Mutex
	keys  []string
	done  chan string
	retry func(attempts int) bool
}

func (r *recorder) fn(key string, w timedWork) bool {
	r.mu.Lock()
	r.keys = append(r.keys, key)
	retry := r.retry
	r.mu.Unlock()
	r.done <- key
	return retry != nil && retry(w.attempts)
}

func waitRuns(t *testing.T, r *recorder, n int) {
	t.Helper()
	for i := 0; i < n; i++ {
		select {
		case <-r.done:
		case <-time.After(time.Minute):
			t.Fatalf("only %d of %d works ran", i, n)
		}
	}
}

func noRun(t *testing.T, r *recorder) {
	t.Helper()
	select {
	case k := <-r.done:
		t.Fatalf("%s ran before its time", k)
	case <-time.After(50 * time.Millisecond):
	}
}

func constBackoff(int) time.Duration { return time.Second }

func TestTimedWorkersImmediateAndDelayed(t *testing.T) {
	now := time.Now()
	clk := testingclock.NewFakeClock(now)
	r := &recorder{done: make(chan string, 10)}
	q := newTimedWorkers(clk, r.fn, constBackoff)
	q.Add("now", &timedWork{due: now})
	waitRuns(t, r, 1)
	q.Add("past", &timedWork{due: now.Add(-time.Hour)}) // a due time already past runs at once
	waitRuns(t, r, 1)
	q.Add("later", &timedWork{due: now.Add(10 * time.Second)})
	clk.Step(5 * time.Second)
	noRun(t, r)
	clk.Step(5 * time.Second)
	waitRuns(t, r, 1)
	if err := wait.PollUntilContextTimeout(context.Background(), time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		_, ok := q.Get("later")
		return !ok, nil
	}); err != nil {
		t.Error("finished work still listed")
	}
}

func TestTimedWorkersReplaceAndCancel(t *testing.T) {
	now := time.Now()
	clk := testingclock.NewFakeClock(now)
	r := &recorder{done: make(chan string, 10)}
	q := newTimedWorkers(clk, r.fn, constBackoff)
	for _, k := range []string{"a", "b", "c"} {
		q.Add(k, &timedWork{due: now.Add(time.Second)})
	}
	q.Add("c", &timedWork{due: now.Add(3 * time.Second)}) // replaced: the first timer must not run it
	if _, pending := q.Cancel("b"); !pending {
		t.Error("cancelling a pending work did not report it")
	}
	if _, pending := q.Cancel("b"); pending {
		t.Error("cancelling twice reported a pending work")
	}
	clk.Step(time.Second)
	waitRuns(t, r, 1)
	noRun(t, r)
	clk.Step(2 * time.Second)
	waitRuns(t, r, 1)
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.keys) != 2 || r.keys[0] != "a" || r.keys[1] != "c" {
		t.Errorf("ran %v, want [a c]", r.keys)
	}
}

// A work that asks to be retried runs again after backoff(attempts), until
// it stops asking or is cancelled.
func TestTimedWorkersRetry(t *testing.T) {
	now := time.Now()
	clk := testingclock.NewFakeClock(now)
	r := &recorder{done: make(chan string, 10), retry: func(attempts int) bool { return attempts < 2 }}
	q := newTimedWorkers(clk, r.fn, func(a int) time.Duration { return time.Duration(a) * time.Second })
	// armed waits until the retry after the n-th run waits on the clock.
	armed := func(n int) {
		t.Helper()
		if err := wait.PollUntilContextTimeout(context.Background(), time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
			w, ok := q.Get("k")
			return ok && w.attempts == n && !w.running, nil
		}); err != nil {
			t.Fatalf("retry %d not armed", n)
		}
	}
	gone := func() {
		t.Helper()
		if err := wait.PollUntilContextTimeout(context.Background(), time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
			_, ok := q.Get("k")
			return !ok, nil
		}); err != nil {
			t.Fatal("work not dropped")
		}
	}
	q.Add("k", &timedWork{due: now})
	waitRuns(t, r, 1)
	armed(1)
	clk.Step(time.Second) // backoff(1)
	waitRuns(t, r, 1)
	armed(2)
	clk.Step(time.Second)
	noRun(t, r)
	clk.Step(time.Second) // backoff(2)
	waitRuns(t, r, 1)
	gone()
	clk.Step(time.Hour)
	noRun(t, r)

	r.mu.Lock()
	r.retry = func(int) bool { return true }
	r.mu.Unlock()
	q.Add("k", &timedWork{due: clk.Now()})
	waitRuns(t, r, 1)
	armed(1)
	if w, pending := q.Cancel("k"); !pending || w.attempts != 1 {
		t.Errorf("cancel of a retrying work: pending=%v attempts=%d", pending, w.attempts)
	}
	clk.Step(time.Hour)
	noRun(t, r)
}
