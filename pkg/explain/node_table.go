package explain

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
)

// WriteTable prints the explanation for people, in sections like kubectl
// describe: times in UTC with their age or delay from now.
func (e *NodeExplanation) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	p := func(format string, args ...any) { fmt.Fprintf(tw, format+"\n", args...) }
	at := func(t time.Time) string { return relative(t, e.Now) }
	s := e.Settings
	p("Node:\t%s", e.Name)
	p("Settings:\t%s (nodeMonitorGracePeriod %s, nodeStartupGracePeriod %s, unhealthyZoneThreshold %g)", s.Source, s.NodeMonitorGracePeriod, s.NodeStartupGracePeriod, s.UnhealthyZoneThreshold)
	if len(s.DrainConditions) > 0 {
		p("\tdrain: %s; maxConcurrentDrains %d, maxCordonedNodes %q, drainBuffer %s, maxUnhealthyNodes %q%s", strings.Join(s.DrainConditions, ", "),
			s.MaxConcurrentDrains, s.MaxCordonedNodes, s.DrainBuffer, s.MaxUnhealthyNodes, optional(", groupByLabel ", s.GroupByLabel))
	}
	p("")
	h := e.Heartbeats
	p("Heartbeats:")
	if h.NodeStatus != nil {
		p("  NodeStatus (Ready lastHeartbeatTime):\t%s", at(h.NodeStatus.Time))
	} else {
		p("  NodeStatus (Ready lastHeartbeatTime):\tnone")
	}
	if h.Lease != nil {
		p("  Lease (renewTime):\t%s", at(h.Lease.Time))
	} else {
		p("  Lease (renewTime):\tnone")
	}
	p("  Grace:\t%s (%s); deadline %s", h.Grace, h.GraceSetting, at(h.Deadline))
	tw.Flush()
	tw = tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	p("Health:\t%s: %s", e.Health.Judgment, e.Health.Message)
	if e.Health.MarkedBy != "" {
		p("  Ready status last written by:\t%s", e.Health.MarkedBy)
	}
	z := e.Zone
	p("Zone:\t%q: %s (%d of %d nodes not ready)%s", z.Name, z.State, z.NotReady, z.Nodes, map[bool]string{true: "; this node is excluded (node.kubernetes.io/exclude-disruption)"}[z.Excluded])
	tw.Flush()

	fmt.Fprintln(w, "\nTaints:")
	if len(e.Taints) == 0 {
		fmt.Fprintln(w, "  none")
	} else {
		tw = tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
		fmt.Fprintln(tw, "  KEY\tEFFECT\tOWNER\tSINCE\tWHY\tUNTIL")
		for _, t := range e.Taints {
			key := t.Key
			if t.Value != "" {
				key += "=" + t.Value
			}
			since := "-"
			if t.Since != nil {
				since = at(*t.Since)
			}
			// A taint without nodeshepherd's owner record is someone
			// else's: named by the field manager that last wrote the list.
			by, until := "not nodeshepherd's: "+dash(t.SetBy), "-"
			if t.Owner != nil {
				by, until = "nodeshepherd "+t.Owner.Controller, t.Owner.Until
				if t.Owner.Expires != nil {
					until += ", expires " + at(*t.Owner.Expires)
				}
			}
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t%s\n", key, t.Effect, by, since, dash(t.Why), until)
		}
		tw.Flush()
	}

	fmt.Fprintln(w, "\nEvictions (NoExecute taints):")
	switch {
	case len(e.Evictions) == 0:
		fmt.Fprintln(w, "  no pods on the node")
	case e.Evictions[0].Eviction == EvictNoTaint:
		fmt.Fprintf(w, "  no NoExecute taint: none of the %d pods on the node is evicted\n", len(e.Evictions))
	default:
		tw = tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
		fmt.Fprintln(tw, "  POD\tEVICTED\tTAINT\tNOTE")
		for _, v := range e.Evictions {
			when := map[string]string{EvictNow: "now", EvictNever: "never (tolerates for ever)", EvictNoTaint: "no (no NoExecute taint)", EvictGoing: "already terminating"}[v.Eviction]
			if v.Eviction == EvictAt && v.At != nil {
				when = at(*v.At)
				if v.TolerationSeconds != nil {
					when += fmt.Sprintf(" (tolerationSeconds %d)", *v.TolerationSeconds)
				}
			}
			fmt.Fprintf(tw, "  %s/%s\t%s\t%s\t%s\n", v.Namespace, v.Name, when, dash(v.Taint), v.Note)
		}
		tw.Flush()
	}

	d := e.Drain
	tw = tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	p("")
	p("Drain:\t%s: %s", d.State, d.Summary)
	if d.Cordoned {
		owner := "someone else (nodeshepherd leaves it)"
		switch r := d.CordonOwner; {
		case r != nil:
			owner = fmt.Sprintf("nodeshepherd's %s controller since %s (%s), until %s", r.Controller, at(r.Since), r.Why, r.Until)
			if r.Expires != nil {
				owner += ", expires " + at(*r.Expires)
			}
		case d.CordonedByDrain: // cordoned before owner records
			owner = "nodeshepherd's drain controller"
			if d.CordonedAt != nil {
				owner += " since " + at(*d.CordonedAt)
			}
			owner += ", until no drain rule's condition has held for --uncordon-after"
		}
		p("  Cordoned by:\t%s; spec.unschedulable last written by %s", owner, dash(d.CordonedBy))
	}
	if d.MatchedSince != nil {
		p("  Matched:\t%s, since %s", strings.Join(d.Matched, ", "), at(*d.MatchedSince))
	}
	if d.Conditions != "" {
		p("  Cordon conditions:\t%s", d.Conditions)
	}
	if d.ScheduledAt != nil {
		p("  Drain scheduled:\t%s", at(*d.ScheduledAt))
	}
	if d.Attempts > 0 || d.RetryRequested {
		p("  Failed attempts:\t%d%s", d.Attempts, map[bool]string{true: " (retry requested: draino/drain-retry=true)"}[d.RetryRequested])
	}
	if d.BlockedSince != nil {
		p("  Blocked by a PDB since:\t%s", at(*d.BlockedSince))
	}
	if d.Budget != nil {
		if d.Budget.Allowed {
			p("  Budget:\tthe budgets let the %s run now", d.Budget.Action)
		} else {
			p("  Budget:\t%s blocks the %s: %s", d.Budget.Budget, d.Budget.Action, d.Budget.Reason)
		}
	}
	if d.Message != "" {
		p("  DrainScheduled:\t%s", d.Message)
	}
	tw.Flush()
	if len(d.Blockers) > 0 {
		fmt.Fprintln(w, "  Pods a PodDisruptionBudget keeps:")
		tw = tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
		fmt.Fprintln(tw, "    POD\tPDB\tALLOWED\tHEALTHY/DESIRED\tWHY")
		for _, b := range d.Blockers {
			fmt.Fprintf(tw, "    %s\t%s\t%d\t%d/%d\t%s\n", b.Pod, b.PodDisruptionBudget, b.DisruptionsAllowed, b.CurrentHealthy, b.DesiredHealthy, b.Why)
		}
		tw.Flush()
		move := "off (--drain-move-before-evict; a Namespace's or Deployment's nodeshepherd.io/move-before-evict may turn it on)"
		if d.MoveBeforeEvict {
			move = "on: a Deployment's pod a budget keeps is replaced first (unless its Namespace or Deployment says false)"
		}
		fmt.Fprintf(w, "  Move before evict: %s\n", move)
	}
	for _, m := range d.Moves {
		fmt.Fprintf(w, "  Moving: Deployment %s: replicas %d -> %d since %s, back to %d once the new pods are available\n",
			m.Deployment, m.Replicas, m.Replicas+m.Surge, at(m.Since), m.Replicas)
	}
	o := e.OutOfService
	fmt.Fprintf(w, "\nOut of service:  %s: %s\n", o.State, o.Summary)
	e.Remediation.writeTable(w, at)
	for _, warning := range e.Warnings {
		fmt.Fprintf(w, "\nWarning: %s\n", warning)
	}
	return nil
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func optional(prefix, s string) string {
	if s == "" {
		return ""
	}
	return prefix + s
}

// relative prints t in UTC with its distance from now.
func relative(t, now time.Time) string {
	d := now.Sub(t).Truncate(time.Second)
	switch {
	case d > 0:
		return fmt.Sprintf("%s (%s ago)", stamp(t), d)
	case d < 0:
		return fmt.Sprintf("%s (in %s)", stamp(t), -d)
	}
	return stamp(t) + " (now)"
}
