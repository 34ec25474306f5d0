package nodelifecycle

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	"github.com/nodeshepherd/nodeshepherd/pkg/kube"
)

// Confirming silence with a fresh read.
//
// The informers are the controller's only view of heartbeats. A Lease watch
// can stall while the API server still answers (a watch left open without
// events, a slow re-list after an API server restart or upgrade): every node
// then looks silent at once, every zone would read FullDisruption, and the
// all-zones mode would strip the taints of nodes that were really dead. So
// the informer's view alone never makes a node count as overdue, nor marks it
// Unknown: a node silent on that view is a suspect until a fresh read of the
// Leases from the API server (a quorum LIST of kube-node-lease, one for all
// nodes, sent after the node became overdue or passed its grace period)
// shows no renewal the watch missed. A renewal it shows is a heartbeat,
// heard when the read answered; a read that fails confirms nothing, so no
// node is judged on silence until a read succeeds (as while blind, see
// contact). Suspects without a Lease are confirmed by a LIST of Nodes (their
// Ready heartbeat). Reads are sent only by a pass that has suspects, at most
// one every freshReadEvery, each bounded by freshReadTimeout; but a read that
// confirms a grace-period expiry which the previous read preceded (sent, or
// still in flight, before the expiry) may go early, at most one such early
// read every freshReadEvery: the previous read, sent for another node
// moments before, cannot confirm this expiry, and detection at expiry must
// not wait for the spacing. So at most two reads in any freshReadEvery, one
// on average while nothing expires. While a zone has suspects no read has
// settled, it applies no NoExecute taint: counting them healthy could let a
// taint out that counting them overdue would forbid.

// pointReadMax: a pass with at most this many suspects, each with a Lease,
// confirms them by a quorum GET of each one's Lease, all sent at once and
// without the spacing below. A GET reads one key, so a rack whose grace
// periods end some milliseconds apart has each expiry confirmed by a read
// sent after it, not after the spacing; a node is a suspect about twice per
// silence (overdue, then expired), or once an interval while its watch is
// stale, so the GETs stay bounded by the nodes that fall silent. More
// suspects (a stalled watch over many nodes) take one LIST, paced.
const pointReadMax = 16

// freshReadTimeout bounds one fresh read (both lists, or one GET).
const freshReadTimeout = 5 * time.Second

// freshReadEvery is the shortest time between two fresh reads: the monitor
// period, or one second if that is shorter. Not the monitor period alone: a
// pass also runs at each grace-period expiry, whose read must not wait a
// whole period (detection at expiry is the point of those passes).
func (c *Controller) freshReadEvery() time.Duration {
	return min(c.cfg.NodeMonitorPeriod, time.Second)
}

// readSinceLocked is when the last fresh read that covers rec's node was
// sent: the last LIST, or a GET of its Lease alone if later. Under mu.
func (c *Controller) readSinceLocked(rec *nodeHealth) time.Time {
	if rec.pointRead.After(c.freshRead) {
		return rec.pointRead
	}
	return c.freshRead
}

// confirmedAfterLocked reports whether a fresh read covering rec's node was
// sent after t (and so covers any heartbeat it sent before t), under mu.
func (c *Controller) confirmedAfterLocked(rec *nodeHealth, t time.Time) bool {
	read := c.readSinceLocked(rec)
	return !read.IsZero() && read.After(t)
}

// freshReadAllowed says whether a fresh read may be sent now, and if not,
// when it may. expiry is the earliest grace-period expiry the read would
// confirm (zero: none, only overdue nodes): if the last read was sent
// before it, the read may go early (see above).
func (c *Controller) freshReadAllowed(now, expiry time.Time) (bool, time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	every := c.freshReadEvery()
	at := c.freshTried.Add(every)
	if c.freshTried.IsZero() || !now.Before(at) {
		c.freshEarly = false
		return true, at
	}
	if expiry.IsZero() || !c.freshTried.Before(expiry) {
		return false, at
	}
	early := c.freshEarlyAt.Add(every)
	if c.freshEarlyAt.IsZero() || !now.Before(early) {
		c.freshEarly = true
		return true, at
	}
	if early.Before(at) {
		return false, early
	}
	return false, at
}

