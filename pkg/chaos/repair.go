package chaos

// The repair checker: the remediation ladder's invariants, judged like the
// Checker's from its own watches (Nodes, the fake cloud's requests and
// machine states ConfigMaps, events for the timeline), never from a
// controller's memory. It is a checker of its own beside the Checker, which
// knows nothing of remediation: one RepairChecker per policy, fed by
// WatchRepairs on the same watch plumbing as Watch; the runner merges their
// violations and timelines.

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	fakecloud "github.com/nodeshepherd/nodeshepherd/pkg/cloudprovider/fake"
	"github.com/nodeshepherd/nodeshepherd/pkg/remediation"
)

// The repair checker's invariants, as reported.
const (
	InvRepairBrakes    = "repair-brakes"
	InvRepairSelection = "repair-selection"
	InvRepairLadder    = "repair-ladder"
	InvRepairRequests  = "repair-requests"
	InvRepairProgress  = "repair-progress"
	// InvRepairUnhealthy: a Reboot, Replace or Fence (a request, or the
	// record climbing to such a step) of a node that no version the checker
	// saw around it showed unhealthy by the policy's condition.
	InvRepairUnhealthy = "repair-unhealthy"
	// InvFenceRunning: an out-of-service taint under a Fence step while the
	// fake cloud (the provider's source) said the machine runs, in every
	// version of its state from the Fence step to the taint.
	InvFenceRunning = "fence-running"
	// InvRepairDrain: a Reboot, Replace or Fence that follows a Drain step
	// starts only once the drain controller has drained the node under
	// its present cordon (issue 46 point 2: the ladder keeps the drain's
	// promises), judged on the Node version that carries the new step.
	InvRepairDrain = "repair-drain"
)

// The remediation record, spelled out rather than imported from the
// controller it judges, as the Checker's keys are (zoneLabel and
// taintOutOfService are theirs).
const annRepairRecord = "nodeshepherd.io/remediation"

// What the drain controller writes on a Node, as Draino does, besides its
// condition (condDrainSched: True while draining; False with "| Completed:
// TIME" once a drain ended well): when it cordoned the node.
const (
	drainCompletedMark = " | Completed: "
	annDrainCordonedAt = "nodeshepherd.io/drain-cordoned-at"
)

// drainDone says whether the node, as written, was drained under its
// present cordon: cordoned, its drain condition False with a completion at
// or after the cordon (times of one-second precision are compared to the
// second); why says what it shows otherwise.
func drainDone(n *v1.Node) (done bool, why string) {
	if !n.Spec.Unschedulable {
		return false, "not cordoned"
	}
	var cond *v1.NodeCondition
	for i := range n.Status.Conditions {
		if n.Status.Conditions[i].Type == condDrainSched {
			cond = &n.Status.Conditions[i]
		}
	}
	if cond == nil {
		return false, "no " + string(condDrainSched) + " condition"
	}
	i := strings.Index(cond.Message, drainCompletedMark)
	if cond.Status != v1.ConditionFalse || i < 0 {
		return false, fmt.Sprintf("%s=%s %q", condDrainSched, cond.Status, cond.Message)
	}
	ts, _, _ := strings.Cut(cond.Message[i+len(drainCompletedMark):], " ")
	completed, err := time.Parse(time.RFC3339Nano, ts)
	if err != nil {
		return false, fmt.Sprintf("completion time %q unreadable", ts)
	}
	if v, ok := n.Annotations[annDrainCordonedAt]; ok {
		if cordoned, err := time.Parse(time.RFC3339Nano, v); err == nil && completed.Truncate(time.Second).Before(cordoned.Truncate(time.Second)) {
			return false, fmt.Sprintf("the last drain completed at %s, before the cordon at %s", ts, v)
		}
	}
	return true, ""
}

// disruptiveSteps are the steps that take a node's machine or workloads away:
// each needs the node selected and unhealthy when it is taken.
var disruptiveSteps = map[string]bool{"Reboot": true, "Replace": true, "Fence": true}

// RepairNotChecked is what the repair checker leaves out, printed with
// NotChecked.
var RepairNotChecked = []string{
	"repair-brakes: the cooldown after a storm (a process's memory: a new leader starts without it); maxUnhealthy is judged only when the unhealthy nodes held their condition over the whole window from the decision to the checker's view of it",
	"repair-selection: a request written less than the slack after its node left the pool is not told from one written just before",
	"repair-ladder: steps' timeouts and the healthy hold (when a step may come) are not checked, only their order",
	"repair-brakes: a node being replaced (its Node absent) is not counted in repair",
}

// repairRecord is a node's repair record (the annotation's JSON).
type repairRecord struct {
	Policy      string    `json:"policy"`
	Step        int       `json:"step"`
	Action      string    `json:"action"`
	StepSince   time.Time `json:"stepSince"`
	RepairSince time.Time `json:"repairSince"`
	BootID      string    `json:"bootID,omitempty"`
}

// same says whether two records are one version (times compared as
// instants: their zones may be spelled differently).
func (r repairRecord) same(o repairRecord) bool {
	return r.Policy == o.Policy && r.Step == o.Step && r.Action == o.Action && r.BootID == o.BootID &&
		r.StepSince.Equal(o.StepSince) && r.RepairSince.Equal(o.RepairSince)
}

func (r repairRecord) String() string {
	return fmt.Sprintf("step %d (%s) since %s, repair since %s", r.Step+1, r.Action, r.StepSince.Format("15:04:05.000"), r.RepairSince.Format("15:04:05.000"))
}

