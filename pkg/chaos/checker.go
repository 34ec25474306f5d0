package chaos

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	v1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
)

// The keys and reasons the checker reads. They are the API's contract,
// spelled out here so that the checker does not import the controllers it
// judges.
const (
	taintNotReady     = "node.kubernetes.io/not-ready"
	taintUnreachable  = "node.kubernetes.io/unreachable"
	taintOutOfService = "node.kubernetes.io/out-of-service"
	annDrainOwned     = "nodeshepherd.io/drain-conditions"
	condDrainSched    = v1.NodeConditionType("DrainScheduled")
	reasonTaintEvict  = "DeletionByTaintManager"
	reasonEvictionAPI = "EvictionByEvictionAPI"
	reasonPodGC       = "DeletionByPodGC"
	eventForceDeleted = "DrainForceDeleted"
	zoneLabel         = "topology.kubernetes.io/zone"
	excludeLabel      = "node.kubernetes.io/exclude-disruption"
)

// Invariant names, as reported.
const (
	InvZoneRules     = "zone-rules"
	InvRunningForced = "running-machine"
	InvBudgets       = "budgets"
	InvToleration    = "toleration"
	InvUntainted     = "untainted-eviction"
	InvPDB           = "pdb"
	InvCIDR          = "pod-cidr"
	InvReadiness     = "readiness-restore"
	InvProgress      = "progress"
	// InvEarlyUnknown and InvEarlyTaint: Ready=Unknown, or a not-ready or
	// unreachable NoExecute taint, on a node whose Lease renewals the
	// checker saw with no gap longer than the grace period (point 3a).
	InvEarlyUnknown = "early-unknown"
	InvEarlyTaint   = "early-taint"
	// InvCountdown: a node's not-ready/unreachable countdown stripped
	// without a recovery, or restarted (the same key again with a later
	// timeAdded, or an older one than the checker ever saw) (point 3b).
	InvCountdown = "countdown-restart"
	// InvRateLimit: a zone's new not-ready/unreachable taints faster than
	// the eviction rate (point 3c).
	InvRateLimit = "rate-limit"
)

// NotChecked lists what the checker does not check yet; runs print it so
// that nobody reads a green run as more than it is.
var NotChecked = []string{
	"pdb: evictions through the Eviction API are trusted to the API server's budget arithmetic (not recomputed); only deletions that bypass it, and machines a repair request takes down, are checked",
	"progress during faults: replacement of a dead node's pods is checked only after the last fault, not within a bound of each death",
	"readiness-restore: a Ready=True whose writer managedFields do not name (not the kubelet's field manager) counts as a restore",
	"taint-eviction cancellation: a pod whose taint went away before its toleration ended is not followed",
	"uncordon after a drain condition clears is not checked",
	"untainted-eviction: an eviction decided less than EvictionSlack (plus the second its time is rounded to) after the taint went is not told from one decided just before",
	"early-unknown/early-taint: a mark whose Lease renewals the checker saw late (its watch trailing by more than the grace period less the renewal interval) is not judged",
	"countdown-restart: a strip followed by a recovery within the slack is not told from a removal after it; a re-add of the other failure kind with a new timeAdded counts as a swap",
	"rate-limit: the fresh limiter of a zone state change (upstream swaps it) is not allowed for, a leader change's is",
	"running-machine: an out-of-service taint on a machine that started again unseen (its kubelet cut off and the provider blind to it from its start on) is not judged, and confirm-cut-start never overlaps the blind kinds: nothing a controller sees tells such a machine from a dead one",
	"zone-rules: a node counts as silent only once the checker saw its last renewal more than the controller's longest overdue time plus ViewLag before the pass, a monitor period and ViewLag before the decision (about 5.4 s with 0.5 s renewals); while a fault held the controllers' view of the Leases or their passes, or every node may have been down, only silences certain for grace + monitor period + slack count; a taint decided on a node's own expiry while its zone's other nodes were merely overdue is not caught",
}

// Limits are the configuration the invariants depend on.
type Limits struct {
	// Grace and MonitorPeriod are the node lifecycle controller's
	// nodeMonitorGracePeriod and nodeMonitorPeriod: a silent node is
	// counted once it has been silent for both plus Slack.
	Grace, MonitorPeriod time.Duration
	// Slack absorbs watch delays and one-second timestamps (default 3s).
	Slack                  time.Duration
	UnhealthyZoneThreshold float64 // 0.55
	LargeClusterThreshold  int     // 50
	MaxCordoned            int     // drain's --max-cordoned-nodes, as a count
	MaxConcurrentDrains    int     // 0: no limit
	MaxOutOfService        int
	// ForceAllowed says drain's force-after is configured: a PDB may then
	// be bypassed by a deletion that a DrainForceDeleted event announces.
	ForceAllowed bool
	// EvictionSlack is how long before the time it stamps on a taint
	// eviction (the DisruptionTarget condition, the announcing event) the
	// taint eviction controller may have made its decision: it reads the
	// node from the API server right before (default 1s).
	EvictionSlack time.Duration
	// EvictionRate is the node lifecycle controller's nodeEvictionRate
	// (taints per second in a zone, with a burst of one; the secondary
	// rate and a PartialDisruption zone's 0 are lower): the rate-limit rule
	// is judged only when it is set.
	EvictionRate float64
	// OverdueSlack is the node lifecycle controller's
	// --heartbeat-overdue-slack: a node silent for longer than its usual
	// heartbeat interval plus this (or than grace less 1.5 intervals, if
	// sooner; never more than grace) counts as not Ready in its zone once a
	// fresh read confirms it, and a zone with unconfirmed suspects applies
	// no taint. 0: only nodes past their grace period count (upstream).
	OverdueSlack time.Duration
	// ViewLag bounds how late the controllers' informers deliver a Lease
	// renewal after it landed, outside the faults that hold their view of
	// the Leases or hold their passes (a stalled or 410'd lease watch,
	// 429s, an API server restart): zone-rules counts a node silent from the moment the
	// checker saw its last renewal plus this (default 1s).
	ViewLag time.Duration
	// SkipReadinessRestore turns readiness-restore off: where kubelets post
	// their pods' Ready before their node's status (simulate's kubelet
	// timings), the rule, which cannot tell the writer, would blame them.
	SkipReadinessRestore bool
}

