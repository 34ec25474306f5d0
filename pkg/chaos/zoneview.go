package chaos

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
)

// zone-rules on the checker's own view (issue 45, point 3): the certain
// silences of the ground truth count a node only once it has been silent
// for the grace period, a monitor period and the slack before the decision,
// about 9 s, while the node lifecycle controller counts a node in its
// zone's state once it is overdue (silent longer than its heartbeat
// interval plus --heartbeat-overdue-slack, at most the grace period), or
// applies no taint in the zone until a fresh read settles it. Here a node
// counts as not Ready at the pass whose zone state a taint used when the
// checker saw its last renewal before that pass more than the longest
// overdue time the controller can have used, plus ViewLag, before it.
//
// Why that is a count the controller had: the controller hears a renewal
// when its informer delivers it, at most ViewLag after it landed, and a
// renewal landed before the checker saw it; a fresh read that shows a
// renewal its informer had not delivered yet counts the silence from the
// read, which also comes before the informer delivers it. A new leader (or
// a process just started) counts the silence of a node from its Lease's
// renewTime, which is earlier. So at the pass the controller's silence is
// at least the checker's, less ViewLag. Past the overdue time, the node was
// counted, or its zone unsettled (no taint at all). Not judged so when a
// fault held the controllers' view of the Leases or their passes (a stalled
// or 410'd lease watch, 429s, an API server restart) or when every node may have
// been silent (leaving the all-zones mode restarts every node's count), in
// the window: the certain silences alone judge the taint then.

// pendingZone is a new not-ready/unreachable taint the certain silences
// allowed, waiting for the checker's Lease watch to catch up.
type pendingZone struct {
	node          string
	seen, decided time.Time
	taint         v1.Taint
}

func (c *Checker) settleZone(at time.Time) {
	var keep []pendingZone
	for _, p := range c.pendingZone {
		if at.Sub(p.seen) <= c.limits.Slack {
			keep = append(keep, p)
			continue
		}
		c.judgeZoneView(p)
	}
	c.pendingZone = keep
}

// judgeZoneView judges a taint on the zone states the controller certainly
// had at the pass whose state it used: that pass came at most a monitor
// period before the decision (the tainting runs between passes), and
// ViewLag more for a pass that the machine's load delayed. A pass held
// longer (its writes retried after 429s, an API server restart) is one of
// the faults that viewHeld leaves to the certain silences.
func (c *Checker) judgeZoneView(p pendingZone) {
	pass := p.decided.Add(-c.limits.MonitorPeriod - c.limits.ViewLag)
	from := pass.Add(-c.countMargin() - c.limits.Slack)
	if why := c.viewHeld(from, p.seen); why != "" {
		return
	}
	if c.everyNodeMaybeDown(from, p.seen) {
		return
	}
	certainFrom := p.decided.Add(-c.countMargin())
	silent := map[string]string{}
	counted := func(n string) bool {
		if c.truth.Always(n, certainFrom, p.seen, Machine.NotReady) {
			silent[n] = "certainly silent or not Ready since " + certainFrom.Format("15:04:05.000")
			return true
		}
		if ok, why := c.silentInView(n, pass, p.seen); ok {
			silent[n] = why
			return true
		}
		return false
	}
	// A Node the checker saw deleted in the window (a replacement) may
	// have been missing from the controller's count, or counted anew:
	// a zone's state is judged only where both give the same
	// (certainStates), so that the view never counts a silent node the
	// controller did not have nor leaves out a Ready one it had.
	present := c.presentSince(from)
	states := c.certainStates(counted, from)
	zone := c.truth.Zone(p.node)
	var inZone []string
	for _, z := range c.truth.Zones() {
		for _, n := range z.Nodes {
			if why, ok := silent[n]; ok && (z.Name == zone || allFull(states)) {
				inZone = append(inZone, n+" ("+why+")")
			}
		}
	}
	sort.Strings(inZone)
	switch {
	case allFull(states):
		c.violate(p.seen, InvZoneRules, "node/"+p.node, "%s:NoExecute added (timeAdded %s) while every zone was in FullDisruption by the checker's view of the Lease renewals at the pass before %s (master disruption mode: no taint): %s",
			p.taint.Key, fmtTime(p.taint.TimeAdded), p.decided.Format("15:04:05.000"), strings.Join(inZone, ", "))
	case states[zone] == "PartialDisruption" && c.zoneSize(zone) <= c.limits.LargeClusterThreshold && c.someReady(zone, pass, p.decided, p.seen, present) != "":
		c.violate(p.seen, InvZoneRules, "node/"+p.node, "%s:NoExecute added (timeAdded %s) while zone %s was in PartialDisruption by the checker's view of the Lease renewals at the pass before %s (size %d <= %d: eviction rate 0): %s; %s Ready",
			p.taint.Key, fmtTime(p.taint.TimeAdded), zone, p.decided.Format("15:04:05.000"), c.zoneSize(zone), c.limits.LargeClusterThreshold, strings.Join(inZone, ", "),
			c.someReady(zone, pass, p.decided, p.seen, present))
	}
}