// nodeView is one version of a node as the checker saw it, from `from`
// until the next one: what the window checks need.
type nodeView struct {
	from     time.Time
	exists   bool
	selected bool
	// cond is the policy's condition, nil when the node has none.
	cond *v1.NodeCondition
	rec  *repairRecord
	// oos: the node carries the out-of-service taint.
	oos bool
	// rv is the version's resourceVersion (0: unknown): etcd's revision,
	// which orders writes to different Nodes as the API server made them,
	// where a relist delivers them in name order.
	rv uint64
}

// machineView is one version of the fake cloud's machine states (its
// ConfigMap: a node's key missing means running), from `from` on.
type machineView struct {
	from  time.Time
	state map[string]string
}

// pendingRepair is a check that needs the view up to a moment past the
// slack: a request's selection, or a new repair's maxUnhealthy.
type pendingRepair struct {
	kind string // "selection", "unhealthy", "step" (a climb or a request) or "fence"
	node string
	seen time.Time // when the checker saw the request or the record
	// decided is the controller's own time of the decision (the record's
	// repairSince) for "unhealthy"; id and action the request's.
	decided    time.Time
	id, action string
	// step: the climb's record (kind "step"), or the Fence step's first
	// sight (kind "fence").
	rec       *repairRecord
	fenceSeen time.Time
	// rv and zone: the new record's resourceVersion and its node's zone
	// (kind "brakes").
	rv   uint64
	zone string
}

// RepairStep is one rung of a policy's ladder.
type RepairStep struct {
	Action  string
	Timeout time.Duration
}

// RepairPolicy is a RemediationPolicy in the terms the repair checker
// judges by. The runner installs the policy from this same value, so the
// checker's limits are the policy's; the checker itself reads neither the
// steps' timeouts nor HealthyHold, TaintKey and Cooldown.
type RepairPolicy struct {
	Name                 string
	PoolLabel, PoolValue string
	Condition            v1.NodeConditionType
	Status               v1.ConditionStatus
	For, HealthyHold     time.Duration
	Steps                []RepairStep
	TaintKey             string
	MaxInRepair          intstr.IntOrString
	MaxInRepairPerZone   intstr.IntOrString
	MaxUnhealthy         intstr.IntOrString
	Cooldown             time.Duration
}

// Selects says whether labels put a node in the policy's pool.
func (p RepairPolicy) Selects(labels map[string]string) bool {
	return labels[p.PoolLabel] == p.PoolValue
}

// RepairChecker judges the ladder of one policy.
type RepairChecker struct {
	mu       sync.Mutex
	pol      RepairPolicy
	slack    time.Duration
	provider bool // a cloud provider that can reboot and replace
	// others are the other policies' names: their records are theirs to
	// judge. requestActions says which of the fake cloud's request actions
	// this checker judges (nil: all). events: this checker puts the
	// remediation events into the timeline (one of them does).
	others         map[string]bool
	requestActions func(action string) bool
	events         bool
	// machines are the fake cloud's machine states, version by version;
	// fenceSeen is when the checker first saw each node's record at a
	// Fence step (zero: not at one).
	machines  []machineView
	fenceSeen map[string]time.Time

	nodes map[string]*v1.Node
	views map[string][]nodeView
	// bad is the last unreadable or foreign record reported, per node.
	bad map[string]string
	// maxPool and maxZonePool are the largest pool sizes seen: a
	// percentage brake is judged against them (the most it can allow).
	maxPool     int
	maxZonePool map[string]int
	// requests is the last request seen per node; written counts the
	// writes of each request ID; byBoot the IDs per node UID, boot and
	// action.
	requests map[string]fakecloud.Request
	written  map[string]int
	byBoot   map[string][]string
	done     []string
	pending  []pendingRepair
	// ended is, per node, the step its last repair ended at and when the
	// checker saw the record go: a repair that starts again within the
	// recurrence window may start above step 1, up to the step after it.
	ended map[string]endedRepair

	// blind are the intervals in which the checker's own watches were
	// broken (an API server restart: its reflectors back off, up to some
	// 30 s, and relist): versions written then may never be delivered, so
	// no judgement that needs every version of a node looks into them.
	// blindFrom is the open one's start, lastBroken its last error.
	blind                 []blindInterval
	blindFrom, lastBroken time.Time

	stats map[string]int
	findings
}

// NewRepairChecker judges pol with the given slack for watch delays;
// provider: a cloud provider that can reboot and replace.
func NewRepairChecker(pol RepairPolicy, slack time.Duration, provider bool) *RepairChecker {
	return &RepairChecker{pol: pol, slack: slack, provider: provider, nodes: map[string]*v1.Node{}, views: map[string][]nodeView{}, bad: map[string]string{},
		maxZonePool: map[string]int{}, requests: map[string]fakecloud.Request{}, written: map[string]int{}, byBoot: map[string][]string{},
		stats: map[string]int{}, others: map[string]bool{}, events: true, fenceSeen: map[string]time.Time{}, ended: map[string]endedRepair{}}
}

// endedRepair is a repair's end as the checker saw it.
type endedRepair struct {
	step int
	at   time.Time
}

// Violations returns what was found so far.
func (c *RepairChecker) Violations() []Violation {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]Violation(nil), c.violations...)
}

// Timeline returns the repairs' writes seen so far.
func (c *RepairChecker) Timeline() []Entry {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]Entry(nil), c.timeline...)
}

// readRepairRecord parses a node's record (nil: none).
func readRepairRecord(n *v1.Node) (*repairRecord, error) {
	s, ok := n.Annotations[annRepairRecord]
	if !ok {
		return nil, nil
	}
	var r repairRecord
	if err := json.Unmarshal([]byte(s), &r); err != nil {
		return nil, fmt.Errorf("annotation %s %q: %v", annRepairRecord, s, err)
	}
	return &r, nil
}

