package cloudnodelifecycle

import "github.com/prometheus/client_golang/prometheus"

// metrics are the controller's metrics (upstream has none for it).
type metrics struct {
	calls        *prometheus.CounterVec
	callDuration *prometheus.HistogramVec
	deleted      prometheus.Counter
	taints       *prometheus.CounterVec
	blocked      *prometheus.CounterVec
	guardActive  prometheus.Gauge
}

// newMetrics creates the metrics and registers them with reg.
func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "nodeshepherd", Subsystem: "cloud_provider", Name: "requests_total",
			Help: "Questions asked to the cloud provider, by question and result (ok, error)."}, []string{"question", "result"}),
		callDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: "nodeshepherd", Subsystem: "cloud_provider", Name: "request_duration_seconds",
			Help: "Latency of the cloud provider's answers.", Buckets: prometheus.ExponentialBuckets(0.001, 4, 8)}, []string{"question"}),
		deleted: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "nodeshepherd", Subsystem: "cloudnodelifecycle", Name: "nodes_deleted_total",
			Help: "Nodes deleted because their machine no longer exists."}),
		taints: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "nodeshepherd", Subsystem: "cloudnodelifecycle", Name: "shutdown_taints_total",
			Help: "Shutdown taints added and removed."}, []string{"action"}),
		blocked: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "nodeshepherd", Subsystem: "cloudnodelifecycle", Name: "deletions_blocked_total",
			Help: "Deletions postponed, by reason (rate-limit, incident-guard)."}, []string{"reason"}),
		guardActive: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "nodeshepherd", Subsystem: "cloudnodelifecycle", Name: "incident_guard_active",
			Help: "1 while too many nodes are not Ready for any node to be deleted."}),
	}
	reg.MustRegister(m.calls, m.callDuration, m.deleted, m.taints, m.blocked, m.guardActive)
	return m
}
