package chaos

import (
	"fmt"
	"math"
	"sort"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
)

// The rules of issue 45, point 3, judged from what the checker itself saw
// and when: early-unknown/early-taint (a node still renewing its Lease
// marked dead), countdown-restart (a countdown stripped without recovery or
// restarted) and rate-limit (a zone's new taints faster than the rate).

// renewal is a node Lease's renewTime and when the checker saw it.
type renewal struct{ renewed, seen time.Time }

// pendingEarly is a mark of death (Ready=Unknown, or a not-ready or
// unreachable taint) waiting for the Lease watch to catch up.
type pendingEarly struct {
	node string
	seen time.Time
	inv  string
	what string
}

// pendingStrip is a countdown whose last taint was seen removed.
type pendingStrip struct {
	node    string
	seen    time.Time
	taints  string
	readyAt time.Time // a version with Ready=True seen (zero: none yet)
}

// countdown is a node's episode of not-ready/unreachable taints: from the
// first seen to a recovery seen (Ready=True and none of them on the node).
type countdown struct {
	first time.Time
	// stripped: its taints were seen gone (judged once, until one is back).
	stripped bool
	// added is the first timeAdded seen for each key in the episode.
	added map[string]time.Time
	// readySeen is the last version with Ready=True seen while its taints
	// were on; strippedAt when they were last seen gone. A strip that
	// follows a Ready=True within the slack is the recovery the controller
	// saw (its write landing after the node failed again): the episode
	// ended there, and a taint after it starts a new countdown.
	readySeen, strippedAt time.Time
	// lastKey is the key of the last taint of the episode seen added: a
	// key added after the other one is a swap (upstream swaps not-ready
	// and unreachable with a new timeAdded each way), not a restart.
	lastKey string
}

// countdownStart is a new episode seen in a zone, for rate-limit.
type countdownStart struct {
	node  string
	seen  time.Time
	added time.Time // its taint's timeAdded (zero: none)
}

func isCountdown(key string) bool { return key == taintNotReady || key == taintUnreachable }

func countdownTaints(n *v1.Node) []v1.Taint {
	var out []v1.Taint
	for _, t := range noExecute(n) {
		if isCountdown(t.Key) {
			out = append(out, t)
		}
	}
	return out
}

// observeRenewal keeps a node Lease's renewals (the last two minutes).
func (c *Checker) observeRenewal(at time.Time, node string, renewed time.Time) {
	rs := c.renewals[node]
	if len(rs) > 0 && !renewed.After(rs[len(rs)-1].renewed) {
		return
	}
	rs = append(rs, renewal{renewed: renewed, seen: at})
	cut := 0
	for cut < len(rs)-1 && rs[cut+1].renewed.Before(at.Add(-2*time.Minute)) {
		cut++
	}
	if cut > 0 {
		delete(c.born, node) // no longer its whole history
	}
	c.renewals[node] = rs[cut:]
}

// renewedThroughout says whether the checker saw the node renew its Lease
// so that the node lifecycle controller, reading the Leases at any moment
// after from, cannot have found it silent since before to for the grace
// period. Such a finding needs two renewals a and b, one after the other,
// with a before to and b landing after the read, so more than the grace
// period after a (the read is sent once the node is overdue). The renewals
// the checker saw are some of those that happened, each landed between its
// renewTime and the moment the checker saw it: so it needs a renewal seen
// at or before from and one at or after to, and every two of them one
// after the other, the first before to and the second seen after from,
// seen within the grace period of the first's renewTime.
func (c *Checker) renewedThroughout(node string, from, to time.Time) bool {
	rs := c.renewals[node]
	if len(rs) == 0 || rs[0].renewed.After(from) || rs[len(rs)-1].renewed.Before(to) {
		return false
	}
	for i := 0; i+1 < len(rs); i++ {
		if !rs[i].renewed.Before(to) {
			break
		}
		if rs[i+1].seen.After(from) && rs[i+1].seen.Sub(rs[i].renewed) > c.limits.Grace {
			return false
		}
	}
	return true
}

