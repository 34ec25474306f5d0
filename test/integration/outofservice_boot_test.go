package integration

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/nodeshepherd/nodeshepherd/pkg/controller/outofservice"
	"github.com/nodeshepherd/nodeshepherd/pkg/controlplane"
	"github.com/nodeshepherd/nodeshepherd/pkg/fakenode"
	"github.com/nodeshepherd/nodeshepherd/pkg/kube"
	"github.com/nodeshepherd/nodeshepherd/pkg/localcluster"
	"github.com/nodeshepherd/nodeshepherd/test/framework"
)

// bootIDShape is /proc/sys/kernel/random/boot_id's shape.
var bootIDShape = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)

// runPodOn creates a pod bound to node and waits until it runs.
func runPodOn(t *testing.T, client kubernetes.Interface, name, node string) {
	t.Helper()
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: v1.PodSpec{NodeName: node, Containers: []v1.Container{{Name: "c", Image: "example.com/app"}}}}
	// kube-controller-manager creates the default ServiceAccount pods need.
	framework.Eventually(t, 30*time.Second, name+" created", func(ctx context.Context) (bool, string, error) {
		_, err := client.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{})
		return err == nil, fmt.Sprint(err), nil
	})
	framework.Eventually(t, 30*time.Second, name+" Running", func(ctx context.Context) (bool, string, error) {
		p, err := client.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		return p.Status.Phase == v1.PodRunning, string(p.Status.Phase), nil
	})
}

// deleteUnconfirmed deletes a pod of a silent node: no kubelet confirms it,
// so it stays Terminating until something force-deletes it.
func deleteUnconfirmed(t *testing.T, client kubernetes.Interface, name string) {
	t.Helper()
	ctx := framework.Context(t)
	if err := client.CoreV1().Pods("default").Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if p, err := client.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{}); err != nil || p.DeletionTimestamp == nil {
		t.Fatalf("pod %s not Terminating on the silent node: %v", name, err)
	}
}