// zoneStatesBy computes each zone's state as upstream does, with counted
// saying which nodes are not Ready and present (nil: every node) which
// are in the count at all.
func (c *Checker) zoneStatesBy(counted, present func(node string) bool) map[string]string {
	out := map[string]string{}
	for _, z := range c.truth.Zones() {
		ready, notReady := 0, 0
		for _, n := range z.Nodes {
			if present != nil && !present(n) {
				continue
			}
			if obj := c.nodes[n]; obj != nil {
				if _, ex := obj.Labels[excludeLabel]; ex {
					continue
				}
			}
			if counted(n) {
				notReady++
			} else {
				ready++
			}
		}
		switch {
		case ready+notReady == 0:
			continue
		case ready == 0:
			out[z.Name] = "FullDisruption"
		case notReady > 2 && float32(notReady)/float32(notReady+ready) >= float32(c.limits.UnhealthyZoneThreshold):
			out[z.Name] = "PartialDisruption"
		default:
			out[z.Name] = "Normal"
		}
	}
	return out
}

// silentInView says whether the node lifecycle controller certainly
// counted node as not Ready (or its zone unsettled) at pass, by the
// renewals the checker saw: the last one made before the pass was seen
// more than the overdue bound plus ViewLag before it, and the machine was
// certainly silent over that span (the ground truth: the node did not
// reach the API server by another way).
//
// The pass may have come later than the earliest one, up to the decision:
// a node that renewed (or was healed) before the checker saw the taint may
// have been Ready in the pass the controller used, so it counts only if it
// stayed silent until then (chaos seed 90013: two nodes healed 1.3 s before
// a new leader's first pass, counted silent at the earliest pass).
func (c *Checker) silentInView(node string, pass, until time.Time) (bool, string) {
	rs := c.renewals[node]
	last := -1
	for i, r := range rs {
		if r.renewed.Before(pass) {
			last = i
		}
	}
	if last < 0 {
		return false, ""
	}
	for _, r := range rs[last+1:] {
		if r.seen.Before(until) || r.renewed.Before(until) {
			return false, ""
		}
	}
	margin := c.overdueBound(rs[max(0, last-2):last+1], c.born[node] && last < 2)
	margin += c.limits.ViewLag
	seen := rs[last].seen
	if pass.Sub(seen) <= margin || !c.truth.Always(node, pass.Add(-margin), until, Machine.Silent) {
		return false, ""
	}
	return true, fmt.Sprintf("last renewal seen %s, %v before the pass; counted after %v", seen.Format("15:04:05.000"), pass.Sub(seen).Round(time.Millisecond), margin.Round(time.Millisecond))
}

