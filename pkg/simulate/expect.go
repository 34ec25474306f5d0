package simulate

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// Measurement kinds.
const (
	kindDuration = "duration"
	kindCount    = "count"
)

// Measure is one figure of a run's report; `expect:` names them.
type Measure struct {
	Name  string
	Kind  string
	Title string
	Help  string
}

// Measures lists every figure a report has, in the order it prints them.
// Durations are cluster time from the first timeline step unless said.
var Measures = []Measure{
	{"timeToDetect", kindDuration, "time to detect", "first fault until a faulty node's Ready condition is no longer True"},
	{"timeToTaint", kindDuration, "time to taint (NoExecute)", "first fault until the first not-ready/unreachable NoExecute taint"},
	{"timeToFirstEviction", kindDuration, "time to first eviction", "first fault until the first pod deleted for a NoExecute taint"},
	{"timeToLastEviction", kindDuration, "time to last eviction", "first fault until the last pod deleted for a NoExecute taint"},
	{"podsEvicted", kindCount, "pods evicted (taints)", "pods deleted by taint eviction"},
	{"nodesTainted", kindCount, "nodes tainted NoExecute", "nodes that got a not-ready or unreachable NoExecute taint"},
	{"podsNotReady", kindCount, "pods that went NotReady", "bound pods whose Ready condition turned False"},
	{"maxPodNotReady", kindDuration, "longest NotReady", "longest time a pod stayed NotReady (to the end of the run if it never recovered)"},
	{"podNotReadyAfterRecovery", kindDuration, "longest NotReady after recovery", "longest time a pod stayed NotReady after its node was Ready again"},
	{"podsNotReadyAtEnd", kindCount, "pods NotReady at the end", "bound pods NotReady when the run ended"},
	{"serviceReadyEndpointsMin", kindCount, "fewest ready Service endpoints", "fewest ready endpoints (EndpointSlices, conditions.ready) of the scenario's Services together, at any moment of the timeline"},
	{"serviceReadyEndpointsAtEnd", kindCount, "ready Service endpoints at the end", "ready endpoints of the scenario's Services together when the run ended"},
	{"maxServiceWithoutReadyEndpoints", kindDuration, "longest without a ready Service endpoint", "longest time one of the scenario's Services had no ready endpoint (EndpointSlices, conditions.ready) after having had one, during the timeline (to the end if none came back)"},
	{"rescheduledPods", kindCount, "replacement pods", "pods created during the timeline, burst pods aside"},
	{"maxPendingTime", kindDuration, "longest pending (replacements)", "longest time a replacement pod waited for a node (to the end if it never got one)"},
	{"podsPendingAtEnd", kindCount, "pods pending at the end", "pods without a node when the run ended"},
	{"burstPendingTime", kindDuration, "longest pending (burst)", "longest time a pod of a burst step waited for a node"},
	{"preemptions", kindCount, "pods preempted", "pods deleted by the scheduler to make room (DisruptionTarget PreemptionByScheduler)"},
	{"nodesCordoned", kindCount, "nodes cordoned", "nodes that became unschedulable during the timeline"},
	{"maxNodesCordoned", kindCount, "most nodes cordoned at once", "largest number of unschedulable nodes at any moment"},
	{"drains", kindCount, "drains finished", "nodes drained (DrainSucceeded events)"},
	{"podsDrained", kindCount, "pods evicted by drains", "pods evicted through the Eviction API (DisruptionTarget EvictionByEvictionAPI)"},
	{"repairsStarted", kindCount, "repairs started", "repairs of remediation policies started: a node's repair record (annotation nodeshepherd.io/remediation) appeared"},
	{"repairStepsStarted", kindCount, "repair steps started", "steps of the repair ladders started: each new step in a node's repair record, the first included"},
	{"repairStepsMoved", kindCount, "repair records moved by edits", "a node's repair record following its step to another index after an edit of the policy's ladder (the same step, action and start time): nothing started"},
	{"maxNodesInRepair", kindCount, "most nodes in repair at once", "largest number of nodes with a repair record at any moment of the timeline"},
	{"repairsDone", kindCount, "repairs done", "RemediationDone events: nodes healthy for their policy's hold time, the repair ended"},
	{"repairsBlocked", kindCount, "nodes whose repair was blocked", "distinct nodes with a RemediationBlocked event: a brake (or a person's cordon, or the pause) held their repair back"},
	{"repairsExhausted", kindCount, "nodes left for a person", "distinct nodes with a RemediationExhausted event: the last step timed out and the node was still unhealthy"},
	{"fencesConfirmed", kindCount, "fences confirmed", "nodes whose repair record confirmed a Fence step's power-off (fenceBootID written: the cloud provider answered the machine off)"},
	{"fencesVetoed", kindCount, "fences vetoed", "distinct nodes with a FenceVetoed event: the machine still ran after a Fence step's power-off request"},
	{"nodesOutOfService", kindCount, "nodes out of service", "nodes that got the node.kubernetes.io/out-of-service taint during the timeline"},
	{"podsForceDeleted", kindCount, "pods force-deleted", "pods removed from the API during the timeline while their node was not Ready or gone: no kubelet confirmed the deletion"},
	{"nodesRebooted", kindCount, "nodes rebooted", "nodes whose boot ID (status.nodeInfo.bootID) changed during the timeline: their machine booted again"},
	{"nodesReplaced", kindCount, "nodes replaced", "nodes whose Node was deleted and registered again (a new UID) during the timeline: a new machine"},
	{"allReplicasReadyAfterRecovery", kindDuration, "all replicas Ready after recovery", "from the end of the last fault until every Deployment, StatefulSet and DaemonSet has all replicas Ready"},
	{"podsTerminatingAtEnd", kindCount, "pods Terminating at the end", "pods deleted but still there when the run ended: no kubelet confirmed the deletion (a powered-off node)"},
	{"statefulReplicasOnFailedNodes", kindCount, "stateful replicas on failed nodes", "StatefulSet pods with volumes that ran at the start of the timeline on a node that then went NotReady"},
	{"timeToVolumeAttachedElsewhere", kindDuration, "volumes attached to another node", "first fault until the volumes of every such replica are attached (VolumeAttachment status.attached) to another node"},
	{"timeToReplicaRunningElsewhere", kindDuration, "replicas Running elsewhere with volumes", "first fault until every such replica runs Ready on another node with its volumes attached there"},
}

