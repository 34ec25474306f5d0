package fakenode

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// Action is what a fault does to its nodes.
type Action string

// Fault actions. Each with a duration is undone by its opposite when the
// duration ends.
const (
	// Partition cuts every API request of the node: no lease, no status, no pod updates.
	Partition Action = "partition"
	// Heal ends a partition.
	Heal Action = "heal"
	// KubeletStop stops the node's kubelet; KubeletStart restarts it, which
	// re-posts every pod status as a freshly started kubelet does.
	KubeletStop  Action = "kubelet-stop"
	KubeletStart Action = "kubelet-start"
	// SetCondition sets a node condition, e.g. KernelDeadlock=True.
	SetCondition Action = "condition"
	// ClearCondition sets a condition back to its healthy status.
	ClearCondition Action = "clear-condition"
	// MachineDelete removes the node's machine from the fake cloud: its
	// kubelet stops for good and the fake cloud provider reports it gone.
	MachineDelete Action = "machine-delete"
	// MachineShutdown powers the machine off: the kubelet stops and the fake
	// cloud provider reports it shut down.
	MachineShutdown Action = "machine-shutdown"
	// MachineStart powers the machine on (or creates it again): the kubelet
	// starts with a new boot ID (status.nodeInfo.bootID) and registers its
	// Node again if it was deleted.
	MachineStart Action = "machine-start"
)

// Actions lists the valid actions, for help texts and errors.
var Actions = []Action{Partition, Heal, KubeletStop, KubeletStart, SetCondition, ClearCondition, MachineDelete, MachineShutdown, MachineStart}

func (a Action) opposite() Action {
	switch a {
	case Partition:
		return Heal
	case KubeletStop:
		return KubeletStart
	case SetCondition:
		return ClearCondition
	case MachineShutdown:
		return MachineStart
	}
	return ""
}

// Target selects nodes by name, zone or label selector; the sets intersect
// when several are given. All selects every node.
type Target struct {
	Nodes    []string `json:"nodes,omitempty"`
	Zone     string   `json:"zone,omitempty"`
	Selector string   `json:"selector,omitempty"`
	All      bool     `json:"all,omitempty"`
}

func (t Target) String() string {
	var parts []string
	if t.All {
		parts = append(parts, "all nodes")
	}
	if len(t.Nodes) > 0 {
		parts = append(parts, "nodes "+strings.Join(t.Nodes, ","))
	}
	if t.Zone != "" {
		parts = append(parts, "zone "+t.Zone)
	}
	if t.Selector != "" {
		parts = append(parts, "selector "+t.Selector)
	}
	return strings.Join(parts, " and ")
}

// Condition is a node condition to set or clear.
type Condition struct {
	Type    v1.NodeConditionType `json:"type"`
	Status  v1.ConditionStatus   `json:"status,omitempty"`
	Reason  string               `json:"reason,omitempty"`
	Message string               `json:"message,omitempty"`
	// SurvivesReboot keeps a set condition through a reboot of the machine
	// (a hardware fault, a bad disk). Without it a fresh boot reports the
	// condition healthy, as node-problem-detector does after a kernel
	// deadlock. A replaced machine never has it.
	SurvivesReboot bool `json:"survivesReboot,omitempty"`
}

// Fault is one injected failure.
type Fault struct {
	Action    Action     `json:"action"`
	Target    Target     `json:"target"`
	Condition *Condition `json:"condition,omitempty"`
	// Duration, when positive, undoes the fault after that long.
	Duration time.Duration `json:"duration,omitempty"`
}

func (f Fault) String() string {
	s := string(f.Action)
	if f.Condition != nil {
		s += " " + string(f.Condition.Type)
		if f.Condition.Status != "" {
			s += "=" + string(f.Condition.Status)
		}
		if f.Condition.SurvivesReboot {
			s += " (survives reboots)"
		}
	}
	s += " on " + f.Target.String()
	if f.Duration > 0 {
		s += " for " + f.Duration.String()
	}
	return s
}

// ParseCondition parses "Type=Status" (Status True, False or Unknown) or,
// for clearing, a bare "Type".
func ParseCondition(s string, needStatus bool) (*Condition, error) {
	typ, status, hasStatus := strings.Cut(s, "=")
	if typ == "" || strings.ContainsAny(typ, " ,:") {
		return nil, fmt.Errorf("condition %q: expected TYPE=STATUS, e.g. KernelDeadlock=True", s)
	}
	c := &Condition{Type: v1.NodeConditionType(typ)}
	switch {
	case hasStatus:
		switch v1.ConditionStatus(status) {
		case v1.ConditionTrue, v1.ConditionFalse, v1.ConditionUnknown:
			c.Status = v1.ConditionStatus(status)
		default:
			return nil, fmt.Errorf("condition %q: status %q must be True, False or Unknown", s, status)
		}
	case needStatus:
		return nil, fmt.Errorf("condition %q: expected TYPE=STATUS, e.g. KernelDeadlock=True", s)
	}
	return c, nil
}

// Validate checks a fault's shape; resolving its target needs the nodes.
func (f Fault) Validate() error {
	var errs []error
	if !slices.Contains(Actions, f.Action) {
		errs = append(errs, fmt.Errorf("unknown fault action %q; valid actions: %v", f.Action, Actions))
	}
	if !f.Target.All && len(f.Target.Nodes) == 0 && f.Target.Zone == "" && f.Target.Selector == "" {
		errs = append(errs, errors.New("no target: give nodes, a zone, a label selector, or all"))
	}
	if f.Target.Selector != "" {
		if _, err := labels.Parse(f.Target.Selector); err != nil {
			errs = append(errs, fmt.Errorf("invalid label selector %q: %v", f.Target.Selector, err))
		}
	}
	switch f.Action {
	case SetCondition, ClearCondition:
		if f.Condition == nil || f.Condition.Type == "" {
			errs = append(errs, fmt.Errorf("%s needs a condition, e.g. KernelDeadlock=True", f.Action))
		} else if f.Action == SetCondition && f.Condition.Status == "" {
			errs = append(errs, fmt.Errorf("%s needs a status, e.g. %s=True", f.Action, f.Condition.Type))
		}
		if f.Action == ClearCondition && f.Condition != nil && f.Condition.SurvivesReboot {
			errs = append(errs, fmt.Errorf("%s takes no survivesReboot: it says how long a condition being set lasts", f.Action))
		}
	default:
		if f.Condition != nil {
			errs = append(errs, fmt.Errorf("%s takes no condition", f.Action))
		}
	}
	if f.Duration < 0 {
		errs = append(errs, fmt.Errorf("duration must not be negative, got %v", f.Duration))
	}
	if f.Duration > 0 && f.Action.opposite() == "" {
		errs = append(errs, fmt.Errorf("%s takes no duration: it is itself the end of a fault", f.Action))
	}
	return errors.Join(errs...)
}

// healthyStatus is the status a cleared condition returns to.
func healthyStatus(t v1.NodeConditionType) v1.ConditionStatus {
	if t == v1.NodeReady {
		return v1.ConditionTrue
	}
	return v1.ConditionFalse
}
