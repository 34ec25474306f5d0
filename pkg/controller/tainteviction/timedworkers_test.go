package tainteviction

import (
	"sync"
	"testing"
	"time"

	testingclock "k8s.io/utils/clock/testing"
)

type recorder struct {
	mu   sync.Mutex
	keys []string
	done chan string
}

func (r *recorder) fn(key string, _ *timedWork) {
	r.mu.Lock()
	r.keys = append(r.keys, key)
	r.mu.Unlock()
	r.done <- key
}

func waitRuns(t *testing.T, r *recorder, n int) {
	t.Helper()
	for i := 0; i < n; i++ {
		select {
		case <-r.done:
		case <-time.After(5 * time.Second):
			t.Fatalf("only %d of %d works ran", i, n)
		}
	}
}

func TestTimedWorkersImmediateAndDelayed(t *testing.T) {
	now := time.Now()
	clk := testingclock.NewFakeClock(now)
	r := &recorder{done: make(chan string, 10)}
	q := newTimedWorkers(clk, r.fn)
	q.Add("now", now, now)
	waitRuns(t, r, 1)
	q.Add("later", now, now.Add(10*time.Second))
	q.Add("later", now, now.Add(time.Second)) // duplicate: ignored
	clk.Step(5 * time.Second)
	select {
	case k := <-r.done:
		t.Fatalf("%s ran before its time", k)
	default:
	}
	clk.Step(5 * time.Second)
	waitRuns(t, r, 1)
}

func TestTimedWorkersCancel(t *testing.T) {
	now := time.Now()
	clk := testingclock.NewFakeClock(now)
	r := &recorder{done: make(chan string, 10)}
	q := newTimedWorkers(clk, r.fn)
	for _, k := range []string{"a", "b", "c"} {
		q.Add(k, now, now.Add(time.Second))
	}
	if !q.Cancel("b") {
		t.Error("cancelling a pending work returned false")
	}
	if q.Cancel("b") {
		t.Error("cancelling twice returned true")
	}
	q.Add("b", now, now.Add(time.Second)) // re-added after a cancel: runs
	clk.Step(time.Second)
	waitRuns(t, r, 3)
	if q.Cancel("zzz") {
		t.Error("cancelling unknown work returned true")
	}
}
