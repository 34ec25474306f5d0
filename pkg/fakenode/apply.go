package fakenode

import (
	"context"
	"fmt"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/klog/v2"
)

// FaultError is a fault that cannot be applied as given (bad input).
type FaultError struct{ Err error }

func (e *FaultError) Error() string { return e.Err.Error() }
func (e *FaultError) Unwrap() error { return e.Err }

// Apply injects a fault and returns the names of the nodes it reached. With
// a duration, the opposite action runs when it ends.
func (m *Manager) Apply(ctx context.Context, f Fault) ([]string, error) {
	if err := f.Validate(); err != nil {
		return nil, &FaultError{Err: err}
	}
	names, err := m.resolve(f.Target)
	if err != nil {
		return nil, &FaultError{Err: err}
	}
	logger := klog.FromContext(ctx)
	for _, name := range names {
		m.applyTo(m.nodes[name], f.Action, f.Condition)
	}
	logger.Info("Fault injected", "fault", f.String(), "nodes", len(names))
	if f.Duration > 0 {
		undo := Fault{Action: f.Action.opposite(), Target: Target{Nodes: names}, Condition: f.Condition}
		if undo.Action == ClearCondition {
			undo.Condition = &Condition{Type: f.Condition.Type}
		}
		m.cfg.Clock.AfterFunc(f.Duration, func() {
			for _, name := range names {
				m.applyTo(m.nodes[name], undo.Action, undo.Condition)
			}
			logger.Info("Fault ended", "fault", f.String(), "undo", string(undo.Action), "nodes", len(names))
		})
	}
	return names, nil
}

func (m *Manager) applyTo(n *node, a Action, c *Condition) {
	now := metav1.NewTime(m.cfg.Clock.Now())
	n.mu.Lock()
	wasHealthy := n.healthy()
	restarted := false
	switch a {
	case Partition:
		n.partitioned = true
	case Heal:
		n.partitioned = false
	case KubeletStop:
		n.kubeletStopped = true
	case KubeletStart:
		// A fresh kubelet posts its whole status and every pod's status.
		restarted = n.kubeletStopped
		n.kubeletStopped = false
		n.fullStatus = n.fullStatus || restarted
	case SetCondition:
		n.dirty = n.setCondition(*c, now) || n.dirty
	case ClearCondition:
		n.dirty = n.setCondition(Condition{Type: c.Type, Status: healthyStatus(c.Type), Reason: c.Reason, Message: c.Message}, now) || n.dirty
	}
	recovered := !wasHealthy && n.healthy()
	n.mu.Unlock()
	if m.podQ == nil {
		return // not running yet: the first sync covers everything
	}
	if recovered {
		m.leaseQ.Add(n.name)
		m.resyncPods(n, restarted)
	}
	m.statusQ.Add(n.name)
}

// resolve turns a target into node names; unknown names or zones and empty
// matches are errors, so a typo never silently does nothing.
func (m *Manager) resolve(t Target) ([]string, error) {
	var sel labels.Selector
	if t.Selector != "" {
		var err error
		if sel, err = labels.Parse(t.Selector); err != nil {
			return nil, fmt.Errorf("invalid label selector %q: %v", t.Selector, err)
		}
	}
	var unknown []string
	for _, name := range t.Nodes {
		if m.nodes[name] == nil {
			unknown = append(unknown, name)
		}
	}
	if len(unknown) > 0 {
		return nil, fmt.Errorf("unknown node(s) %s; this process simulates %s … %s", strings.Join(unknown, ", "), m.names[0], m.names[len(m.names)-1])
	}
	if t.Zone != "" && !slices.ContainsFunc(m.cfg.Zones, func(z Zone) bool { return z.Name == t.Zone }) {
		zones := make([]string, 0, len(m.cfg.Zones))
		for _, z := range m.cfg.Zones {
			zones = append(zones, z.Name)
		}
		return nil, fmt.Errorf("unknown zone %q; zones: %s", t.Zone, strings.Join(zones, ", "))
	}
	var out []string
	for _, name := range m.names {
		n := m.nodes[name]
		if len(t.Nodes) > 0 && !slices.Contains(t.Nodes, name) {
			continue
		}
		if t.Zone != "" && n.zone != t.Zone {
			continue
		}
		if sel != nil && !sel.Matches(labels.Set(n.labels)) {
			continue
		}
		out = append(out, name)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no node matches %s", t)
	}
	return out, nil
}

// NodeState is a node's fault state, as `fakenodes status` shows it.
type NodeState struct {
	Name           string            `json:"name"`
	Zone           string            `json:"zone"`
	Partitioned    bool              `json:"partitioned,omitempty"`
	KubeletStopped bool              `json:"kubeletStopped,omitempty"`
	Conditions     map[string]string `json:"conditions,omitempty"` // those not at their healthy status
}

// States returns every node's fault state.
func (m *Manager) States() []NodeState {
	out := make([]NodeState, 0, len(m.names))
	for _, name := range m.names {
		n := m.nodes[name]
		n.mu.Lock()
		s := NodeState{Name: name, Zone: n.zone, Partitioned: n.partitioned, KubeletStopped: n.kubeletStopped}
		for _, c := range n.conditions {
			if c.Status != healthyStatus(c.Type) {
				if s.Conditions == nil {
					s.Conditions = map[string]string{}
				}
				s.Conditions[string(c.Type)] = string(c.Status)
			}
		}
		n.mu.Unlock()
		out = append(out, s)
	}
	return out
}