// observeReady notes a node's Ready=False reports and its Ready=Unknown
// marks (early-unknown).
func (c *Checker) observeReady(at time.Time, old, n *v1.Node) {
	st := readyStatus(n)
	var was v1.ConditionStatus
	if old != nil {
		was = readyStatus(old)
	}
	if st == v1.ConditionFalse {
		rf := c.readyFalse[n.Name]
		if len(rf) == 0 || at.Sub(rf[len(rf)-1]) > time.Second {
			c.readyFalse[n.Name] = append(rf, at)
		}
	}
	if st == v1.ConditionUnknown && old != nil && was != v1.ConditionUnknown {
		c.pendingEarly = append(c.pendingEarly, pendingEarly{node: n.Name, seen: at, inv: InvEarlyUnknown, what: "Ready=Unknown"})
	}
	if cd := c.countdowns[n.Name]; cd != nil && st == v1.ConditionTrue {
		if len(countdownTaints(n)) == 0 {
			delete(c.countdowns, n.Name) // recovered: the next taint starts a new countdown
		} else {
			cd.readySeen = at
		}
	}
}

// earlyWindow is how far before the checker saw a mark of death the node
// lifecycle controller's fresh read of the Leases may have been: the slack
// (the write seen late) and the slack again (the read before the write).
func (c *Checker) earlyWindow() time.Duration { return 2 * c.limits.Slack }

// settleEarly judges the marks of death whose Lease view had the slack to
// catch up: a node the checker saw renew with no gap longer than the grace
// period, from the earliest moment the controller's read may have been
// until the grace period before the mark, was certainly not silent for the
// grace period at the read (a renewal before the read is in it). A
// not-ready taint on a node seen reporting Ready=False is the kubelet's
// word, not silence.
func (c *Checker) settleEarly(at time.Time) {
	var keep []pendingEarly
	for _, p := range c.pendingEarly {
		if at.Sub(p.seen) <= c.limits.Slack {
			keep = append(keep, p)
			continue
		}
		from, to := p.seen.Add(-c.earlyWindow()), p.seen.Add(-c.limits.Grace)
		if !c.renewedThroughout(p.node, from, to) {
			continue
		}
		if p.what == taintNotReady && c.reportedNotReady(p.node, from.Add(-c.limits.Grace), p.seen.Add(c.limits.Slack)) {
			continue
		}
		c.violate(p.seen, p.inv, "node/"+p.node, "%s while the checker saw its Lease renewed with no gap over the grace period %v from %s to %s (the last renewal before: %s)",
			p.what, c.limits.Grace, from.Format("15:04:05.000"), to.Format("15:04:05.000"), c.lastRenewal(p.node, p.seen))
	}
	c.pendingEarly = keep
	var keepStrip []pendingStrip
	for _, p := range c.pendingStrip {
		if at.Sub(p.seen) <= c.limits.Slack {
			keepStrip = append(keepStrip, p)
			continue
		}
		c.judgeStrip(p)
	}
	c.pendingStrip = keepStrip
}

func (c *Checker) lastRenewal(node string, before time.Time) string {
	rs := c.renewals[node]
	for i := len(rs) - 1; i >= 0; i-- {
		if !rs[i].renewed.After(before) {
			return fmt.Sprintf("renewTime %s, seen %s", rs[i].renewed.Format("15:04:05.000"), rs[i].seen.Format("15:04:05.000"))
		}
	}
	return "none seen"
}

// reportedNotReady: the node reported Ready=False (the checker saw it, or
// the truth's ready-flap may have been on) at some moment of [from, to].
func (c *Checker) reportedNotReady(node string, from, to time.Time) bool {
	for _, t := range c.readyFalse[node] {
		if !t.Before(from) && !t.After(to) {
			return true
		}
	}
	return c.truth.Ever(node, from, to, func(m Machine) bool { return m.ReadyFalse })
}

