package integration

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeshepherd/nodeshepherd/pkg/controlplane"
	"github.com/nodeshepherd/nodeshepherd/pkg/hollownode"
	"github.com/nodeshepherd/nodeshepherd/test/framework"
)

// TestHollowNodesRealKubelet (issue 47, point 1): kubemark's hollow nodes,
// the real kubelet code of v1.37.1 with a fake runtime (bin/kubemark, built
// by make controlplane), register with their zones, run a pod, fall silent
// when their proxy cuts them off (nodeshepherd's node lifecycle controller
// marks the node Unknown and taints it, as for a partitioned fake node),
// come back Ready when healed, keep a condition written through the API
// (KernelDeadlock, as node-problem-detector writes it) through the
// kubelet's own status posts, and start again after a kubelet stop.
func TestHollowNodesRealKubelet(t *testing.T) {
	cp := framework.StartControlPlane(t, controlplane.Config{ControllerManager: true})
	client := framework.Client(t, cp)
	ctx := framework.Context(t)
	// The fleet is up before the controller starts: the controller judges
	// the nodes from their first heartbeats on.
	fleet, err := hollownode.Start(ctx, hollownode.Config{
		Binary: filepath.Join(controlplane.FindBinDir(), hollownode.Binary),
		Server: cp.RESTConfig(), Nodes: 2, Zones: []string{"zone-a", "zone-b"}, Dir: t.TempDir(),
	}, 2*time.Minute, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(fleet.Stop)
	names := fleet.Names()
	for i, want := range []string{"zone-a", "zone-b"} {
		n := getNode(t, client, names[i])
		if got := n.Labels["topology.kubernetes.io/zone"]; got != want {
			t.Errorf("%s: zone %q, want %q", names[i], got, want)
		}
		if n.Status.NodeInfo.KubeletVersion == "" {
			t.Errorf("%s reports no kubelet version", names[i])
		}
	}
	// The kubelet's own Lease (40 s, renewed every 10 s) and a grace of
	// 20 s: two renewals missed.
	cfg := fastLifecycle(100)
	cfg.NodeLifecycle.NodeMonitorGracePeriod = 20 * time.Second
	framework.StartNodeShepherd(t, cp.RESTConfig(), cfg, nil)

	createPod(t, client, "on-hollow", names[0], nil)
	framework.Eventually(t, time.Minute, "the pod Running and Ready on the hollow node", func(ctx context.Context) (bool, string, error) {
		p, err := client.CoreV1().Pods("default").Get(ctx, "on-hollow", metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		for _, c := range p.Status.Conditions {
			if c.Type == v1.PodReady && c.Status == v1.ConditionTrue {
				return p.Status.Phase == v1.PodRunning, string(p.Status.Phase), nil
			}
		}
		return false, fmt.Sprintf("%s %v", p.Status.Phase, p.Status.Conditions), nil
	})

	// A condition of another reporter, written as node-problem-detector
	// writes it (a status patch through the API).
	kernelDeadlock := v1.NodeConditionType("KernelDeadlock")
	if err := fleet.SetCondition(ctx, v1.NodeCondition{Type: kernelDeadlock, Status: v1.ConditionTrue}, names[1]); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, 30*time.Second, "KernelDeadlock=True on the hollow node", nodeCondition(client, names[1], kernelDeadlock, v1.ConditionTrue))

	if err := fleet.Partition(names[1]); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, 2*time.Minute, "the partitioned hollow node Unknown", nodeCondition(client, names[1], v1.NodeReady, v1.ConditionUnknown))
	framework.Eventually(t, time.Minute, "the partitioned hollow node tainted unreachable", nodeTainted(client, names[1], v1.Taint{Key: v1.TaintNodeUnreachable, Effect: v1.TaintEffectNoExecute}, true))
	if err := fleet.Heal(names[1]); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, 2*time.Minute, "the healed hollow node Ready", nodeCondition(client, names[1], v1.NodeReady, v1.ConditionTrue))
	// The kubelet posted its Ready after the heal and kept the foreign
	// condition; cleared through the API, it is False.
	if ok, got, err := nodeCondition(client, names[1], kernelDeadlock, v1.ConditionTrue)(ctx); err != nil || !ok {
		t.Errorf("after the kubelet's own status post: %s (%v), want KernelDeadlock=True kept", got, err)
	}
	if err := fleet.SetCondition(ctx, v1.NodeCondition{Type: kernelDeadlock, Status: hollownode.HealthyStatus(kernelDeadlock)}, names[1]); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, 30*time.Second, "KernelDeadlock=False after the clear", nodeCondition(client, names[1], kernelDeadlock, v1.ConditionFalse))

	// A kubelet stopped and started: the real start-up path, the pod kept.
	if err := fleet.KubeletStop(names[0]); err != nil {
		t.Fatal(err)
	}
	if len(fleet.Usage()) != 1 {
		t.Errorf("after a kubelet stop, %d kubelets run, want 1", len(fleet.Usage()))
	}
	if err := fleet.KubeletStart(names[0]); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, 2*time.Minute, "the restarted hollow kubelet's node Ready", nodeCondition(client, names[0], v1.NodeReady, v1.ConditionTrue))
	for _, u := range fleet.Usage() {
		if u.RSS <= 0 {
			t.Errorf("%s: no resident memory read for pid %d", u.Name, u.PID)
		}
	}
	if err := fleet.Partition("no-such-node"); err == nil {
		t.Error("a partition of an unknown node is not refused")
	}
}
