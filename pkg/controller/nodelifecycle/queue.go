package nodelifecycle

import (
	"container/heap"
	"sync"
	"time"

	"golang.org/x/time/rate"
	"k8s.io/apimachinery/pkg/types"
)

// timedValue is a node waiting in a zone's tainting queue.
type timedValue struct {
	value     string // node name
	uid       types.UID
	addedAt   time.Time
	processAt time.Time
}

type timedHeap []*timedValue

func (h timedHeap) Len() int           { return len(h) }
func (h timedHeap) Less(i, j int) bool { return h[i].processAt.Before(h[j].processAt) }
func (h timedHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *timedHeap) Push(x any)        { *h = append(*h, x.(*timedValue)) }
func (h *timedHeap) Pop() any {
	old := *h
	n := len(old)
	x := old[n-1]
	*h = old[:n-1]
	return x
}

// zoneQueue is one zone's NoExecute tainting queue: a heap ordered by
// processing time, a set that deduplicates node names, and a token bucket
// with burst 1. A node stays in the set after it was tainted, so it is not
// queued again until Remove (node healthy again, or the taint must be re-armed).
// It is not a client-go workqueue: upstream's per-zone eviction rate (one
// node per token, with the rate changing with the zone's state) and the
// order by time are the point, not retries.
type zoneQueue struct {
	mu      sync.Mutex
	heap    timedHeap
	set     map[string]bool
	limiter *rate.Limiter
	qps     float64
}

func newZoneQueue(qps float64, now time.Time) *zoneQueue {
	q := &zoneQueue{set: map[string]bool{}}
	q.limiter, q.qps = newLimiter(qps, now), qps
	return q
}

func newLimiter(qps float64, now time.Time) *rate.Limiter {
	if qps <= 0 {
		return rate.NewLimiter(0, 0) // never accepts
	}
	l := rate.NewLimiter(rate.Limit(qps), 1)
	l.AllowN(now, 0) // start the bucket's clock at now, full
	return l
}

// Add queues a node unless it is already in the set.
func (q *zoneQueue) Add(name string, uid types.UID, now time.Time) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.set[name] {
		return false
	}
	q.set[name] = true
	heap.Push(&q.heap, &timedValue{value: name, uid: uid, addedAt: now, processAt: now})
	return true
}

// Remove drops a node from the heap and the set; it reports whether the node
// was in the set (possibly already processed).
func (q *zoneQueue) Remove(name string) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if !q.set[name] {
		return false
	}
	delete(q.set, name)
	for i, v := range q.heap {
		if v.value == name {
			heap.Remove(&q.heap, i)
			break
		}
	}
	return true
}

// Done records a node as tainted without tainting it (its taint was
// restored as it was): it leaves the heap and stays in the set.
func (q *zoneQueue) Done(name string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.set[name] = true
	for i, v := range q.heap {
		if v.value == name {
			heap.Remove(&q.heap, i)
			break
		}
	}
}

// Clear empties the queue.
func (q *zoneQueue) Clear() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.heap, q.set = nil, map[string]bool{}
}

// Len is the number of nodes waiting (not yet processed).
func (q *zoneQueue) Len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.heap)
}

// Try processes due heads while tokens last. fn returns whether the node is
// done and, if not, how long to wait before retrying it. As upstream, a token
// is taken before the head's time is checked.
func (q *zoneQueue) Try(now time.Time, fn func(v timedValue) (done bool, retryAfter time.Duration)) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for len(q.heap) > 0 {
		if !q.limiter.AllowN(now, 1) {
			return
		}
		head := q.heap[0]
		if now.Before(head.processAt) {
			return
		}
		done, wait := fn(*head)
		if done {
			heap.Pop(&q.heap) // stays in the set: deduplicated until Remove
			continue
		}
		head.processAt = now.Add(wait + time.Nanosecond)
		heap.Fix(&q.heap, 0)
	}
}

// SwapLimiter changes the rate. A new bucket starts with its one token, unless
// the old one was empty, so that a swap never grants an extra taint.
func (q *zoneQueue) SwapLimiter(qps float64, now time.Time) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.qps == qps {
		return
	}
	hadToken := q.limiter.TokensAt(now) >= 1
	q.limiter, q.qps = newLimiter(qps, now), qps
	if !hadToken {
		q.limiter.AllowN(now, 1)
	}
}
