package integration

import (
	"context"
	"fmt"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeshepherd/nodeshepherd/pkg/controller/nodelifecycle"
	"github.com/nodeshepherd/nodeshepherd/pkg/controlplane"
	"github.com/nodeshepherd/nodeshepherd/pkg/fakenode"
	"github.com/nodeshepherd/nodeshepherd/pkg/kube"
	"github.com/nodeshepherd/nodeshepherd/test/framework"
)

// restoreConfig: compressed lifecycle timings and a restore delay long
// enough to kill the leader between the mark and the restore.
const restoreConfig = `apiVersion: nodeshepherd.io/v1alpha1
kind: NodeShepherdConfiguration
manager:
  controllers: [nodelifecycle]
` + fastElection + `shared:
  nodeMonitorPeriod: 1s
nodeLifecycle:
  nodeMonitorGracePeriod: 3s
  nodeStartupGracePeriod: 5s
  nodeEvictionRate: 100
  podReadinessRestoreDelay: 2s
`

// TestReadinessRestoredAfterFailover is seed 002 across a leader change: the
// leader marks a pod NotReady during a network blip and is killed; the
// standby, which never saw the mark happen, reads it from the pod and
// restores readiness once the node is back.
func TestReadinessRestoredAfterFailover(t *testing.T) {
	cp := framework.StartControlPlane(t, controlplane.Config{ControllerManager: true, Scheduler: true})
	client := framework.Client(t, cp)
	m := framework.StartFakeNodes(t, fastNodes(client, 2, true)) // the 1.15 kubelet that never re-posts
	node := m.NodeNames()[0]
	rs := startReplicas(t, cp, restoreConfig, 2)
	waitNodesReady(t, client, m.NodeNames()...)
	createPod(t, client, "app", node, tolerations(nil))
	framework.Eventually(t, time.Minute, "pod Ready", podReadyIs(client, "app", v1.ConditionTrue))

	partition(t, m, fakenode.Partition, fakenode.Target{Nodes: []string{node}})
	framework.Eventually(t, time.Minute, "pod marked NotReady, with the mark on the pod", func(ctx context.Context) (bool, string, error) {
		p, err := client.CoreV1().Pods("default").Get(ctx, "app", metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		mark := kube.PodCondition(p, nodelifecycle.MarkedCondition)
		return !kube.PodReady(p) && mark != nil && mark.Status == v1.ConditionTrue, fmt.Sprintf("mark %+v", mark), nil
	})
	killed, standby := rs.killLeader(takeoverDeadline)
	t.Logf("killed %s after the mark; %s leads", killed.name, standby.name)
	partition(t, m, fakenode.Heal, fakenode.Target{Nodes: []string{node}})
	framework.Eventually(t, time.Minute, "node Ready again", nodeCondition(client, node, v1.NodeReady, v1.ConditionTrue))
	framework.Eventually(t, 30*time.Second, "readiness restored by the standby", podReadyIs(client, "app", v1.ConditionTrue))
	p, err := client.CoreV1().Pods("default").Get(framework.Context(t), "app", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if mark := kube.PodCondition(p, nodelifecycle.MarkedCondition); mark == nil || mark.Status != v1.ConditionFalse || mark.Reason != "ReadinessRestored" {
		t.Errorf("the mark is not settled after the restore: %+v", mark)
	}
	if v := standby.ns.Metric(t, "nodeshepherd_nodelifecycle_pod_readiness_restored_total", nil); v != 1 {
		t.Errorf("the standby's pod_readiness_restored_total = %v, want 1", v)
	}
	framework.WaitEvents(t, client, "reason="+nodelifecycle.EventReadinessRestored, 1)
}
