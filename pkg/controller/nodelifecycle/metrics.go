package nodelifecycle

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/nodeshepherd/nodeshepherd/pkg/nodetopology"
)

// metrics carries upstream's node_collector metrics (same names, types,
// labels and buckets, so dashboards carry over) and nodeshepherd's own.
type metrics struct {
	zoneHealth           *prometheus.GaugeVec
	zoneSize             *prometheus.GaugeVec
	unhealthyNodes       *prometheus.GaugeVec
	evictions            *prometheus.CounterVec
	updateNodeHealth     prometheus.Histogram
	updateAllNodesHealth prometheus.Histogram
	podsMarkedNotReady   prometheus.Counter
	podReadinessRestored prometheus.Counter
	restoreErrors        prometheus.Counter
	detectionDelay       prometheus.Histogram
	zoneState            *prometheus.GaugeVec
	staticStability      prometheus.Gauge
	freshReads           *prometheus.CounterVec
	staleView            prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		zoneHealth: prometheus.NewGaugeVec(prometheus.GaugeOpts{Subsystem: "node_collector", Name: "zone_health",
			Help: "Gauge measuring percentage of healthy nodes per zone."}, []string{"zone"}),
		zoneSize: prometheus.NewGaugeVec(prometheus.GaugeOpts{Subsystem: "node_collector", Name: "zone_size",
			Help: "Gauge measuring number of registered Nodes per zones."}, []string{"zone"}),
		unhealthyNodes: prometheus.NewGaugeVec(prometheus.GaugeOpts{Subsystem: "node_collector", Name: "unhealthy_nodes_in_zone",
			Help: "Gauge measuring number of not Ready Nodes per zones."}, []string{"zone"}),
		evictions: prometheus.NewCounterVec(prometheus.CounterOpts{Subsystem: "node_collector", Name: "evictions_total",
			Help: "Number of Node evictions that happened since current instance of NodeController started."}, []string{"zone"}),
		updateNodeHealth: prometheus.NewHistogram(prometheus.HistogramOpts{Subsystem: "node_collector", Name: "update_node_health_duration_seconds",
			Help: "Duration in seconds for NodeController to update the health of a single node.", Buckets: prometheus.ExponentialBuckets(0.001, 4, 8)}),
		updateAllNodesHealth: prometheus.NewHistogram(prometheus.HistogramOpts{Subsystem: "node_collector", Name: "update_all_nodes_health_duration_seconds",
			Help: "Duration in seconds for NodeController to update the health of all nodes.", Buckets: prometheus.ExponentialBuckets(0.01, 4, 8)}),
		podsMarkedNotReady: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "nodeshepherd", Subsystem: "nodelifecycle", Name: "pods_marked_not_ready_total",
			Help: "Pods set Ready=False because their node stopped being Ready."}),
		podReadinessRestored: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "nodeshepherd", Subsystem: "nodelifecycle", Name: "pod_readiness_restored_total",
			Help: "Pods given Ready=True back after their node recovered and their kubelet did not re-post their status."}),
		restoreErrors: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "nodeshepherd", Subsystem: "nodelifecycle", Name: "pod_readiness_restore_errors_total",
			Help: "Failed attempts to give a pod Ready=True back (the API server refused the read or the write; conflicts, where the kubelet wrote first, are not counted); each is retried at the node's next Ready check."}),
		detectionDelay: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: "nodeshepherd", Subsystem: "nodelifecycle", Name: "unknown_detection_delay_seconds",
			Help: "Time from a node's grace-period expiry to the controller marking it Unknown.", Buckets: []float64{0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}}),
		zoneState: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "nodeshepherd", Subsystem: "nodelifecycle", Name: "zone_state",
			Help: "1 for the current disruption state of each zone (Initial, Normal, PartialDisruption, FullDisruption), 0 for the others."}, []string{"zone", "state"}),
	}
	m.staticStability = prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "nodeshepherd", Subsystem: "nodelifecycle", Name: "static_stability_active",
		Help: "1 while every zone is in FullDisruption and pods are kept Ready instead of being marked NotReady (--static-stability)."})
	m.freshReads = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "nodeshepherd", Subsystem: "nodelifecycle", Name: "fresh_lease_reads_total",
		Help: "Reads of the Leases from the API server (quorum LISTs, or GETs of one Lease) sent to confirm that nodes silent on the informers' view are silent, by result (ok, error)."}, []string{"result"})
	m.staleView = prometheus.NewCounter(prometheus.CounterOpts{Namespace: "nodeshepherd", Subsystem: "nodelifecycle", Name: "stale_view_confirmations_total",
		Help: "Fresh reads that found heartbeats of silent-looking nodes which the informers had not delivered: the controller's view was stale (a stalled watch, a slow re-list)."})
	m.freshReads.WithLabelValues("ok").Add(0)
	m.freshReads.WithLabelValues("error").Add(0)
	reg.MustRegister(m.freshReads, m.staleView, m.staticStability, m.zoneState, m.zoneHealth, m.zoneSize, m.unhealthyNodes, m.evictions, m.updateNodeHealth, m.updateAllNodesHealth,
		m.podsMarkedNotReady, m.podReadinessRestored, m.restoreErrors, m.detectionDelay)
	return m
}

// setZoneState publishes a zone's state as a one-hot gauge.
func (m *metrics) setZoneState(zone string, state nodetopology.ZoneState) {
	for _, s := range []nodetopology.ZoneState{nodetopology.StateInitial, nodetopology.StateNormal, nodetopology.StatePartialDisruption, nodetopology.StateFullDisruption} {
		v := 0.0
		if s == state {
			v = 1
		}
		m.zoneState.WithLabelValues(zone, string(s)).Set(v)
	}
}