// Violation is one broken invariant.
type Violation struct {
	At        time.Time
	Invariant string
	Object    string
	Detail    string
}

func (v Violation) String() string {
	return fmt.Sprintf("%s %s %s: %s", v.At.Format("15:04:05.000"), v.Invariant, v.Object, v.Detail)
}

// Entry is one line of the timeline: a fault step or a write the checker saw.
type Entry struct {
	At   time.Time
	What string
}

// findings are what a checker (Checker, RepairChecker) reports: its
// violations, and its timeline, where each violation stands among the
// writes it saw. The checker's own lock guards them.
type findings struct {
	violations []Violation
	timeline   []Entry
}

func (f *findings) violate(at time.Time, inv, obj, format string, args ...any) {
	v := Violation{At: at, Invariant: inv, Object: obj, Detail: fmt.Sprintf(format, args...)}
	f.violations = append(f.violations, v)
	f.timeline = append(f.timeline, Entry{At: at, What: "VIOLATION " + inv + " " + obj + ": " + v.Detail})
}

func (f *findings) note(at time.Time, format string, args ...any) {
	f.timeline = append(f.timeline, Entry{At: at, What: fmt.Sprintf(format, args...)})
}

// taintSeen is a NoExecute taint's life as observed.
type taintSeen struct {
	taint   v1.Taint
	from    time.Time // observed added
	to      time.Time // observed removed (zero while present)
	flagged bool
}

type podSeen struct {
	pod        *v1.Pod
	readyFalse time.Time // when Ready last went False (condition time, else observed)
	// tolsChanged: when the checker saw the pod's tolerations change
	// (zero: never, as created). A changed toleration counts from the
	// change (upstream's taint manager reschedules from it).
	tolsChanged time.Time
}

// Checker evaluates the invariants on every change it is told about. It
// learns the cluster only from what it is given (its own watches on the
// API server) and the ground truth; it never reads a controller's state.
type Checker struct {
	mu     sync.Mutex
	limits Limits
	truth  *Truth

	nodes  map[string]*v1.Node
	taints map[string][]*taintSeen // node -> NoExecute taints seen
	pods   map[string]*podSeen     // ns/name
	pdbs   map[string]*policyv1.PodDisruptionBudget
	leases map[string]time.Time // node -> last renewTime
	// forced are pods a DrainForceDeleted event named.
	forced map[string]bool
	// leaders are the holders of the leader-election Leases, by ns/name.
	leaders map[string]string
	// pendingReady are readiness restores whose node had not yet been seen
	// reporting; Settle decides them.
	pendingReady []pendingReady
	// explained are nodes whose drain an event explains (waiting, failed).
	explained map[string]string
	// seenPods is the last version of every pod seen, gone ones included
	// (an eviction's event may come after its pod is gone), by podID.
	seenPods map[string]*v1.Pod
	// evictions are the taint evictions (condition or event) already
	// taken for untainted-eviction, by podID or event UID and count.
	evictions map[string]bool
	// pendingEvict are taint evictions waiting for the node's view to
	// settle (the slack); Settle decides them.
	pendingEvict []pendingEvict
	// renewals are the node Leases' renewals the checker saw, in order of
	// renewTime (which the fake kubelets set from this machine's clock).
	renewals map[string][]renewal
	// born are the node Leases created after the checker began (created),
	// whose every renewal it saw: a newcomer's first renewals are its whole
	// history, so its intervals are known even before three of them.
	born    map[string]bool
	created time.Time
	// readyFalse are the moments the checker saw a node report Ready=False.
	readyFalse map[string][]time.Time
	// pendingEarly are early-unknown/early-taint checks waiting for the
	// Lease watch to catch up; pendingStrip the countdown strips.
	pendingEarly []pendingEarly
	pendingStrip []pendingStrip
	// pendingZone are new taints waiting for the Lease watch to catch up
	// before zone-rules judges them on the checker's own view (zoneview.go).
	pendingZone []pendingZone
	// deleted is when the checker last saw each Node deleted.
	deleted map[string]time.Time
	// countdowns are the nodes' not-ready/unreachable episodes, from the
	// first such taint seen to a recovery seen (Ready=True, no such taint).
	countdowns map[string]*countdown
	// starts are each zone's countdown starts seen (rate-limit), and
	// leaderChanges the moments the controllers' leader changed.
	starts        map[string][]countdownStart
	leaderChanges []time.Time
	// lives are the pods' stays on their nodes, by podID, and
	// pendingDisrupt the machines controllers took down (disrupt.go).
	lives          map[string]*podLife
	pendingDisrupt []pendingDisrupt

	findings
}

// NewChecker returns a checker of a run with these limits and ground truth.
func NewChecker(l Limits, truth *Truth) *Checker {
	if l.Slack == 0 {
		l.Slack = 3 * time.Second
	}
	if l.UnhealthyZoneThreshold == 0 {
		l.UnhealthyZoneThreshold = 0.55
	}
	if l.LargeClusterThreshold == 0 {
		l.LargeClusterThreshold = 50
	}
	if l.EvictionSlack == 0 {
		l.EvictionSlack = time.Second
	}
	if l.ViewLag == 0 {
		l.ViewLag = time.Second
	}
	return &Checker{limits: l, truth: truth, nodes: map[string]*v1.Node{}, taints: map[string][]*taintSeen{},
		pods: map[string]*podSeen{}, pdbs: map[string]*policyv1.PodDisruptionBudget{}, leases: map[string]time.Time{},
		forced: map[string]bool{}, explained: map[string]string{}, leaders: map[string]string{},
		seenPods: map[string]*v1.Pod{}, lives: map[string]*podLife{}, evictions: map[string]bool{}, renewals: map[string][]renewal{},
		readyFalse: map[string][]time.Time{}, countdowns: map[string]*countdown{}, starts: map[string][]countdownStart{}, deleted: map[string]time.Time{},
		born: map[string]bool{}, created: time.Now()}
}

// Violations returns what was found so far.
func (c *Checker) Violations() []Violation {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]Violation(nil), c.violations...)
}

// Timeline returns the writes seen so far.
func (c *Checker) Timeline() []Entry {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]Entry(nil), c.timeline...)
}

