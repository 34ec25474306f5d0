package tainteviction

import (
	"sync"
	"sync/atomic"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
)

// timedWork is one pod's deletion: due at a time, then retried until it
// succeeds or is no longer wanted.
type timedWork struct {
	// uid is the pod the deletion is for: a pod recreated under the same
	// name (a StatefulSet's) is another pod and is never deleted by it.
	uid types.UID
	// due is when the pod's toleration ran out (now when it had none).
	due time.Time
	// cause is the taint whose toleration runs out first; nil when the pod
	// had to go at once.
	cause *v1.Taint
	// attempts counts the failed deletion attempts so far.
	attempts int
	// announced is set once the eviction's event is sent (shared by the
	// copies fn gets): one event per eviction, whichever attempt gets to it.
	announced *atomic.Bool
	running   bool
	// done marks a dry run's deletion once reported: it is kept, never
	// armed, so that the pod judged again on the same taints (a late
	// informer event, a restart of its node's sync) is not reported again.
	done bool

	timer     clock.Timer
	cancelled bool
}

// started says whether a deletion attempt was made or is being made.
func (w *timedWork) started() bool { return w.running || w.attempts > 0 || w.done }

// timedWorkers runs fn for a key at its work's due time, and again after
// backoff(attempts) for as long as fn asks to retry. A key has at most one
// work; cancelling or replacing it stops its timer and any later retry.
type timedWorkers struct {
	mu      sync.Mutex
	clock   clock.WithDelayedExecution
	work    map[string]*timedWork
	fn      func(key string, w timedWork) (retry bool)
	backoff func(attempts int) time.Duration
	// attempts counts the calls of fn under way, which CancelAll waits for.
	attempts sync.WaitGroup
}

func newTimedWorkers(c clock.WithDelayedExecution, fn func(key string, w timedWork) bool, backoff func(int) time.Duration) *timedWorkers {
	return &timedWorkers{clock: c, work: map[string]*timedWork{}, fn: fn, backoff: backoff}
}

// Add schedules w for key at w.due, replacing key's work if it has one. The
// delay is measured from now, so a due time already past runs at once.
func (q *timedWorkers) Add(key string, w *timedWork) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if old := q.work[key]; old != nil {
		old.stop()
	}
	q.work[key] = w
	q.arm(key, w, w.due.Sub(q.clock.Now()))
}

// arm runs w after delay; q.mu is held.
func (q *timedWorkers) arm(key string, w *timedWork, delay time.Duration) {
	if delay <= 0 {
		go q.run(key, w)
		return
	}
	// Its own goroutine: a fake clock runs AfterFunc inside Step, under its lock.
	w.timer = q.clock.AfterFunc(delay, func() { go q.run(key, w) })
}

func (q *timedWorkers) run(key string, w *timedWork) {
	q.mu.Lock()
	if w.cancelled {
		q.mu.Unlock()
		return
	}
	w.running, w.timer = true, nil
	q.attempts.Add(1) // before CancelAll can mark w cancelled: q.mu is held
	defer q.attempts.Done()
	snapshot := *w
	q.mu.Unlock()
	retry := q.fn(key, snapshot)
	q.mu.Lock()
	defer q.mu.Unlock()
	w.running = false
	// A work cancelled or replaced meanwhile ends here; a replacement survives.
	if w.cancelled || q.work[key] != w {
		return
	}
	if !retry {
		if !w.done {
			delete(q.work, key)
		}
		return
	}
	w.attempts++
	q.arm(key, w, q.backoff(w.attempts))
}

func (w *timedWork) stop() {
	w.cancelled = true
	if w.timer != nil {
		w.timer.Stop()
	}
}

// Cancel drops key's work. It returns the work, and whether it was pending
// (not in the middle of an attempt, which cannot be called back, nor a dry
// run's deletion already reported).
func (q *timedWorkers) Cancel(key string) (timedWork, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	w, ok := q.work[key]
	if !ok {
		return timedWork{}, false
	}
	delete(q.work, key)
	w.stop()
	return *w, !w.running && !w.done
}

// MarkDone keeps key's work, in the middle of its attempt for the pod uid,
// as a dry run's reported deletion: not retried, not pending. A work that
// replaced it meanwhile (another pod of that name) is left alone.
func (q *timedWorkers) MarkDone(key string, uid types.UID) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if w := q.work[key]; w != nil && w.uid == uid && w.running {
		w.done = true
	}
}

// Get returns a copy of key's work.
func (q *timedWorkers) Get(key string) (timedWork, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	w, ok := q.work[key]
	if !ok {
		return timedWork{}, false
	}
	return *w, true
}

// Len is the number of keys with work: due later, running, or to be retried
// (not a dry run's reported deletion).
func (q *timedWorkers) Len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	n := 0
	for _, w := range q.work {
		if !w.done {
			n++
		}
	}
	return n
}

// CancelAll stops every timer and waits for the attempts under way (on
// shutdown: a deletion in flight finishes before the controller stops).
func (q *timedWorkers) CancelAll() {
	q.mu.Lock()
	for k, w := range q.work {
		w.stop()
		delete(q.work, k)
	}
	q.mu.Unlock()
	q.attempts.Wait()
}
