package remediation

import "github.com/prometheus/client_golang/prometheus"

// metrics are the controller's own; the per-policy gauges are set from
// the same count as the policy's status.
type metrics struct {
	nodes, unhealthy, blocked, exhausted *prometheus.GaugeVec
	conflicting                          *prometheus.GaugeVec
	inStep                               *prometheus.GaugeVec
	steps                                *prometheus.CounterVec
	requests                             *prometheus.CounterVec
	fences                               *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	gauge := func(name, help string, labels ...string) *prometheus.GaugeVec {
		return prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "nodeshepherd", Subsystem: "remediation", Name: name, Help: help}, labels)
	}
	m := &metrics{
		nodes:       gauge("pool_nodes", "Nodes a remediation policy selects.", "policy"),
		unhealthy:   gauge("unhealthy_nodes", "Nodes of a remediation policy's pool that are unhealthy under its conditions.", "policy"),
		blocked:     gauge("blocked_nodes", "Unhealthy nodes whose repair a brake (or the pause, or a person's cordon) holds back.", "policy"),
		exhausted:   gauge("exhausted_nodes", "Nodes whose last step timed out while still unhealthy: they wait for a person.", "policy"),
		conflicting: gauge("conflicting_nodes", "Nodes a remediation policy selects that another policy selects too: neither repairs them.", "policy"),
		inStep:      gauge("nodes_in_step", "Nodes in repair, by policy and step (1-based) and the step's action.", "policy", "step", "action"),
		steps: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "nodeshepherd", Subsystem: "remediation", Name: "steps_started_total",
			Help: "Steps of the repair ladder started, by policy and action."}, []string{"policy", "action"}),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "nodeshepherd", Subsystem: "remediation", Name: "provider_requests_total",
			Help: "Reboot, Replace and Fence (power-off) requests sent to the cloud provider, by action and result (accepted, refused, error)."}, []string{"action", "result"}),
		fences: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "nodeshepherd", Subsystem: "remediation", Name: "fence_outcomes_total",
			Help: "Fence steps decided, by policy and outcome: powered-off (confirmed; the node may be taken out of service) or vetoed (the machine runs; said once per change)."}, []string{"policy", "outcome"}),
	}
	reg.MustRegister(m.nodes, m.unhealthy, m.blocked, m.exhausted, m.conflicting, m.inStep, m.steps, m.requests, m.fences)
	return m
}

// forget drops a deleted policy's series.
func (m *metrics) forget(policy string) {
	for _, g := range []*prometheus.GaugeVec{m.nodes, m.unhealthy, m.blocked, m.exhausted, m.conflicting, m.inStep} {
		g.DeletePartialMatch(prometheus.Labels{"policy": policy})
	}
}