func noExecute(n *v1.Node) []v1.Taint {
	var out []v1.Taint
	if n == nil {
		return nil
	}
	for _, t := range n.Spec.Taints {
		if t.Effect == v1.TaintEffectNoExecute {
			out = append(out, t)
		}
	}
	return out
}

func sameTaint(a, b v1.Taint) bool {
	return a.Key == b.Key && a.Effect == b.Effect && a.Value == b.Value && a.TimeAdded.Equal(b.TimeAdded)
}

func readyStatus(n *v1.Node) v1.ConditionStatus {
	for _, c := range n.Status.Conditions {
		if c.Type == v1.NodeReady {
			return c.Status
		}
	}
	return v1.ConditionUnknown
}

func drainInFlight(n *v1.Node) bool {
	if _, owned := n.Annotations[annDrainOwned]; !owned {
		return false
	}
	for _, c := range n.Status.Conditions {
		if c.Type == condDrainSched {
			return c.Status == v1.ConditionTrue
		}
	}
	return false
}

// ObserveNode takes a node as watched at `at` (deleted: it is gone).
func (c *Checker) ObserveNode(at time.Time, n *v1.Node, deleted bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	old := c.nodes[n.Name]
	if deleted {
		delete(c.nodes, n.Name)
		c.deleted[n.Name] = at
		delete(c.countdowns, n.Name) // a Node anew starts afresh
		c.note(at, "node %s deleted", n.Name)
		return
	}
	if old != nil && old.UID != n.UID {
		delete(c.countdowns, n.Name)
	}
	c.nodes[n.Name] = n
	c.diffNode(at, old, n)
	c.observeReady(at, old, n)

	// The NoExecute taints' lives, and the checks on new ones.
	seen := c.taints[n.Name]
	now := noExecute(n)
	for _, s := range seen {
		if s.to.IsZero() && !containsTaint(now, s.taint) {
			s.to = at
		}
	}
	for _, t := range now {
		found := false
		for _, s := range seen {
			if s.to.IsZero() && sameTaint(s.taint, t) {
				found = true
			}
		}
		if !found {
			s := &taintSeen{taint: t, from: at}
			c.taints[n.Name] = append(c.taints[n.Name], s)
			c.checkNewTaint(at, n, s)
			c.checkCountdownTaint(at, n, s)
		}
	}
	c.checkCountdownGone(at, n)
	for _, s := range c.taints[n.Name] {
		if s.to.IsZero() && s.taint.Key == taintOutOfService {
			c.checkOutOfServiceTaint(at, n.Name, s)
		}
	}
	c.checkBudgets(at)
	c.checkCIDRs(at, n)
	c.settle(at)
}

func containsTaint(list []v1.Taint, t v1.Taint) bool {
	for _, x := range list {
		if sameTaint(x, t) {
			return true
		}
	}
	return false
}

// diffNode notes the writes that matter in the timeline.
func (c *Checker) diffNode(at time.Time, old, n *v1.Node) {
	if old == nil {
		return
	}
	if a, b := readyStatus(old), readyStatus(n); a != b {
		c.note(at, "node %s Ready %s -> %s", n.Name, a, b)
	}
	if old.Spec.Unschedulable != n.Spec.Unschedulable {
		c.note(at, "node %s unschedulable=%v", n.Name, n.Spec.Unschedulable)
	}
	key := func(t v1.Taint) string { return t.Key + ":" + string(t.Effect) }
	was := map[string]bool{}
	for _, t := range old.Spec.Taints {
		was[key(t)] = true
	}
	is := map[string]bool{}
	for _, t := range n.Spec.Taints {
		is[key(t)] = true
		if !was[key(t)] {
			c.note(at, "node %s taint + %s", n.Name, key(t))
		}
	}
	for k := range was {
		if !is[k] {
			c.note(at, "node %s taint - %s", n.Name, k)
		}
	}
	if a, b := drainInFlight(old), drainInFlight(n); a != b {
		c.note(at, "node %s drain in flight=%v", n.Name, b)
	}
	_, ow := old.Annotations[annDrainOwned]
	_, nw := n.Annotations[annDrainOwned]
	if ow != nw {
		c.note(at, "node %s drain-owned=%v", n.Name, nw)
	}
	if strings.Join(old.Spec.PodCIDRs, ",") != strings.Join(n.Spec.PodCIDRs, ",") {
		c.note(at, "node %s podCIDRs %v", n.Name, n.Spec.PodCIDRs)
	}
}

// countMargin is how long a node must have been silent for the node
// lifecycle controller to count it: the grace period, a monitor period to
// notice, and the slack.
func (c *Checker) countMargin() time.Duration {
	return c.limits.Grace + c.limits.MonitorPeriod + c.limits.Slack
}

// zoneStates computes each zone's state as upstream does, counting as not
// Ready only the nodes certainly not Ready since from (silent or reporting
// NotReady), up to to: the fewest the controller can have seen. A forbidden
// state computed so is forbidden whatever the controller saw late.
func (c *Checker) zoneStates(from, to time.Time) map[string]string {
	return c.zoneStatesBy(func(n string) bool { return c.truth.Always(n, from, to, Machine.NotReady) }, nil)
}

func allFull(states map[string]string) bool {
	if len(states) == 0 {
		return false
	}
	for _, s := range states {
		if s != "FullDisruption" {
			return false
		}
	}
	return true
}

