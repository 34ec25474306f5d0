package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/nodeshepherd/nodeshepherd/pkg/controller/outofservice"
	"github.com/nodeshepherd/nodeshepherd/pkg/fakenode"
	"github.com/nodeshepherd/nodeshepherd/pkg/kube"
	"github.com/nodeshepherd/nodeshepherd/pkg/manager"
	"github.com/nodeshepherd/nodeshepherd/test/framework"
)

// confirmAsPerson annotates the node as `kubectl annotate` does: a merge
// patch under kubectl's own field manager, so that the node's managedFields
// say when the confirmation was written (the fake nodes share the test's
// client, and so its default field manager).
func confirmAsPerson(t *testing.T, client kubernetes.Interface, node, reason string) {
	t.Helper()
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{outofservice.AnnotationConfirm: reason}}})
	if _, err := client.CoreV1().Nodes().Patch(framework.Context(t), node, types.MergePatchType, patch,
		metav1.PatchOptions{FieldManager: "kubectl-annotate"}); err != nil {
		t.Fatal(err)
	}
}

// onlyOutOfService runs the outofservice controller alone, next to a
// nodeshepherd that runs the node lifecycle controllers.
func onlyOutOfService(o *manager.Options) { o.Controllers = []string{outofservice.Name} }

// TestOutOfServiceConfirmationOfAnEarlierBoot (issue 45, hole 4e): a
// person's confirmation is bound to the boot it was written during, not to
// the boot the node reports when the controller first reads it. While the
// outofservice controller is not running, a person confirms a powered-off
// machine dead; the machine boots again (a new boot ID), is Ready, and is
// then partitioned for longer than --out-of-service-after. When the
// controller starts it must not take the confirmation for the new boot: it
// neither records that boot nor taints the node, and says why (event
// OutOfServiceBlocked). Another machine, confirmed dead after its node went
// silent and not rebooted since, is tainted at once: its confirmation's
// write time (managedFields) is after the silence began, so its boot is
// known.
func TestOutOfServiceConfirmationOfAnEarlierBoot(t *testing.T) {
	cfg, client := lifecycleCluster(t)
	m := framework.StartFakeNodes(t, fastNodes(client, 4, false))
	// The node lifecycle controllers run throughout; the outofservice
	// controller starts later.
	framework.StartNodeShepherd(t, cfg, oosConfig(fastLifecycle(100), 2), nil)
	names := m.NodeNames()
	waitNodesReady(t, client, names...)
	victim, dead := names[0], names[1]

	boot1 := getNode(t, client, victim).Status.NodeInfo.BootID
	machine(t, m, fakenode.MachineShutdown, victim)
	framework.Eventually(t, 30*time.Second, "victim not Ready", nodeCondition(client, victim, v1.NodeReady, v1.ConditionUnknown))
	confirmAsPerson(t, client, victim, "power supply failed")
	machine(t, m, fakenode.MachineStart, victim)
	var boot2 string
	framework.Eventually(t, 30*time.Second, "victim Ready on a new boot", func(ctx context.Context) (bool, string, error) {
		n := getNode(t, client, victim)
		boot2 = n.Status.NodeInfo.BootID
		return kube.NodeReady(n) && boot2 != boot1, fmt.Sprintf("Ready %v, boot %q", kube.NodeReady(n), boot2), nil
	})
	partition(t, m, fakenode.Partition, fakenode.Target{Nodes: []string{victim}})
	framework.Eventually(t, 30*time.Second, "victim silent again", nodeCondition(client, victim, v1.NodeReady, v1.ConditionUnknown))

	machine(t, m, fakenode.MachineShutdown, dead)
	framework.Eventually(t, 30*time.Second, "dead node not Ready", nodeCondition(client, dead, v1.NodeReady, v1.ConditionUnknown))
	// The managedFields time has a precision of one second: the
	// confirmation is written in a later second than the silence began.
	silent := readySince(t, client, dead)
	framework.Eventually(t, 10*time.Second, "a second after the dead node went silent", func(context.Context) (bool, string, error) {
		return time.Now().After(silent.Add(1100 * time.Millisecond)), "silent since " + silent.String(), nil
	})
	confirmAsPerson(t, client, dead, "fan failure")
	deadBoot := getNode(t, client, dead).Status.NodeInfo.BootID

	due := kube.NotBefore(readySince(t, client, victim)).Add(oosAfter)
	if d := kube.NotBefore(readySince(t, client, dead)).Add(oosAfter); d.After(due) {
		due = d
	}
	framework.Eventually(t, 30*time.Second, "both silent for --out-of-service-after", func(context.Context) (bool, string, error) {
		return time.Now().After(due), "due " + due.String(), nil
	})

	framework.StartNodeShepherd(t, cfg, oosConfig(fastLifecycle(100), 2), onlyOutOfService)
	framework.Eventually(t, 60*time.Second, "the dead node tainted", nodeTainted(client, dead, outofservice.Taint, true))
	if got := getNode(t, client, dead).Annotations[outofservice.AnnotationConfirmationBootID]; got != deadBoot {
		t.Errorf("the dead node's confirmation recorded for boot %q, want its boot %q", got, deadBoot)
	}
	// The victim: tainted (the defect) or refused, whichever comes first.
	framework.Eventually(t, 60*time.Second, "the victim decided on", func(ctx context.Context) (bool, string, error) {
		if kube.FindTaint(getNode(t, client, victim), outofservice.Taint) != nil {
			return true, "", nil
		}
		evs, err := client.CoreV1().Events(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{FieldSelector: oosEvents(outofservice.EventBlocked, victim)})
		if err != nil {
			return false, "", err
		}
		return len(evs.Items) > 0, fmt.Sprintf("%d events", len(evs.Items)), nil
	})
	n := getNode(t, client, victim)
	if kube.FindTaint(n, outofservice.Taint) != nil {
		t.Fatalf("the victim, running boot %s, tainted out of service on a confirmation written during boot %s (annotations %v)", boot2, boot1, n.Annotations)
	}
	if got, ok := n.Annotations[outofservice.AnnotationConfirmationBootID]; ok {
		t.Errorf("a confirmation written during boot %s recorded for boot %q (the node runs boot %s)", boot1, got, boot2)
	}
	if _, msgs := framework.WaitEvents(t, client, oosEvents(outofservice.EventBlocked, victim), 1); !strings.Contains(msgs[0], "was written") {
		t.Errorf("%s events: %v", outofservice.EventBlocked, msgs)
	}
	// Decided once: the controller keeps looking at the silent victim and
	// still does not taint it.
	if cnt, msgs := framework.WaitEvents(t, client, oosEvents(outofservice.EventTaintAdded, dead), 1); cnt != 1 {
		t.Errorf("%s events on the dead node: %v", outofservice.EventTaintAdded, msgs)
	}
	if n := getNode(t, client, victim); kube.FindTaint(n, outofservice.Taint) != nil {
		t.Errorf("the victim tainted later: %v", n.Spec.Taints)
	}
}