// checkCountdownTaint takes a new not-ready/unreachable taint: a mark of
// death for early-taint, a countdown start for rate-limit, and, within an
// episode, the same key again with a later timeAdded is a restarted
// countdown; any with a timeAdded older than the episode's first sight (by
// more than two slacks: a write may land late) is a countdown backdated.
func (c *Checker) checkCountdownTaint(at time.Time, n *v1.Node, s *taintSeen) {
	if !isCountdown(s.taint.Key) {
		return
	}
	var added time.Time
	if s.taint.TimeAdded != nil {
		added = s.taint.TimeAdded.Time
	}
	c.pendingEarly = append(c.pendingEarly, pendingEarly{node: n.Name, seen: at, inv: InvEarlyTaint, what: s.taint.Key})
	cd := c.countdowns[n.Name]
	if cd != nil && cd.stripped && c.recoveredBefore(cd, cd.strippedAt) {
		cd = nil // recovered just before the strip (the strip's judge agrees: a Ready=True version within the slack)
	}
	if cd == nil {
		cd = &countdown{first: at, added: map[string]time.Time{}}
		c.countdowns[n.Name] = cd
		c.checkRate(at, n.Name, added)
	}
	cd.stripped = false
	obj := "node/" + n.Name
	if cd.lastKey != "" && cd.lastKey != s.taint.Key && !added.IsZero() {
		// Swapped back (Ready Unknown, then False, then Unknown again:
		// chaos seed 180011): the kind's countdown starts anew, as upstream's.
		cd.added[s.taint.Key] = added
	}
	cd.lastKey = s.taint.Key
	if first, ok := cd.added[s.taint.Key]; ok && !added.IsZero() && added.After(first.Add(time.Second)) {
		c.violate(at, InvCountdown, obj, "%s:NoExecute again with timeAdded %s, later than the %s it carried first in this countdown (seen since %s, no recovery seen): the countdown restarted",
			s.taint.Key, added.Format("15:04:05"), first.Format("15:04:05"), cd.first.Format("15:04:05.000"))
	}
	if !added.IsZero() && added.Before(cd.first.Add(-2*c.limits.Slack-time.Second)) {
		c.violate(at, InvCountdown, obj, "%s:NoExecute with timeAdded %s, older than the countdown the checker saw start at %s: the countdown backdated",
			s.taint.Key, added.Format("15:04:05"), cd.first.Format("15:04:05.000"))
	}
	if _, ok := cd.added[s.taint.Key]; !ok && !added.IsZero() {
		cd.added[s.taint.Key] = added
	}
}

