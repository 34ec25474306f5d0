package nodelifecycle

import (
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestRestoreVerdict(t *testing.T) {
	at := func(s int) metav1.Time { return metav1.NewTime(time.Date(2026, 11, 23, 10, 0, s, 0, time.UTC)) }
	markT := at(10)
	pod := func(mod func(p *v1.Pod)) *v1.Pod {
		p := &v1.Pod{Status: v1.PodStatus{
			Conditions: []v1.PodCondition{
				{Type: v1.ContainersReady, Status: v1.ConditionTrue},
				{Type: v1.PodReady, Status: v1.ConditionFalse, LastTransitionTime: markT},
				{Type: MarkedCondition, Status: v1.ConditionTrue, LastTransitionTime: markT},
			},
			ContainerStatuses: []v1.ContainerStatus{{Name: "c", Ready: true}},
		}}
		if mod != nil {
			mod(p)
		}
		return p
	}
	node := func(transition, heartbeat metav1.Time) *v1.Node {
		return &v1.Node{Status: v1.NodeStatus{Conditions: []v1.NodeCondition{{Type: v1.NodeReady, Status: v1.ConditionTrue,
			LastTransitionTime: transition, LastHeartbeatTime: heartbeat}}}}
	}
	back := node(at(20), at(20))
	cases := []struct {
		name string
		pod  *v1.Pod
		node *v1.Node
		want verdict
	}{
		{"node came back, kubelet silent about the pod", pod(nil), back, restore},
		{"kubelet kept its own transition time, heartbeat after the mark", pod(nil), node(at(0), at(20)), restore},
		{"node has not reported since the mark", pod(nil), node(at(0), at(5)), keepMark},
		{"containers not ready", pod(func(p *v1.Pod) { p.Status.ContainerStatuses[0].Ready = false }), back, keepMark},
		{"readiness gate false", pod(func(p *v1.Pod) {
			p.Spec.ReadinessGates = []v1.PodReadinessGate{{ConditionType: "example.com/gate"}}
			p.Status.Conditions = append(p.Status.Conditions, v1.PodCondition{Type: "example.com/gate", Status: v1.ConditionFalse})
		}), back, keepMark},
		{"kubelet reported Ready itself", pod(func(p *v1.Pod) { p.Status.Conditions[1].Status = v1.ConditionTrue }), back, settleMark},
		{"readiness changed since the mark", pod(func(p *v1.Pod) { p.Status.Conditions[1].LastTransitionTime = at(30) }), back, settleMark},
		{"being deleted", pod(func(p *v1.Pod) { p.DeletionTimestamp = &markT }), back, settleMark},
		{"node unknown", pod(nil), nil, keepMark},
	}
	for _, c := range cases {
		mark, _ := markedOn(c.pod)
		if got, why := restoreVerdict(c.pod, c.node, mark); got != c.want {
			t.Errorf("%s: verdict %d (%s), want %d", c.name, got, why, c.want)
		}
	}
}