// checkNewTaint: a node lifecycle NoExecute taint must be allowed by the
// zone rules, judged on the silent nodes that had long enough to be counted.
func (c *Checker) checkNewTaint(at time.Time, n *v1.Node, s *taintSeen) {
	if s.taint.Key != taintNotReady && s.taint.Key != taintUnreachable {
		return
	}
	// Upstream swaps not-ready for unreachable (and back) at once, outside
	// the zone's rate: a swap is not a new taint.
	for _, o := range c.taints[n.Name] {
		if o != s && (o.taint.Key == taintNotReady || o.taint.Key == taintUnreachable) && o.taint.Key != s.taint.Key &&
			(o.to.IsZero() || !o.to.Before(at.Add(-c.limits.Slack))) {
			return
		}
	}
	// The decision was made before the checker saw the taint, and at most
	// the slack before (a write is seen within the slack): judged from the
	// checker's own sight, not from timeAdded, which a taint re-applied
	// with its old time carries from long before (issue 45, point 3).
	// timeAdded (whole seconds, rounded down) only narrows it.
	decided := at.Add(-c.limits.Slack)
	if s.taint.TimeAdded != nil && s.taint.TimeAdded.Time.After(decided) && s.taint.TimeAdded.Time.Before(at) {
		decided = s.taint.TimeAdded.Time
	}
	from := decided.Add(-c.countMargin())
	states := c.certainStates(func(n string) bool { return c.truth.Always(n, from, at, Machine.NotReady) }, from.Add(-c.limits.Slack))
	zone := c.truth.Zone(n.Name)
	if c.eitherWayForbidden(zone, from, at) {
		c.violate(at, InvZoneRules, "node/"+n.Name, "%s:NoExecute added (timeAdded %s) while every zone but %s was certainly in FullDisruption and %s certainly in PartialDisruption or FullDisruption "+
			"(size %d <= %d): with a node of it counted Ready, its eviction rate was 0; with none, every zone was down (master disruption mode: no taint)",
			s.taint.Key, fmtTime(s.taint.TimeAdded), zone, zone, c.zoneSize(zone), c.limits.LargeClusterThreshold)
		return
	}
	if !allFull(states) && (states[zone] != "PartialDisruption" || c.someReady(zone, decided.Add(-c.limits.MonitorPeriod-c.limits.ViewLag), decided, at, nil) == "") {
		// Not forbidden by the certain silences: judged again on the
		// checker's own view of the renewals once its Lease watch has had
		// the slack to catch up (zoneview.go).
		c.pendingZone = append(c.pendingZone, pendingZone{node: n.Name, seen: at, decided: decided, taint: s.taint})
		return
	}
	switch {
	case allFull(states):
		c.violate(at, InvZoneRules, "node/"+n.Name, "%s:NoExecute added (timeAdded %s) while every zone was certainly silent (master disruption mode: no taint)",
			s.taint.Key, fmtTime(s.taint.TimeAdded))
	case states[zone] == "PartialDisruption" && len(c.truth.Zones()) > 0 && c.zoneSize(zone) <= c.limits.LargeClusterThreshold &&
		c.someReady(zone, decided.Add(-c.limits.MonitorPeriod-c.limits.ViewLag), decided, at, nil) != "":
		c.violate(at, InvZoneRules, "node/"+n.Name, "%s:NoExecute added (timeAdded %s) while zone %s was certainly in PartialDisruption (size %d <= %d: eviction rate 0)",
			s.taint.Key, fmtTime(s.taint.TimeAdded), zone, c.zoneSize(zone), c.limits.LargeClusterThreshold)
	}
}

// eitherWayForbidden: a new taint of a node of zone is forbidden whatever
// the controller counted of the nodes the checker cannot be sure of, when
// every node of every other zone was certainly not Ready over [from, to]
// (those zones in FullDisruption) and zone, a small one, had enough
// certainly not Ready to be in PartialDisruption even if all its other
// nodes were counted Ready. Counting more of them not Ready only moves
// zone to FullDisruption: then every zone is, the all-zones mode, no taint;
// otherwise zone's rate is 0. Unlike someReady, this needs no node the
// controller certainly counted Ready, which right after the all-zones heal
// (a node healthy for less than a grace period) nothing shows: leaving the
// all-zones mode with one zone partially disrupted is judged here
// (all-zones-lasting). Every node of the ground truth is counted, the ones
// the checker has not seen or saw deleted too: a node the controller may
// have had must not make a zone look more disrupted than it was.
func (c *Checker) eitherWayForbidden(zone string, from, to time.Time) bool {
	zones := c.truth.Zones()
	if len(zones) == 0 || c.zoneSize(zone) > c.limits.LargeClusterThreshold {
		return false
	}
	certain := func(n string) bool { return c.truth.Always(n, from, to, Machine.NotReady) }
	states := c.zoneStatesBy(certain, nil)
	if states[zone] != "PartialDisruption" { // FullDisruption too: allFull judges it
		return false
	}
	for _, z := range zones {
		if z.Name == zone {
			continue
		}
		for _, n := range z.Nodes {
			if obj := c.nodes[n]; obj != nil {
				if _, ex := obj.Labels[excludeLabel]; ex {
					continue
				}
			}
			if !certain(n) {
				return false
			}
		}
	}
	return true
}

func (c *Checker) zoneSize(zone string) int {
	for _, z := range c.truth.Zones() {
		if z.Name == zone {
			return len(z.Nodes)
		}
	}
	return 0
}

func fmtTime(t *metav1.Time) string {
	if t == nil {
		return "none"
	}
	return t.Format("15:04:05")
}

// checkOutOfServiceTaint: the taint must never sit on a machine that kept
// running with the same boot since before it was added.
func (c *Checker) checkOutOfServiceTaint(at time.Time, node string, s *taintSeen) {
	if s.flagged {
		return
	}
	from := s.from.Add(-c.limits.Slack)
	if s.taint.TimeAdded != nil && s.taint.TimeAdded.Time.Before(from) {
		from = s.taint.TimeAdded.Time
	}
	if c.truth.Always(node, from, at, Machine.Running) {
		// A machine that started again unseen (its kubelet cut off and
		// the provider blind to it from its start on) is told from a
		// dead one by nothing a controller can see (chaos seed 180024:
		// another fault's partition hid the new boot): not judged.
		// Unseen until the taint was seen: the heal that lets the
		// controller see the new boot comes after (chaos seed 190009).
		if b := c.truth.BootStarted(node, s.from); !b.IsZero() && c.truth.Always(node, b, s.from, Machine.Unseen) {
			return
		}
		s.flagged = true
		c.violate(at, InvRunningForced, "node/"+node, "out-of-service taint (seen since %s) on a machine that ran all along with the same boot",
			s.from.Format("15:04:05.000"))
	}
}

