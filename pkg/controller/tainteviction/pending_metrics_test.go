package tainteviction

import (
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"k8s.io/utils/ptr"
)

// nodeshepherd_tainteviction_pods_pending_deletion is the eviction queue: a
// pod counts from the moment its deletion is scheduled until it is deleted
// (the dashboard's eviction queue panel).
func TestPendingDeletionsGauge(t *testing.T) {
	old := base.Add(-time.Hour)
	h := start(t, testNode("n1", noExec("a", at(-time.Second))),
		testPod("p1", "n1", "u1", old, tolFor("a", ptr.To[int64](10))), testPod("p2", "n1", "u2", old, tolFor("a", ptr.To[int64](20))))
	pending := func() float64 {
		var m dto.Metric
		if err := h.c.metrics.pending.Write(&m); err != nil {
			t.Fatal(err)
		}
		return m.GetGauge().GetValue()
	}
	h.until("both pods scheduled", func() bool { return pending() == 2 })
	h.clk.Step(11 * time.Second)
	h.until("p1 deleted", func() bool { return h.podGone("p1") })
	h.until("one pod pending", func() bool { return pending() == 1 })
	h.clk.Step(10 * time.Second)
	h.until("p2 deleted", func() bool { return h.podGone("p2") })
	h.until("none pending", func() bool { return pending() == 0 })
}
