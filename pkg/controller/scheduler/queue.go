package scheduler

import (
	"container/heap"
	"context"
	"slices"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
)

// Where a pending pod waits.
const (
	inActive        = "active"
	inBackoff       = "backoff"
	inUnschedulable = "unschedulable"
	inGated         = "gated"
	inFlight        = "in-flight"
)

// queuedPod is a pending pod and its scheduling history.
type queuedPod struct {
	info *podInfo
	// timestamp orders pods of equal priority: when the pod last entered the
	// active queue's waiting line.
	timestamp time.Time
	// created is when the scheduler first saw the pod, for latency metrics.
	created     time.Time
	attempts    int
	lastAttempt time.Time
	// parkedAt is when the pod entered the unschedulable pool.
	parkedAt time.Time
	// wake says which cluster events can help this pod (see moveOnPodDelete).
	nominated     string
	resourceBound bool
	spreadBound   bool // some node rejected it for its topology spread
	// stuck pods cannot be evaluated as they are (refused features, a bad
	// affinity value): only a change of their own spec or labels wakes them.
	stuck bool
	// affinityBound: some node rejected it for inter-pod (anti-)affinity,
	// so changes of assigned pods may help it.
	affinityBound bool
	// featuresBound: some node lacked a feature the pod requires
	// (NodeDeclaredFeatures), so a node's declaredFeatures change may help.
	featuresBound bool
	// claimsGated: parked by Gate (its resource claims are not there yet);
	// counted as gated, as kube-scheduler counts pods its PreEnqueue holds.
	claimsGated bool
	// pending is an update received while the pod was in flight, applied by
	// Requeue; pendingSpec says its spec or labels changed.
	pending     *podInfo
	pendingSpec bool
	where       string
	index       int
}

// podHeap is a heap with a custom order.
type podHeap struct {
	items []*queuedPod
	less  func(a, b *queuedPod) bool
}

func (h *podHeap) Len() int           { return len(h.items) }
func (h *podHeap) Less(i, j int) bool { return h.less(h.items[i], h.items[j]) }
func (h *podHeap) Swap(i, j int) {
	h.items[i], h.items[j] = h.items[j], h.items[i]
	h.items[i].index, h.items[j].index = i, j
}
func (h *podHeap) Push(x any) {
	p := x.(*queuedPod)
	p.index = len(h.items)
	h.items = append(h.items, p)
}
func (h *podHeap) Pop() any {
	last := len(h.items) - 1
	p := h.items[last]
	h.items[last] = nil
	h.items = h.items[:last]
	p.index = -1
	return p
}
func (h *podHeap) peek() *queuedPod {
	if len(h.items) == 0 {
		return nil
	}
	return h.items[0]
}

// queueConfig are the queue's timings, kube-scheduler's by default.
type queueConfig struct {
	InitialBackoff   time.Duration
	MaxBackoff       time.Duration
	MaxUnschedulable time.Duration
}

// schedulingQueue holds pending pods: an active heap by priority then
// arrival, a backoff heap by expiry, an unschedulable pool woken by cluster
// events or after MaxUnschedulable, and gated pods (schedulingGates). It is
// not a client-go workqueue, as the other controllers use, because
// kube-scheduler's order (priority, then arrival) and its wake-up rules are
// part of the parity the scheduler promises; a FIFO with rate-limited
// retries cannot express them.
type schedulingQueue struct {
	cfg   queueConfig
	clock clock.WithTicker

	mu      sync.Mutex
	cond    *sync.Cond
	active  *podHeap
	backoff *podHeap
	parked  map[types.UID]*queuedPod
	pods    map[types.UID]*queuedPod // every pending pod, wherever it is
	// cycle counts pops; moveCycle is the cycle of the last wake-up event,
	// so a pod that failed while an event that might help it happened goes
	// to backoff rather than sleeping until the next event.
	cycle, moveCycle int64
	// affinityMoveCycle is moveCycle for assigned-pod changes, which only
	// concern affinity-bound pods.
	affinityMoveCycle int64
	closed            bool

	// onMove counts pods moved by an event, for metrics.
	onMove func(event, queue string)
}

