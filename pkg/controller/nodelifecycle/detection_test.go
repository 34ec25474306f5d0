package nodelifecycle

import (
	"testing"
	"time"
)

// TestFirstFailureAfterSlowStart: the controller is built, then its caches
// take 5 s to sync (a busy machine) before its loops start. A node that
// falls silent 2.5 s later, having renewed since the start, must be
// tainted at its grace period's end. Before, the first pass counted the
// 5 s since the controller was built as a gap without answers from the API
// server: it did not judge, waited for a Lease event and then for the next
// monitor period (5 s), so every node was first seen 5 s late, and the
// node's grace ran from that first sight.
func TestFirstFailureAfterSlowStart(t *testing.T) {
	cfg := correlatedConfig()
	cl := newCluster(t, cfg, map[string]int{"a": 4, "b": 4})
	cl.leaderless(5 * time.Second) // the caches sync; the nodes renew
	cl.c.begin(cl.clk.Now())
	cl.nextPass = cl.clk.Now()
	cl.run(2500 * time.Millisecond)
	n := cl.inZone("a")[0]
	cl.silence([]string{n}, 0)
	cl.run(cfg.NodeMonitorGracePeriod + 5*time.Second)
	at, ok := cl.tainted[n]
	if !ok {
		t.Fatalf("%s not tainted", n)
	}
	if late := at.Sub(cl.lastRnw[n].Add(cfg.NodeMonitorGracePeriod)); late < 0 || late > 200*time.Millisecond {
		t.Errorf("tainted %v after its grace period ended (last renewal %v after the start), want within 0.2 s",
			late, cl.lastRnw[n].Sub(cl.clk.Now().Add(-cfg.NodeMonitorGracePeriod-5*time.Second-2500*time.Millisecond)))
	}
}

// TestExpiryReadNotDelayedByAnotherRead: two nodes of different zones fall
// silent; their last renewals, hence their grace periods' ends, are 0.3 s
// apart. The first expiry's fresh read was sent 0.3 s before the second
// expiry, so it cannot confirm it; the second must still be marked and
// tainted at its expiry, not a read spacing (1 s) after the first read.
// Both are confirmed by a read sent after their expiry.
func TestExpiryReadNotDelayedByAnotherRead(t *testing.T) {
	cfg := correlatedConfig()
	cl := newCluster(t, cfg, map[string]int{"a": 4, "b": 4})
	x, v := cl.inZone("b")[0], cl.inZone("a")[0]
	cl.lastRnw[v] = cl.clk.Now().Add(300*time.Millisecond - cl.renew) // renews 0.3 s after x
	cl.run(10 * time.Second)
	cl.silence([]string{x, v}, 0)
	cl.run(cfg.NodeMonitorGracePeriod + 5*time.Second)
	if got := cl.lastRnw[v].Sub(cl.lastRnw[x]); got != 300*time.Millisecond {
		t.Fatalf("last renewals %v apart, want 300ms", got)
	}
	for _, n := range []string{x, v} {
		at, ok := cl.tainted[n]
		if !ok {
			t.Fatalf("%s not tainted", n)
		}
		if late := at.Sub(cl.lastRnw[n].Add(cfg.NodeMonitorGracePeriod)); late < 0 || late > 200*time.Millisecond {
			t.Errorf("%s tainted %v after its grace period ended, want within 0.2 s", n, late)
		}
	}
	if reads := cl.leaseLists(); reads > 6 {
		t.Errorf("%d fresh reads for two failures", reads)
	}
}

// TestRackExpiriesEachConfirmedAtItsOwn: a rack of three nodes (one in each
// of three zones, so no zone rule holds a taint) falls silent; their last
// renewals, hence their grace periods' ends, are 20 ms apart. Each expiry
// needs a read sent after it; the reads of the first two cannot confirm the
// third. Each node must be marked and tainted within 0.1 s of its own
// expiry. Before, the third waited for the read spacing (1 s): one early
// read a second was all the LIST's pacing allowed.
func TestRackExpiriesEachConfirmedAtItsOwn(t *testing.T) {
	cfg := correlatedConfig()
	cl := newCluster(t, cfg, map[string]int{"a": 4, "b": 4, "c": 4})
	rack := []string{cl.inZone("a")[0], cl.inZone("b")[0], cl.inZone("c")[0]}
	cl.run(10 * time.Second)
	for i, n := range rack[1:] { // the next renewals 20 and 40 ms after the first's
		cl.lastRnw[n] = cl.lastRnw[rack[0]].Add(time.Duration(i+1) * 20 * time.Millisecond)
	}
	cl.step = 5 * time.Millisecond // finer than the renewals' spread
	cl.run(3 * time.Second)
	cl.silence(rack, 0)
	cl.run(cfg.NodeMonitorGracePeriod + 3*time.Second)
	for i := 1; i < len(rack); i++ {
		if got := cl.lastRnw[rack[i]].Sub(cl.lastRnw[rack[i-1]]); got != 20*time.Millisecond {
			t.Fatalf("last renewals of %s and %s %v apart, want 20ms", rack[i-1], rack[i], got)
		}
	}
	for _, n := range rack {
		at, ok := cl.tainted[n]
		if !ok {
			t.Errorf("%s not tainted", n)
			continue
		}
		if late := at.Sub(cl.lastRnw[n].Add(cfg.NodeMonitorGracePeriod)); late < 0 || late > 100*time.Millisecond {
			t.Errorf("%s tainted %v after its grace period ended, want within 0.1 s", n, late)
		}
	}
}
