package fakenode

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

func TestParseCondition(t *testing.T) {
	if c, err := ParseCondition("KernelDeadlock=True", true); err != nil || c.Type != "KernelDeadlock" || c.Status != v1.ConditionTrue {
		t.Errorf("got %+v, %v", c, err)
	}
	if c, err := ParseCondition("KernelDeadlock", false); err != nil || c.Status != "" {
		t.Errorf("bare type for clearing: %+v, %v", c, err)
	}
	for _, bad := range []string{"KernelDeadlock", "=True", "A=Yes", "A B=True"} {
		if _, err := ParseCondition(bad, true); err == nil {
			t.Errorf("ParseCondition(%q) accepted", bad)
		}
	}
}

func TestFaultValidate(t *testing.T) {
	all := Target{All: true}
	cases := []struct {
		f    Fault
		want string
	}{
		{Fault{Action: "explode", Target: all}, "unknown fault action"},
		{Fault{Action: Partition}, "no target"},
		{Fault{Action: Partition, Target: Target{Selector: "a in ("}}, "invalid label selector"},
		{Fault{Action: SetCondition, Target: all}, "needs a condition"},
		{Fault{Action: SetCondition, Target: all, Condition: &Condition{Type: "X"}}, "needs a status"},
		{Fault{Action: Partition, Target: all, Condition: &Condition{Type: "X"}}, "takes no condition"},
		{Fault{Action: Heal, Target: all, Duration: time.Second}, "takes no duration"},
		{Fault{Action: Partition, Target: all, Duration: -time.Second}, "must not be negative"},
		{Fault{Action: ClearCondition, Target: all, Condition: &Condition{Type: "X", SurvivesReboot: true}}, "takes no survivesReboot"},
	}
	for _, tc := range cases {
		if err := tc.f.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: Validate() = %v, want %q", tc.f, err, tc.want)
		}
	}
	ok := Fault{Action: SetCondition, Target: Target{Zone: "z"}, Condition: &Condition{Type: "KernelDeadlock", Status: v1.ConditionTrue}, Duration: time.Minute}
	if err := ok.Validate(); err != nil {
		t.Errorf("valid fault rejected: %v", err)
	}
	ok.Condition.SurvivesReboot = true
	if err := ok.Validate(); err != nil || !strings.Contains(ok.String(), "survives reboots") {
		t.Errorf("a condition that survives reboots: %v, %q", err, ok)
	}
}

func TestResolveTargets(t *testing.T) {
	m, err := New(Config{Client: &kubernetes.Clientset{}, Nodes: 6, Labels: map[string]string{"pool": "blue"}})
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		t       Target
		want    int
		wantErr string
	}{
		{Target{All: true}, 6, ""},
		{Target{Zone: "zone-b"}, 2, ""},
		{Target{Selector: "pool=blue"}, 6, ""},
		{Target{Selector: "topology.kubernetes.io/zone in (zone-a,zone-c)"}, 4, ""},
		{Target{Nodes: []string{"fake-node-0001", "fake-node-0002"}, Zone: "zone-b"}, 1, ""},
		{Target{Nodes: []string{"nope"}}, 0, "unknown node(s) nope"},
		{Target{Zone: "zone-z"}, 0, `unknown zone "zone-z"; zones: zone-a, zone-b, zone-c`},
		{Target{Selector: "pool=red"}, 0, "no node matches"},
	}
	for _, tc := range cases {
		got, err := m.resolve(tc.t)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%v: error %v, want %q", tc.t, err, tc.wantErr)
			}
			continue
		}
		if err != nil || len(got) != tc.want {
			t.Errorf("%v: got %v, %v; want %d nodes", tc.t, got, err, tc.want)
		}
	}
	// Apply reports bad targets as FaultError, before touching any node.
	_, err = m.Apply(context.Background(), Fault{Action: Partition, Target: Target{Zone: "nowhere"}})
	var fe *FaultError
	if !errors.As(err, &fe) {
		t.Errorf("Apply with unknown zone: %v, want a FaultError", err)
	}
	for _, s := range m.States() {
		if s.Partitioned {
			t.Errorf("%s partitioned by a rejected fault", s.Name)
		}
	}
}