func newSchedulingQueue(cfg queueConfig, clk clock.WithTicker) *schedulingQueue {
	q := &schedulingQueue{cfg: cfg, clock: clk, parked: map[types.UID]*queuedPod{}, pods: map[types.UID]*queuedPod{}}
	q.cond = sync.NewCond(&q.mu)
	q.active = &podHeap{less: func(a, b *queuedPod) bool {
		if a.info.priority != b.info.priority {
			return a.info.priority > b.info.priority
		}
		return a.timestamp.Before(b.timestamp)
	}}
	q.backoff = &podHeap{less: func(a, b *queuedPod) bool { return q.backoffExpiry(a).Before(q.backoffExpiry(b)) }}
	return q
}

func gated(p *v1.Pod) bool { return len(p.Spec.SchedulingGates) > 0 }

// backoffExpiry is 1 s doubling per failed attempt up to 10 s by default,
// counted from the last attempt.
func (q *schedulingQueue) backoffExpiry(p *queuedPod) time.Time {
	d := q.cfg.InitialBackoff
	for i := 1; i < p.attempts && d < q.cfg.MaxBackoff; i++ {
		d *= 2
	}
	return p.lastAttempt.Add(min(d, q.cfg.MaxBackoff))
}

// Add adds a new pending pod, or updates it when known.
func (q *schedulingQueue) Add(pod *v1.Pod) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if p, ok := q.pods[pod.UID]; ok {
		q.updateLocked(p, pod)
		return
	}
	now := q.clock.Now()
	p := &queuedPod{info: newPodInfo(pod), timestamp: now, created: now, index: -1}
	q.pods[pod.UID] = p
	if gated(pod) {
		p.where = inGated
	} else {
		q.toActive(p)
	}
	if q.onMove != nil { // kube-scheduler counts arrivals as event PodAdd
		q.onMove("PodAdd", p.where)
	}
}

// Update replaces a pending pod's object. A spec or label change wakes an
// unschedulable or gated pod; status-only changes (ours included) do not.
func (q *schedulingQueue) Update(old, pod *v1.Pod) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	p, ok := q.pods[pod.UID]
	if !ok {
		return false
	}
	specChanged := old == nil || !equality.Semantic.DeepEqual(old.Spec, pod.Spec) || !equality.Semantic.DeepEqual(old.Labels, pod.Labels)
	if p.where == inFlight {
		// The scheduling goroutine owns an in-flight pod's object and
		// results; the update waits for Requeue.
		p.pending = newPodInfo(pod)
		p.pendingSpec = p.pendingSpec || specChanged
		return true
	}
	if !specChanged {
		p.info = newPodInfo(pod)
		return true
	}
	q.updateLocked(p, pod)
	return true
}

func (q *schedulingQueue) updateLocked(p *queuedPod, pod *v1.Pod) {
	p.info = newPodInfo(pod)
	p.stuck = false
	switch p.where {
	case inActive:
		heap.Fix(q.active, p.index)
	case inBackoff:
		heap.Fix(q.backoff, p.index)
	case inUnschedulable:
		delete(q.parked, pod.UID)
		q.toActiveOrBackoff(p)
	case inGated:
		if !gated(pod) {
			q.toActive(p)
		}
	}
}

// Delete forgets a pod that was deleted or bound.
func (q *schedulingQueue) Delete(uid types.UID) {
	q.mu.Lock()
	defer q.mu.Unlock()
	p, ok := q.pods[uid]
	if !ok {
		return
	}
	q.detach(p)
	delete(q.pods, uid)
}

func (q *schedulingQueue) detach(p *queuedPod) {
	switch p.where {
	case inActive:
		heap.Remove(q.active, p.index)
	case inBackoff:
		heap.Remove(q.backoff, p.index)
	case inUnschedulable:
		delete(q.parked, p.info.pod.UID)
	}
	p.where = ""
}

