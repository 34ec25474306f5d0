package budget

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

func cluster(n int, mut func(i int, node *Node)) Cluster {
	c := Cluster{}
	for i := 0; i < n; i++ {
		node := Node{Name: fmt.Sprintf("n%d", i), Ready: true, Group: []string{"a", "b"}[i%2]}
		if mut != nil {
			mut(i, &node)
		}
		c.Nodes = append(c.Nodes, node)
	}
	return c
}

var now = time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)

func TestCircuitBreaker(t *testing.T) {
	l := Limits{MaxUnhealthyNodes: "45%"}
	// 6 of 10 not Ready (60 %): nothing new is cordoned or drained.
	c := cluster(10, func(i int, n *Node) { n.Ready = i >= 6 })
	if v := l.Cordon(c, "n0"); v.Allowed || v.Budget != CircuitBreaker || !strings.Contains(v.Reason, "6 of 10") {
		t.Errorf("cordon at 60%% not Ready: %+v", v)
	}
	if v := l.StartDrain(c, "n0", now); v.Allowed {
		t.Errorf("drain at 60%% not Ready: %+v", v)
	}
	// 4 of 10 (40 %): allowed.
	c = cluster(10, func(i int, n *Node) { n.Ready = i >= 4 })
	if v := l.Cordon(c, "n0"); !v.Allowed {
		t.Errorf("cordon at 40%%: %+v", v)
	}
	c.ZoneDisruption = "zone-a in PartialDisruption"
	if v := l.Cordon(c, "n0"); v.Allowed || !strings.Contains(v.Reason, "PartialDisruption") {
		t.Errorf("zone disruption must trip the breaker: %+v", v)
	}
}

func TestMaxConcurrentDrains(t *testing.T) {
	l := Limits{MaxConcurrentDrains: 2, MaxUnhealthyNodes: "100%"}
	c := cluster(10, func(i int, n *Node) { n.Draining = i < 2 })
	if v := l.StartDrain(c, "n5", now); v.Allowed || v.Budget != MaxConcurrent {
		t.Errorf("third drain: %+v", v)
	}
	if v := l.StartDrain(c, "n1", now); !v.Allowed {
		t.Errorf("a node already draining is not held back by itself: %+v", v)
	}
	// Per group: n0 (a) and n1 (b) drain; each group still has room for one more.
	l.GroupByLabel = "pool"
	c = cluster(10, func(i int, n *Node) { n.Draining = i < 2 })
	if v := l.StartDrain(c, "n2", now); !v.Allowed {
		t.Errorf("group a has one drain of two: %+v", v)
	}
	c = cluster(10, func(i int, n *Node) { n.Draining = i == 0 || i == 2 })
	if v := l.StartDrain(c, "n4", now); v.Allowed || !strings.Contains(v.Reason, "pool=a") {
		t.Errorf("group a full: %+v", v)
	}
}

func TestMaxCordoned(t *testing.T) {
	l := Limits{MaxCordonedNodes: "30%", MaxUnhealthyNodes: "100%"}
	c := cluster(10, func(i int, n *Node) { n.Cordoned = i < 3 })
	if v := l.Cordon(c, "n5"); v.Allowed || v.Budget != MaxCordoned {
		t.Errorf("fourth cordon of 10 at 30%%: %+v", v)
	}
	l.MaxCordonedNodes = "4"
	if v := l.Cordon(c, "n5"); !v.Allowed {
		t.Errorf("fourth cordon with a count of 4: %+v", v)
	}
}

func TestDrainBuffer(t *testing.T) {
	l := Limits{DrainBuffer: 10 * time.Minute, MaxUnhealthyNodes: "100%"}
	c := cluster(3, nil)
	if v := l.StartDrain(c, "n0", now); !v.Allowed {
		t.Errorf("first drain: %+v", v)
	}
	c.LastDrainStart = now.Add(-4 * time.Minute)
	v := l.StartDrain(c, "n0", now)
	if v.Allowed || !v.RetryAt.Equal(now.Add(6*time.Minute)) {
		t.Errorf("within the buffer: %+v", v)
	}
}

func TestValidate(t *testing.T) {
	bad := []Limits{{MaxConcurrentDrains: -1, MaxUnhealthyNodes: "45%"}, {MaxCordonedNodes: "120%", MaxUnhealthyNodes: "45%"},
		{MaxUnhealthyNodes: "lots"}, {DrainBuffer: -time.Second, MaxUnhealthyNodes: "45%"}}
	for _, l := range bad {
		if err := l.Validate(); err == nil {
			t.Errorf("%+v accepted", l)
		}
	}
}