func (c *RepairChecker) condOf(n *v1.Node) *v1.NodeCondition {
	for i := range n.Status.Conditions {
		if n.Status.Conditions[i].Type == c.pol.Condition {
			cd := n.Status.Conditions[i]
			return &cd
		}
	}
	return nil
}

// ObserveNode takes a node as watched at `at` (deleted: it is gone).
func (c *RepairChecker) ObserveNode(at time.Time, n *v1.Node, deleted bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.sight(at)
	name := n.Name
	old := c.nodes[name]
	var prev *repairRecord
	if vs := c.views[name]; len(vs) > 0 {
		prev = vs[len(vs)-1].rec
	}
	if old != nil && !deleted && old.UID != n.UID && prev != nil {
		// A Node created anew under the name whose deletion the watch did
		// not deliver: its old record went with it.
		c.note(at, "repair of %s: record gone with the old Node (%s)", name, *prev)
		prev = nil
	}
	view := nodeView{from: at, exists: !deleted}
	view.rv, _ = strconv.ParseUint(n.ResourceVersion, 10, 64)
	if deleted {
		delete(c.nodes, name)
		if prev != nil {
			c.note(at, "repair of %s: record gone with the Node (%s)", name, *prev)
			c.stats["ended with the Node"]++
		}
		c.views[name] = append(c.views[name], view)
		c.settle(at)
		return
	}
	c.nodes[name] = n
	view.selected, view.cond = c.pol.Selects(n.Labels), c.condOf(n)
	rec, err := readRepairRecord(n)
	switch {
	case err != nil:
		if raw := n.Annotations[annRepairRecord]; c.bad[name] != raw { // once per value, not per status update
			c.bad[name] = raw
			c.violate(at, InvRepairLadder, "node/"+name, "repair record unreadable: %v", err)
		}
		rec = prev // judge the next readable one against the last
	case rec != nil && rec.Policy != c.pol.Name && c.others[rec.Policy]:
		rec = nil // another checker's
	case rec != nil && rec.Policy != c.pol.Name:
		if raw := n.Annotations[annRepairRecord]; c.bad[name] != raw {
			c.bad[name] = raw
			c.violate(at, InvRepairLadder, "node/"+name, "repair record of policy %q, but only %q exists", rec.Policy, c.pol.Name)
		}
		rec = nil
	}
	view.rec = rec
	view.oos = hasTaint(n, taintOutOfService)
	var wasOOS bool
	if vs := c.views[name]; len(vs) > 0 {
		wasOOS = vs[len(vs)-1].exists && vs[len(vs)-1].oos
	}
	c.views[name] = append(c.views[name], view)
	c.poolSizes()
	c.ladder(at, n, prev, rec)
	c.fence(at, name, rec, view.oos && !wasOOS)
	c.settle(at)
}

func hasTaint(n *v1.Node, key string) bool {
	for _, t := range n.Spec.Taints {
		if t.Key == key {
			return true
		}
	}
	return false
}

// fence follows a node's Fence step: its first sight, and an out-of-
// service taint that comes under it (fence-running, judged once the
// machine states' watch has had the slack to catch up).
func (c *RepairChecker) fence(at time.Time, name string, rec *repairRecord, newOOS bool) {
	if rec == nil || rec.Action != "Fence" {
		delete(c.fenceSeen, name)
		return
	}
	if c.fenceSeen[name].IsZero() {
		c.fenceSeen[name] = at
	}
	if newOOS {
		c.pending = append(c.pending, pendingRepair{kind: "fence", node: name, seen: at, fenceSeen: c.fenceSeen[name]})
	}
}

// ObserveMachines takes the fake cloud's machine states ConfigMap.
func (c *RepairChecker) ObserveMachines(at time.Time, cm *v1.ConfigMap, deleted bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.sight(at)
	st := map[string]string{}
	if !deleted {
		for k, v := range cm.Data {
			st[k] = v
		}
	}
	c.machines = append(c.machines, machineView{from: at, state: st})
	c.settle(at)
}

// machineRan says whether every version of the machine states visible in
// [from, to] said the node's machine runs (no key, or "running"); before
// the first version seen, the ConfigMap did not exist: every machine ran.
func (c *RepairChecker) machineRan(node string, from, to time.Time) (bool, []string) {
	var seen []string
	for i, v := range c.machines {
		if v.from.After(to) {
			break
		}
		if i+1 < len(c.machines) && !c.machines[i+1].from.After(from) {
			continue
		}
		s := v.state[node]
		seen = append(seen, v.from.Format("15:04:05.000")+" "+dashIfEmptyState(s))
		if s != "" && s != fakecloud.Running {
			return false, seen
		}
	}
	return true, seen
}

func dashIfEmptyState(s string) string {
	if s == "" {
		return fakecloud.Running + " (no key)"
	}
	return s
}

// checkFence (fence-running): an out-of-service taint came under a Fence
// step while the provider, asked at any moment from the slack before the
// checker first saw the step to the taint, would have said the machine runs.
func (c *RepairChecker) checkFence(p pendingRepair) {
	from := p.fenceSeen.Add(-c.slack)
	if p.fenceSeen.IsZero() {
		from = p.seen.Add(-c.slack)
	}
	if ran, seen := c.machineRan(p.node, from, p.seen); ran {
		c.violate(p.seen, InvFenceRunning, "node/"+p.node, "out-of-service taint under policy %s's Fence step while the fake cloud said the machine runs (its states from %s to %s: %s)",
			c.pol.Name, from.Format("15:04:05.000"), p.seen.Format("15:04:05.000"), dashIfNone(seen))
	}
}

