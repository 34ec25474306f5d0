// Package remediation is the repair ladder of issue 33: a policy per pool of
// nodes says when a node is unhealthy, which steps repair it (taint, drain,
// reboot, replace, fence), how long each may take, and the brakes that hold
// repairs back. This package holds the policy's types, their validation, the
// CustomResourceDefinition, the Node's repair record and the decision for
// one node; it writes nothing. pkg/controller/remediation runs it
// (`nodeshepherd run --controllers=*,remediation,outofservice`).
package remediation

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/nodeshepherd/nodeshepherd/pkg/controllerutil"
)

// Action is what one step of the ladder does.
type Action string

// Actions, in the order a ladder usually climbs them.
const (
	// ActionTaint puts the policy's taint on the node (NoSchedule or
	// NoExecute, a key of the policy's choosing).
	ActionTaint Action = "Taint"
	// ActionDrain cordons and drains the node through the drain
	// controller's own drain (its budgets, windows and escalation).
	ActionDrain Action = "Drain"
	// ActionReboot and ActionReplace ask the cloud provider
	// (cloudprovider.Repairer); without one they are skipped, visibly.
	ActionReboot  Action = "Reboot"
	ActionReplace Action = "Replace"
	// ActionFence powers the machine off through the cloud provider
	// (cloudprovider.Fencer) and, once the provider answers that it is off
	// for the boot the request was for, confirms the death to the
	// outofservice controller, which puts the out-of-service taint on the
	// node (fence.go). A policy with one and no provider that can is
	// refused.
	ActionFence Action = "Fence"
)

// Actions are the known actions.
var Actions = []Action{ActionTaint, ActionDrain, ActionReboot, ActionReplace, ActionFence}

// PolicySpec is one pool's policy.
type PolicySpec struct {
	// NodeSelector selects the pool's nodes; empty selects every node.
	NodeSelector *metav1.LabelSelector `json:"nodeSelector,omitempty"`
	// Unhealthy lists the conditions that make a node unhealthy (any of
	// them).
	Unhealthy []UnhealthyCondition `json:"unhealthy"`
	// HealthyHold is how long a node must be healthy before it counts as
	// healthy again (hysteresis): a step is done, a repair ends.
	HealthyHold metav1.Duration `json:"healthyHold"`
	// Steps are the ladder, climbed in order.
	Steps []Step `json:"steps"`
	// Brakes hold new repairs back.
	Brakes Brakes `json:"brakes,omitempty"`
	// Paused stops new repairs and new steps (the annotation
	// nodeshepherd.io/remediation-paused=true on the policy does too).
	Paused bool `json:"paused,omitempty"`
	// RecurrenceWindow: a node unhealthy again this soon after its last
	// repair under the policy ended starts at the step after the one that
	// ended it, not at step 1, so a fault that comes back is not tainted
	// and rebooted in a loop (as AKS escalates a repeated repair).
	// Default 1h; 0 turns it off.
	RecurrenceWindow *metav1.Duration `json:"recurrenceWindow,omitempty"`
}

// DefaultRecurrenceWindow is RecurrenceWindow when unset.
const DefaultRecurrenceWindow = time.Hour

// Recurrence is the policy's recurrence window.
func (s *PolicySpec) Recurrence() time.Duration {
	if s.RecurrenceWindow == nil {
		return DefaultRecurrenceWindow
	}
	return s.RecurrenceWindow.Duration
}

// UnhealthyCondition is a node condition with a status held for a while.
type UnhealthyCondition struct {
	Type   v1.NodeConditionType `json:"type"`
	Status v1.ConditionStatus   `json:"status"`
	// For is how long the condition must have had the status.
	For metav1.Duration `json:"for"`
	// StaleAfter, when set, makes a condition whose lastHeartbeatTime is
	// older than this stale from then on: it starts no repair and ends none.
	// A node-problem-detector hung by the very deadlock it reports leaves a
	// stale True: the node stays in repair (Judge, Health.Stale). Ready's
	// heartbeat may be 5 minutes old on a healthy node (the kubelet's
	// nodeStatusReportFrequency), so a shorter StaleAfter on Ready is refused.
	StaleAfter *metav1.Duration `json:"staleAfter,omitempty"`
}

