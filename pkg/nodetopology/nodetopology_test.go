package nodetopology

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
		n, got := ComputeZoneState(tc.in, 0.55)
		if got != tc.want || n != tc.notReady {
			t.Errorf("case %d: (%d, %s), want (%d, %s)", i, n, got, tc.notReady, tc.want)
		}
	}
}

func TestExcludedFromDisruption(t *testing.T) {
	n := &v1.Node{}
	n.Name = "master-abc"
	if ExcludedFromDisruption(n) {
		t.Error("a node named master-* is not excluded")
	}
	n.Labels = map[string]string{ExcludeDisruptionLabel: ""}
	if !ExcludedFromDisruption(n) {
		t.Error("label with empty value must exclude")
	}
}