// poolSizes keeps the largest pool sizes seen.
func (c *RepairChecker) poolSizes() {
	pool, zones := 0, map[string]int{}
	for _, n := range c.nodes {
		if c.pol.Selects(n.Labels) {
			pool++
			zones[n.Labels[zoneLabel]]++
		}
	}
	c.maxPool = max(c.maxPool, pool)
	for z, k := range zones {
		c.maxZonePool[z] = max(c.maxZonePool[z], k)
	}
}

// resumeTop is the highest step a new repair of the node may start at
// because its last repair, which the checker saw end at step k, ended
// within the policy's recurrence window (the default; the chaos policy sets
// none) before at: the step after k (k itself at the top), as the next step
// from there goes (-1: no recent repair). The window is judged on the
// checker's own sight of the end, which comes after the controller's, so
// the check is never stricter than the rule.
func (c *RepairChecker) resumeTop(node string, at time.Time) int {
	e, ok := c.ended[node]
	if !ok || at.Sub(e.at) >= remediation.DefaultRecurrenceWindow {
		return -1
	}
	from := min(e.step+1, len(c.pol.Steps)-1)
	if next := c.nextStep(from - 1); next < len(c.pol.Steps) {
		return next
	}
	return from
}

// firstStep is the step a repair may start at: 0, or past Reboot and
// Replace steps when no provider can carry them out.
func (c *RepairChecker) firstStep() int { return c.nextStep(-1) }

// nextStep is the only step that may follow step i.
func (c *RepairChecker) nextStep(i int) int {
	for j := i + 1; j < len(c.pol.Steps); j++ {
		if a := c.pol.Steps[j].Action; c.provider || (a != "Reboot" && a != "Replace") {
			return j
		}
	}
	return len(c.pol.Steps)
}

// ladder judges a record's change (repair-ladder) and a new repair's
// brakes (repair-brakes).
func (c *RepairChecker) ladder(at time.Time, n *v1.Node, prev, rec *repairRecord) {
	name, obj := n.Name, "node/"+n.Name
	switch {
	case rec == nil && prev == nil:
		return
	case rec == nil:
		c.note(at, "repair of %s: record removed at %s", name, *prev)
		c.stats["ended"]++
		c.ended[name] = endedRepair{step: prev.Step, at: at}
		return
	case prev != nil && rec.same(*prev):
		return
	}
	if rec.Step < 0 || rec.Step >= len(c.pol.Steps) {
		c.violate(at, InvRepairLadder, obj, "record at step %d, but policy %s has %d steps", rec.Step+1, c.pol.Name, len(c.pol.Steps))
		return
	}
	if want := c.pol.Steps[rec.Step].Action; rec.Action != want {
		c.violate(at, InvRepairLadder, obj, "record at step %d says %s, but the policy's step %d is %s", rec.Step+1, rec.Action, rec.Step+1, want)
	}
	if prev == nil || !prev.RepairSince.Equal(rec.RepairSince) {
		what := "starts"
		if prev != nil {
			what = fmt.Sprintf("starts anew over the repair at %s without its end", *prev)
		}
		c.note(at, "repair of %s %s: %s", name, what, *rec)
		c.stats["started"]++
		if first, top := c.firstStep(), c.resumeTop(name, at); rec.Step != first && (top < 0 || rec.Step < first || rec.Step > top) {
			if top >= 0 {
				c.violate(at, InvRepairLadder, obj, "a new repair starts at step %d (%s), not at step %d (%s) nor, resuming after the repair that ended at step %d, above step %d",
					rec.Step+1, rec.Action, first+1, c.pol.Steps[first].Action, c.ended[name].step+1, top+1)
			} else {
				c.violate(at, InvRepairLadder, obj, "a new repair starts at step %d (%s), not at step %d (%s)", rec.Step+1, rec.Action, first+1, c.pol.Steps[first].Action)
			}
		}
		c.brakes(at, n, rec)
		return
	}
	if vs := c.views[name]; len(vs) >= 2 && c.blindDuring(vs[len(vs)-2].from, at) {
		// The versions between may never have been delivered.
		c.note(at, "repair of %s: from %s to %s across the checker's blind watches, not judged", name, *prev, *rec)
		return
	}
	if disruptiveSteps[rec.Action] && prev.Action == "Drain" && rec.Step != prev.Step {
		if done, why := drainDone(n); !done {
			c.violate(at, InvRepairDrain, obj, "step %d (%s) started after the Drain step while the drain was not done (%s): from %s to %s", rec.Step+1, rec.Action, why, *prev, *rec)
		}
	}
	switch next := c.nextStep(prev.Step); {
	case rec.Step == prev.Step:
		c.violate(at, InvRepairLadder, obj, "step %d (%s) started again: from %s to %s", rec.Step+1, rec.Action, *prev, *rec)
	case rec.Step == next:
		c.note(at, "repair of %s climbs: %s", name, *rec)
		c.stats["climbed to "+rec.Action]++
		if disruptiveSteps[rec.Action] {
			r := *rec
			c.pending = append(c.pending, pendingRepair{kind: "step", node: name, seen: at, action: rec.Action, rec: &r})
		}
	case rec.Step < prev.Step:
		c.violate(at, InvRepairLadder, obj, "moved back from %s to %s", *prev, *rec)
	default:
		c.violate(at, InvRepairLadder, obj, "skipped from %s to %s; the next step is %d (%s)", *prev, *rec, next+1, c.pol.Steps[next].Action)
	}
}