func (c *Checker) checkBudgets(at time.Time) {
	cordoned, drains, oos := 0, 0, 0
	var names []string
	for _, n := range c.nodes {
		if _, owned := n.Annotations[annDrainOwned]; owned {
			cordoned++
			names = append(names, n.Name)
		}
		if drainInFlight(n) {
			drains++
		}
		for _, t := range n.Spec.Taints {
			if t.Key == taintOutOfService {
				oos++
				break
			}
		}
	}
	sort.Strings(names)
	if c.limits.MaxCordoned > 0 && cordoned > c.limits.MaxCordoned {
		c.violate(at, InvBudgets, "nodes", "%d nodes cordoned by the drain controller (%s), budget %d", cordoned, strings.Join(names, ","), c.limits.MaxCordoned)
	}
	if c.limits.MaxConcurrentDrains > 0 && drains > c.limits.MaxConcurrentDrains {
		c.violate(at, InvBudgets, "nodes", "%d drains in flight, budget %d", drains, c.limits.MaxConcurrentDrains)
	}
	if oos > c.limits.MaxOutOfService {
		c.violate(at, InvBudgets, "nodes", "%d nodes out of service, budget %d", oos, c.limits.MaxOutOfService)
	}
}

func (c *Checker) checkCIDRs(at time.Time, n *v1.Node) {
	for _, cidr := range n.Spec.PodCIDRs {
		for _, o := range c.nodes {
			if o.Name == n.Name {
				continue
			}
			for _, oc := range o.Spec.PodCIDRs {
				if oc == cidr {
					c.violate(at, InvCIDR, "node/"+n.Name, "pod CIDR %s also on node %s", cidr, o.Name)
				}
			}
		}
	}
}

// ObserveLease takes a node Lease (kube-node-lease) or the controllers'
// leader Lease as watched.
func (c *Checker) ObserveLease(at time.Time, l *coordinationv1.Lease) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if l.Namespace == "kube-node-lease" {
		if l.Spec.RenewTime != nil {
			// creationTimestamp is whole seconds, rounded down: a stamp after
			// the checker's start is a Lease created after it.
			if _, seen := c.renewals[l.Name]; !seen && l.CreationTimestamp.Time.After(c.created) {
				c.born[l.Name] = true
			}
			c.leases[l.Name] = l.Spec.RenewTime.Time
			c.observeRenewal(at, l.Name, l.Spec.RenewTime.Time)
		}
		c.settle(at)
		return
	}
	k := l.Namespace + "/" + l.Name
	if h := l.Spec.HolderIdentity; h != nil && *h != c.leaders[k] {
		if c.leaders[k] != "" {
			c.leaderChanges = append(c.leaderChanges, at)
		}
		c.leaders[k] = *h
		c.note(at, "leader lease %s held by %s", k, *h)
	}
}

// ObserveEvent takes an Event as watched.
func (c *Checker) ObserveEvent(at time.Time, e *v1.Event) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch e.Reason {
	case eventForceDeleted:
		c.forced[e.InvolvedObject.Namespace+"/"+e.InvolvedObject.Name] = true
		if e.InvolvedObject.Kind == "Node" {
			// The event is on the node and names the pod in its message.
			for k := range c.pods {
				if strings.Contains(e.Message, k) || strings.Contains(e.Message, k[strings.Index(k, "/")+1:]) {
					c.forced[k] = true
				}
			}
		}
	case "DrainFailed", "DrainWaiting", "DrainAborted", "CordonWaiting":
		if e.InvolvedObject.Kind == "Node" {
			c.explained[e.InvolvedObject.Name] = e.Reason + ": " + e.Message
		}
	case "TaintManagerEviction":
		if e.InvolvedObject.Kind == "Pod" && strings.HasPrefix(e.Message, "Marking for deletion") {
			c.eventEviction(at, e)
		}
	case "DrainStarting":
		// A new drain: a wait or failure said before does not explain it.
		if e.InvolvedObject.Kind == "Node" {
			delete(c.explained, e.InvolvedObject.Name)
		}
	case "OutOfServiceTaintAdded", "OutOfServiceTaintRemoved", "DrainSucceeded":
	default:
		return
	}
	c.note(at, "event %s %s/%s: %s", e.Reason, strings.ToLower(e.InvolvedObject.Kind), e.InvolvedObject.Name, e.Message)
}

// ObservePDB takes a PodDisruptionBudget as watched.
func (c *Checker) ObservePDB(_ time.Time, p *policyv1.PodDisruptionBudget, deleted bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	k := p.Namespace + "/" + p.Name
	if deleted {
		delete(c.pdbs, k)
		return
	}
	c.pdbs[k] = p
}

func podReady(p *v1.Pod) (v1.ConditionStatus, time.Time) {
	for _, c := range p.Status.Conditions {
		if c.Type == v1.PodReady {
			return c.Status, c.LastTransitionTime.Time
		}
	}
	return "", time.Time{}
}

func disruption(p *v1.Pod) (string, time.Time) {
	for _, c := range p.Status.Conditions {
		if c.Type == v1.DisruptionTarget && c.Status == v1.ConditionTrue {
			return c.Reason, c.LastTransitionTime.Time
		}
	}
	return "", time.Time{}
}

// ObservePod takes a pod as watched (deleted: it is gone from the API).
func (c *Checker) ObservePod(at time.Time, p *v1.Pod, deleted bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	k := p.Namespace + "/" + p.Name
	prev := c.pods[k]
	var old *v1.Pod
	if prev != nil {
		old = prev.pod
	}
	c.seenPods[podID(p.UID, p.Namespace, p.Name)] = p
	c.observeLife(at, p, deleted)
	if reason, stamp := disruption(p); reason == reasonTaintEvict && !c.evictions[podID(p.UID, p.Namespace, p.Name)] {
		c.evictions[podID(p.UID, p.Namespace, p.Name)] = true
		if !stamp.IsZero() {
			c.pendingEvict = append(c.pendingEvict, pendingEvict{seen: at, stamp: stamp, pod: p, what: "marked (DisruptionTarget)"})
		}
	}
	if deleted {
		delete(c.pods, k)
		c.note(at, "pod %s gone (node %s)", k, p.Spec.NodeName)
		c.checkPodGone(at, p)
		return
	}
	ps := &podSeen{pod: p}
	if prev != nil {
		ps.readyFalse, ps.tolsChanged = prev.readyFalse, prev.tolsChanged
		if prev.pod.UID == p.UID && !equality.Semantic.DeepEqual(prev.pod.Spec.Tolerations, p.Spec.Tolerations) {
			ps.tolsChanged = at
			c.note(at, "pod %s tolerations changed (node %s): %s", k, p.Spec.NodeName, tolerationSeconds(p))
		}
	}
	c.pods[k] = ps
	st, since := podReady(p)
	var oldSt v1.ConditionStatus
	if old != nil {
		oldSt, _ = podReady(old)
	}
	if st == v1.ConditionFalse && oldSt != v1.ConditionFalse {
		ps.readyFalse = since
		if since.IsZero() {
			ps.readyFalse = at
		}
		if old != nil {
			c.note(at, "pod %s Ready False (node %s)", k, p.Spec.NodeName)
		}
	}
	if st == v1.ConditionTrue && oldSt == v1.ConditionFalse && !ps.readyFalse.IsZero() {
		if w := readyWriter(p); w == KubeletManager {
			// The kubelet's own post (it runs the pod and says it is
			// ready): ground truth, not a controller's restore.
			c.note(at, "pod %s Ready True again, posted by its kubelet (node %s)", k, p.Spec.NodeName)
		} else {
			c.note(at, "pod %s Ready True again (node %s, by %s)", k, p.Spec.NodeName, dashIfEmpty(w))
			c.checkReadinessBack(at, p, ps.readyFalse)
		}
	}
	if p.DeletionTimestamp != nil && (old == nil || old.DeletionTimestamp == nil) {
		reason, _ := disruption(p)
		c.note(at, "pod %s terminating (node %s, %s)", k, p.Spec.NodeName, reason)
		c.checkEviction(at, p, ps.tolsChanged)
		c.checkPDB(at, p)
	}
}