func (q *schedulingQueue) toActive(p *queuedPod) {
	p.where = inActive
	heap.Push(q.active, p)
	q.cond.Signal()
}

func (q *schedulingQueue) toActiveOrBackoff(p *queuedPod) {
	if p.attempts > 0 && q.backoffExpiry(p).After(q.clock.Now()) {
		p.where = inBackoff
		heap.Push(q.backoff, p)
		return
	}
	p.timestamp = q.clock.Now()
	q.toActive(p)
}

// Pop blocks until a pod is active or ctx ends, and returns it with the
// scheduling cycle it starts.
func (q *schedulingQueue) Pop(ctx context.Context) (*queuedPod, int64, bool) {
	stop := context.AfterFunc(ctx, func() {
		q.mu.Lock()
		q.closed = true
		q.cond.Broadcast()
		q.mu.Unlock()
	})
	defer stop()
	q.mu.Lock()
	defer q.mu.Unlock()
	for q.active.Len() == 0 && !q.closed {
		q.cond.Wait()
	}
	if q.closed {
		return nil, 0, false
	}
	p := heap.Pop(q.active).(*queuedPod)
	p.where = inFlight
	p.claimsGated = false
	p.attempts++
	p.lastAttempt = q.clock.Now()
	q.cycle++
	return p, q.cycle, true
}

// Done forgets a pod that was scheduled (it is now the cache's).
func (q *schedulingQueue) Done(uid types.UID) { q.Delete(uid) }

// Requeue returns a pod after a failed attempt: an error goes to backoff; an
// unschedulable pod is parked until an event may help it, unless such an
// event already happened during its attempt.
func (q *schedulingQueue) Requeue(p *queuedPod, cycle int64, isError bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if cur, ok := q.pods[p.info.pod.UID]; !ok || cur != p || p.where != inFlight {
		return // deleted or bound meanwhile
	}
	if p.pending != nil {
		// Updated during the attempt: a new spec or labels is tried again
		// (after backoff), whatever this attempt found.
		p.info, p.pending = p.pending, nil
		if p.pendingSpec {
			p.pendingSpec, p.stuck = false, false
			p.where = inBackoff
			heap.Push(q.backoff, p)
			return
		}
	}
	if isError || (!p.stuck && (q.moveCycle >= cycle || (p.affinityBound && q.affinityMoveCycle >= cycle))) {
		p.where = inBackoff
		heap.Push(q.backoff, p)
		return
	}
	p.where = inUnschedulable
	p.parkedAt = q.clock.Now()
	q.parked[p.info.pod.UID] = p
}

// Gate parks a pod that a PreEnqueue check keeps out (its resource
// claims are not there yet). As kube-scheduler does not try a gated pod,
// the attempt does not count: the event that lets it in moves it to the
// active queue without backoff, and an event during the check already has.
func (q *schedulingQueue) Gate(p *queuedPod, cycle int64) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if cur, ok := q.pods[p.info.pod.UID]; !ok || cur != p || p.where != inFlight {
		return
	}
	p.attempts--
	changed := p.pendingSpec // its spec or labels changed meanwhile: look again
	if p.pending != nil {
		p.info, p.pending, p.pendingSpec = p.pending, nil, false
	}
	if changed || q.moveCycle >= cycle {
		p.timestamp = q.clock.Now()
		q.toActive(p)
		return
	}
	p.where = inUnschedulable
	p.claimsGated = true
	p.parkedAt = q.clock.Now()
	q.parked[p.info.pod.UID] = p
}

// Readd puts back a pod whose binding failed, with backoff.
func (q *schedulingQueue) Readd(pod *v1.Pod) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if p, ok := q.pods[pod.UID]; ok && p.where != inFlight {
		return
	}
	now := q.clock.Now()
	p := &queuedPod{info: newPodInfo(pod), timestamp: now, created: now, attempts: 1, lastAttempt: now, index: -1, where: inBackoff}
	if old, ok := q.pods[pod.UID]; ok {
		p.created, p.attempts = old.created, old.attempts
	}
	q.pods[pod.UID] = p
	heap.Push(q.backoff, p)
}