// brakeLimit is a brake's value over total nodes: a count, or a percentage
// rounded up; 0 is 0 (issue 46 point 5, as remediation.Limit, computed
// here on its own: the checker shares no code with the controller).
func brakeLimit(v intstr.IntOrString, total int) int {
	l, err := intstr.GetScaledValueFromIntOrPercent(&v, total, true)
	if err != nil {
		return total // unreadable: the policy would have been refused
	}
	return l
}

// brakes: when a new repair starts, the pool's nodes carrying a record,
// the new one and those in progress, are within maxInRepair, and those of
// its zone within maxInRepairPerZone. The checker's view of the Nodes is
// the API's at some moment (one watch, in order), so the count is one the
// cluster had. maxUnhealthy needs the view around the decision: pending.
//
// The count is judged after the slack, on each node's version just before
// the new record's write (by resourceVersion, when known): a relist after
// an API server restart delivers the Nodes in name order, so a repair's
// start may come before another's end that the API server wrote first
// (chaos seed 60016).
func (c *RepairChecker) brakes(at time.Time, n *v1.Node, rec *repairRecord) {
	rv, _ := strconv.ParseUint(n.ResourceVersion, 10, 64)
	r := *rec
	c.pending = append(c.pending, pendingRepair{kind: "brakes", node: n.Name, seen: at, rec: &r, rv: rv, zone: n.Labels[zoneLabel]},
		pendingRepair{kind: "unhealthy", node: n.Name, seen: at, decided: rec.RepairSince})
}

// viewBefore is node name's version as the API server had it when the
// version rv of another node was written: the last one with a smaller
// resourceVersion, or without resourceVersions the last one seen by at.
func (c *RepairChecker) viewBefore(name string, rv uint64, at time.Time) (nodeView, bool) {
	var out nodeView
	ok := false
	for _, v := range c.views[name] {
		if rv > 0 && v.rv > 0 {
			if v.rv > rv {
				break
			}
		} else if v.from.After(at) {
			break
		}
		out, ok = v, true
	}
	return out, ok
}

// checkBrakes is brakes' judgement, once the slack has passed.
func (c *RepairChecker) checkBrakes(p pendingRepair) {
	at, rec := p.seen, p.rec
	if c.blindDuring(at.Add(-2*c.slack), at) {
		return
	}
	var pool, inZone []string
	for name, vs := range c.views {
		v, ok := c.viewBefore(name, p.rv, at)
		if name == p.node {
			v, ok = vs[0], true // the new repair itself
			v.exists, v.selected, v.rec = true, true, rec
		}
		if !ok || !v.exists || !v.selected || v.rec == nil {
			continue
		}
		pool = append(pool, name)
		if m := c.nodes[name]; name == p.node || m != nil && m.Labels[zoneLabel] == p.zone {
			inZone = append(inZone, name)
		}
	}
	sort.Strings(pool)
	sort.Strings(inZone)
	if l := brakeLimit(c.pol.MaxInRepair, c.maxPool); len(pool) > l {
		c.violate(at, InvRepairBrakes, "node/"+p.node, "repair started (%s) with %d nodes of pool %s in repair (%s), maxInRepair %s (%d of %d)",
			*rec, len(pool), c.pol.Name, strings.Join(pool, ","), c.pol.MaxInRepair.String(), l, c.maxPool)
	}
	if l := brakeLimit(c.pol.MaxInRepairPerZone, c.maxZonePool[p.zone]); len(inZone) > l {
		c.violate(at, InvRepairBrakes, "node/"+p.node, "repair started (%s) with %d nodes of pool %s in zone %s in repair (%s), maxInRepairPerZone %s (%d of %d)",
			*rec, len(inZone), c.pol.Name, p.zone, strings.Join(inZone, ","), c.pol.MaxInRepairPerZone.String(), l, c.maxZonePool[p.zone])
	}
}

// ObserveRequests takes the fake cloud's requests ConfigMap as watched.
func (c *RepairChecker) ObserveRequests(at time.Time, cm *v1.ConfigMap) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.sight(at)
	names := make([]string, 0, len(cm.Data))
	for k := range cm.Data {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, node := range names {
		r, err := fakecloud.ParseRequest(cm.Data[node])
		if err != nil {
			c.violate(at, InvRepairRequests, "node/"+node, "unreadable request: %v", err)
			continue
		}
		prev, had := c.requests[node]
		c.requests[node] = r
		if !c.judges(r) {
			continue // another checker's
		}
		if had && prev.ID == r.ID {
			if prev.Done == nil && r.Done != nil {
				c.note(at, "request %s %s carried out (%s)", r.Action, node, r.ID)
				c.done = append(c.done, r.ID)
			}
			continue
		}
		c.write(at, node, r)
	}
	c.settle(at)
}

// blindInterval is a stretch of time the checker's watches were broken.
type blindInterval struct{ from, to time.Time }

// WatchBroken notes an error of one of the checker's watches at at.
func (c *RepairChecker) WatchBroken(at time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.blindFrom.IsZero() {
		c.blindFrom = at
		c.note(at, "the checker's watches broken (not judged until they deliver again)")
	}
	c.lastBroken = at
}

// sight closes an open blind interval once a watch delivers after its last
// error (the mutex is held).
func (c *RepairChecker) sight(at time.Time) {
	if !c.blindFrom.IsZero() && at.After(c.lastBroken) {
		c.blind = append(c.blind, blindInterval{c.blindFrom, at})
		c.note(at, "the checker's watches deliver again (blind since %s)", c.blindFrom.Format("15:04:05.000"))
		c.blindFrom = time.Time{}
	}
}