// checkPodGone: a bound pod's object may vanish only if its kubelet could
// confirm it or its machine is not running it: never while the machine runs
// and its kubelet is cut off (a force deletion of a running pod).
func (c *Checker) checkPodGone(at time.Time, p *v1.Pod) {
	if p.Spec.NodeName == "" {
		return
	}
	cutOff := func(m Machine) bool { return m.Running() && (m.Partitioned || m.KubeletStopped) }
	// The same boot since the pod was created: a reboot killed it.
	boot := -1
	sameBoot := func(m Machine) bool {
		if boot < 0 {
			boot = m.Boot
		}
		return m.Running() && m.Boot == boot
	}
	created := p.CreationTimestamp.Time
	if created.IsZero() || created.After(at) {
		created = at.Add(-c.limits.Slack)
	}
	if c.truth.Always(p.Spec.NodeName, created, at, sameBoot) && c.truth.Always(p.Spec.NodeName, at.Add(-c.limits.Slack), at, cutOff) {
		reason, _ := disruption(p)
		c.violate(at, InvRunningForced, "pod/"+p.Namespace+"/"+p.Name, "deleted from the API while its machine %s ran it with the kubelet cut off (no kubelet confirmed it; disruption reason %q)",
			p.Spec.NodeName, reason)
	}
}

// checkEviction: a taint eviction may come only once a NoExecute taint of
// the node either is not tolerated or has been tolerated for the
// toleration's seconds. Every taint seen on the node around the eviction is
// considered (the pod and node watches are not ordered with each other).
// A pod whose tolerations the checker saw change (tolsChanged) counts a
// tolerated taint's seconds from the change too, taken as early as the
// slack allows (a write is seen within the slack): never from the
// controller's record of it.
func (c *Checker) checkEviction(at time.Time, p *v1.Pod, tolsChanged time.Time) {
	reason, when := disruption(p)
	if reason != reasonTaintEvict {
		return
	}
	if when.IsZero() || when.After(at) {
		when = at
	}
	// Condition times are whole seconds, rounded down.
	latest := when.Add(time.Second)
	// The master disruption mode stops the not-ready and unreachable
	// taints' evictions only: a NoExecute taint of another key (an
	// out-of-service taint on a confirmed death, which running-machine
	// judges) evicts whatever the zones' state, as upstream's.
	byOther := false
	for _, s := range c.taintChain(p.Spec.NodeName, when, at) {
		if due, ok := dueTime(p, s.taint); ok && !isCountdown(s.taint.Key) && !due.After(latest) {
			byOther = true
		}
	}
	if states := c.zoneStates(when.Add(-c.countMargin()-c.limits.Slack), at); allFull(states) && !byOther {
		c.violate(at, InvZoneRules, "pod/"+p.Namespace+"/"+p.Name, "taint eviction at %s on %s while every zone was certainly silent (master disruption mode: no eviction)",
			when.Format("15:04:05"), p.Spec.NodeName)
	}
	var considered []string
	changed := time.Time{}
	if !tolsChanged.IsZero() {
		changed = tolsChanged.Add(-c.limits.Slack)
	}
	for _, s := range c.taintChain(p.Spec.NodeName, when, at) {
		due, ok := dueTime(p, s.taint)
		if !ok {
			considered = append(considered, s.taint.Key+" tolerated forever")
			continue
		}
		how := ""
		if secs, tolerated := shortestToleration(p, s.taint); tolerated && !changed.IsZero() {
			if from := changed.Add(time.Duration(max(secs, 0)) * time.Second); from.After(due) {
				due = from
				how = fmt.Sprintf(", %ds from the tolerations' change seen at %s less the slack", secs, tolsChanged.Format("15:04:05.000"))
			}
		}
		if !due.After(latest) {
			return
		}
		considered = append(considered, fmt.Sprintf("%s due %s%s", s.taint.Key, due.Format("15:04:05.000"), how))
	}
	// Every taint in view was tolerated longer: an early eviction. With
	// none in view the taint was lifted before the eviction: untainted-
	// eviction judges that, with its own, smaller slack.
	if len(considered) == 0 {
		return
	}
	c.violate(at, InvToleration, "pod/"+p.Namespace+"/"+p.Name, "taint eviction at %s on %s before its toleration ended (%s)",
		when.Format("15:04:05"), p.Spec.NodeName, strings.Join(considered, "; "))
}

// taintChain is the NoExecute taints of a node that may have led to an
// eviction at when (seen by at): those present around it, and those before
// them without a gap longer than the slack (a not-ready taint swapped for
// an unreachable one keeps the eviction's clock running).
func (c *Checker) taintChain(node string, when, at time.Time) []*taintSeen {
	var chain []*taintSeen
	in := map[*taintSeen]bool{}
	start := time.Time{}
	for _, s := range c.taints[node] {
		if (s.to.IsZero() || !s.to.Before(when.Add(-c.limits.Slack))) && !s.from.After(at) {
			chain, in[s] = append(chain, s), true
			if start.IsZero() || s.from.Before(start) {
				start = s.from
			}
		}
	}
	for grew := len(chain) > 0; grew; {
		grew = false
		for _, s := range c.taints[node] {
			if !in[s] && !s.to.IsZero() && !s.to.Before(start.Add(-c.limits.Slack)) && s.from.Before(start) {
				chain, in[s], start, grew = append(chain, s), true, s.from, true
			}
		}
	}
	return chain
}