func TestSetConditionAndDiffers(t *testing.T) {
	now := metav1.Now()
	n := &node{conditions: initialConditions(now)}
	if n.differsFrom(initialConditions(now)) {
		t.Error("identical conditions reported as different")
	}
	later := metav1.NewTime(now.Add(time.Minute))
	if !n.setCondition(Condition{Type: "KernelDeadlock", Status: v1.ConditionTrue}, later) {
		t.Error("new condition not reported as a change")
	}
	if !n.differsFrom(initialConditions(now)) {
		t.Error("API without KernelDeadlock should differ")
	}
	if n.setCondition(Condition{Type: v1.NodeMemoryPressure, Status: v1.ConditionFalse}, later) {
		t.Error("unchanged MemoryPressure reported as a change")
	}
	n.setCondition(Condition{Type: v1.NodeMemoryPressure, Status: v1.ConditionTrue}, later)
	for _, c := range n.conditions {
		if c.Type == v1.NodeMemoryPressure && (c.Reason != "KubeletHasInsufficientMemory" || !c.LastTransitionTime.Equal(&later)) {
			t.Errorf("MemoryPressure=True: %+v", c)
		}
		if c.Type == "KernelDeadlock" && c.Reason != "FaultInjected" {
			t.Errorf("KernelDeadlock reason %q", c.Reason)
		}
	}
	api := append([]v1.NodeCondition(nil), n.conditions...)
	api[0].Status = v1.ConditionUnknown // a node lifecycle controller's doing
	if !n.differsFrom(api) {
		t.Error("Unknown set by a controller must make the kubelet post")
	}
}

func TestPodIPs(t *testing.T) {
	n := &node{index: 300, podCIDR: "10.244.3.0/26"}
	seen := map[string]bool{}
	for i := 0; i < 62; i++ {
		ip := n.nextPodIP()
		if seen[ip] || !strings.HasPrefix(ip, "10.244.3.") || ip == "10.244.3.0" {
			t.Fatalf("bad or repeated pod IP %s", ip)
		}
		seen[ip] = true
	}
	n = &node{index: 300}
	if ip := n.nextPodIP(); ip != "10.129.44.2" {
		t.Errorf("fallback pod IP %s", ip)
	}
	if nodeIP(0) == nodeIP(256) {
		t.Error("node IPs collide")
	}
}

func TestStatusDiffers(t *testing.T) {
	m := &Manager{}
	pod := &v1.Pod{Spec: v1.PodSpec{Containers: []v1.Container{{Name: "c"}}}}
	st := &podState{running: true, ip: "10.0.0.2", startedAt: metav1.Now()}
	want := m.desiredStatus(pod, &node{ip: "10.64.0.1"}, st)
	api := *want.DeepCopy()
	if statusDiffers(&api, &want) {
		t.Error("equal statuses differ")
	}
	api.Conditions[3].Status = v1.ConditionFalse // Ready=False from a controller
	if !statusDiffers(&api, &want) {
		t.Error("Ready=False not noticed")
	}
	gated := pod.DeepCopy()
	gated.Spec.ReadinessGates = []v1.PodReadinessGate{{ConditionType: "example.com/lb"}}
	if s := m.desiredStatus(gated, &node{}, st); s.Conditions[3].Status != v1.ConditionFalse {
		t.Error("unmet readiness gate must keep the pod NotReady")
	}
}

// TestHealReachedAtNextAttempt: a healed partition's kubelet is not heard
// until its request in flight gets through (reconnect, at the Lease tick
// reconnectAt sets: TestReconnectAt), as a real kubelet whose requests hang
// over the cut connection; a kubelet restart or ReachedAtHeal ends the wait
// at once, and a partition again starts it over.
func TestHealReachedAtNextAttempt(t *testing.T) {
	for _, atHeal := range []bool{false, true} {
		m, err := New(Config{Client: &kubernetes.Clientset{}, Nodes: 1, ReachedAtHeal: atHeal})
		if err != nil {
			t.Fatal(err)
		}
		n := m.nodes[m.names[0]]
		m.applyTo(n, Partition, nil)
		ch := make(chan struct{})
		n.reachable = ch
		m.applyTo(n, Heal, nil)
		if got := n.isHealthy(); got != atHeal {
			t.Fatalf("ReachedAtHeal=%v: healthy right after the heal = %v", atHeal, got)
		}
		if atHeal {
			continue
		}
		if s := m.States()[0]; s.Partitioned || !s.Reconnecting {
			t.Errorf("after the heal: state %+v, want reconnecting", s)
		}
		select {
		case <-ch:
			t.Fatal("reachable closed before the kubelet reached the API server")
		default:
		}
		if !m.reconnect(n) || !n.isHealthy() || m.reconnect(n) {
			t.Fatal("the next tick did not end the reconnect exactly once")
		}
		select {
		case <-ch:
		default:
			t.Fatal("reachable not closed when the kubelet reached the API server")
		}
		// Cut again, healed, then a fresh kubelet: new connections at once.
		m.applyTo(n, Partition, nil)
		m.applyTo(n, Heal, nil)
		m.applyTo(n, KubeletStop, nil)
		m.applyTo(n, KubeletStart, nil)
		if !n.isHealthy() || m.States()[0].Reconnecting {
			t.Errorf("a restarted kubelet still waits for the old connections: %+v", m.States()[0])
		}
		// A partition during the wait: the heal after it waits again.
		m.applyTo(n, Partition, nil)
		m.applyTo(n, Heal, nil)
		m.applyTo(n, Partition, nil)
		if s := m.States()[0]; !s.Partitioned || s.Reconnecting || m.reconnect(n) {
			t.Errorf("partitioned while reconnecting: %+v", s)
		}
	}
}