// blindDuring says whether the checker's watches were broken at some moment
// of [from, to].
func (c *RepairChecker) blindDuring(from, to time.Time) bool {
	if !c.blindFrom.IsZero() && !c.blindFrom.After(to) {
		return true
	}
	for _, b := range c.blind {
		if !b.from.After(to) && !b.to.Before(from) {
			return true
		}
	}
	return false
}

// judges says whether the request is this checker's: its ID names the
// policy (UID/boot/policy/step, cloudprovider.RequestID), which decides when
// it names a policy the checkers know (chaos seed 70021: the chaos policy's
// Fence power-off was judged as chaos-fence's); otherwise by action.
func (c *RepairChecker) judges(r fakecloud.Request) bool {
	if parts := strings.SplitN(r.ID, "/", 4); len(parts) == 4 {
		if parts[2] == c.pol.Name {
			return true
		}
		if c.others[parts[2]] {
			return false
		}
	}
	return c.requestActions == nil || c.requestActions(r.Action)
}

// write is a request written: (d) each ID once, one request of an action
// per boot of a Node; (b) pending: the node in the pool when written.
func (c *RepairChecker) write(at time.Time, node string, r fakecloud.Request) {
	c.note(at, "request %s %s written (%s)", r.Action, node, r.ID)
	c.stats["request "+r.Action]++
	obj := "node/" + node
	if c.written[r.ID]++; c.written[r.ID] > 1 {
		c.violate(at, InvRepairRequests, obj, "request %s (%s) written %d times: the same request carried out again", r.ID, r.Action, c.written[r.ID])
	}
	if r.Done != nil {
		c.done = append(c.done, r.ID)
	}
	// The ID is the Node's UID, its boot ID and the step
	// (cloudprovider.RequestID): one reboot per boot, one replacement.
	if parts := strings.SplitN(r.ID, "/", 3); len(parts) == 3 {
		key := parts[0] + "/" + parts[1] + "/" + r.Action
		ids := c.byBoot[key]
		if len(ids) > 0 && !slices.Contains(ids, r.ID) {
			c.violate(at, InvRepairRequests, obj, "a second %s for Node UID %s boot %s: %s after %s", r.Action, parts[0], parts[1], r.ID, strings.Join(ids, ", "))
		}
		if !slices.Contains(ids, r.ID) {
			c.byBoot[key] = append(ids, r.ID)
		}
	} else {
		c.violate(at, InvRepairRequests, obj, "request ID %q names no Node UID and boot", r.ID)
	}
	c.pending = append(c.pending, pendingRepair{kind: "selection", node: node, seen: at, id: r.ID, action: r.Action},
		pendingRepair{kind: "step", node: node, seen: at, id: r.ID, action: r.Action})
}

// stepAction is the ladder's action a fake cloud request carries out.
func stepAction(requestAction string) string {
	switch requestAction {
	case "reboot":
		return "Reboot"
	case "replace":
		return "Replace"
	}
	return "Fence"
}

// checkStep judges a disruptive action (a climb to its step, or a request)
// against every version of the node visible from the slack before the
// checker saw it to the slack after: one of them must have been selected by
// the policy and unhealthy by its condition (repair-selection for a climb,
// repair-unhealthy), and, for a request, carried this policy's record at
// the action's step (repair-ladder: no step skipped).
func (c *RepairChecker) checkStep(p pendingRepair) {
	from, to := p.seen.Add(-c.slack), p.seen.Add(c.slack)
	if c.blindDuring(from.Add(-c.slack), to) {
		c.note(p.seen, "%s %s of %s across the checker's blind watches, not judged", p.action, p.id, p.node)
		return
	}
	what := "climb to " + p.action
	action := p.action
	if p.rec == nil {
		what, action = fmt.Sprintf("%s request %s", p.action, p.id), stepAction(p.action)
	}
	var selected, sick, atStep bool
	var seen []string
	for _, v := range c.within(p.node, from, to) {
		if !v.exists {
			seen = append(seen, v.from.Format("15:04:05.000")+" no Node")
			continue
		}
		selected = selected || v.selected
		sick = sick || (v.cond != nil && v.cond.Status == c.pol.Status)
		atStep = atStep || (v.rec != nil && v.rec.Action == action)
		st := "none"
		if v.cond != nil {
			st = string(v.cond.Status)
		}
		rs := "no record"
		if v.rec != nil {
			rs = fmt.Sprintf("record at step %d (%s)", v.rec.Step+1, v.rec.Action)
		}
		seen = append(seen, fmt.Sprintf("%s %s=%s, %s", v.from.Format("15:04:05.000"), c.pol.Condition, st, rs))
	}
	obj := "node/" + p.node
	window := fmt.Sprintf("its versions from %s to %s: %s", from.Format("15:04:05.000"), to.Format("15:04:05.000"), dashIfNone(seen))
	if p.rec != nil && !selected {
		c.violate(p.seen, InvRepairSelection, obj, "%s of policy %s while the policy did not select the node (%s)", what, c.pol.Name, window)
	}
	if !sick {
		c.violate(p.seen, InvRepairUnhealthy, obj, "%s of policy %s while the node was not unhealthy by %s=%s (%s)", what, c.pol.Name, c.pol.Condition, c.pol.Status, window)
	}
	if p.rec == nil && !atStep {
		c.violate(p.seen, InvRepairLadder, obj, "%s while the node's record of policy %s was never at a %s step: a step skipped (%s)", what, c.pol.Name, action, window)
	}
}

// within returns the node's views visible at some moment of [from, to]:
// those the API may have shown at any moment of [from, to-slack] when
// every watch delay is under the slack.
func (c *RepairChecker) within(node string, from, to time.Time) []nodeView {
	vs := c.views[node]
	var out []nodeView
	for i, v := range vs {
		if v.from.After(to) {
			break
		}
		if i+1 < len(vs) && !vs[i+1].from.After(from) {
			continue
		}
		out = append(out, v)
	}
	return out
}

