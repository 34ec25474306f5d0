package nodeipam

import "github.com/prometheus/client_golang/prometheus"

// metrics are the controller's metrics (upstream's range allocator has none
// of these).
type metrics struct {
	allocations, failures prometheus.Counter
	used                  *prometheus.GaugeVec
}

// newMetrics creates the metrics and registers them with reg.
func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		allocations: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "nodeshepherd", Subsystem: "nodeipam", Name: "allocations_total",
			Help: "Pod CIDR sets allocated to nodes."}),
		failures: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "nodeshepherd", Subsystem: "nodeipam", Name: "allocation_failures_total",
			Help: "Nodes that could not get pod CIDRs (range full or write failed)."}),
		used: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "nodeshepherd", Subsystem: "nodeipam", Name: "cidrs_in_use",
			Help: "Node CIDR blocks in use, per cluster CIDR."}, []string{"cluster_cidr"}),
	}
	reg.MustRegister(m.allocations, m.failures, m.used)
	return m
}