// ReadyReportPeriod is the kubelet's default nodeStatusReportFrequency: how
// old Ready's heartbeat may be on a healthy node.
const ReadyReportPeriod = 5 * time.Minute

// Step is one rung of the ladder.
type Step struct {
	Action Action `json:"action"`
	// Timeout is how long the step has to make the node healthy (for the
	// hold time) before the next step starts.
	Timeout metav1.Duration `json:"timeout"`
	// Taint is the taint of a Taint step.
	Taint *TaintSpec `json:"taint,omitempty"`
}

// TaintSpec is the taint a Taint step puts on the node (its timeAdded is
// when the step starts).
type TaintSpec struct {
	Key    string         `json:"key"`
	Value  string         `json:"value,omitempty"`
	Effect v1.TaintEffect `json:"effect"`
}

// Brakes hold new repairs back; a repair under way climbs on.
type Brakes struct {
	// MaxInRepair is how many of the pool's nodes may be in repair at once:
	// a number or a percentage of the pool's nodes (rounded down, at least
	// 1). Unset: no limit.
	MaxInRepair *intstr.IntOrString `json:"maxInRepair,omitempty"`
	// MaxInRepairPerZone is the same per zone (of the pool's nodes there).
	MaxInRepairPerZone *intstr.IntOrString `json:"maxInRepairPerZone,omitempty"`
	// MaxUnhealthy stops new repairs while more of the pool's nodes than
	// this are unhealthy (a number or a percentage): a storm is not repaired
	// node by node. Unset: no limit.
	MaxUnhealthy *intstr.IntOrString `json:"maxUnhealthy,omitempty"`
	// Cooldown keeps new repairs stopped this long after MaxUnhealthy last
	// held.
	Cooldown metav1.Duration `json:"cooldown,omitempty"`
}

// MinStepTimeout is the shortest step timeout: a step must outlast the
// hold time and a second of timestamp precision to be judged at all.
const MinStepTimeout = 10 * time.Second