// TestOutOfServiceConfirmationEndsWithTheBoot (issue 30): a person's
// confirmation applies to the boot it was given for. A powered-off node
// confirmed by a person is tainted and its terminating pod force-deleted;
// its machine boots again (a new boot ID) and is Ready: the taint and the
// confirmation go. A later partition of that boot, longer than
// --out-of-service-after, taints nothing and force-deletes nothing, while a
// node confirmed at the same time is tainted (the controller did look).
func TestOutOfServiceConfirmationEndsWithTheBoot(t *testing.T) {
	cfg, client := lifecycleCluster(t)
	m := framework.StartFakeNodes(t, fastNodes(client, 4, false))
	framework.StartNodeShepherd(t, cfg, oosConfig(fastLifecycle(100), 2), withOutOfService)
	names := m.NodeNames()
	waitNodesReady(t, client, names...)
	victim, witness := names[0], names[1]
	ctx := framework.Context(t)

	runPodOn(t, client, "first", victim)
	boot1 := getNode(t, client, victim).Status.NodeInfo.BootID
	machine(t, m, fakenode.MachineShutdown, victim)
	framework.Eventually(t, 30*time.Second, "victim not Ready", nodeCondition(client, victim, v1.NodeReady, v1.ConditionUnknown))
	deleteUnconfirmed(t, client, "first")
	annotateOutOfService(t, client, victim, ptr.To("power supply failed"))
	framework.Eventually(t, 30*time.Second, "out-of-service taint", nodeTainted(client, victim, outofservice.Taint, true))
	if got := getNode(t, client, victim).Annotations[outofservice.AnnotationConfirmationBootID]; got != boot1 {
		t.Errorf("confirmation recorded for boot %q, want the powered-off boot %q", got, boot1)
	}
	framework.Eventually(t, 90*time.Second, "first pod force-deleted by the pod GC", func(ctx context.Context) (bool, string, error) {
		_, err := client.CoreV1().Pods("default").Get(ctx, "first", metav1.GetOptions{})
		return apierrors.IsNotFound(err), fmt.Sprint(err), nil
	})

	// The machine boots again: Ready with a new boot ID, untainted, and the
	// confirmation of the previous boot is gone with the taint.
	machine(t, m, fakenode.MachineStart, victim)
	framework.Eventually(t, 30*time.Second, "taint removed after the reboot", nodeTainted(client, victim, outofservice.Taint, false))
	n := getNode(t, client, victim)
	boot2 := n.Status.NodeInfo.BootID
	if !kube.NodeReady(n) || boot2 == boot1 || !bootIDShape.MatchString(boot2) {
		t.Errorf("after the reboot: Ready %v, boot ID %q (was %q)", kube.NodeReady(n), boot2, boot1)
	}
	for _, a := range []string{outofservice.AnnotationConfirm, outofservice.AnnotationConfirmationBootID} {
		if v, ok := n.Annotations[a]; ok {
			t.Errorf("confirmation of boot %s still on the node after the reboot: %s=%q", boot1, a, v)
		}
	}

	// A partition of the machine that runs, well past --out-of-service-after.
	runPodOn(t, client, "second", victim)
	partition(t, m, fakenode.Partition, fakenode.Target{Nodes: []string{victim}})
	framework.Eventually(t, 30*time.Second, "victim silent again", nodeCondition(client, victim, v1.NodeReady, v1.ConditionUnknown))
	deleteUnconfirmed(t, client, "second")
	due := kube.NotBefore(readySince(t, client, victim)).Add(oosAfter)
	// The witness is confirmed once the victim's wait is over: its taint,
	// at least --out-of-service-after later, shows that the controller
	// looked at the silent victim after its wait (it re-checks silent nodes
	// every --node-monitor-period, 1s here).
	framework.Eventually(t, 30*time.Second, "victim silent for --out-of-service-after", func(context.Context) (bool, string, error) {
		return time.Now().After(due), "due " + due.String(), nil
	})
	partition(t, m, fakenode.Partition, fakenode.Target{Nodes: []string{witness}})
	framework.Eventually(t, 30*time.Second, "witness not Ready", nodeCondition(client, witness, v1.NodeReady, v1.ConditionUnknown))
	annotateOutOfService(t, client, witness, ptr.To("witness"))
	framework.Eventually(t, 30*time.Second, "witness tainted", nodeTainted(client, witness, outofservice.Taint, true))
	n = getNode(t, client, victim)
	if kube.FindTaint(n, outofservice.Taint) != nil {
		t.Errorf("partitioned node with boot %s tainted out of service on the confirmation of boot %s (annotations %v)", boot2, boot1, n.Annotations)
	}
	if p, err := client.CoreV1().Pods("default").Get(ctx, "second", metav1.GetOptions{}); err != nil || p.DeletionTimestamp == nil {
		t.Errorf("the partitioned node's terminating pod: %v (%v)", p, err)
	}
	if s := kube.NotBefore(readySince(t, client, victim)); !s.Add(oosAfter).Equal(due) {
		t.Errorf("the victim was not silent throughout: NotReady since %v", s)
	}

	// Said in the events: recorded for boot 1, removed with the taint.
	if _, msgs := framework.WaitEvents(t, client, oosEvents(outofservice.EventConfirmationRecorded, victim), 1); !strings.Contains(msgs[0], boot1) {
		t.Errorf("%s events: %v", outofservice.EventConfirmationRecorded, msgs)
	}
	if _, msgs := framework.WaitEvents(t, client, oosEvents(outofservice.EventTaintRemoved, victim), 1); !strings.Contains(msgs[0], "removed with the taint") {
		t.Errorf("%s events: %v", outofservice.EventTaintRemoved, msgs)
	}
	if cnt, msgs := framework.WaitEvents(t, client, oosEvents(outofservice.EventTaintAdded, victim), 1); cnt != 1 {
		t.Errorf("%s events: %v", outofservice.EventTaintAdded, msgs)
	}
}

// TestFakeNodesRestartNewBootID: a fakenodes process started again for
// nodes that exist reports a new random boot ID for each, as machines that
// start do (/proc/sys/kernel/random/boot_id).
func TestFakeNodesRestartNewBootID(t *testing.T) {
	cp := framework.StartControlPlane(t, controlplane.Config{})
	client := framework.Client(t, cp)
	cfg := fastNodes(client, 2, false)
	first, err := localcluster.StartNodes(framework.Context(t), cfg, localcluster.DefaultRegisterTimeout)
	if err != nil {
		t.Fatal(err)
	}
	names := first.Manager().NodeNames()
	boots := map[string]string{}
	framework.Eventually(t, 30*time.Second, "boot IDs reported", func(ctx context.Context) (bool, string, error) {
		for _, name := range names {
			n, err := client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, "", err
			}
			if !bootIDShape.MatchString(n.Status.NodeInfo.BootID) {
				return false, fmt.Sprintf("%s boot ID %q", name, n.Status.NodeInfo.BootID), nil
			}
			boots[name] = n.Status.NodeInfo.BootID
		}
		return true, "", nil
	})
	if boots[names[0]] == boots[names[1]] {
		t.Errorf("two machines share boot ID %s", boots[names[0]])
	}
	first.Stop()

	second, err := localcluster.StartNodes(framework.Context(t), cfg, localcluster.DefaultRegisterTimeout)
	if err != nil {
		t.Fatal(err)
	}
	defer second.Stop()
	framework.Eventually(t, 30*time.Second, "new boot IDs after the restart", func(ctx context.Context) (bool, string, error) {
		for _, name := range names {
			n, err := client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, "", err
			}
			if b := n.Status.NodeInfo.BootID; b == boots[name] || !bootIDShape.MatchString(b) {
				return false, fmt.Sprintf("%s boot ID %q, before the restart %q", name, b, boots[name]), nil
			}
		}
		return true, "", nil
	})
}
