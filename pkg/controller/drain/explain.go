package drain

import (
	"fmt"
	"sort"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/nodeshepherd/nodeshepherd/pkg/controller/drain/budget"
	"github.com/nodeshepherd/nodeshepherd/pkg/controller/drain/rules"
	"github.com/nodeshepherd/nodeshepherd/pkg/kube"
	"github.com/nodeshepherd/nodeshepherd/pkg/nodetopology"
)

// What `nodeshepherd explain node` needs of the drain controller, read from
// the objects alone (the controller keeps its state on the Node).

// Drain phases, as NodeState.Phase says them.
const (
	PhaseNone      = "none"
	PhaseDraining  = "draining"
	PhaseCompleted = "completed"
	PhaseFailed    = "failed"
)

// NodeState is the drain state kept on a node.
type NodeState struct {
	// Owned: cordoned by the drain controller (AnnotationConditions).
	Owned    bool
	Cordoned bool
	// Conditions is AnnotationConditions: the rules matched at the cordon
	// ("" when it was taken for a remediation request alone).
	Conditions string
	// Request is AnnotationRequest: the remediation request the cordon is
	// held for ("" when none).
	Request      string
	Phase        string
	ScheduledAt  time.Time
	FinishedAt   time.Time
	Attempts     int
	RetryNow     bool
	BlockedSince time.Time
	// CordonedAt is when the drain controller cordoned the node (zero when
	// it did not, or before it recorded that).
	CordonedAt time.Time
	// RetryAt is when a failed drain is tried again (backoff only; zero
	// unless Phase is failed).
	RetryAt time.Time
}

// ReadNodeState reads the drain state of a node as the controller does.
func (c *Config) ReadNodeState(n *v1.Node) NodeState {
	st := readState(n)
	out := NodeState{Owned: st.owned, Cordoned: st.cordoned, Conditions: n.Annotations[AnnotationConditions], Request: st.request, Phase: PhaseNone,
		ScheduledAt: st.scheduledAt, FinishedAt: st.finishedAt, Attempts: st.attempts, RetryNow: st.retryNow, BlockedSince: st.blockedSince,
		CordonedAt: st.cordonedAt}
	switch st.phase {
	case phaseInFlight:
		out.Phase = PhaseDraining
	case phaseCompleted:
		out.Phase = PhaseCompleted
	case phaseFailed:
		out.Phase, out.RetryAt = PhaseFailed, st.retryAt(c.RetryBackoff)
	}
	return out
}

// PodSkipReason says why a drain leaves the pod on its node; "" means it
// is evicted.
func (c *Config) PodSkipReason(p *v1.Pod) string { return c.skipReason(p) }

// BudgetCluster describes the nodes the budgets count (those the rules
// select and those remediation requests ask to drain), as the controller
// does from its informer (without the drains it runs in memory: a drain in
// flight shows as DrainScheduled=True on its node).
func BudgetCluster(c *Config, r *rules.Rules, nodes []*v1.Node) budget.Cluster {
	var cl budget.Cluster
	for _, n := range nodes {
		st := readState(n)
		cl.LastDrainStart = latestOf(cl.LastDrainStart, st.scheduledAt, st.startedAt)
		if ok, _ := r.Selector.Matches(n); !ok && !requestCounted(n) {
			continue
		}
		cl.Nodes = append(cl.Nodes, budget.Node{Name: n.Name, Group: labels.Set(n.Labels).Get(c.Budget.GroupByLabel), Ready: kube.NodeReady(n),
			Cordoned: st.owned && st.cordoned, Draining: st.owned && st.phase == phaseInFlight})
	}
	cl.ZoneDisruption = zoneDisruption(nodetopology.DisruptedZones(nodes, c.UnhealthyZoneThreshold))
	return cl
}

// zoneDisruption says which zones are disrupted, for the circuit breaker.
func zoneDisruption(disrupted map[string]nodetopology.ZoneState) string {
	zones := make([]string, 0, len(disrupted))
	for z, s := range disrupted {
		zones = append(zones, fmt.Sprintf("zone %q in %s", z, s))
	}
	sort.Strings(zones)
	return strings.Join(zones, ", ")
}
