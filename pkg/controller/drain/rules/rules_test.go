package rules

import (
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Draino's TestParseConditions cases, plus the inputs Draino mishandles.
func TestParseCondition(t *testing.T) {
	good := map[string]Condition{
		"KernelDeadlock":                         {Type: "KernelDeadlock", Status: v1.ConditionTrue},
		"KernelDeadlock=True,10m":                {Type: "KernelDeadlock", Status: v1.ConditionTrue, MinDuration: 10 * time.Minute},
		"Ready=Unknown,30m":                      {Type: v1.NodeReady, Status: v1.ConditionUnknown, MinDuration: 30 * time.Minute},
		"OutOfDisk=True,10m":                     {Type: "OutOfDisk", Status: v1.ConditionTrue, MinDuration: 10 * time.Minute},
		"Ready=Unknown":                          {Type: v1.NodeReady, Status: v1.ConditionUnknown}, // Draino panics here
		"KernelDeadlock=True,10m,force-after=2h": {Type: "KernelDeadlock", Status: v1.ConditionTrue, MinDuration: 10 * time.Minute, ForceAfter: 2 * time.Hour},
		"KernelDeadlock=True,0s,force-after=90s": {Type: "KernelDeadlock", Status: v1.ConditionTrue, ForceAfter: 90 * time.Second},
	}
	for in, want := range good {
		if got, err := ParseCondition(in); err != nil || got != want {
			t.Errorf("ParseCondition(%q) = %+v, %v", in, got, err)
		}
	}
	bad := map[string]string{
		"KernelDeadlock=True,tenminutes":           `"tenminutes" is not a duration`,
		"KernelDeadlock=Yes,10m":                   `status "Yes"`,
		"=True,10m":                                "type is missing",
		"KernelDeadlock=True,-5m":                  "is not a duration",
		"KernelDeadlock=True,10m,force=2h":         "unknown option",
		"KernelDeadlock=True,10m,force-after=soon": "not a positive duration",
		"KernelDeadlock=True,10m,force-after=0s":   "not a positive duration",
		"KernelDeadlock=True,10m,force-after=1s":   "below the least force-after, 1m0s",
		"KernelDeadlock=True,10m,force-after=59s":  "give at least 1m0s",
	}
	for in, want := range bad {
		if _, err := ParseCondition(in); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseCondition(%q) error %v, want %q", in, err, want)
		}
	}
	if _, err := ParseConditions(nil); err == nil {
		t.Error("no conditions must be an error")
	}
}

func node(labels map[string]string, conds ...v1.NodeCondition) *v1.Node {
	return &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", Labels: labels}, Status: v1.NodeStatus{Conditions: conds}}
}

func TestEvaluateDurations(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	r := Rules{Conditions: []Condition{{Type: "KernelDeadlock", Status: v1.ConditionTrue, MinDuration: 10 * time.Minute},
		{Type: v1.NodeReady, Status: v1.ConditionUnknown, MinDuration: 30 * time.Minute}}}
	since := func(d time.Duration) metav1.Time { return metav1.NewTime(now.Add(-d)) }
	n := node(nil, v1.NodeCondition{Type: "KernelDeadlock", Status: v1.ConditionTrue, LastTransitionTime: since(4 * time.Minute)},
		v1.NodeCondition{Type: v1.NodeReady, Status: v1.ConditionUnknown, LastTransitionTime: since(25 * time.Minute)})
	e := r.Evaluate(n, now)
	// Durations count from the end of lastTransitionTime's second: +1s.
	if len(e.Matched) != 0 || !e.Pending.Equal(now.Add(5*time.Minute+time.Second)) {
		t.Fatalf("got %+v; want nothing yet, re-check in 5m1s (Ready's 30m comes first)", e)
	}
	if e := r.Evaluate(n, now.Add(5*time.Minute)); len(e.Matched) != 0 {
		t.Errorf("matched at exactly 30m after a one-second-precision timestamp: %+v", e)
	}
	// After 5m1s Ready=Unknown has surely held 30m; KernelDeadlock needs one more minute.
	if e := r.Evaluate(n, now.Add(5*time.Minute+time.Second)); len(e.Matched) != 1 || e.Matched[0].Type != v1.NodeReady || !e.Pending.Equal(now.Add(6*time.Minute+time.Second)) {
		t.Errorf("after 5m: %+v", e)
	}
	if e := r.Evaluate(n, now.Add(6*time.Minute+time.Second)); len(e.Matched) != 2 || !e.Pending.IsZero() {
		t.Errorf("after 6m: %+v", e)
	}
	healthy := node(nil, v1.NodeCondition{Type: "KernelDeadlock", Status: v1.ConditionFalse, LastTransitionTime: since(time.Hour)})
	if e := r.Evaluate(healthy, now); len(e.Matched) != 0 || !e.Pending.IsZero() {
		t.Errorf("healthy node: %+v", e)
	}
}

