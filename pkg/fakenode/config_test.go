package fakenode

import (
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

func TestParseZones(t *testing.T) {
	cases := []struct {
		in      string
		want    []Zone
		wantErr string
	}{
		{in: "zone-a,zone-b", want: []Zone{{Name: "zone-a"}, {Name: "zone-b"}}},
		{in: "a=20, b=10", want: []Zone{{Name: "a", Count: 20}, {Name: "b", Count: 10}}},
		{in: "a,,b", wantErr: "empty zone name"},
		{in: "", wantErr: "empty zone name"},
		{in: "a=0", wantErr: "at least 1"},
		{in: "a=x", wantErr: "whole number"},
		{in: "a,a", wantErr: "listed twice"},
		{in: "bad zone", wantErr: "not a valid zone label value"},
	}
	for _, tc := range cases {
		got, err := ParseZones(tc.in)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("ParseZones(%q) error = %v, want %q", tc.in, err, tc.wantErr)
			}
			continue
		}
		if err != nil || len(got) != len(tc.want) {
			t.Fatalf("ParseZones(%q) = %v, %v", tc.in, got, err)
		}
		for i := range got {
			if got[i] != tc.want[i] {
				t.Errorf("ParseZones(%q)[%d] = %v, want %v", tc.in, i, got[i], tc.want[i])
			}
		}
	}
}

func TestZoneOfAndNames(t *testing.T) {
	c := Config{Client: &kubernetes.Clientset{}, Zones: []Zone{{Name: "a", Count: 2}, {Name: "b", Count: 1}}}
	c.Complete()
	if c.Nodes != 3 {
		t.Fatalf("nodes from zone counts = %d, want 3", c.Nodes)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	var got []string
	for i := 0; i < 3; i++ {
		got = append(got, c.zoneOf(i))
	}
	if strings.Join(got, ",") != "a,a,b" {
		t.Errorf("zones %v, want a,a,b", got)
	}
	rr := Config{Nodes: 4, Zones: []Zone{{Name: "x"}, {Name: "y"}}}
	if rr.zoneOf(2) != "x" || rr.zoneOf(3) != "y" {
		t.Errorf("round-robin zones wrong")
	}
	if n := (&Config{Nodes: 5000, NamePrefix: "n-"}).nodeName(42); n != "n-0042" {
		t.Errorf("nodeName = %s", n)
	}
	if n := (&Config{Nodes: 20000, NamePrefix: "n-"}).nodeName(42); n != "n-00042" {
		t.Errorf("nodeName = %s", n)
	}
}

func TestValidate(t *testing.T) {
	base := func() Config {
		c := Config{Client: &kubernetes.Clientset{}, Nodes: 3}
		c.Complete()
		return c
	}
	cases := map[string]struct {
		mut  func(*Config)
		want string
	}{
		"no client":        {func(c *Config) { c.Client = nil }, "client is required"},
		"negative nodes":   {func(c *Config) { c.Nodes = -1 }, "at least 1"},
		"renew >= lease":   {func(c *Config) { c.LeaseRenewInterval = time.Minute }, "shorter than the lease duration"},
		"negative delay":   {func(c *Config) { c.PodStartDelay = -time.Second }, "must not be negative"},
		"bad prefix":       {func(c *Config) { c.NamePrefix = "Bad_" }, "does not make valid node names"},
		"mixed zone count": {func(c *Config) { c.Zones = []Zone{{Name: "a", Count: 2}, {Name: "b"}} }, "every zone or for none"},
		"zone sum":         {func(c *Config) { c.Zones = []Zone{{Name: "a", Count: 2}} }, "add up to 2 but 3"},
		"zero workers":     {func(c *Config) { c.Workers = 0 }, "workers must be at least 1"},
	}
	for name, tc := range cases {
		c := base()
		tc.mut(&c)
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Validate() = %v, want %q", name, err, tc.want)
		}
	}
	if c := base(); c.Validate() != nil {
		t.Errorf("defaults invalid: %v", c.Validate())
	}
}

// Node groups lay nodes out group by group, each with its zone, labels,
// taints and shape on top of every node's.
func TestNodeGroups(t *testing.T) {
	c := Config{Client: &kubernetes.Clientset{}, Labels: map[string]string{"all": "x"}, MaxPods: 50,
		Taints: []v1.Taint{{Key: "every", Effect: v1.TaintEffectNoSchedule}},
		Groups: []NodeGroup{
			{Name: "a-big", Zone: "a", Count: 2, CPU: resource.MustParse("64"), Labels: map[string]string{"pool": "big"},
				Taints: []v1.Taint{{Key: "dedicated", Value: "big", Effect: v1.TaintEffectNoExecute}}},
			{Name: "b-small", Zone: "b", Count: 1},
			{Name: "a-small", Zone: "a", Count: 1, Memory: resource.MustParse("8Gi"), MaxPods: 20},
		}}
	m, err := New(c)
	if err != nil {
		t.Fatal(err)
	}
	if got := len(m.NodeNames()); got != 4 {
		t.Fatalf("%d nodes, want 4", got)
	}
	if z := m.cfg.Zones; len(z) != 2 || z[0] != (Zone{Name: "a", Count: 3}) || z[1] != (Zone{Name: "b", Count: 1}) {
		t.Errorf("zones %v, want a=3, b=1", z)
	}
	now := metav1.Now()
	want := []struct {
		zone, pool, cpu, mem string
		pods                 int64
		taints               int
	}{{"a", "big", "64", "256Gi", 50, 2}, {"a", "big", "64", "256Gi", 50, 2}, {"b", "", "32", "256Gi", 50, 1}, {"a", "", "32", "8Gi", 20, 1}}
	for i, name := range m.NodeNames() {
		obj := m.object(m.nodes[name], now)
		w := want[i]
		cap := obj.Status.Capacity
		if obj.Labels["topology.kubernetes.io/zone"] != w.zone || m.Zone(name) != w.zone || obj.Labels["pool"] != w.pool || obj.Labels["all"] != "x" ||
			cap.Cpu().String() != w.cpu || cap.Memory().String() != w.mem || cap.Pods().Value() != w.pods || len(obj.Spec.Taints) != w.taints {
			t.Errorf("node %s: labels %v, capacity %v, taints %v; want %+v", name, obj.Labels, cap, obj.Spec.Taints, w)
		}
	}
}

func TestNodeGroupsValidation(t *testing.T) {
	c := Config{Client: &kubernetes.Clientset{}, Groups: []NodeGroup{
		{Name: "x", Zone: "bad zone", Count: 0, Labels: map[string]string{"bad key!": "v"},
			Taints: []v1.Taint{{Key: "k", Effect: "Sometimes"}}},
		{Name: "x", Zone: "a", Count: 1},
	}}
	_, err := New(c)
	for _, want := range []string{"count must be at least 1", "not a valid zone label value", `label key "bad key!"`, `effect "Sometimes"`, "a name of its own"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v, want %q", err, want)
		}
	}
}