// shortestToleration is the shortest tolerationSeconds of the pod's
// tolerations of t; tolerated is false when none tolerates it for a time.
func shortestToleration(p *v1.Pod, t v1.Taint) (secs int64, tolerated bool) {
	for _, tol := range p.Spec.Tolerations {
		if !tolerates(tol, t) || tol.TolerationSeconds == nil {
			continue
		}
		if !tolerated || *tol.TolerationSeconds < secs {
			secs, tolerated = *tol.TolerationSeconds, true
		}
	}
	return secs, tolerated
}

// tolerationSeconds lists a pod's NoExecute tolerations with their
// seconds, for the timeline.
func tolerationSeconds(p *v1.Pod) string {
	var out []string
	for _, tol := range p.Spec.Tolerations {
		if tol.Effect != v1.TaintEffectNoExecute && tol.Effect != "" {
			continue
		}
		secs := "forever"
		if tol.TolerationSeconds != nil {
			secs = fmt.Sprintf("%ds", *tol.TolerationSeconds)
		}
		out = append(out, tol.Key+" "+secs)
	}
	return strings.Join(out, ", ")
}

// dueTime is when a taint may evict the pod: its timeAdded when not
// tolerated, plus tolerationSeconds when it is; ok false: tolerated forever.
func dueTime(p *v1.Pod, t v1.Taint) (time.Time, bool) {
	added := time.Time{}
	if t.TimeAdded != nil {
		added = t.TimeAdded.Time
	}
	var best *int64
	tolerated := false
	for _, tol := range p.Spec.Tolerations {
		if !tolerates(tol, t) {
			continue
		}
		if tol.TolerationSeconds == nil {
			return time.Time{}, false
		}
		tolerated = true
		if best == nil || *tol.TolerationSeconds < *best {
			s := *tol.TolerationSeconds
			best = &s
		}
	}
	if !tolerated {
		return added, true
	}
	return added.Add(time.Duration(max(*best, 0)) * time.Second), true
}

// checkPDB: a pod covered by a PodDisruptionBudget may be deleted outside
// the Eviction API only by taint eviction, pod GC, or a forced drain that
// the configuration allows and an event announces.
func (c *Checker) checkPDB(at time.Time, p *v1.Pod) {
	reason, _ := disruption(p)
	switch reason {
	case reasonEvictionAPI, reasonTaintEvict, reasonPodGC:
		return
	}
	if len(c.taintChain(p.Spec.NodeName, at, at)) > 0 {
		return // NoExecute taints evict regardless of budgets
	}
	var covering []string
	for k, b := range c.pdbs {
		if b.Namespace != p.Namespace || b.Spec.Selector == nil {
			continue
		}
		sel, err := metav1.LabelSelectorAsSelector(b.Spec.Selector)
		if err != nil || !sel.Matches(labels.Set(p.Labels)) {
			continue
		}
		if b.Status.DisruptionsAllowed == 0 {
			covering = append(covering, k)
		}
	}
	if len(covering) == 0 {
		return
	}
	if c.limits.ForceAllowed && c.forced[p.Namespace+"/"+p.Name] {
		return
	}
	sort.Strings(covering)
	c.violate(at, InvPDB, "pod/"+p.Namespace+"/"+p.Name, "deleted outside the Eviction API (disruption reason %q) while PodDisruptionBudget %s allowed no disruption, with no announced forced eviction",
		reason, strings.Join(covering, ","))
}

// checkReadinessBack: a pod's Ready may come back only once its node is
// Ready and has reported (lease or status heartbeat) since the pod was
// marked not Ready. Node and lease watches may trail the pod's, so the
// latest node view within the slack decides; see Settle.
func (c *Checker) checkReadinessBack(at time.Time, p *v1.Pod, mark time.Time) {
	if c.limits.SkipReadinessRestore {
		return
	}
	n := c.nodes[p.Spec.NodeName]
	if n != nil && c.nodeReportedSince(n, mark) {
		return
	}
	c.pendingReady = append(c.pendingReady, pendingReady{at: at, pod: p.Namespace + "/" + p.Name, node: p.Spec.NodeName, mark: mark})
}

// KubeletManager is the kubelet's field manager (a real kubelet's, and the
// fake nodes' pod status writes: pkg/fakenode.FieldManager).
const KubeletManager = "kubelet"

// readyWriter is the field manager that owns the pod's Ready condition's
// status, the last to change it ("" when managedFields do not say).
func readyWriter(p *v1.Pod) string {
	for _, mf := range p.ManagedFields {
		if mf.FieldsV1 == nil {
			continue
		}
		var fields map[string]any
		if json.Unmarshal(mf.FieldsV1.GetRawBytes(), &fields) != nil {
			continue
		}
		st, _ := fields["f:status"].(map[string]any)
		conds, _ := st["f:conditions"].(map[string]any)
		ready, _ := conds[`k:{"type":"Ready"}`].(map[string]any)
		if _, ok := ready["f:status"]; ok {
			return mf.Manager
		}
	}
	return ""
}

func dashIfEmpty(s string) string {
	if s == "" {
		return "unknown writer"
	}
	return s
}

type pendingReady struct {
	at        time.Time
	pod, node string
	mark      time.Time
}

// Settle decides the pending readiness restores: one whose node has been
// seen Ready and reporting since the mark is fine; one still undecided
// after the slack is a violation. Called on every node or lease change and
// by the watcher once a second.
func (c *Checker) Settle(at time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.settle(at)
}

