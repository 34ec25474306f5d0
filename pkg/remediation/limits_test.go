package remediation

import (
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

// Brakes round a percentage up (a pool under 5 nodes with maxUnhealthy 20%
// still repairs one node) and a limit of 0 is 0, never 1 (issue 46 point 5).
func TestBrakeLimits(t *testing.T) {
	for _, c := range []struct {
		v     intstr.IntOrString
		total int
		want  int
	}{
		{intstr.FromString("20%"), 4, 1}, {intstr.FromString("20%"), 5, 1}, {intstr.FromString("20%"), 6, 2},
		{intstr.FromString("0%"), 10, 0}, {intstr.FromInt32(0), 10, 0}, {intstr.FromInt32(3), 10, 3},
		{intstr.FromString("100%"), 7, 7}, {intstr.FromString("bad"), 7, 0},
	} {
		if got := Limit(&c.v, c.total); got != c.want {
			t.Errorf("Limit(%s, %d) = %d, want %d", c.v.String(), c.total, got, c.want)
		}
	}
	p := policy()
	sick := node(deadlock(v1.ConditionTrue, t0.Add(-time.Hour), t0))
	can := Capabilities{Reboot: true, Replace: true, Fence: true}
	p.Brakes.MaxUnhealthy = ptr.To(intstr.FromString("20%"))
	if d := p.Decide(Input{Node: sick, State: NotInRepair, Pool: Pool{Name: "gpu", Nodes: 4, Unhealthy: 1}, Can: can, Now: t0}); d.Verdict != VerdictStart {
		t.Errorf("1 of 4 unhealthy, maxUnhealthy 20%%: %+v, want Start", d)
	}
	p.Brakes.MaxInRepair = ptr.To(intstr.FromInt32(0))
	if d := p.Decide(Input{Node: sick, State: NotInRepair, Pool: Pool{Name: "gpu", Nodes: 4, Unhealthy: 1}, Can: can, Now: t0}); d.Verdict != VerdictBlocked ||
		!strings.Contains(d.Reason, "0 of 4 nodes of pool gpu in repair, limit 0") {
		t.Errorf("maxInRepair 0: %+v, want Blocked", d)
	}
}