// Activate moves a parked or backing-off pod to the active queue at once.
func (q *schedulingQueue) Activate(uid types.UID) {
	q.mu.Lock()
	defer q.mu.Unlock()
	p, ok := q.pods[uid]
	if !ok {
		return
	}
	if p.where != inUnschedulable && p.where != inBackoff {
		q.moveCycle = q.cycle // in flight: a failure goes to backoff, not to sleep
		return
	}
	q.moveCycle = q.cycle
	q.detach(p)
	p.timestamp = q.clock.Now()
	q.toActive(p)
}

// MoveAll wakes every parked pod for which helps returns true (all when nil).
func (q *schedulingQueue) MoveAll(event string, helps func(*queuedPod) bool) {
	q.MoveAllSkipping(event, helps, nil)
}

// MoveAllSkipping is MoveAll, except that pods for which skipBackoff returns
// true go to the active queue at once, also from backoff: a preemptor whose
// nominated node just freed up is expected to fit, and backing off would
// only delay it.
func (q *schedulingQueue) MoveAllSkipping(event string, helps, skipBackoff func(*queuedPod) bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.moveCycle = q.cycle
	if skipBackoff != nil {
		for _, p := range slices.Clone(q.backoff.items) {
			if skipBackoff(p) {
				heap.Remove(q.backoff, p.index)
				p.timestamp = q.clock.Now()
				q.toActive(p)
			}
		}
	}
	for uid, p := range q.parked {
		if p.stuck || (helps != nil && !helps(p)) {
			continue
		}
		delete(q.parked, uid)
		if skipBackoff != nil && skipBackoff(p) {
			p.timestamp = q.clock.Now()
			q.toActive(p)
		} else {
			q.toActiveOrBackoff(p)
		}
		if q.onMove != nil {
			q.onMove(event, p.where)
		}
	}
}

// flush moves expired backoffs to active, and pods parked longer than
// MaxUnschedulable back to active or backoff.
func (q *schedulingQueue) flush() {
	q.mu.Lock()
	defer q.mu.Unlock()
	now := q.clock.Now()
	for p := q.backoff.peek(); p != nil && !q.backoffExpiry(p).After(now); p = q.backoff.peek() {
		heap.Pop(q.backoff)
		p.timestamp = now
		q.toActive(p)
	}
	for uid, p := range q.parked {
		if !p.stuck && now.Sub(p.parkedAt) >= q.cfg.MaxUnschedulable {
			delete(q.parked, uid)
			q.toActiveOrBackoff(p)
			if q.onMove != nil {
				q.onMove("UnschedulableTimeout", p.where)
			}
		}
	}
}

// Lens returns how many pods wait where.
func (q *schedulingQueue) Lens() map[string]int {
	q.mu.Lock()
	defer q.mu.Unlock()
	out := map[string]int{inActive: q.active.Len(), inBackoff: q.backoff.Len(), inUnschedulable: len(q.parked), inGated: 0}
	for _, p := range q.pods {
		if p.where == inGated {
			out[inGated]++
		}
	}
	for _, p := range q.parked {
		if p.claimsGated {
			out[inUnschedulable]--
			out[inGated]++
		}
	}
	return out
}

// MoveAffinityBound wakes the parked pods that a node rejected for inter-pod
// (anti-)affinity: an assigned pod appeared, changed labels or went.
func (q *schedulingQueue) MoveAffinityBound(event string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.affinityMoveCycle = q.cycle
	for uid, p := range q.parked {
		if p.stuck || !p.affinityBound {
			continue
		}
		delete(q.parked, uid)
		q.toActiveOrBackoff(p)
		if q.onMove != nil {
			q.onMove(event, p.where)
		}
	}
}