// overdueBound is the longest silence after which the controller counts a
// node overdue, over every heartbeat interval it can have measured from
// these renewals (its last two gaps, each seen up to ViewLag apart from the
// renewTimes) or assumed (for a node it has not measured): the controller's
// rule (nodelifecycle overdueAfter), stated again here so that the checker
// imports no controller. With no overdue slack only the grace period
// counts. Fewer than three renewals say nothing of the intervals measured
// before them (the grace period counts), unless they are the Lease's whole
// history (whole: a Lease created while the checker watched): then the
// controller measured at most their gaps, or assumed an interval (a
// newcomer's, silent since).
//
// The controller assumes a quarter of the Lease's leaseDurationSeconds (a
// quarter of the grace period only without one). The checker reads no
// Lease duration; the intervals it covers, up to max(gap+ViewLag, grace/4),
// still include it for the chaos Leases: 4 s / 4 = 1 s, never above
// ViewLag (1 s). Leases longer than four ViewLags (a real kubelet's 40 s)
// would need the duration read here.
func (c *Checker) overdueBound(rs []renewal, whole bool) time.Duration {
	grace, slack := c.limits.Grace, c.limits.OverdueSlack
	if slack <= 0 || len(rs) == 0 || (len(rs) < 3 && !whole) {
		return grace
	}
	var gap time.Duration
	for i := 1; i < len(rs); i++ {
		gap = max(gap, rs[i].renewed.Sub(rs[i-1].renewed))
	}
	top := max(gap+c.limits.ViewLag, grace/4)
	worst := time.Duration(0)
	for i := time.Duration(0); i <= top; i += 10 * time.Millisecond {
		worst = max(worst, overdueAfter(i, grace, slack))
	}
	return max(worst, overdueAfter(top, grace, slack))
}

// overdueAfter is the controller's overdue time for a heartbeat interval:
// interval plus slack, or grace less 1.5 intervals when that is sooner (but
// never below interval plus the lesser of slack and half an interval), and
// never more than grace (docs/nodelifecycle.md).
func overdueAfter(interval, grace, slack time.Duration) time.Duration {
	after := interval + slack
	if together := grace - interval - interval/2; together < after {
		after = max(together, interval+min(slack, interval/2))
	}
	return min(after, grace)
}

// viewHeld names a fault that held the controllers' view of the node
// Leases, or their passes, at some moment of [from, to] (until the slack
// after it ended: a watch resumes with a backoff): "" when none did.
func (c *Checker) viewHeld(from, to time.Time) string {
	type window struct {
		what       string
		start, end time.Time
	}
	open := map[int]*window{}
	var all []*window
	for _, a := range c.truth.Applied() {
		s := a.Step
		switch {
		case (s.Op == OpWatchStallStart || s.Op == OpWatchGoneStart) && s.Resource == "leases",
			s.Op == OpWatchLagStart && slices.Contains(strings.Split(s.Resource, ","), "leases"), // heard-unseen
			s.Op == OpAPIFaultStart && s.Status == 429,                                           // retried after a second, up to ten times: a pass held
			s.Op == OpAPIServerStop:
			w := &window{what: s.String(), start: a.Start}
			open[s.Fault] = w
			all = append(all, w)
		case s.Op == OpWatchStallEnd, s.Op == OpWatchGoneEnd, s.Op == OpWatchLagEnd, s.Op == OpAPIFaultEnd, s.Op == OpAPIServerReady:
			if w := open[s.Fault]; w != nil {
				w.end = a.Done.Add(c.limits.Slack)
				delete(open, s.Fault)
			}
		}
	}
	for _, w := range all {
		if !w.start.After(to) && (w.end.IsZero() || !w.end.Before(from)) {
			return w.what
		}
	}
	return ""
}

// everyNodeMaybeDown: every node of every zone may have been not Ready at
// some moment of [from, to], so the controller may have left the all-zones
// mode meanwhile, which starts every node's count afresh.
func (c *Checker) everyNodeMaybeDown(from, to time.Time) bool {
	zones := c.truth.ZonesAt(to)
	if len(zones) == 0 {
		return false
	}
	for _, z := range zones {
		for _, n := range z.Nodes {
			if !c.truth.Ever(n, from, to, Machine.NotReady) {
				return false
			}
		}
	}
	return true
}

