package drain

import "github.com/prometheus/client_golang/prometheus"

type metrics struct {
	// Draino's counters, with its result label (succeeded, failed).
	cordoned, uncordoned, drained, scheduled *prometheus.CounterVec

	inFlight       prometheus.Gauge
	cordonedNodes  prometheus.Gauge
	waiting        *prometheus.GaugeVec
	skipped        *prometheus.GaugeVec
	forceDeleted   prometheus.Counter
	breakerOpen    prometheus.Gauge
	evictions      *prometheus.CounterVec
	blockedByPDB   prometheus.Counter
	drainDurations *prometheus.HistogramVec
	moves          *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	result := []string{"result"}
	draino := func(name, help string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "draino", Name: name, Help: help}, result)
	}
	opts := func(name, help string) prometheus.GaugeOpts {
		return prometheus.GaugeOpts{Namespace: "nodeshepherd", Subsystem: "drain", Name: name, Help: help}
	}
	m := &metrics{
		cordoned:      draino("cordoned_nodes_total", "Nodes cordoned (Draino's name), by result."),
		uncordoned:    draino("uncordoned_nodes_total", "Nodes uncordoned (Draino's name), by result."),
		drained:       draino("drained_nodes_total", "Drains ended (Draino's name), by result."),
		scheduled:     draino("drain_scheduled_nodes_total", "Drains scheduled (Draino's name), by result."),
		inFlight:      prometheus.NewGauge(opts("in_flight", "Drains running now.")),
		cordonedNodes: prometheus.NewGauge(opts("cordoned_nodes", "Nodes currently cordoned by the drain controller.")),
		waiting: prometheus.NewGaugeVec(opts("nodes_waiting", "Nodes that should be cordoned or drained but wait for a budget, by action (cordon, drain) and budget."),
			[]string{"action", "budget"}),
		skipped: prometheus.NewGaugeVec(opts("nodes_skipped", "Nodes a drain rule matches that the controller leaves alone, by reason (cordoned-by-someone-else)."),
			[]string{"reason"}),
		forceDeleted: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "nodeshepherd", Subsystem: "drain", Name: "force_deletions_total",
			Help: "Pods deleted by force-after, bypassing a PodDisruptionBudget that kept refusing their eviction (with --dry-run none: they are reported in nodeshepherd_dry_run_actions_total{action=\"force-delete\"})."}),
		breakerOpen: prometheus.NewGauge(opts("circuit_breaker_open", "1 while too many selected nodes are not Ready, or a zone is disrupted, for any new cordon or drain.")),
		evictions: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "nodeshepherd", Subsystem: "drain", Name: "evictions_total",
			Help: "Eviction requests, by result (evicted, gone, blocked-by-pdb, error)."}, result),
		blockedByPDB: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "nodeshepherd", Subsystem: "drain", Name: "evictions_blocked_by_pdb_total",
			Help: "Evictions refused (429) because a PodDisruptionBudget allows no disruption now; each is retried with backoff."}),
		drainDurations: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: "nodeshepherd", Subsystem: "drain", Name: "duration_seconds",
			Help: "Time from a drain's start to its end, by result.", Buckets: prometheus.ExponentialBuckets(1, 2, 12)}, result),
		moves: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "nodeshepherd", Subsystem: "drain", Name: "moves_total",
			Help: "Move-before-evict, by result: started (a Deployment surged), moved (scaled back once the new pods were available), aborted (replicas changed by someone else, or the drain ended), failed (the new pods did not come), refused (a workload that cannot surge, named in DrainMoveRefused)."}, result),
	}
	reg.MustRegister(m.cordoned, m.uncordoned, m.drained, m.scheduled, m.inFlight, m.cordonedNodes, m.waiting, m.skipped, m.forceDeleted, m.breakerOpen,
		m.evictions, m.blockedByPDB, m.drainDurations, m.moves)
	for _, c := range []*prometheus.CounterVec{m.cordoned, m.uncordoned, m.drained, m.scheduled} {
		c.WithLabelValues(resultSucceeded).Add(0)
		c.WithLabelValues(resultFailed).Add(0)
	}
	return m
}

const (
	resultSucceeded = "succeeded"
	resultFailed    = "failed"
)