func TestSelector(t *testing.T) {
	s, err := NewSelector("pool in (blue,green)", `node.metadata.labels["team"] == "infra" && !has(node.spec.unschedulable)`)
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		labels map[string]string
		cordon bool
		want   bool
	}{
		{map[string]string{"pool": "blue", "team": "infra"}, false, true},
		{map[string]string{"pool": "blue", "team": "web"}, false, false},
		{map[string]string{"pool": "red", "team": "infra"}, false, false},
		{map[string]string{"pool": "blue", "team": "infra"}, true, false},
	}
	for _, tc := range cases {
		n := node(tc.labels)
		n.Spec.Unschedulable = tc.cordon
		if got, err := s.Matches(n); err != nil || got != tc.want {
			t.Errorf("%v cordoned=%v: %v, %v", tc.labels, tc.cordon, got, err)
		}
	}
	// A missing label read without has() is an error on that node, not a match.
	s2, _ := NewSelector("", `node.metadata.labels["team"] == "infra"`)
	if ok, err := s2.Matches(node(map[string]string{"pool": "blue"})); ok || err == nil {
		t.Errorf("missing key: %v, %v", ok, err)
	}
	for _, bad := range [][2]string{{"pool in (", ""}, {"", "node.metadata.labels["}, {"", `"just a string"`}} {
		if _, err := NewSelector(bad[0], bad[1]); err == nil {
			t.Errorf("NewSelector(%q, %q) accepted", bad[0], bad[1])
		}
	}
}

// FuzzParseCondition: any input parses or is refused with an error, never a
// panic, and what parses prints back to the same rule.
func FuzzParseCondition(f *testing.F) {
	for _, s := range []string{"KernelDeadlock", "KernelDeadlock=True,10m", "Ready=Unknown", "Ready=Unknown,30m,force-after=2h",
		"=True", "A=B,,", "X=True,1h,force-after=", ",,,", "X=False,0s,force-after=1s,force-after=2s"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		c, err := ParseCondition(s)
		if err != nil {
			return
		}
		again, err := ParseCondition(c.String())
		if err != nil || again != c {
			t.Errorf("%q parsed as %+v, which prints as %q and parses back as %+v, %v", s, c, c.String(), again, err)
		}
	})
}

// TestSelectorCostLimit: an expression doing millions of steps per node is
// stopped by the cost limit with an error naming the expression and node,
// and the node is not selected. Each of its 3.2 million steps costs 100 (a
// contains of two 100-byte strings), so the limit stops it after about
// 10,000 of them (with a step costing 1, it ran a million steps, 10 s under
// -race on a busy machine).
func TestSelectorCostLimit(t *testing.T) {
	list := "[" + strings.Repeat("0,", 19) + "0]"
	s100 := `"` + strings.Repeat("a", 100) + `"`
	expr := list + ".all(a, " + list + ".all(b, " + list + ".all(c, " + list + ".all(d, " + list + ".all(e, " + s100 + ".contains(" + s100 + "))))))"
	s, err := NewSelector("", expr)
	if err != nil {
		t.Fatal(err)
	}
	ok, err := s.Matches(&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}})
	if ok || err == nil || !strings.Contains(err.Error(), "cost limit") || !strings.Contains(err.Error(), "node n1") {
		t.Fatalf("matched=%v err=%v, want an error about the cost limit on node n1", ok, err)
	}
	cheap, err := NewSelector("", `node.metadata.name == "n1"`)
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := cheap.Matches(&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}); !ok || err != nil {
		t.Fatalf("a cheap expression: matched=%v err=%v", ok, err)
	}
}
