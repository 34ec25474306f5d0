package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/nodeshepherd/nodeshepherd/pkg/cloudprovider/providers"
	"github.com/nodeshepherd/nodeshepherd/pkg/controller/outofservice"
	"github.com/nodeshepherd/nodeshepherd/pkg/fakenode"
	"github.com/nodeshepherd/nodeshepherd/pkg/kube"
	"github.com/nodeshepherd/nodeshepherd/pkg/remediation"
	"github.com/nodeshepherd/nodeshepherd/test/framework"
)

// setFenceRecord writes the node's repair record as the remediation
// controller does when policy gpu's ladder reaches its Fence step (the
// fourth) for boot fenceBoot. The node is read and written again on a
// conflict: the fake kubelet and the controllers write it meanwhile.
func setFenceRecord(t *testing.T, client kubernetes.Interface, node, fenceBoot string) {
	t.Helper()
	since := time.Now().Add(-time.Minute)
	record := remediation.EncodeState("gpu", remediation.ActionFence, remediation.State{Step: 3, StepSince: since,
		RepairSince: since.Add(-10 * time.Minute), BootID: fenceBoot, FenceBootID: fenceBoot})
	framework.UpdateNode(t, client, node, func(n *v1.Node) {
		if n.Annotations == nil {
			n.Annotations = map[string]string{}
		}
		n.Annotations[remediation.AnnotationState] = record
	})
}