// checkCountdownGone: every not-ready/unreachable taint of a node in a
// countdown seen gone. Judged after the slack (strip).
func (c *Checker) checkCountdownGone(at time.Time, n *v1.Node) {
	cd := c.countdowns[n.Name]
	if cd == nil || cd.stripped || len(countdownTaints(n)) > 0 {
		return
	}
	cd.stripped, cd.strippedAt = true, at
	var keys []string
	for k := range cd.added {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	p := pendingStrip{node: n.Name, seen: at, taints: strings.Join(keys, ",")}
	if readyStatus(n) == v1.ConditionTrue {
		p.readyAt = at
	} else if c.recoveredBefore(cd, at) {
		p.readyAt = cd.readySeen
	}
	c.pendingStrip = append(c.pendingStrip, p)
}

// recoveredBefore says whether the strip seen at strip follows the
// recovery the controller saw: a Ready=True version seen while the taints
// were on, within the slack before it, or earlier while a fault held the
// controllers' writes (429s, an API server restart: viewHeld), so that the
// strip the recovery called for landed late, after the node had failed
// again (chaos seed 90026: Ready=True, then a ready-flap 5.7 s later,
// the strip delayed by 429s on nodes landing after it).
func (c *Checker) recoveredBefore(cd *countdown, strip time.Time) bool {
	if cd.readySeen.IsZero() {
		return false
	}
	return !cd.readySeen.Before(strip.Add(-c.limits.Slack)) || c.viewHeld(cd.readySeen, strip) != ""
}

// judgeStrip (countdown-restart): a countdown's taints removed while the
// node did not recover: no version Ready=True seen from the slack before
// the removal to the slack after with a Lease renewal seen in the grace
// period around it. Not when every node of every zone may have been down
// meanwhile (the all-zones mode strips every taint, as upstream).
func (c *Checker) judgeStrip(p pendingStrip) {
	n := c.nodes[p.node]
	if n == nil {
		return // deleted: a new Node starts afresh
	}
	ready := !p.readyAt.IsZero() || readyStatus(n) == v1.ConditionTrue
	renewing := false
	for _, r := range c.renewals[p.node] {
		if !r.seen.Before(p.seen.Add(-c.limits.Grace-c.limits.Slack)) && !r.seen.After(p.seen.Add(c.limits.Slack)) {
			renewing = true
		}
	}
	if ready && renewing {
		return
	}
	from := p.seen.Add(-2 * c.countMargin())
	zones := c.truth.ZonesAt(p.seen)
	allDown := len(zones) > 0
	for _, z := range zones {
		for _, name := range z.Nodes {
			allDown = allDown && c.truth.Ever(name, from, p.seen, Machine.NotReady)
		}
	}
	if allDown {
		return
	}
	back := ""
	if len(countdownTaints(n)) > 0 {
		back = "; it is back since"
	}
	c.violate(p.seen, InvCountdown, "node/"+p.node, "%s:NoExecute removed while the node had not recovered (Ready=True seen: %v, Lease renewal seen within %v: %v)%s",
		p.taints, ready, c.limits.Grace+c.limits.Slack, renewing, back)
}

// checkRate (rate-limit): a zone's countdown starts, n of them from the
// k-th to this one, need n-1 tokens at the rate after the first. The
// most time they can have had: the k-th decided no earlier than its
// timeAdded (whole seconds, rounded down) less a second (a token taken just
// before the taint was made), this one no later than the checker saw it.
// A leader change meanwhile may bring a fresh token (a new process's
// limiter).
func (c *Checker) checkRate(at time.Time, node string, added time.Time) {
	zone := c.truth.Zone(node)
	c.starts[zone] = append(c.starts[zone], countdownStart{node: node, seen: at, added: added})
	if c.limits.EvictionRate <= 0 {
		return
	}
	ss := c.starts[zone]
	last := len(ss) - 1
	for k := last - 1; k >= 0; k-- {
		from := ss[k].added.Add(-time.Second)
		if ss[k].added.IsZero() || ss[k].added.After(ss[k].seen) {
			from = ss[k].seen.Add(-c.limits.Slack)
		}
		span := at.Sub(from)
		if span < 0 {
			span = 0
		}
		allowed := 1 + int(math.Floor(span.Seconds()*c.limits.EvictionRate+1e-9))
		for _, lc := range c.leaderChanges {
			if !lc.Before(ss[k].seen.Add(-c.limits.Slack)) && !lc.After(at) {
				allowed++
			}
		}
		if n := last - k + 1; n > allowed {
			var names []string
			for _, s := range ss[k:] {
				names = append(names, s.node+" "+s.seen.Format("15:04:05.000"))
			}
			c.violate(at, InvRateLimit, "zone/"+zone, "%d new not-ready/unreachable taints in zone %s seen from %s to %s (the first's timeAdded %s), %d allowed in at most %v at %v a second with a burst of 1 and the leader changes: %s",
				n, zone, ss[k].seen.Format("15:04:05.000"), at.Format("15:04:05.000"), ss[k].added.Format("15:04:05"), allowed, span.Round(time.Millisecond), c.limits.EvictionRate, strings.Join(names, ", "))
			return
		}
	}
}
