package nodelifecycle

import (
	"sync"
	"time"
)

// contact tracks whether the controller can currently see heartbeats. It
// goes blind when the API server stops answering; when it answers again, the
// controller stays blind until the lease watch delivers an event again: the
// informer may reconnect up to a minute after the API server (its backoff),
// and its relist then delivers every Lease, renewed or not. Only a cluster
// without Leases never sends one; after maxBlind the controller judges anyway.
// Leaving blindness resets every node's probe, so no node is judged on
// heartbeats the controller could not have seen.
type contact struct {
	mu          sync.Mutex
	gap         time.Duration // no answer for longer: blind
	maxBlind    time.Duration
	lastAnswer  time.Time
	reconnected time.Time // zero unless waiting for a fresh view
	leaseEvent  bool      // a lease event arrived since reconnecting
}

// maxBlindAfterOutage bounds the wait for the lease watch; it exceeds
// client-go's longest reflector backoff (30s, doubled by jitter).
const maxBlindAfterOutage = 2 * time.Minute

func newContact(now time.Time, gap, grace time.Duration) *contact {
	return &contact{gap: gap, maxBlind: max(grace, maxBlindAfterOutage), lastAnswer: now}
}

// start records that the controller starts now: its informers have just
// synced, an answer from the API server. The controller is built before its
// caches sync, which can take seconds on a busy machine; counted from then,
// its first passes would see a gap without answers and not judge at all.
func (c *contact) start(now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.reconnected.IsZero() && now.After(c.lastAnswer) {
		c.lastAnswer = now
	}
}

// answered records a successful ping; it reports the length of the outage
// that just ended, if any.
func (c *contact) answered(now time.Time) time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	outage := now.Sub(c.lastAnswer)
	c.lastAnswer = now
	if outage > c.gap {
		c.reconnected, c.leaseEvent = now, false
		return outage
	}
	return 0
}

// sawLease records a lease event from the informer.
func (c *contact) sawLease() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.reconnected.IsZero() {
		c.leaseEvent = true
	}
}

// check reports whether nodes may be judged now, and whether every probe must
// be reset first (the end of a blind spell).
func (c *contact) check(now time.Time) (judge, reset bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if now.Sub(c.lastAnswer) > c.gap {
		return false, false
	}
	if c.reconnected.IsZero() {
		return true, false
	}
	if c.leaseEvent || now.Sub(c.reconnected) > c.maxBlind {
		c.reconnected = time.Time{}
		return true, true
	}
	return false, false
}
