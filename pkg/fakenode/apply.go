package fakenode

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/klog/v2"

	fakecloud "github.com/nodeshepherd/nodeshepherd/pkg/cloudprovider/fake"
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
	switch f.Action {
	case MachineDelete, MachineShutdown, MachineStart:
		// The cloud's answer changes even though the node's own traffic stops.
		if err := m.publishMachines(ctx); err != nil {
			return names, err
		}
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
			if undo.Action == MachineStart {
				if err := m.publishMachines(context.Background()); err != nil {
					logger.Error(err, "Publishing machine states")
				}
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
	reconnectIn := time.Duration(-1)
	switch a {
	case Partition:
		n.partitioned = true
		n.reconnecting = false
	case Heal:
		// Reached again when the request in flight gets through
		// (reconnectAt, then reconnect at that Lease tick), not now.
		n.reconnecting = !m.cfg.ReachedAtHeal && (n.reconnecting || n.partitioned)
		n.partitioned = false
		if n.reconnecting {
			reconnectIn = reconnectAt(n.lastAttempt, now.Time, m.cfg.LeaseRenewInterval).Sub(now.Time)
		}
	case KubeletStop:
		n.kubeletStopped = true
	case KubeletStart:
		// A fresh kubelet posts its whole status and every pod's status.
		restarted = n.kubeletStopped
		n.kubeletStopped = false
		n.fullStatus = n.fullStatus || restarted
	case SetCondition:
		n.dirty = n.setFault(*c, false, now) || n.dirty
	case ClearCondition:
		n.dirty = n.setFault(*c, true, now) || n.dirty
	case MachineDelete:
		n.machine = fakecloud.Deleted
	case MachineShutdown:
		n.machine = fakecloud.Shutdown
	case MachineStart:
		// A machine that comes back boots a fresh kubelet.
		restarted = n.machine != "" && n.machine != fakecloud.Running
		if n.machine == fakecloud.Deleted {
			n.lasting = nil // a machine created again is a new machine: no fault of the old one lasts
		}
		n.machine = fakecloud.Running
		if restarted {
			n.newBoot()
			n.dirty = n.rebooted(now) || n.dirty
			// The fresh boot starts a fresh kubelet (systemd does): a hung
			// or stopped kubelet does not survive a reboot or replacement.
			n.kubeletStopped = false
		}
		n.fullStatus = n.fullStatus || restarted
	}
	if restarted {
		// A fresh kubelet opens new connections: nothing of the old
		// ones' hanging requests is left to wait for.
		n.reconnecting = false
	}
	recovered := !wasHealthy && n.healthy()
	if recovered {
		n.reached()
	}
	n.mu.Unlock()
	if m.podQ == nil {
		return // not running yet: the first sync covers everything
	}
	if reconnectIn >= 0 {
		// Sooner than the node's next tick (the queue keeps the sooner);
		// its cadence goes on from there, re-phased as the kubelet's is.
		m.leaseQ.AddAfter(n.name, reconnectIn)
	}
	if recovered {
		m.leaseQ.Add(n.name)
		m.resyncPods(n, restarted)
	}
	m.statusQ.Add(n.name)
}

// reconnect ends a healed partition when the kubelet's request in flight
// gets through (the Lease tick reconnectAt set): from then on it renews and
// watches its pods; its node status and the pods' statuses that were
// changed while it was away go out at its next status tick, as the real
// kubelet's do (its loops keep their own phase). It says whether the node
// came back.
func (m *Manager) reconnect(n *node) bool {
	n.mu.Lock()
	if !n.reconnecting {
		n.mu.Unlock()
		return false
	}
	n.reconnecting = false
	back := n.healthy()
	if back {
		n.reached()
	}
	n.mu.Unlock()
	if back && m.podQ != nil {
		m.resyncPods(n, false)
	}
	return back
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
	Reconnecting   bool              `json:"reconnecting,omitempty"` // healed, not reached the API server yet
	KubeletStopped bool              `json:"kubeletStopped,omitempty"`
	Machine        string            `json:"machine,omitempty"`    // shutdown or deleted
	Conditions     map[string]string `json:"conditions,omitempty"` // those not at their healthy status
}

// States returns every node's fault state.
func (m *Manager) States() []NodeState {
	out := make([]NodeState, 0, len(m.names))
	for _, name := range m.names {
		n := m.nodes[name]
		n.mu.Lock()
		s := NodeState{Name: name, Zone: n.zone, Partitioned: n.partitioned, Reconnecting: n.reconnecting, KubeletStopped: n.kubeletStopped}
		if n.machine != fakecloud.Running {
			s.Machine = n.machine
		}
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

// SetCloudError makes the fake cloud provider answer every question about
// the named machines with an error (on), or their state again (off): a
// provider blind to those machines only, the others still seen.
func (m *Manager) SetCloudError(ctx context.Context, names []string, on bool) error {
	for _, name := range names {
		n := m.nodes[name]
		if n == nil {
			return fmt.Errorf("no fake node %q in this process", name)
		}
		n.mu.Lock()
		n.cloudError = on
		n.mu.Unlock()
	}
	return m.publishMachines(ctx)
}

// publishMachines writes the machines that are not running into the fake
// cloud's ConfigMap (one key per node; a missing key means running), where
// the fake cloud provider reads them. Only this process's keys are touched.
func (m *Manager) publishMachines(ctx context.Context) error {
	states := map[string]string{}
	for _, name := range m.names {
		n := m.nodes[name]
		n.mu.Lock()
		switch {
		case n.cloudError:
			states[name] = fakecloud.Error
		case n.machine != "" && n.machine != fakecloud.Running:
			states[name] = n.machine
		default:
			states[name] = fakecloud.Running
		}
		n.mu.Unlock()
	}
	return fakecloud.Publish(ctx, m.cfg.Client, states)
}
