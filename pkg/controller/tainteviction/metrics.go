package tainteviction

import "github.com/prometheus/client_golang/prometheus"

// metrics are the controller's metrics: upstream's names where upstream has
// the metric, nodeshepherd_tainteviction_* otherwise.
type metrics struct {
	deletions        prometheus.Counter
	deletionDuration prometheus.Histogram
	deletionErrors   prometheus.Counter
	pending          prometheus.GaugeFunc
}

// newMetrics creates the metrics and registers them with reg (none when nil).
func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		deletions: prometheus.NewCounter(prometheus.CounterOpts{Subsystem: "taint_eviction_controller", Name: "pod_deletions_total",
			Help: "Total number of Pods deleted by TaintEvictionController since its start."}),
		// Upstream's buckets; unlike upstream, the value recorded is in seconds.
		deletionDuration: prometheus.NewHistogram(prometheus.HistogramOpts{Subsystem: "taint_eviction_controller", Name: "pod_deletion_duration_seconds",
			Help:    "Latency, in seconds, between the time when a taint effect has been activated for the Pod and its deletion via TaintEvictionController.",
			Buckets: []float64{0.005, 0.025, 0.1, 0.5, 1, 2.5, 10, 30, 60, 120, 180, 240}}),
		deletionErrors: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "nodeshepherd", Subsystem: "tainteviction", Name: "pod_deletion_errors_total",
			Help: "Failed attempts to delete a pod for a NoExecute taint; each is retried with backoff while the pod must go."}),
	}
	if reg != nil {
		reg.MustRegister(m.deletions, m.deletionDuration, m.deletionErrors)
	}
	return m
}

// registerPending publishes the eviction queue: count is read at each scrape.
func (m *metrics) registerPending(reg prometheus.Registerer, count func() int) {
	m.pending = prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "nodeshepherd", Subsystem: "tainteviction", Name: "pods_pending_deletion",
		Help: "Pods scheduled for deletion because of a NoExecute taint: waiting for their tolerationSeconds, being deleted, or waiting to retry a failed deletion."},
		func() float64 { return float64(count()) })
	if reg != nil {
		reg.MustRegister(m.pending)
	}
}