// readyGap is the longest gap between two renewals (renewTimes) of a node
// that the controller certainly counts Ready: its overdue time is never
// below 1.5 s (an interval of 1 s; grace less 1.5 intervals, at least
// interval plus half of it), and its informer's deliveries jitter by less
// than ViewLag.
const readyGap = time.Second

// someReady names a node of zone the controller certainly counted Ready at
// every pass of [pass, decided] ("" when none): PartialDisruption needs
// one, or the zone may have been in FullDisruption in the controller's
// view (normal rate: a taint allowed) where the checker counts fewer. The
// machine healthy (the ground truth: renewing and reporting Ready) since a
// grace period and ViewLag before the pass, a Ready=True version seen, and
// its renewals seen over [pass - readyGap, decided] at most readyGap apart.
func (c *Checker) someReady(zone string, pass, decided, seen time.Time, present func(string) bool) string {
	healthy := func(m Machine) bool { return !m.NotReady() }
	for _, z := range c.truth.Zones() {
		if z.Name != zone {
			continue
		}
		for _, n := range z.Nodes {
			if present != nil && !present(n) {
				continue
			}
			if obj := c.nodes[n]; obj == nil || readyStatus(obj) != v1.ConditionTrue {
				continue
			}
			if !c.truth.Always(n, pass.Add(-c.limits.Grace-c.limits.ViewLag), seen, healthy) {
				continue
			}
			if c.renewedEvery(n, pass.Add(-readyGap), decided, readyGap) {
				return n
			}
		}
	}
	return ""
}

// renewedEvery: the checker saw the node's renewals over [from, to] with
// renewTimes at most gap apart (one at or before from, one at or after
// to).
func (c *Checker) renewedEvery(node string, from, to time.Time, gap time.Duration) bool {
	rs := c.renewals[node]
	first, last := -1, -1
	for i, r := range rs {
		if !r.renewed.After(from) {
			first = i
		}
		if last < 0 && !r.renewed.Before(to) {
			last = i
		}
	}
	if first < 0 || last < 0 {
		return false
	}
	for i := first + 1; i <= last; i++ {
		if rs[i].renewed.Sub(rs[i-1].renewed) > gap {
			return false
		}
	}
	return true
}

// presentSince says which nodes the controller certainly had in its count
// since from: a Node the checker has and did not see deleted since.
func (c *Checker) presentSince(from time.Time) func(string) bool {
	return func(n string) bool {
		d, ok := c.deleted[n]
		return c.nodes[n] != nil && (!ok || d.Before(from))
	}
}

// maybePresentSince says which nodes the controller may have had in its
// count since from: presentSince's, and a Node deleted since then (a
// replacement registered anew, Ready, may well have been counted).
func (c *Checker) maybePresentSince(from time.Time) func(string) bool {
	return func(n string) bool {
		d, ok := c.deleted[n]
		return c.nodes[n] != nil || (ok && !d.Before(from))
	}
}

// certainStates is each zone's state as zoneStatesBy computes it, kept
// only where the nodes the controller certainly had since from and those
// it may have had give the same state; elsewhere "uncertain". A node
// deleted and registered anew inside the window (a replacement, chaos
// seed 170023) counted Ready keeps its zone out of FullDisruption; left
// out, it would not.
func (c *Checker) certainStates(counted func(string) bool, from time.Time) map[string]string {
	a := c.zoneStatesBy(counted, c.presentSince(from))
	b := c.zoneStatesBy(counted, c.maybePresentSince(from))
	out := map[string]string{}
	for z, s := range a {
		out[z] = "uncertain"
		if b[z] == s {
			out[z] = s
		}
	}
	for z := range b {
		if _, ok := a[z]; !ok {
			out[z] = "uncertain"
		}
	}
	return out
}
