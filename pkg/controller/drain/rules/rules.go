// Package rules decides which nodes the drain controller acts on: node
// conditions in Draino's syntax (any of them), with minimum durations, and a
// node selection by label selector and an optional CEL expression. It is pure:
// the controller feeds it nodes and the time.
package rules

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/cel-go/cel"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/nodeshepherd/nodeshepherd/pkg/controller/drain/window"
	"github.com/nodeshepherd/nodeshepherd/pkg/kube"
)

// Condition is one rule: a node condition type and status held for at least
// MinDuration (measured from the condition's lastTransitionTime).
type Condition struct {
	Type        v1.NodeConditionType `json:"type"`
	Status      v1.ConditionStatus   `json:"status"`
	MinDuration time.Duration        `json:"minDuration,omitempty"`
	// ForceAfter, when set, lets a drain of a node this rule matched delete
	// the pods whose every eviction a PodDisruptionBudget has refused for
	// this long, without a break (nodeshepherd's extension; off by default;
	// at least MinForceAfter).
	ForceAfter time.Duration `json:"forceAfter,omitempty"`
}

// MinForceAfter is the least force-after accepted: below it, refusals that
// last as long as a pod's start (a rolling update, a rescheduled replica)
// would be forced, which is PodDisruptionBudgets turned off.
const MinForceAfter = time.Minute

// CheckForceAfter refuses a force-after below MinForceAfter; what names the
// setting in the error.
func CheckForceAfter(what string, d time.Duration) error {
	if d > 0 && d < MinForceAfter {
		return fmt.Errorf("%s %v is below the least force-after, %v: a shorter one would delete pods whose PodDisruptionBudget is short only while a replica starts, which turns budgets off; give at least %v, or leave force-after off",
			what, d, MinForceAfter, MinForceAfter)
	}
	return nil
}

func (c Condition) String() string {
	s := string(c.Type) + "=" + string(c.Status)
	if c.MinDuration > 0 || c.ForceAfter > 0 {
		s += "," + c.MinDuration.String()
	}
	if c.ForceAfter > 0 {
		s += ",force-after=" + c.ForceAfter.String()
	}
	return s
}

// ParseCondition reads Draino's syntax: "KernelDeadlock" (status True, no
// minimum), "KernelDeadlock=True,10m", "Ready=Unknown,30m". Unlike Draino,
// "Type=Status" without a duration is accepted (no minimum) and a bad
// duration is an error instead of a rule that never matches. nodeshepherd's
// options follow the duration: "KernelDeadlock=True,10m,force-after=2h".
func ParseCondition(s string) (Condition, error) {
	spec, dur, hasDur := strings.Cut(strings.TrimSpace(s), ",")
	dur, opts, hasOpts := strings.Cut(dur, ",")
	typ, status, hasStatus := strings.Cut(spec, "=")
	c := Condition{Type: v1.NodeConditionType(typ), Status: v1.ConditionTrue}
	if typ == "" || strings.ContainsAny(typ, " =") {
		return c, fmt.Errorf("condition %q: the condition type is missing; write TYPE, TYPE=STATUS or TYPE=STATUS,DURATION (e.g. KernelDeadlock=True,10m)", s)
	}
	if hasStatus {
		switch v1.ConditionStatus(status) {
		case v1.ConditionTrue, v1.ConditionFalse, v1.ConditionUnknown:
			c.Status = v1.ConditionStatus(status)
		default:
			return c, fmt.Errorf("condition %q: status %q must be True, False or Unknown", s, status)
		}
	}
	if hasDur {
		d, err := time.ParseDuration(dur)
		if err != nil || d < 0 {
			return c, fmt.Errorf("condition %q: %q is not a duration (e.g. 10m, 90s, 1h30m)", s, dur)
		}
		c.MinDuration = d
	}
	if hasOpts {
		for _, o := range strings.Split(opts, ",") {
			k, v, _ := strings.Cut(strings.TrimSpace(o), "=")
			if k != "force-after" {
				return c, fmt.Errorf("condition %q: unknown option %q; the only option is force-after=DURATION (e.g. KernelDeadlock=True,10m,force-after=2h)", s, o)
			}
			d, err := time.ParseDuration(v)
			if err != nil || d <= 0 {
				return c, fmt.Errorf("condition %q: force-after %q is not a positive duration (e.g. 2h)", s, v)
			}
			if err := CheckForceAfter("force-after", d); err != nil {
				return c, fmt.Errorf("condition %q: %w", s, err)
			}
			c.ForceAfter = d
		}
	}
	return c, nil
}

