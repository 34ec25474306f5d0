package integration

import (
	"context"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"

	"github.com/nodeshepherd/nodeshepherd/pkg/controller/nodelifecycle"
	"github.com/nodeshepherd/nodeshepherd/pkg/controlplane"
	"github.com/nodeshepherd/nodeshepherd/pkg/fakenode"
	"github.com/nodeshepherd/nodeshepherd/pkg/kube"
	"github.com/nodeshepherd/nodeshepherd/test/framework"
)

// TestRestartKeepsNoExecuteTaint: a node is partitioned and tainted
// unreachable:NoExecute (timeAdded T0); the controller stops and another
// starts (a new leader, no memory). The node is still Unknown: the new
// controller keeps the taint with timeAdded T0, so its pods'
// tolerationSeconds keep counting from T0, and the taint is never removed,
// as seen by a watch on the node from before the restart. When the node is
// healed, the taint is removed. Before, every newly seen node lost its
// NoExecute taints and was tainted again with a new timeAdded.
func TestRestartKeepsNoExecuteTaint(t *testing.T) {
	cp := framework.StartControlPlane(t, controlplane.Config{})
	client := framework.Client(t, cp)
	nodes := fastNodes(client, 0, false)
	nodes.Zones, _ = fakenode.ParseZones("zone-a=3,zone-b=3")
	m := framework.StartFakeNodes(t, nodes)
	first := framework.StartNodeShepherd(t, cp.RESTConfig(), fastLifecycle(100), nil)
	waitNodesReady(t, client, m.NodeNames()...)
	dead := m.NodeNames()[0]
	partition(t, m, fakenode.Partition, fakenode.Target{Nodes: []string{dead}})
	framework.Eventually(t, time.Minute, dead+" tainted", nodeTainted(client, dead, nodelifecycle.UnreachableTaint, true))
	t0 := *kube.FindTaint(getNode(t, client, dead), nodelifecycle.UnreachableTaint).TimeAdded

	// Every version of the node from now on: its taint must stay T0's.
	var mu sync.Mutex
	var changed []string
	factory := informers.NewSharedInformerFactory(client, 0)
	onNode := func(obj any) {
		n, ok := obj.(*v1.Node)
		if !ok || n.Name != dead {
			return
		}
		if tt := kube.FindTaint(n, nodelifecycle.UnreachableTaint); tt == nil || tt.TimeAdded == nil || !tt.TimeAdded.Equal(&t0) {
			mu.Lock()
			changed = append(changed, time.Now().Format("15:04:05.000 ")+n.ResourceVersion+" "+taintsOf(n))
			mu.Unlock()
		}
	}
	_, _ = factory.Core().V1().Nodes().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: onNode, UpdateFunc: func(_, obj any) { onNode(obj) }})
	ctx, cancel := context.WithCancel(framework.Context(t))
	factory.Start(ctx.Done())
	t.Cleanup(func() { cancel(); factory.Shutdown() })
	factory.WaitForCacheSync(ctx.Done())

	first.Stop()
	// timeAdded has whole seconds: a taint added anew after this differs.
	time.Sleep(time.Until(t0.Add(2 * time.Second)))
	second := framework.StartNodeShepherd(t, cp.RESTConfig(), fastLifecycle(100), nil)
	passesAfter(t, second, 4)
	mu.Lock()
	seen := append([]string(nil), changed...)
	mu.Unlock()
	if len(seen) > 0 {
		t.Errorf("%s's unreachable:NoExecute taint (timeAdded %v) changed across the restart, its pods' countdown restarted:\n%v", dead, t0, seen)
	}
	if r := kube.NodeCondition(getNode(t, client, dead), v1.NodeReady); r.Status != v1.ConditionUnknown {
		t.Errorf("%s Ready=%s, want Unknown", dead, r.Status)
	}

	partition(t, m, fakenode.Heal, fakenode.Target{Nodes: []string{dead}})
	framework.Eventually(t, time.Minute, dead+" untainted once Ready", nodeTainted(client, dead, nodelifecycle.UnreachableTaint, false))
}

func taintsOf(n *v1.Node) string {
	s := "["
	for i, t := range n.Spec.Taints {
		if i > 0 {
			s += " "
		}
		s += t.ToString()
		if t.TimeAdded != nil {
			s += "@" + t.TimeAdded.UTC().Format("15:04:05")
		}
	}
	return s + "]"
}