// TestOutOfServiceForRemediationFence: a remediation policy's confirmed
// Fence step confirms the death of the boot it was taken for, and only while
// the cloud provider answers the machine off (issue 46). A powered-off node
// whose record fences its boot is tainted out of service once NotReady for
// --out-of-service-after, with the policy named among the confirmations,
// while a silent node whose record fences a boot that ended is left alone;
// the machine boots again and the taint goes. A record of the current boot
// on a machine the provider answers running is vetoed: refused, visibly
// (OutOfServiceBlocked), and the node is not tainted. (The records here are
// written by hand; TestRemediationFenceRunningMachineVetoed and
// TestRemediationFencePoweredOffVolumeMoves drive the remediation
// controller itself.)
func TestOutOfServiceForRemediationFence(t *testing.T) {
	cfg, client := lifecycleCluster(t)
	// One zone: the zone's state follows the share of silent nodes alone.
	m := framework.StartFakeNodes(t, zonedNodes(client, "zone-a=4", false))
	c := oosConfig(fastLifecycle(100), 2)
	c.CloudNodeLifecycle.Cloud = providers.Options{Name: "fake"}
	ns := framework.StartNodeShepherd(t, cfg, c, withOutOfService)
	names := m.NodeNames()
	waitNodesReady(t, client, names...)
	victim, stale, third := names[0], names[1], names[2]

	// Silent first, so that its wait is over before the victim's.
	partition(t, m, fakenode.Partition, fakenode.Target{Nodes: []string{stale}})
	framework.Eventually(t, 30*time.Second, "stale not Ready", nodeCondition(client, stale, v1.NodeReady, v1.ConditionUnknown))
	setFenceRecord(t, client, stale, "a-boot-that-ended")
	staleSince := kube.NotBefore(readySince(t, client, stale))

	boot1 := getNode(t, client, victim).Status.NodeInfo.BootID
	machine(t, m, fakenode.MachineShutdown, victim)
	framework.Eventually(t, 30*time.Second, "victim not Ready", nodeCondition(client, victim, v1.NodeReady, v1.ConditionUnknown))
	setFenceRecord(t, client, victim, boot1)
	framework.Eventually(t, 60*time.Second, "out-of-service taint", nodeTainted(client, victim, outofservice.Taint, true))
	if due := kube.NotBefore(readySince(t, client, victim)).Add(oosAfter); time.Now().Before(due) {
		t.Errorf("tainted before NotReady + %v", oosAfter)
	}
	n := getNode(t, client, victim)
	by := n.Annotations[outofservice.AnnotationConfirmedBy]
	if n.Annotations[outofservice.AnnotationBootID] != boot1 || !strings.Contains(by, outofservice.SourceRemediation+" ") ||
		!strings.Contains(by, "remediation policy gpu, step 4 (Fence)") || !strings.Contains(by, boot1) {
		t.Errorf("annotations after the taint: %v", n.Annotations)
	}
	if cnt, msgs := framework.WaitEvents(t, client, oosEvents(outofservice.EventTaintAdded, victim), 1); cnt != 1 || !strings.Contains(msgs[0], "remediation policy gpu") {
		t.Errorf("%s events: %v", outofservice.EventTaintAdded, msgs)
	}
	framework.Eventually(t, 30*time.Second, "the taint counted by its first source", func(context.Context) (bool, string, error) {
		v := ns.Metric(t, "nodeshepherd_outofservice_decisions_total", map[string]string{"action": "taint", "reason": outofservice.SourceCloudProvider})
		return v == 1, fmt.Sprint(v), nil
	})
	// The stale node was silent longer than the victim, and the controller
	// looks at silent nodes every --node-monitor-period (1s here): its
	// record, for another boot, confirmed nothing.
	if s := kube.NotBefore(readySince(t, client, stale)); !s.Equal(staleSince) {
		t.Errorf("the stale node was not silent throughout: NotReady since %v, was %v", s, staleSince)
	}
	if n := getNode(t, client, stale); kube.FindTaint(n, outofservice.Taint) != nil {
		t.Errorf("node %s tainted on a Fence of a boot that ended (annotations %v)", stale, n.Annotations)
	}
	if evs, err := client.CoreV1().Events("default").List(framework.Context(t), metav1.ListOptions{FieldSelector: "involvedObject.name=" + stale}); err != nil {
		t.Fatal(err)
	} else {
		for _, e := range evs.Items {
			if e.Source.Component == outofservice.EventSource {
				t.Errorf("event about the stale node: %s %s", e.Reason, e.Message)
			}
		}
	}

	// The machine boots again: Ready with another boot ID, the taint goes;
	// the repair record is the remediation controller's and stays.
	machine(t, m, fakenode.MachineStart, victim)
	framework.Eventually(t, 30*time.Second, "taint removed after the reboot", nodeTainted(client, victim, outofservice.Taint, false))
	n = getNode(t, client, victim)
	if !kube.NodeReady(n) || n.Status.NodeInfo.BootID == boot1 || n.Annotations[remediation.AnnotationState] == "" {
		t.Errorf("after the reboot: Ready %v, boot ID %q (was %q), annotations %v", kube.NodeReady(n), n.Status.NodeInfo.BootID, boot1, n.Annotations)
	}
	if _, msgs := framework.WaitEvents(t, client, oosEvents(outofservice.EventTaintRemoved, victim), 1); !strings.Contains(msgs[0], "after a reboot") {
		t.Errorf("%s events: %v", outofservice.EventTaintRemoved, msgs)
	}

	// A record of the current boot on a silent machine that runs: the
	// provider's "running" vetoes it.
	partition(t, m, fakenode.Partition, fakenode.Target{Nodes: []string{third}})
	framework.Eventually(t, 30*time.Second, third+" not Ready", nodeCondition(client, third, v1.NodeReady, v1.ConditionUnknown))
	setFenceRecord(t, client, third, getNode(t, client, third).Status.NodeInfo.BootID)
	if _, msgs := framework.WaitEvents(t, client, oosEvents(outofservice.EventBlocked, third), 1); !strings.Contains(msgs[0], "answers that the machine runs") ||
		!strings.Contains(msgs[0], "remediation policy gpu") {
		t.Errorf("%s events: %v", outofservice.EventBlocked, msgs)
	}
	never(t, 2*oosAfter, "the running machine tainted on its Fence record", nodeTainted(client, third, outofservice.Taint, true))
}
