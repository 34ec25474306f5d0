package scheduler

import "github.com/prometheus/client_golang/prometheus"

// metrics carry kube-scheduler's names so that its dashboards work.
type metrics struct {
	attempts           *prometheus.CounterVec
	attemptDuration    *prometheus.HistogramVec
	pending            *prometheus.GaugeVec
	incoming           *prometheus.CounterVec
	preemptionAttempts prometheus.Counter
	preemptionVictims  prometheus.Histogram
	e2eLatency         *prometheus.HistogramVec
	preemptionEval     prometheus.Histogram
	extensionPoint     *prometheus.HistogramVec
	bindingsInFlight   prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer, profile string) *metrics {
	m := &metrics{
		attempts: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "scheduler_schedule_attempts_total",
			Help: "Number of attempts to schedule pods, by the result."}, []string{"result", "profile"}),
		attemptDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "scheduler_scheduling_attempt_duration_seconds",
			Help: "Scheduling attempt latency in seconds (filtering, scoring, preemption evaluation; binding excluded).", Buckets: prometheus.ExponentialBuckets(0.001, 2, 15)}, []string{"result", "profile"}),
		pending: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "scheduler_pending_pods",
			Help: "Number of pending pods, by the queue type."}, []string{"queue"}),
		incoming: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "scheduler_queue_incoming_pods_total",
			Help: "Number of pods moved by cluster events, by event and destination queue."}, []string{"queue", "event"}),
		preemptionAttempts: prometheus.NewCounter(prometheus.CounterOpts{Name: "scheduler_preemption_attempts_total",
			Help: "Total preemption attempts in the cluster till now."}),
		preemptionVictims: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "scheduler_preemption_victims",
			Help: "Number of selected preemption victims.", Buckets: prometheus.ExponentialBuckets(1, 2, 7)}),
		e2eLatency: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "scheduler_pod_scheduling_sli_duration_seconds",
			Help: "Seconds from a pod entering the queue to its binding, over all its attempts.", Buckets: prometheus.ExponentialBuckets(0.01, 2, 20)}, []string{"attempts"}),
		preemptionEval: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "nodeshepherd_scheduler_preemption_evaluation_seconds",
			Help: "Seconds spent choosing a node and victims for one preemptor.", Buckets: prometheus.ExponentialBuckets(0.0001, 2, 16)}),
		// kube-scheduler's name, labels and buckets; only the Bind point is
		// measured here (the call to the API server).
		extensionPoint: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "scheduler_framework_extension_point_duration_seconds",
			Help: "Latency of a scheduling framework extension point; here only Bind, the binding API call.", Buckets: prometheus.ExponentialBuckets(0.0001, 2, 12)}, []string{"extension_point", "status", "profile"}),
		bindingsInFlight: prometheus.NewGauge(prometheus.GaugeOpts{Name: "nodeshepherd_scheduler_bindings_in_flight",
			Help: "Binding API calls started and not yet answered."}),
	}
	for _, r := range []string{"scheduled", "unschedulable", "error"} {
		m.attempts.WithLabelValues(r, profile)
	}
	if reg != nil {
		reg.MustRegister(m.attempts, m.attemptDuration, m.pending, m.incoming, m.preemptionAttempts, m.preemptionVictims, m.e2eLatency, m.preemptionEval, m.extensionPoint, m.bindingsInFlight)
	}
	return m
}
