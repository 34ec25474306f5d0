package rules

import (
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// FuzzNewSelector: any --drain-node-selector and --drain-node-expression are
// refused with an error or give a selector that answers about a node
// without panicking.
func FuzzNewSelector(f *testing.F) {
	for _, s := range [][2]string{
		{"pool in (batch,web)", ""}, {"", `node.metadata.labels["pool"] == "batch"`}, {"!critical", "!has(node.metadata.labels.critical)"},
		{"a=b,c!=d", `node.spec.unschedulable == true`}, {"pool in (", ""}, {"", "node.metadata.labels["}, {"", `"just a string"`},
		{"", `size(node.status.conditions) > 0 && node.status.conditions.exists(c, c.type == "Ready")`}, {"", "1/0 == 1"},
	} {
		f.Add(s[0], s[1])
	}
	n := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", Labels: map[string]string{"pool": "batch", "a": "b"}},
		Status: v1.NodeStatus{Conditions: []v1.NodeCondition{{Type: v1.NodeReady, Status: v1.ConditionTrue}}}}
	f.Fuzz(func(t *testing.T, sel, expr string) {
		s, err := NewSelector(sel, expr)
		if err != nil {
			return
		}
		ok, err := s.Matches(n)
		if ok && err != nil {
			t.Errorf("NewSelector(%q, %q) selects the node despite %v", sel, expr, err)
		}
	})
}
