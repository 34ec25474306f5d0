package outofservice

import "github.com/prometheus/client_golang/prometheus"

// metrics are the controller's metrics (upstream has no such controller).
type metrics struct {
	nodes          prometheus.Gauge
	decisions      *prometheus.CounterVec
	refusals       *prometheus.CounterVec
	providerErrors prometheus.Counter
	fencingErrors  prometheus.Counter
}

// newMetrics creates the metrics and registers them with reg.
func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		nodes: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "nodeshepherd", Subsystem: "outofservice", Name: "nodes",
			Help: "Nodes carrying the node.kubernetes.io/out-of-service taint, whoever added it (what the budget counts)."}),
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "nodeshepherd", Subsystem: "outofservice", Name: "decisions_total",
			Help: "Out-of-service taints added (reason: the confirmation's source, person, cloud-provider, fencing-webhook or remediation-policy) and removed (reason: rebooted, confirmation-withdrawn)."},
			[]string{"action", "reason"}),
		refusals: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "nodeshepherd", Subsystem: "outofservice", Name: "refusals_total",
			Help: "Refusals to add or remove the taint, once per change of reason per node (budget, disruption, node-ready, not-rebooted, still-silent)."},
			[]string{"reason"}),
		providerErrors: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "nodeshepherd", Subsystem: "outofservice", Name: "cloud_provider_errors_total",
			Help: "Cloud provider questions that failed (never taken as an answer)."}),
		fencingErrors: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "nodeshepherd", Subsystem: "outofservice", Name: "fencing_webhook_errors_total",
			Help: "Fencing endpoint questions that failed (never taken as an answer)."}),
	}
	reg.MustRegister(m.nodes, m.decisions, m.refusals, m.providerErrors, m.fencingErrors)
	return m
}
