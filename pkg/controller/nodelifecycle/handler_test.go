package nodelifecycle

import (
	"context"
	"encoding/json"
	"strconv"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"

	"github.com/nodeshepherd/nodeshepherd/pkg/kube"
)

// The taint choice, through the monitor loop on the fake clock (the cluster
// harness of correlated_test.go): a node whose kubelet reports Ready=False
// gets the not-ready NoExecute taint, a silent one the unreachable taint;
// when the kind of failure changes the taints are swapped at once, and a
// Ready node loses both. The NoSchedule taints follow the conditions in the
// same writes.

// report makes the kubelet of name post Ready=status (it keeps renewing
// its Lease unless silenced), as a new version of the node.
func (cl *cluster) report(name string, status v1.ConditionStatus, extra ...v1.NodeCondition) {
	cl.t.Helper()
	cur, err := cl.c.latestNode(name)
	if err != nil {
		cl.t.Fatal(err)
	}
	n := cur.DeepCopy()
	now := metav1.NewTime(cl.clk.Now())
	n.Status.Conditions = append([]v1.NodeCondition{{Type: v1.NodeReady, Status: status, LastHeartbeatTime: now, LastTransitionTime: now}}, extra...)
	rv, _ := strconv.Atoi(n.ResourceVersion)
	n.ResourceVersion = strconv.Itoa(rv + 1)
	if _, err := cl.c.client.CoreV1().Nodes().UpdateStatus(context.Background(), n, metav1.UpdateOptions{}); err != nil {
		cl.t.Fatal(err)
	}
	cl.updateNode(n)
	delete(cl.silentAt, name)
}

// apiTaints is the node's taints as written to the API.
func (cl *cluster) apiTaints(name string) map[string]v1.TaintEffect {
	cl.t.Helper()
	n, err := cl.c.client.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		cl.t.Fatal(err)
	}
	out := map[string]v1.TaintEffect{}
	for _, t := range n.Spec.Taints {
		out[t.Key+":"+string(t.Effect)] = t.Effect
	}
	return out
}

// everWritten says whether any taint patch of the node carried the taint.
func (cl *cluster) everWritten(name string, taint v1.Taint) bool {
	cl.t.Helper()
	for _, a := range cl.c.client.(*fake.Clientset).Actions() {
		p, ok := a.(clienttesting.PatchAction)
		if !ok || a.GetResource().Resource != "nodes" || p.GetName() != name {
			continue
		}
		var patch struct {
			Spec struct{ Taints []v1.Taint } `json:"spec"`
		}
		if err := json.Unmarshal(p.GetPatch(), &patch); err != nil {
			cl.t.Fatal(err)
		}
		for _, t := range patch.Spec.Taints {
			if t.MatchTaint(&taint) {
				return true
			}
		}
	}
	return false
}