// Validate reports every problem of the spec, each with its field path.
func (s *PolicySpec) Validate(path *field.Path) field.ErrorList {
	var errs field.ErrorList
	if s.NodeSelector != nil {
		if _, err := metav1.LabelSelectorAsSelector(s.NodeSelector); err != nil {
			errs = append(errs, field.Invalid(path.Child("nodeSelector"), s.NodeSelector, err.Error()))
		}
	}
	if len(s.Unhealthy) == 0 {
		errs = append(errs, field.Required(path.Child("unhealthy"), "at least one condition makes a node unhealthy"))
	}
	if s.RecurrenceWindow != nil && s.RecurrenceWindow.Duration < 0 {
		errs = append(errs, field.Invalid(path.Child("recurrenceWindow"), s.RecurrenceWindow.Duration.String(), "must not be negative (0 turns it off)"))
	}
	for i, c := range s.Unhealthy {
		p := path.Child("unhealthy").Index(i)
		if c.Type == "" {
			errs = append(errs, field.Required(p.Child("type"), "a node condition type"))
		}
		switch c.Status {
		case v1.ConditionTrue, v1.ConditionFalse, v1.ConditionUnknown:
		default:
			errs = append(errs, field.NotSupported(p.Child("status"), c.Status, []string{"True", "False", "Unknown"}))
		}
		if c.For.Duration < 0 {
			errs = append(errs, field.Invalid(p.Child("for"), c.For.Duration.String(), "must not be negative"))
		}
		if c.StaleAfter != nil && c.StaleAfter.Duration <= 0 {
			errs = append(errs, field.Invalid(p.Child("staleAfter"), c.StaleAfter.Duration.String(), "must be positive"))
		} else if c.StaleAfter != nil && c.Type == v1.NodeReady && c.StaleAfter.Duration < ReadyReportPeriod {
			errs = append(errs, field.Invalid(p.Child("staleAfter"), c.StaleAfter.Duration.String(),
				"on Ready must be at least 5m: the kubelet posts an unchanged status only every 5 minutes (nodeStatusReportFrequency), so a healthy node's Ready heartbeat is up to 5m old"))
		}
	}
	if s.HealthyHold.Duration < 0 {
		errs = append(errs, field.Invalid(path.Child("healthyHold"), s.HealthyHold.Duration.String(), "must not be negative"))
	}
	if len(s.Steps) == 0 {
		errs = append(errs, field.Required(path.Child("steps"), "at least one step"))
	}
	for i, st := range s.Steps {
		p := path.Child("steps").Index(i)
		known := false
		for _, a := range Actions {
			known = known || st.Action == a
		}
		if !known {
			names := make([]string, len(Actions))
			for j, a := range Actions {
				names[j] = string(a)
			}
			errs = append(errs, field.NotSupported(p.Child("action"), st.Action, names))
		}
		if min := max(MinStepTimeout, s.HealthyHold.Duration+time.Second); st.Timeout.Duration < min {
			errs = append(errs, field.Invalid(p.Child("timeout"), st.Timeout.Duration.String(),
				fmt.Sprintf("must be at least %v (the healthy hold time %v and a second, or %v)", min, s.HealthyHold.Duration, MinStepTimeout)))
		}
		switch {
		case st.Action == ActionTaint && st.Taint == nil:
			errs = append(errs, field.Required(p.Child("taint"), "the taint a Taint step puts on the node"))
		case st.Action == ActionTaint && st.Taint.Effect != v1.TaintEffectNoSchedule && st.Taint.Effect != v1.TaintEffectNoExecute:
			errs = append(errs, field.NotSupported(p.Child("taint", "effect"), st.Taint.Effect, []string{"NoSchedule", "NoExecute"}))
		case st.Action == ActionTaint && st.Taint.Key == "":
			errs = append(errs, field.Required(p.Child("taint", "key"), "a taint key"))
		case st.Action == ActionTaint && ReservedTaintKey(st.Taint.Key):
			errs = append(errs, field.Invalid(p.Child("taint", "key"), st.Taint.Key, "a key under node.kubernetes.io/ or node.cloudprovider.kubernetes.io/ is reserved for Kubernetes "+
				"(the out-of-service, not-ready, unreachable and shutdown taints): use your own, such as example.com/unhealthy"))
		case st.Action != ActionTaint && st.Taint != nil:
			errs = append(errs, field.Forbidden(p.Child("taint"), "only a Taint step has a taint"))
		}
	}
	b := path.Child("brakes")
	for name, v := range map[string]*intstr.IntOrString{"maxInRepair": s.Brakes.MaxInRepair, "maxInRepairPerZone": s.Brakes.MaxInRepairPerZone, "maxUnhealthy": s.Brakes.MaxUnhealthy} {
		if v == nil {
			continue
		}
		if _, err := scaled(v, 100); err != nil {
			errs = append(errs, field.Invalid(b.Child(name), v.String(), err.Error()))
		}
	}
	if s.Brakes.Cooldown.Duration < 0 {
		errs = append(errs, field.Invalid(b.Child("cooldown"), s.Brakes.Cooldown.Duration.String(), "must not be negative"))
	}
	return errs
}

// scaled is v of total: a count, or a percentage rounded down
// (controllerutil.ParseLimit, as the drain's budgets are written).
func scaled(v *intstr.IntOrString, total int) (int, error) {
	return controllerutil.ParseLimit(v.String(), total)
}

// Limit is a brake's count for a pool of total nodes: a number as it is, a
// percentage rounded up, as Karpenter's disruption budgets and Service
// Fabric's health policy do, so that "20%" of a pool under 5 nodes lets one
// node count (rounded down it would be 0 and hold every repair of a small
// GPU pool). An invalid value (refused by Validate) counts 0.
func Limit(v *intstr.IntOrString, total int) int {
	s := v.String()
	if pct, ok := strings.CutSuffix(s, "%"); ok {
		f, err := strconv.ParseFloat(pct, 64)
		if err != nil || !(f >= 0 && f <= 100) {
			return 0
		}
		return int(math.Ceil(f * float64(total) / 100))
	}
	n, err := scaled(v, total)
	if err != nil {
		return 0
	}
	return n
}

// ReservedTaintKey says whether a taint key belongs to Kubernetes: a Taint
// step putting node.kubernetes.io/out-of-service on a node would force-delete
// its pods and detach its volumes with no confirmation of death.
func ReservedTaintKey(key string) bool {
	return strings.HasPrefix(key, "node.kubernetes.io/") || strings.HasPrefix(key, "node.cloudprovider.kubernetes.io/")
}