// unhealthyAt says whether the view's condition made the node unhealthy at
// t, as the policy judges: its status held since its transition (a whole
// second, so from the next one unless it has a fraction) plus For.
func (c *RepairChecker) unhealthyAt(v nodeView, t time.Time) bool {
	if !v.exists || v.cond == nil || v.cond.Status != c.pol.Status {
		return false
	}
	since := v.cond.LastTransitionTime.Time
	if since.Nanosecond() == 0 {
		since = since.Add(time.Second)
	}
	return !t.Before(since.Add(c.pol.For))
}

// Settle decides the pending checks whose window has passed.
func (c *RepairChecker) Settle(at time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.settle(at)
}

// Pending says how many checks wait for their window.
func (c *RepairChecker) Pending() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.pending)
}

func (c *RepairChecker) settle(at time.Time) {
	var keep []pendingRepair
	for _, p := range c.pending {
		if at.Sub(p.seen) <= c.slack {
			keep = append(keep, p)
			continue
		}
		switch p.kind {
		case "selection":
			c.checkSelection(p)
		case "unhealthy":
			c.checkUnhealthy(p)
		case "step":
			c.checkStep(p)
		case "fence":
			c.checkFence(p)
		case "brakes":
			c.checkBrakes(p)
		}
	}
	c.pending = keep
}

// checkSelection (b): a request is written at most the slack before the
// checker sees it, so the node's version then is among those visible from
// the slack before to the slack after; all of them out of the pool (or no
// Node) is a request for a node the policy did not select.
func (c *RepairChecker) checkSelection(p pendingRepair) {
	from, to := p.seen.Add(-c.slack), p.seen.Add(c.slack)
	if c.blindDuring(from.Add(-c.slack), to) {
		return
	}
	var seen []string
	for _, v := range c.within(p.node, from, to) {
		if v.exists && v.selected {
			return
		}
		what := "no Node"
		if v.exists {
			what = "out of the pool"
		}
		seen = append(seen, v.from.Format("15:04:05.000")+" "+what)
	}
	c.violate(p.seen, InvRepairSelection, "node/"+p.node, "%s request %s written while policy %s did not select the node (its versions from %s to %s: %s)",
		p.action, p.id, c.pol.Name, from.Format("15:04:05.000"), to.Format("15:04:05.000"), dashIfNone(seen))
}

// checkUnhealthy: a repair started (decided at the controller's own time,
// the record's repairSince) while more of the pool than maxUnhealthy were
// unhealthy. The controller read the nodes after deciding and before
// writing, so each node's version it read is visible to the checker from
// the decision to the slack after the record was seen: a node counts only
// if every one of them was in the pool and unhealthy at the decision.
func (c *RepairChecker) checkUnhealthy(p pendingRepair) {
	from, to := p.decided, p.seen.Add(c.slack)
	var sick []string
	for name := range c.views {
		vs := c.within(name, from, to)
		ok := len(vs) > 0
		for _, v := range vs {
			ok = ok && v.selected && c.unhealthyAt(v, p.decided)
		}
		if ok {
			sick = append(sick, name)
		}
	}
	sort.Strings(sick)
	if l := brakeLimit(c.pol.MaxUnhealthy, c.maxPool); len(sick) > l {
		c.violate(p.seen, InvRepairBrakes, "node/"+p.node, "repair started (decided %s) while %d nodes of pool %s were unhealthy (%s), maxUnhealthy %s (%d)",
			p.decided.Format("15:04:05.000"), len(sick), c.pol.Name, strings.Join(sick, ","), c.pol.MaxUnhealthy.String(), l)
	}
}

func dashIfNone(list []string) string {
	if len(list) == 0 {
		return "none seen"
	}
	return strings.Join(list, "; ")
}

// InRepair lists the nodes carrying a record now.
func (c *RepairChecker) InRepair() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	now := time.Now()
	for name := range c.nodes {
		if vs := c.views[name]; len(vs) > 0 && vs[len(vs)-1].rec != nil {
			if ran, _ := c.machineRan(name, now, now); vs[len(vs)-1].rec.Action == "Fence" && !ran {
				continue // waits for a person (CheckProgress)
			}
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}

// Done lists the request IDs fakenodes marked carried out.
func (c *RepairChecker) Done() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.done...)
}

// CheckProgress is the end-of-run check: every fault ended, every node's
// condition was cleared, so every repair ends within the bound (healthy
// for the hold time, or its Node replaced).
func (c *RepairChecker) CheckProgress(at time.Time, bound time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	names := make([]string, 0, len(c.nodes))
	for name := range c.nodes {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		vs := c.views[name]
		if len(vs) == 0 || vs[len(vs)-1].rec == nil {
			continue
		}
		rec := *vs[len(vs)-1].rec
		if rec.Action == "Fence" {
			if ran, seen := c.machineRan(name, at, at); !ran {
				// A machine a Fence powered off stays off: starting it is
				// a person's decision (docs/remediation.md); the repair
				// waits for it (chaos seed 70021).
				c.note(at, "node %s waits at its Fence for a person, its machine off (%s)", name, strings.Join(seen, ", "))
				continue
			}
		}
		c.violate(at, InvRepairProgress, "node/"+name, "still in repair %v after the last fault ended: %s", bound, rec)
	}
}

// Summary says what the repairs did, for the seed's log line.
func (c *RepairChecker) Summary() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	keys := make([]string, 0, len(c.stats))
	for k := range c.stats {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s %d", k, c.stats[k]))
	}
	if len(parts) == 0 {
		return "no repair"
	}
	return strings.Join(parts, ", ")
}