func (c *Checker) settle(at time.Time) {
	c.settleEarly(at)
	c.settleZone(at)
	c.settleDisrupt(at)
	var keepEvict []pendingEvict
	for _, pe := range c.pendingEvict {
		if at.Sub(pe.seen) <= c.limits.Slack {
			keepEvict = append(keepEvict, pe)
			continue
		}
		c.checkUntainted(pe)
	}
	c.pendingEvict = keepEvict
	var keep []pendingReady
	for _, pr := range c.pendingReady {
		if n := c.nodes[pr.node]; n != nil && c.nodeReportedSince(n, pr.mark) {
			continue
		}
		if at.Sub(pr.at) <= c.limits.Slack {
			keep = append(keep, pr)
			continue
		}
		state := "not seen"
		if n := c.nodes[pr.node]; n != nil {
			state = fmt.Sprintf("Ready=%s, lease renewed %s", readyStatus(n), c.leases[pr.node].Format("15:04:05.000"))
		}
		c.violate(pr.at, InvReadiness, "pod/"+pr.pod, "Ready given back while node %s was not Ready or had not reported since the mark at %s (node %s within %v)",
			pr.node, pr.mark.Format("15:04:05.000"), state, c.limits.Slack)
	}
	c.pendingReady = keep
}

// StuckDrains lists the nodes whose drain is in flight with no event
// explaining why, for the runner's wait before CheckProgress.
func (c *Checker) StuckDrains() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for name, n := range c.nodes {
		if drainInFlight(n) && c.explained[name] == "" {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}

// Deployment is what the progress check needs of a workload.
type Deployment struct {
	Name                string
	Replicas, Available int32
}

// CheckProgress is the end-of-run check, once every fault has ended and
// the bound has passed: every workload is whole again (a dead node's pods
// were replaced), and every drain finished or is explained by an event.
func (c *Checker) CheckProgress(at time.Time, deps []Deployment, bound time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.settle(at.Add(c.limits.Slack + time.Nanosecond))
	for _, d := range deps {
		if d.Available < d.Replicas {
			c.violate(at, InvProgress, "deployment/"+d.Name, "%d of %d replicas available %v after the last fault ended", d.Available, d.Replicas, bound)
		}
	}
	var names []string
	for n := range c.nodes {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, name := range names {
		if drainInFlight(c.nodes[name]) && c.explained[name] == "" {
			c.violate(at, InvProgress, "node/"+name, "drain still in flight %v after the last fault ended, and no event explains it", bound)
		}
	}
}

func (c *Checker) nodeReportedSince(n *v1.Node, mark time.Time) bool {
	if readyStatus(n) != v1.ConditionTrue {
		return false
	}
	if r, ok := c.leases[n.Name]; ok && r.After(mark) {
		return true
	}
	for _, cd := range n.Status.Conditions {
		if cd.Type == v1.NodeReady && !cd.LastHeartbeatTime.Time.Before(mark) {
			return true
		}
	}
	return false
}

// tolerates is the API's toleration rule: effect empty or equal; key empty
// (with Exists) or equal; Exists, or Equal (the default) with the value.
func tolerates(tol v1.Toleration, t v1.Taint) bool {
	if tol.Effect != "" && tol.Effect != t.Effect {
		return false
	}
	if tol.Key != "" && tol.Key != t.Key {
		return false
	}
	switch tol.Operator {
	case v1.TolerationOpExists:
		return true
	case "", v1.TolerationOpEqual:
		return tol.Key != "" && tol.Value == t.Value
	}
	return false
}

// podID names a pod by UID (by namespace/name when it has none, as in
// tests).
func podID(uid types.UID, ns, name string) string {
	if uid != "" {
		return string(uid)
	}
	return ns + "/" + name
}

// pendingEvict is a taint eviction as the checker saw it: a pod's
// DisruptionTarget condition, or the event announcing it.
type pendingEvict struct {
	seen  time.Time // when the checker saw it
	stamp time.Time // the controller's time on it, to the second
	pod   *v1.Pod
	what  string
}

// eventEviction takes a "Marking for deletion" event: each emission (the
// event's count) is a decision, stamped with the event's last time.
func (c *Checker) eventEviction(at time.Time, e *v1.Event) {
	id := fmt.Sprintf("event/%s/%d", e.UID, e.Count)
	if c.evictions[id] {
		return
	}
	c.evictions[id] = true
	p := c.seenPods[podID(e.InvolvedObject.UID, e.InvolvedObject.Namespace, e.InvolvedObject.Name)]
	if p == nil {
		return // a pod never seen: nothing to judge it by
	}
	stamp := e.LastTimestamp.Time
	if stamp.IsZero() {
		stamp = e.FirstTimestamp.Time
	}
	if stamp.IsZero() {
		stamp = e.EventTime.Time
	}
	if stamp.IsZero() {
		return
	}
	c.pendingEvict = append(c.pendingEvict, pendingEvict{seen: at, stamp: stamp, pod: p, what: "announced (event)"})
}

// checkUntainted (untainted-eviction): a taint eviction needs a NoExecute
// taint on the pod's node that the pod does not tolerate forever, present
// when the decision was made. The controller stamps its time (to the
// second, rounded down) right after deciding, so the decision came no
// earlier than stamp - EvictionSlack; a taint the checker saw removed
// before that (a removal is seen after it happened) was certainly gone.
// Taints seen added up to the slack after the eviction count as possibly
// there (the node's watch may trail the pod's), so a late view can only
// hide a violation. A deleted node's pods may go, as upstream.
func (c *Checker) checkUntainted(pe pendingEvict) {
	node := pe.pod.Spec.NodeName
	if node == "" || c.nodes[node] == nil {
		return
	}
	since := pe.stamp.Add(-c.limits.EvictionSlack)
	horizon := pe.seen.Add(c.limits.Slack)
	var last time.Time
	for _, s := range c.taints[node] {
		if s.from.After(horizon) {
			continue
		}
		if _, ok := dueTime(pe.pod, s.taint); !ok {
			continue // tolerated forever: it cannot evict the pod
		}
		if s.to.IsZero() || !s.to.Before(since) {
			return
		}
		if s.to.After(last) {
			last = s.to
		}
	}
	gone := "none was ever seen on it"
	if !last.IsZero() {
		gone = "the last one was seen removed at " + last.Format("15:04:05.000")
	}
	c.violate(pe.seen, InvUntainted, "pod/"+pe.pod.Namespace+"/"+pe.pod.Name,
		"taint eviction %s at %s (the controller's time, to the second) while node %s had no NoExecute taint the pod does not tolerate forever: %s, more than %v before",
		pe.what, pe.stamp.Format("15:04:05"), node, gone, c.limits.EvictionSlack)
}