// CELCostLimit is the most work one evaluation of a node expression may do,
// in CEL cost units: the API server's per-call limit for admission policies.
const CELCostLimit = 1_000_000

// Selector chooses the nodes the rules apply to.
type Selector struct {
	labels  labels.Selector
	program cel.Program
	expr    string
}

// NewSelector parses a label selector ("" selects every node) and an
// optional CEL expression over the Node, seen as `node` (for example
// node.metadata.labels["pool"] == "batch" && !has(node.spec.unschedulable)).
func NewSelector(labelSelector, celExpr string) (*Selector, error) {
	sel, err := labels.Parse(labelSelector)
	if err != nil {
		return nil, fmt.Errorf("label selector %q: %w", labelSelector, err)
	}
	s := &Selector{labels: sel, expr: celExpr}
	if celExpr == "" {
		return s, nil
	}
	env, err := cel.NewEnv(cel.Variable("node", cel.DynType))
	if err != nil {
		return nil, err
	}
	ast, iss := env.Compile(celExpr)
	if iss.Err() != nil {
		return nil, fmt.Errorf("CEL expression %q: %w", celExpr, iss.Err())
	}
	if ast.OutputType() != cel.BoolType && ast.OutputType() != cel.DynType {
		return nil, fmt.Errorf("CEL expression %q gives %v; it must give a bool", celExpr, ast.OutputType())
	}
	// A runtime cost limit, as the API server puts on its own CEL: the
	// expression runs for every node on every evaluation, and a nested
	// comprehension must not stall the controller.
	if s.program, err = env.Program(ast, cel.CostLimit(CELCostLimit)); err != nil {
		return nil, fmt.Errorf("CEL expression %q: %w", celExpr, err)
	}
	return s, nil
}

// Matches says whether the node is selected. An expression that fails on a
// node (say, a missing label read without has()) does not select it.
func (s *Selector) Matches(n *v1.Node) (bool, error) {
	if !s.labels.Matches(labels.Set(n.Labels)) {
		return false, nil
	}
	if s.program == nil {
		return true, nil
	}
	obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(n)
	if err != nil {
		return false, err
	}
	out, _, err := s.program.Eval(map[string]any{"node": obj})
	if err != nil {
		return false, fmt.Errorf("CEL expression %q on node %s: %w", s.expr, n.Name, err)
	}
	b, ok := out.Value().(bool)
	if !ok {
		return false, fmt.Errorf("CEL expression %q on node %s gave %v, not a bool", s.expr, n.Name, out.Value())
	}
	return b, nil
}

// Rules are the conditions (any of them), the node selection and the
// maintenance windows drains may start in (nil: any time).
type Rules struct {
	Conditions []Condition
	Selector   *Selector
	Windows    *window.Schedule
}

// Evaluation is the verdict on one node at one time.
type Evaluation struct {
	// Matched are the conditions held long enough; the node must be acted on.
	Matched []Condition
	// Pending is the earliest time a condition that already holds will have
	// held long enough; zero if none. The controller re-checks then, so a
	// duration is never missed just because the Node object is quiet.
	Pending time.Time
}

// Evaluate checks a (selected) node's conditions at now. A minimum duration
// counts from the end of lastTransitionTime's second (the true transition
// lies in [t, t+1s)), so it is never shorter than configured.
func (r *Rules) Evaluate(n *v1.Node, now time.Time) Evaluation {
	var e Evaluation
	for _, rule := range r.Conditions {
		for _, c := range n.Status.Conditions {
			if c.Type != rule.Type || c.Status != rule.Status {
				continue
			}
			due := c.LastTransitionTime.Time
			if rule.MinDuration > 0 {
				due = kube.NotBefore(due).Add(rule.MinDuration) // never shorter than configured
			}
			if !now.Before(due) {
				e.Matched = append(e.Matched, rule)
			} else if e.Pending.IsZero() || due.Before(e.Pending) {
				e.Pending = due
			}
		}
	}
	return e
}

// ParseConditions parses a list, reporting every bad entry.
func ParseConditions(specs []string) ([]Condition, error) {
	var out []Condition
	var errs []error
	for _, s := range specs {
		c, err := ParseCondition(s)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out = append(out, c)
	}
	if len(out) == 0 && len(errs) == 0 {
		errs = append(errs, errors.New("no node condition given: name at least one, e.g. KernelDeadlock=True,10m"))
	}
	return out, errors.Join(errs...)
}