// ObserveEvent notes the remediation controller's events in the timeline
// (not judged: they explain).
func (c *RepairChecker) ObserveEvent(at time.Time, e *v1.Event) {
	if !c.events || !strings.HasPrefix(e.Reason, "Remediation") {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if e.Reason == "RemediationBlocked" {
		c.stats["blocked events"]++
	}
	c.note(at, "event %s %s/%s: %s", e.Reason, strings.ToLower(e.InvolvedObject.Kind), e.InvolvedObject.Name, e.Message)
}

// RepairCheckers are the checkers of every policy of the run, each judging
// its own (WatchRepairs tells each of the others).
type RepairCheckers []*RepairChecker

func (rs RepairCheckers) each(f func(c *RepairChecker)) {
	for _, c := range rs {
		f(c)
	}
}

// InRepair lists the nodes in repair under any policy.
func (rs RepairCheckers) InRepair() []string {
	var out []string
	rs.each(func(c *RepairChecker) { out = append(out, c.InRepair()...) })
	return out
}

// CheckProgress is every checker's end-of-run check.
func (rs RepairCheckers) CheckProgress(at time.Time, bound time.Duration) {
	rs.each(func(c *RepairChecker) { c.CheckProgress(at, bound) })
}

// Pending says how many checks wait for their window, in all.
func (rs RepairCheckers) Pending() int {
	n := 0
	rs.each(func(c *RepairChecker) { n += c.Pending() })
	return n
}

// Done lists the request IDs carried out, of every checker.
func (rs RepairCheckers) Done() []string {
	var out []string
	rs.each(func(c *RepairChecker) { out = append(out, c.Done()...) })
	return out
}

// Violations returns what every checker found so far.
func (rs RepairCheckers) Violations() []Violation {
	var out []Violation
	rs.each(func(c *RepairChecker) { out = append(out, c.Violations()...) })
	return out
}

// Timeline returns every checker's timeline, one after another.
func (rs RepairCheckers) Timeline() []Entry {
	var out []Entry
	rs.each(func(c *RepairChecker) { out = append(out, c.Timeline()...) })
	return out
}

// Summary says what the repairs of each policy did.
func (rs RepairCheckers) Summary() string {
	var parts []string
	rs.each(func(c *RepairChecker) { parts = append(parts, c.pol.Name+": "+c.Summary()) })
	return strings.Join(parts, "; ")
}

// WatchBroken notes an error of the checkers' watches at at in each of
// them: the runner says so when it restarts the API server.
func (rs RepairCheckers) WatchBroken(at time.Time) {
	rs.each(func(c *RepairChecker) { c.WatchBroken(at) })
}

// WatchRepairs feeds the repair checkers from their own informers (Nodes,
// the fake cloud's requests and machine states ConfigMaps, events), through
// a client that bypasses the fault proxy, until ctx ends; it returns once
// they are synced. Each checker leaves the others' records to them; the
// first one judges the fake cloud's reboots and replacements and notes the
// events, the others the other requests. Every checker sees each change
// with the same time stamp.
func WatchRepairs(ctx context.Context, client kubernetes.Interface, rs ...*RepairChecker) error {
	for i, c := range rs {
		for j, o := range rs {
			if i != j {
				c.others[o.pol.Name] = true
			}
		}
		if i > 0 {
			c.events = false
			c.requestActions = func(a string) bool { return a != "reboot" && a != "replace" }
		} else if len(rs) > 1 {
			c.requestActions = func(a string) bool { return a == "reboot" || a == "replace" }
		}
	}
	all := RepairCheckers(rs).each
	w := &feed{ctx: ctx, who: "repair checker"}
	f := w.factory(informers.NewSharedInformerFactory(client, 0))
	// The fake cloud's ConfigMaps, each on a watch of its own by name.
	configMap := func(name string) cache.SharedIndexInformer {
		return w.factory(informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithNamespace(fakecloud.ConfigMapNamespace),
			informers.WithTweakListOptions(func(o *metav1.ListOptions) {
				o.FieldSelector = fields.OneTermEqualSelector("metadata.name", name).String()
			}))).Core().V1().ConfigMaps().Informer()
	}
	nodes, requests, machines := f.Core().V1().Nodes().Informer(), configMap(fakecloud.RequestsConfigMapName), configMap(fakecloud.ConfigMapName)
	w.on(nodes, func(obj any, deleted bool) {
		if n, ok := obj.(*v1.Node); ok {
			now := time.Now()
			all(func(c *RepairChecker) { c.ObserveNode(now, n, deleted) })
		}
	})
	w.on(f.Core().V1().Events().Informer(), func(obj any, deleted bool) {
		if e, ok := obj.(*v1.Event); ok && !deleted {
			now := time.Now()
			all(func(c *RepairChecker) { c.ObserveEvent(now, e) })
		}
	})
	w.on(requests, func(obj any, deleted bool) {
		if cm, ok := obj.(*v1.ConfigMap); ok && !deleted {
			now := time.Now()
			all(func(c *RepairChecker) { c.ObserveRequests(now, cm) })
		}
	})
	w.on(machines, func(obj any, deleted bool) {
		if cm, ok := obj.(*v1.ConfigMap); ok {
			now := time.Now()
			all(func(c *RepairChecker) { c.ObserveMachines(now, cm, deleted) })
		}
	})
	// The events only explain: a gap in them hides no violation.
	w.onBroken(RepairCheckers(rs).WatchBroken, nodes, requests, machines)
	return w.run(func(now time.Time) { all(func(c *RepairChecker) { c.Settle(now) }) })
}