// optionalMeasures are figures only some runs have (a StatefulSet replica
// with volumes on a node that failed): the report leaves out their rows
// when no run has them.
var optionalMeasures = map[string]bool{"statefulReplicasOnFailedNodes": true, "timeToVolumeAttachedElsewhere": true, "timeToReplicaRunningElsewhere": true}

// repairMeasures are figures of remediation policies' repairs: only a
// scenario with remediationPolicies has them (in both runs: upstream's
// repairs nothing), and an expectation on one elsewhere is an error.
var repairMeasures = map[string]bool{"repairsStarted": true, "repairStepsStarted": true, "maxNodesInRepair": true, "repairsDone": true,
	"repairsBlocked": true, "repairsExhausted": true, "fencesConfirmed": true, "fencesVetoed": true, "repairStepsMoved": true}

// machineMeasures are figures of every run that the report shows only when
// one is not zero or the scenario repairs: most scenarios reboot nothing,
// take no node out of service and force-delete no pod.
var machineMeasures = map[string]bool{"nodesRebooted": true, "nodesReplaced": true, "nodesOutOfService": true, "podsForceDeleted": true}

// serviceMeasures are figures of the scenario's Services' endpoints: a
// scenario without a Service has none, and an expectation on one is an error.
var serviceMeasures = map[string]bool{"serviceReadyEndpointsMin": true, "serviceReadyEndpointsAtEnd": true, "maxServiceWithoutReadyEndpoints": true}

func measure(name string) *Measure {
	for i := range Measures {
		if Measures[i].Name == name {
			return &Measures[i]
		}
	}
	return nil
}

// Runs an expectation applies to.
const (
	RunNodeShepherd = "nodeshepherd"
	RunUpstream     = "upstream"
	RunBoth         = "both"
)

// Expectation is a bound on one measure. A duration that never happened
// (no eviction at all, say) counts as infinite: atMost fails, atLeast holds.
type Expectation struct {
	Metric  string `yaml:"metric"`
	AtMost  *Bound `yaml:"atMost"`
	AtLeast *Bound `yaml:"atLeast"`
	// Run is nodeshepherd (the default), upstream or both; upstream
	// expectations are checked with --compare upstream only.
	Run string `yaml:"run"`
}

// Bound is a duration ("60s") or a count ("2"), after the measure's kind.
type Bound struct {
	raw  string
	line int
	v    float64 // seconds for durations
}

// UnmarshalYAML keeps the raw value; check parses it by the measure's kind.
func (b *Bound) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return fmt.Errorf("line %d: expected a duration such as 60s or a count such as 2", n.Line)
	}
	b.raw, b.line = n.Value, n.Line
	return nil
}

func (b *Bound) MarshalJSON() ([]byte, error) { return []byte(strconv.Quote(b.raw)), nil }

func (e *Expectation) check() string {
	m := measure(e.Metric)
	if m == nil {
		var names []string
		for _, m := range Measures {
			names = append(names, m.Name)
		}
		return fmt.Sprintf("unknown metric %q; metrics: %s", e.Metric, strings.Join(names, ", "))
	}
	if e.AtMost == nil && e.AtLeast == nil {
		return fmt.Sprintf("%s: give atMost, atLeast or both", e.Metric)
	}
	if e.Run == "" {
		e.Run = RunNodeShepherd
	}
	if !slices.Contains([]string{RunNodeShepherd, RunUpstream, RunBoth}, e.Run) {
		return fmt.Sprintf("run %q: must be nodeshepherd, upstream or both", e.Run)
	}
	for _, b := range []*Bound{e.AtMost, e.AtLeast} {
		if b == nil {
			continue
		}
		if m.Kind == kindDuration {
			d, err := time.ParseDuration(b.raw)
			if err != nil {
				return fmt.Sprintf("%s is a duration: write e.g. 60s or 5m, got %q", e.Metric, b.raw)
			}
			b.v = d.Seconds()
		} else {
			n, err := strconv.Atoi(b.raw)
			if err != nil || n < 0 {
				return fmt.Sprintf("%s is a count: write a whole number, got %q", e.Metric, b.raw)
			}
			b.v = float64(n)
		}
	}
	return ""
}

func (e *Expectation) String() string {
	var parts []string
	if e.AtLeast != nil {
		parts = append(parts, "≥ "+e.AtLeast.raw)
	}
	if e.AtMost != nil {
		parts = append(parts, "≤ "+e.AtMost.raw)
	}
	return e.Metric + " " + strings.Join(parts, " and ")
}

// appliesTo says whether the expectation is checked on a run of mode.
func (e *Expectation) appliesTo(mode string) bool { return e.Run == RunBoth || e.Run == mode }

// holds evaluates the expectation on a value; nil is "never" (infinite).
func (e *Expectation) holds(v *float64) bool {
	if e.AtMost != nil && (v == nil || *v > e.AtMost.v) {
		return false
	}
	if e.AtLeast != nil && v != nil && *v < e.AtLeast.v {
		return false
	}
	return true
}