// readFresh lists the Leases (and, for suspects without one, the Nodes)
// from the API server and records as heartbeats the renewals the informers
// have not delivered. suspects are the nodes the pass could not judge.
func (c *Controller) readFresh(ctx context.Context, suspects []string) error {
	logger := klog.FromContext(ctx)
	sent := c.clock.Now()
	c.mu.Lock()
	c.freshTried = sent
	if c.freshEarly {
		c.freshEarlyAt = sent
	}
	c.mu.Unlock()
	rctx, cancel := context.WithTimeout(ctx, freshReadTimeout)
	defer cancel()
	// resourceVersion "" is a quorum read: served from etcd, not from the
	// API server's watch cache, which may be what stalled.
	leases, err := c.client.CoordinationV1().Leases(v1.NamespaceNodeLease).List(rctx, metav1.ListOptions{ResourceVersion: ""})
	if err != nil {
		c.metrics.freshReads.WithLabelValues("error").Inc()
		return fmt.Errorf("listing Leases in %s to confirm that %d node(s) are silent: %w", v1.NamespaceNodeLease, len(suspects), err)
	}
	renewed := make(map[string]time.Time, len(leases.Items))
	for i := range leases.Items {
		if rt := leases.Items[i].Spec.RenewTime; rt != nil {
			renewed[leases.Items[i].Name] = rt.Time
		}
	}
	var leaseless []string
	for _, n := range suspects {
		if _, ok := renewed[n]; !ok {
			leaseless = append(leaseless, n)
		}
	}
	beats := map[string]metav1.Time{}
	if len(leaseless) > 0 {
		nodes, err := c.client.CoreV1().Nodes().List(rctx, metav1.ListOptions{ResourceVersion: ""})
		if err != nil {
			c.metrics.freshReads.WithLabelValues("error").Inc()
			return fmt.Errorf("listing Nodes to confirm that %d node(s) without a Lease are silent: %w", len(leaseless), err)
		}
		for i := range nodes.Items {
			if ready := kube.NodeCondition(&nodes.Items[i], v1.NodeReady); ready != nil {
				beats[nodes.Items[i].Name] = ready.LastHeartbeatTime
			}
		}
	}
	c.metrics.freshReads.WithLabelValues("ok").Inc()

	now := c.clock.Now()
	var missed []string
	c.mu.Lock()
	// Every node's renewal is taken (it is a heartbeat, whoever delivers
	// it), but only a suspect's counts as missed by the watch: for the
	// others the watch may simply not have delivered it yet.
	credited := map[string]bool{}
	for name, rt := range renewed {
		rec := c.health[name]
		if rec == nil || !rt.After(rec.leaseRenew) {
			continue
		}
		rec.leaseRenew = rt
		freshHeartbeat(rec, now)
		credited[name] = true
	}
	for _, name := range suspects {
		rec := c.health[name]
		if rec == nil {
			continue
		}
		if _, ok := renewed[name]; ok {
			if credited[name] {
				missed = append(missed, name)
			}
			continue
		}
		// Without a Lease: the Ready heartbeat, if newer than any seen. It
		// is credited once; the informer delivering it later is then heard
		// again, which only lengthens the grace.
		hb, ok := beats[name]
		seen := rec.heartbeat
		if fb := c.freshBeats[name]; fb.After(seen.Time) {
			seen = fb
		}
		if ok && hb.After(seen.Time) {
			c.freshBeats[name] = hb
			freshHeartbeat(rec, now)
			missed = append(missed, name)
		}
	}
	c.freshRead = sent
	wasStale := c.viewStale
	c.viewStale = len(missed) > 0
	c.mu.Unlock()

	if len(missed) > 0 {
		c.metrics.staleView.Inc()
		if !wasStale {
			logger.Info("The informers' view of heartbeats is stale: a fresh read of the Leases shows renewals the watch did not deliver; judging nodes on fresh reads until it catches up",
				"renewedNodes", len(missed), "suspects", len(suspects), "example", missed[0])
		}
	} else if wasStale {
		logger.Info("A fresh read found no heartbeat the informers missed: their view looks current again", "suspects", len(suspects))
	}
	return nil
}

// freshHeartbeat records a heartbeat seen by a fresh read, at now. The gaps
// between heartbeats (the usual interval of the overdue rule) are left
// alone: read times measure the reads, not the node.
func freshHeartbeat(rec *nodeHealth, now time.Time) {
	if now.After(rec.probe) {
		rec.probe = now
	}
	rec.renewedBefore = time.Time{}
}