func TestTaintChoice(t *testing.T) {
	noExec := func(key string) string { return key + ":" + string(v1.TaintEffectNoExecute) }
	noSched := func(key string) string { return key + ":" + string(v1.TaintEffectNoSchedule) }
	cfg := correlatedConfig()
	// One NoExecute taint per 100 s: the swap below must not wait for it.
	cfg.NodeEvictionRate = 0.01
	cl := newCluster(t, cfg, map[string]int{"a": 6})
	cl.run(10 * time.Second)
	nodes := cl.inZone("a")
	notReadyNode, silentNode, pressured := nodes[0], nodes[1], nodes[2]

	cl.report(notReadyNode, v1.ConditionFalse)
	cl.report(pressured, v1.ConditionTrue, v1.NodeCondition{Type: v1.NodeMemoryPressure, Status: v1.ConditionTrue})
	cl.silence([]string{silentNode}, 0)
	cl.run(cfg.NodeMonitorGracePeriod + 5*time.Second + 100*time.Second)

	for _, tc := range []struct {
		node      string
		want, not []string
	}{
		{notReadyNode, []string{noExec(v1.TaintNodeNotReady), noSched(v1.TaintNodeNotReady)}, []string{noExec(v1.TaintNodeUnreachable)}},
		{silentNode, []string{noExec(v1.TaintNodeUnreachable), noSched(v1.TaintNodeUnreachable)}, []string{noExec(v1.TaintNodeNotReady)}},
		{pressured, nil, []string{noExec(v1.TaintNodeNotReady), noExec(v1.TaintNodeUnreachable)}},
	} {
		got := cl.apiTaints(tc.node)
		for _, k := range tc.want {
			if _, ok := got[k]; !ok {
				t.Errorf("%s: taints %v lack %s", tc.node, got, k)
			}
		}
		for _, k := range tc.not {
			if _, ok := got[k]; ok {
				t.Errorf("%s: taints %v have %s", tc.node, got, k)
			}
		}
	}
	// The right taint at once, not the other one corrected later.
	if cl.everWritten(notReadyNode, UnreachableTaint) || cl.everWritten(silentNode, NotReadyTaint) {
		t.Errorf("a node carried the other NoExecute taint first")
	}
	// The condition's NoSchedule taint comes from the node worker; run it.
	for cl.c.nodeQueue.Len() > 0 {
		cl.c.processNode(context.Background())
	}
	if _, ok := cl.apiTaints(pressured)[noSched(v1.TaintNodeMemoryPressure)]; !ok {
		t.Errorf("MemoryPressure=True: taints %v lack the memory-pressure NoSchedule taint", cl.apiTaints(pressured))
	}

	// The silent kubelet comes back but reports Ready=False: the taints swap
	// in one step, without waiting for the zone's rate limiter.
	cl.report(silentNode, v1.ConditionFalse)
	cl.run(cfg.NodeMonitorPeriod + time.Second)
	if got := cl.apiTaints(silentNode); got[noExec(v1.TaintNodeNotReady)] == "" || got[noExec(v1.TaintNodeUnreachable)] != "" {
		t.Errorf("unreachable node reporting NotReady: taints %v, want not-ready NoExecute instead of unreachable", got)
	}
	// Ready again: both NoExecute taints go.
	cl.report(notReadyNode, v1.ConditionTrue)
	cl.run(cfg.NodeMonitorPeriod + time.Second)
	if got := cl.apiTaints(notReadyNode); got[noExec(v1.TaintNodeNotReady)] != "" || got[noExec(v1.TaintNodeUnreachable)] != "" {
		t.Errorf("Ready node keeps NoExecute taints %v", got)
	}
	if n, _ := cl.c.latestNode(notReadyNode); kube.FindTaint(n, NotReadyTaint) != nil {
		t.Error("the controller's view still has the not-ready taint")
	}
}

// A node that never posted a status is judged by --node-startup-grace-period
// from its creation, then marked Unknown and tainted unreachable.
func TestStartupGraceOnTheClock(t *testing.T) {
	cfg := correlatedConfig()
	cfg.NodeStartupGracePeriod = 30 * time.Second
	cl := newCluster(t, cfg, map[string]int{"a": 4})
	cl.run(5 * time.Second)
	n := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "new", ResourceVersion: "1", UID: "uid-new",
		CreationTimestamp: metav1.NewTime(cl.clk.Now()),
		Labels:            map[string]string{v1.LabelTopologyRegion: "r", v1.LabelTopologyZone: "a"}}}
	if _, err := cl.c.client.CoreV1().Nodes().Create(context.Background(), n, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := cl.nodeSt.Add(n); err != nil {
		t.Fatal(err)
	}
	cl.c.onNode(n)
	cl.run(cfg.NodeStartupGracePeriod - 5*time.Second)
	if got, _ := cl.c.latestNode("new"); kube.NodeCondition(got, v1.NodeReady) != nil && kube.NodeCondition(got, v1.NodeReady).Status == v1.ConditionUnknown {
		t.Fatalf("marked Unknown %v before --node-startup-grace-period", cfg.NodeStartupGracePeriod)
	}
	cl.run(10 * time.Second)
	got, _ := cl.c.latestNode("new")
	if c := kube.NodeCondition(got, v1.NodeReady); c == nil || c.Status != v1.ConditionUnknown {
		t.Fatalf("Ready = %+v after the startup grace, want Unknown", c)
	}
	if _, ok := cl.apiTaints("new")[v1.TaintNodeUnreachable+":"+string(v1.TaintEffectNoExecute)]; !ok {
		t.Errorf("taints %v lack unreachable:NoExecute", cl.apiTaints("new"))
	}
}
