package chaos

import (
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// drainDone reads the drain controller's public writes on the Node only.
func TestDrainDone(t *testing.T) {
	node := func(cordoned bool, at string, status v1.ConditionStatus, msg string) *v1.Node {
		n := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", Annotations: map[string]string{}}, Spec: v1.NodeSpec{Unschedulable: cordoned}}
		if at != "" {
			n.Annotations[annDrainCordonedAt] = at
		}
		if status != "" {
			n.Status.Conditions = []v1.NodeCondition{{Type: condDrainSched, Status: status, Message: msg}}
		}
		return n
	}
	for _, c := range []struct {
		name string
		n    *v1.Node
		done bool
		why  string
	}{
		{"completed under the cordon", node(true, "2026-12-03T10:00:00Z", v1.ConditionFalse, "Drain activity scheduled 2026-12-03T10:00:00Z | Completed: 2026-12-03T10:00:04Z"), true, ""},
		{"completed the same second", node(true, "2026-12-03T10:00:00.700Z", v1.ConditionFalse, "Drain activity scheduled 2026-12-03T10:00:00Z | Completed: 2026-12-03T10:00:00Z"), true, ""},
		{"not cordoned", node(false, "", v1.ConditionFalse, "x | Completed: 2026-12-03T10:00:04Z"), false, "not cordoned"},
		{"cordoned, no drain yet", node(true, "2026-12-03T10:00:00Z", "", ""), false, "no DrainScheduled"},
		{"draining", node(true, "2026-12-03T10:00:00Z", v1.ConditionTrue, "Drain activity scheduled 2026-12-03T10:00:00Z"), false, "DrainScheduled=True"},
		{"failed", node(true, "2026-12-03T10:00:00Z", v1.ConditionFalse, "Drain activity scheduled 2026-12-03T10:00:00Z | Failed: 2026-12-03T10:00:09Z"), false, "DrainScheduled=False"},
		{"a drain of an earlier cordon", node(true, "2026-12-03T10:05:00Z", v1.ConditionFalse, "x | Completed: 2026-12-03T10:00:04Z"), false, "before the cordon"},
	} {
		done, why := drainDone(c.n)
		if done != c.done || !strings.Contains(why, c.why) {
			t.Errorf("%s: drainDone = %v, %q; want %v, %q", c.name, done, why, c.done, c.why)
		}
	}
}