// confirmSuspects sends a fresh read if the pass left suspects and one is
// allowed, and judges those nodes again on it. It returns when the pass
// must run again for the suspects still unconfirmed (zero: none left).
func (c *Controller) confirmSuspects(ctx context.Context, results []nodeResult) time.Time {
	var suspects []int
	var expiry time.Time // the earliest expiry to confirm
	for i := range results {
		if results[i].suspect {
			suspects = append(suspects, i)
			if e := results[i].expired; !e.IsZero() && (expiry.IsZero() || e.Before(expiry)) {
				expiry = e
			}
		}
	}
	if len(suspects) == 0 {
		return time.Time{}
	}
	names := make([]string, len(suspects))
	for j, i := range suspects {
		names[j] = results[i].name
	}
	rejudge := func() {
		workqueue.ParallelizeUntil(ctx, nodeUpdateWorkers, len(suspects), func(j int) {
			results[suspects[j]] = c.processNodeHealth(ctx, names[j])
		})
	}
	if len(names) <= pointReadMax && c.readPoints(ctx, names) {
		rejudge()
		return time.Time{}
	}
	allowed, at := c.freshReadAllowed(c.clock.Now(), expiry)
	if !allowed {
		return at
	}
	if err := c.readFresh(ctx, names); err != nil {
		klog.FromContext(ctx).Error(err, "Not judging silent nodes until a fresh read confirms their silence", "retryIn", c.freshReadEvery())
		_, at = c.freshReadAllowed(c.clock.Now(), time.Time{})
		return at
	}
	rejudge()
	return time.Time{}
}

// readPoints confirms suspects by a quorum GET of each one's Lease, sent
// together. It reports false, having read nothing, when a suspect has no
// Lease (its Ready heartbeat needs the LIST of Nodes), and false when a GET
// failed: that node stays unconfirmed for the LIST to settle; what the
// others showed is kept. A renewal a GET shows that the informer has not
// delivered is a heartbeat heard now, as with the LIST.
func (c *Controller) readPoints(ctx context.Context, suspects []string) bool {
	leases := c.leaseLister.Leases(v1.NamespaceNodeLease)
	for _, n := range suspects {
		if _, err := leases.Get(n); err != nil {
			return false
		}
	}
	var failed, missed atomic.Int32
	var example atomic.Value // a node whose renewal the watch missed, for the log
	workqueue.ParallelizeUntil(ctx, nodeUpdateWorkers, len(suspects), func(j int) {
		name := suspects[j]
		sent := c.clock.Now()
		rctx, cancel := context.WithTimeout(ctx, freshReadTimeout)
		// An empty resourceVersion is a quorum read (from etcd, not the
		// watch cache), as the LIST's.
		l, err := c.client.CoordinationV1().Leases(v1.NamespaceNodeLease).Get(rctx, name, metav1.GetOptions{})
		cancel()
		if err != nil {
			c.metrics.freshReads.WithLabelValues("error").Inc()
			failed.Add(1)
			klog.FromContext(ctx).V(2).Info("A fresh read of a silent node's Lease failed; the next LIST decides", "node", name, "err", err)
			return
		}
		c.metrics.freshReads.WithLabelValues("ok").Inc()
		now := c.clock.Now()
		c.mu.Lock()
		defer c.mu.Unlock()
		rec := c.health[name]
		if rec == nil {
			return
		}
		if rt := l.Spec.RenewTime; rt != nil && rt.After(rec.leaseRenew) {
			rec.leaseRenew = rt.Time
			freshHeartbeat(rec, now)
			missed.Add(1)
			example.Store(name)
		}
		if sent.After(rec.pointRead) {
			rec.pointRead = sent
		}
	})
	if n := missed.Load(); n > 0 {
		c.metrics.staleView.Inc()
		c.mu.Lock()
		wasStale := c.viewStale
		c.viewStale = true
		c.mu.Unlock()
		if !wasStale {
			klog.FromContext(ctx).Info("The informers' view of heartbeats is stale: a fresh read of the Leases shows renewals the watch did not deliver; judging nodes on fresh reads until it catches up",
				"renewedNodes", n, "suspects", len(suspects), "example", example.Load())
		}
	}
	return failed.Load() == 0
}
