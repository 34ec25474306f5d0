// Package budget decides whether the drain controller may cordon a node or
// start draining it now: Draino's drain buffer, plus what Draino lacks —
// concurrent-drain and cordoned-node limits (overall or per group of nodes
// sharing a label value) and a circuit breaker for incidents. It is pure: the
// controller describes the cluster, budget answers with a reason.
package budget

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nodeshepherd/nodeshepherd/pkg/controllerutil"
)

// Limits are the budgets, as the flags give them.
type Limits struct {
	// MaxConcurrentDrains is the number of drains in flight at most (per
	// group with GroupByLabel); 0 means no limit.
	MaxConcurrentDrains int
	// MaxCordonedNodes is a count or a percentage of the selected nodes (of
	// the group with GroupByLabel) that may be cordoned by the controller at
	// once; "" means no limit.
	MaxCordonedNodes string
	// GroupByLabel applies the two limits above within each group of nodes
	// sharing this label's value (node pools, zones).
	GroupByLabel string
	// DrainBuffer is the least time between two drain starts.
	DrainBuffer time.Duration
	// MaxUnhealthyNodes trips the circuit breaker: no new cordon or drain while
	// more of the selected nodes than this are not Ready.
	MaxUnhealthyNodes string
}

// Validate checks the limits, naming the flag.
func (l Limits) Validate() error {
	var errs []error
	if l.MaxConcurrentDrains < 0 {
		errs = append(errs, fmt.Errorf("--max-concurrent-drains must not be negative, got %d", l.MaxConcurrentDrains))
	}
	if l.MaxCordonedNodes != "" {
		if _, err := controllerutil.ParseLimit(l.MaxCordonedNodes, 100); err != nil {
			errs = append(errs, fmt.Errorf("--max-cordoned-nodes: %w", err))
		}
	}
	if _, err := controllerutil.ParseLimit(l.MaxUnhealthyNodes, 100); err != nil {
		errs = append(errs, fmt.Errorf("--max-unhealthy-nodes: %w", err))
	}
	if l.DrainBuffer < 0 {
		errs = append(errs, fmt.Errorf("--drain-buffer must not be negative, got %v", l.DrainBuffer))
	}
	return errors.Join(errs...)
}

// Node is what budgets need to know of one selected node.
type Node struct {
	Name     string
	Group    string // value of GroupByLabel
	Cordoned bool   // cordoned by the controller (a human's cordon does not count)
	Draining bool
	Ready    bool
}

// Cluster is the selected nodes and the drain history.
type Cluster struct {
	Nodes          []Node
	LastDrainStart time.Time
	// ZoneDisruption is set while the node lifecycle controller reports a
	// zone in PartialDisruption or FullDisruption.
	ZoneDisruption string
}

// Verdict is an answer; Reason says which budget holds a node back.
type Verdict struct {
	Allowed bool
	// Budget names the limit that said no (for the waiting-nodes metric).
	Budget string
	Reason string
	// RetryAt, when set, is when the answer may change by itself.
	RetryAt time.Time
}

// Budget names.
const (
	CircuitBreaker   = "circuit-breaker"
	MaxCordoned      = "max-cordoned-nodes"
	MaxConcurrent    = "max-concurrent-drains"
	DrainBufferLimit = "drain-buffer"
)

func (l Limits) breaker(c Cluster) *Verdict {
	if c.ZoneDisruption != "" {
		return &Verdict{Budget: CircuitBreaker, Reason: "circuit breaker: the node lifecycle controller reports " + c.ZoneDisruption}
	}
	notReady := 0
	for _, n := range c.Nodes {
		if !n.Ready {
			notReady++
		}
	}
	limit, _ := controllerutil.ParseLimit(l.MaxUnhealthyNodes, len(c.Nodes))
	if notReady > limit {
		return &Verdict{Budget: CircuitBreaker, Reason: fmt.Sprintf("circuit breaker: %d of %d selected nodes are not Ready (more than --max-unhealthy-nodes=%s)",
			notReady, len(c.Nodes), l.MaxUnhealthyNodes)}
	}
	return nil
}

// Breaker says whether the circuit breaker is open.
func (l Limits) Breaker(c Cluster) bool { return l.breaker(c) != nil }

// scope returns the nodes a per-node limit counts: the node's group with
// GroupByLabel, else every selected node.
func (l Limits) scope(c Cluster, name string) (nodes []Node, label string) {
	if l.GroupByLabel == "" {
		return c.Nodes, "selected nodes"
	}
	group := ""
	for _, n := range c.Nodes {
		if n.Name == name {
			group = n.Group
		}
	}
	for _, n := range c.Nodes {
		if n.Group == group {
			nodes = append(nodes, n)
		}
	}
	return nodes, fmt.Sprintf("nodes with %s=%s", l.GroupByLabel, group)
}

// Cordon answers whether the node may be cordoned now.
func (l Limits) Cordon(c Cluster, name string) Verdict {
	if v := l.breaker(c); v != nil {
		return *v
	}
	if l.MaxCordonedNodes != "" {
		nodes, label := l.scope(c, name)
		limit, _ := controllerutil.ParseLimit(l.MaxCordonedNodes, len(nodes))
		if strings.HasSuffix(l.MaxCordonedNodes, "%") && limit == 0 && len(nodes) > 0 {
			limit = 1 // a percentage of a small group still lets one node be handled
		}
		cordoned := 0
		for _, n := range nodes {
			if n.Cordoned && n.Name != name {
				cordoned++
			}
		}
		if cordoned+1 > limit {
			return Verdict{Budget: MaxCordoned, Reason: fmt.Sprintf("%d of %d %s are already cordoned (--max-cordoned-nodes=%s allows %d)",
				cordoned, len(nodes), label, l.MaxCordonedNodes, limit)}
		}
	}
	return Verdict{Allowed: true}
}

// StartDrain answers whether draining the (cordoned) node may start now.
func (l Limits) StartDrain(c Cluster, name string, now time.Time) Verdict {
	if v := l.breaker(c); v != nil {
		return *v
	}
	if l.MaxConcurrentDrains > 0 {
		nodes, label := l.scope(c, name)
		draining := 0
		for _, n := range nodes {
			if n.Draining && n.Name != name {
				draining++
			}
		}
		if draining >= l.MaxConcurrentDrains {
			return Verdict{Budget: MaxConcurrent, Reason: fmt.Sprintf("%d drains of %s in flight (--max-concurrent-drains=%d)",
				draining, label, l.MaxConcurrentDrains)}
		}
	}
	if next := c.LastDrainStart.Add(l.DrainBuffer); !c.LastDrainStart.IsZero() && now.Before(next) {
		return Verdict{Budget: DrainBufferLimit, RetryAt: next,
			// No age in the wording: it would change on every re-check.
			Reason: fmt.Sprintf("the last drain started at %s; the next may start at %s (--drain-buffer=%s)",
				c.LastDrainStart.UTC().Format(time.RFC3339Nano), next.UTC().Format(time.RFC3339Nano), l.DrainBuffer)}
	}
	return Verdict{Allowed: true}
}
