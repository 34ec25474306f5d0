package tainteviction

import (
	"sync"
	"time"

	"k8s.io/utils/clock"
)

// timedWork is a deletion scheduled for one pod.
type timedWork struct {
	createdAt time.Time
	fireAt    time.Time
	timer     clock.Timer // nil while running (it was due at once)
	cancelled bool
}

// timedWorkers runs one function per key at a given time. A key has at most
// one pending entry; adding to an existing key does nothing.
type timedWorkers struct {
	mu    sync.Mutex
	clock clock.WithDelayedExecution
	work  map[string]*timedWork
	fn    func(key string, w *timedWork)
}

func newTimedWorkers(c clock.WithDelayedExecution, fn func(key string, w *timedWork)) *timedWorkers {
	return &timedWorkers{clock: c, work: map[string]*timedWork{}, fn: fn}
}

// Add schedules key at fireAt unless it already has work. Work that is due
// runs at once; the delay is measured from now.
func (q *timedWorkers) Add(key string, createdAt, fireAt time.Time) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if _, ok := q.work[key]; ok {
		return
	}
	w := &timedWork{createdAt: createdAt, fireAt: fireAt}
	q.work[key] = w
	delay := fireAt.Sub(createdAt)
	run := func() {
		q.mu.Lock()
		if w.cancelled {
			q.mu.Unlock()
			return
		}
		q.mu.Unlock()
		q.fn(key, w)
		q.mu.Lock()
		// A replacement added after a cancel must survive this completion.
		if q.work[key] == w {
			delete(q.work, key)
		}
		q.mu.Unlock()
	}
	if delay <= 0 {
		go run()
		return
	}
	w.timer = q.clock.AfterFunc(delay, run)
}

// Cancel drops key's work; it reports whether a pending (timer) entry existed.
func (q *timedWorkers) Cancel(key string) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	w, ok := q.work[key]
	if !ok {
		return false
	}
	delete(q.work, key)
	w.cancelled = true
	if w.timer == nil {
		return false
	}
	w.timer.Stop()
	return true
}

// Get returns key's pending work, or nil.
func (q *timedWorkers) Get(key string) *timedWork {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.work[key]
}

// CancelAll stops every timer (on shutdown).
func (q *timedWorkers) CancelAll() {
	q.mu.Lock()
	defer q.mu.Unlock()
	for k, w := range q.work {
		w.cancelled = true
		if w.timer != nil {
			w.timer.Stop()
		}
		delete(q.work, k)
	}
}
