package nodelifecycle

import (
	"testing"

	v1 "k8s.io/api/core/v1"
)

func conds(statuses ...string) []*v1.NodeCondition {
	var out []*v1.NodeCondition
	for _, s := range statuses {
		if s == "nil" {
			out = append(out, nil)
			continue
		}
		out = append(out, &v1.NodeCondition{Type: v1.NodeReady, Status: v1.ConditionStatus(s)})
	}
	return out
}

// The worked examples of the reference (§11) and TestMonitorNodeHealth's zones.
func TestComputeZoneState(t *testing.T) {
	cases := []struct {
		in       []*v1.NodeCondition
		want     ZoneState
		notReady int
	}{
		{conds("Unknown", "Unknown", "True", "True", "True"), StateNormal, 2},
		{conds("Unknown", "Unknown", "Unknown", "True", "True"), StatePartialDisruption, 3},
		{conds("Unknown", "Unknown", "True"), StateNormal, 2},
		{conds("Unknown", "Unknown", "Unknown"), StateFullDisruption, 3},
		{conds("False"), StateFullDisruption, 1},
		{conds("Unknown", "Unknown", "Unknown", "True", "True", "True"), StateNormal, 3},
		{conds("nil", "nil", "nil", "nil"), StateFullDisruption, 4},
		{conds("nil", "nil", "nil", "True"), StatePartialDisruption, 3},
		{conds("True"), StateNormal, 0},
	}
	for i, tc := range cases {
		n, got := computeZoneState(tc.in, 0.55)
		if got != tc.want || n != tc.notReady {
			t.Errorf("case %d: (%d, %s), want (%d, %s)", i, n, got, tc.notReady, tc.want)
		}
	}
}

func TestRateFor(t *testing.T) {
	c := DefaultConfig()
	if r := c.rateFor(StateNormal, 3); r != 0.1 {
		t.Errorf("normal rate %v", r)
	}
	if r := c.rateFor(StatePartialDisruption, 50); r != 0 {
		t.Errorf("partial rate, small zone: %v", r)
	}
	if r := c.rateFor(StatePartialDisruption, 51); r != 0.01 {
		t.Errorf("partial rate, large zone: %v", r)
	}
	if r := c.rateFor(StateFullDisruption, 3); r != 0.1 {
		t.Errorf("full disruption keeps the normal rate: %v", r)
	}
}

func TestExcludedFromDisruption(t *testing.T) {
	n := &v1.Node{}
	n.Name = "master-abc"
	if excludedFromDisruption(n) {
		t.Error("a node named master-* is not excluded")
	}
	n.Labels = map[string]string{ExcludeDisruptionLabel: ""}
	if !excludedFromDisruption(n) {
		t.Error("label with empty value must exclude")
	}
}
