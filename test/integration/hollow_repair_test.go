package integration

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	nscloud "github.com/nodeshepherd/nodeshepherd/pkg/cloudprovider"
	fakecloud "github.com/nodeshepherd/nodeshepherd/pkg/cloudprovider/fake"
	"github.com/nodeshepherd/nodeshepherd/pkg/controlplane"
	"github.com/nodeshepherd/nodeshepherd/pkg/hollownode"
	"github.com/nodeshepherd/nodeshepherd/pkg/kube"
	"github.com/nodeshepherd/nodeshepherd/test/framework"
)

// TestHollowFakeCloudRepairs (issue 47, point 2): the fake cloud provider's
// repair requests are carried out on hollow machines as on fake ones.
//
//   - reboot: the machine is off (the provider answers it shut down, no
//     kubelet runs), then boots with a new boot ID, which the fresh kubelet
//     reports on the same Node (the same UID), with one Rebooted event; the
//     request, sent twice (its answer lost), is carried out once and marked
//     done, and sent again once done it is left done, the machine as it is;
//   - replace: the machine's Node, Lease and pods go (not the other node's
//     pods: the real API server's field selector), and a new machine's
//     kubelet registers the Node anew: a new UID, a new boot ID, Ready, a
//     Lease owned by the new Node; the request is done once it has;
//   - poweroff: the machine is shut down and stays off: the provider answers
//     InstanceShutdown true, no kubelet runs on it; the request is done.
func TestHollowFakeCloudRepairs(t *testing.T) {
	cp := framework.StartControlPlane(t, controlplane.Config{ControllerManager: true})
	client := framework.Client(t, cp)
	ctx := framework.Context(t)
	const downtime = 3 * time.Second
	fleet, err := hollownode.Start(ctx, hollownode.Config{
		Binary: filepath.Join(controlplane.FindBinDir(), hollownode.Binary),
		Server: cp.RESTConfig(), Nodes: 2, Zones: []string{"zone-a"}, Dir: t.TempDir(),
		RebootDowntime: downtime, ReplaceDowntime: downtime,
	}, 2*time.Minute, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(fleet.Stop)
	names := fleet.Names()
	rebooted, replaced := names[0], names[1]
	cloud := fakecloud.New(client)
	for _, n := range names {
		framework.Eventually(t, time.Minute, n+" reporting its boot ID", bootIDReported(client, n, fleet.BootID(n)))
	}
	createPod(t, client, "stays", rebooted, nil)
	createPod(t, client, "goes", replaced, nil)
	for _, p := range []string{"stays", "goes"} {
		framework.Eventually(t, 2*time.Minute, p+" Ready", podReadyIs(client, p, v1.ConditionTrue))
	}

	// Reboot, sent twice.
	before := getNode(t, client, rebooted)
	boot1 := fleet.BootID(rebooted)
	id := nscloud.RequestID(before, "reboot")
	asked := time.Now()
	for range 2 {
		if err := cloud.Reboot(ctx, before, id, nscloud.NoPremise); err != nil {
			t.Fatalf("reboot: %v", err)
		}
	}
	framework.Eventually(t, 30*time.Second, "the reboot marked done", requestDone(client, rebooted, id))
	framework.Eventually(t, 2*time.Minute, rebooted+" booted: a new boot ID reported, the same Node", func(ctx context.Context) (bool, string, error) {
		n, err := client.CoreV1().Nodes().Get(ctx, rebooted, metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		boot := n.Status.NodeInfo.BootID
		return boot != boot1 && boot == fleet.BootID(rebooted) && n.UID == before.UID,
			fmt.Sprintf("boot %s (fleet %s), uid %s", boot, fleet.BootID(rebooted), n.UID), nil
	})
	if took := time.Since(asked); took < downtime {
		t.Errorf("the rebooted machine was back %v after the request, before its downtime of %v", took, downtime)
	}
	boot2 := fleet.BootID(rebooted)
	framework.Eventually(t, time.Minute, "one Rebooted event for the new boot", rebootedEvents(client, rebooted, boot2, 1))
	framework.Eventually(t, 2*time.Minute, rebooted+" Ready after the reboot", nodeCondition(client, rebooted, v1.NodeReady, v1.ConditionTrue))
	if off, err := cloud.InstanceShutdown(ctx, getNode(t, client, rebooted)); err != nil || off {
		t.Errorf("after the reboot the provider answers shut down %v (%v), want false", off, err)
	}
	// Sent again once done: accepted, left done, not carried out again.
	if err := cloud.Reboot(ctx, before, id, nscloud.NoPremise); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, 5*time.Second, "the reboot sent again left done", requestDone(client, rebooted, id))
	if got := fleet.BootID(rebooted); got != boot2 {
		t.Errorf("the reboot sent again once done booted the machine again: boot %s, was %s", got, boot2)
	}

	// Replace.
	old := getNode(t, client, replaced)
	oldBoot := fleet.BootID(replaced)
	rid := nscloud.RequestID(old, "replace")
	if err := cloud.Replace(ctx, old, rid, nscloud.NoPremise); err != nil {
		t.Fatalf("replace: %v", err)
	}
	framework.Eventually(t, 30*time.Second, "the replaced machine's Node and pod deleted", func(ctx context.Context) (bool, string, error) {
		n, err := client.CoreV1().Nodes().Get(ctx, replaced, metav1.GetOptions{})
		if err == nil && n.UID != old.UID {
			return true, "a new Node already", nil // deleted, and registered anew
		}
		_, perr := client.CoreV1().Pods("default").Get(ctx, "goes", metav1.GetOptions{})
		return apierrors.IsNotFound(err) && apierrors.IsNotFound(perr), fmt.Sprintf("Node: %v, pod: %v", err, perr), nil
	})
	framework.Eventually(t, 2*time.Minute, replaced+" registered anew by a new machine", func(ctx context.Context) (bool, string, error) {
		n, err := client.CoreV1().Nodes().Get(ctx, replaced, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, "Node gone", nil
		}
		if err != nil {
			return false, "", err
		}
		ready := kube.NodeCondition(n, v1.NodeReady)
		return n.UID != old.UID && n.Status.NodeInfo.BootID != oldBoot && n.Status.NodeInfo.BootID == fleet.BootID(replaced) && ready != nil && ready.Status == v1.ConditionTrue,
			fmt.Sprintf("uid %s, boot %s, ready %v", n.UID, n.Status.NodeInfo.BootID, ready), nil
	})
	framework.Eventually(t, 30*time.Second, "the replacement marked done", requestDone(client, replaced, rid))
	framework.Eventually(t, time.Minute, "the new Node's Lease", func(ctx context.Context) (bool, string, error) {
		l, err := client.CoordinationV1().Leases(v1.NamespaceNodeLease).Get(ctx, replaced, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, "no Lease", nil
		}
		if err != nil {
			return false, "", err
		}
		n := getNode(t, client, replaced)
		return len(l.OwnerReferences) == 1 && l.OwnerReferences[0].UID == n.UID, fmt.Sprintf("owners %+v", l.OwnerReferences), nil
	})
	if _, err := client.CoreV1().Pods("default").Get(ctx, "goes", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the replaced machine's pod is still there: %v", err)
	}
	if _, err := client.CoreV1().Pods("default").Get(ctx, "stays", metav1.GetOptions{}); err != nil {
		t.Errorf("the other node's pod went with the replaced machine: %v", err)
	}
	if exists, err := cloud.InstanceExists(ctx, getNode(t, client, replaced)); err != nil || !exists {
		t.Errorf("after the replacement the provider answers the machine exists %v (%v), want true", exists, err)
	}

	// Power-off.
	node := getNode(t, client, rebooted)
	pid := nscloud.RequestID(node, "poweroff")
	if err := cloud.PowerOff(ctx, node, pid, nscloud.NoPremise); err != nil {
		t.Fatalf("power-off: %v", err)
	}
	framework.Eventually(t, 30*time.Second, "the power-off marked done", requestDone(client, rebooted, pid))
	if off, err := cloud.InstanceShutdown(ctx, getNode(t, client, rebooted)); err != nil || !off {
		t.Errorf("after the power-off the provider answers shut down %v (%v), want true", off, err)
	}
	for _, u := range fleet.Usage() {
		if u.Name == rebooted {
			t.Errorf("a kubelet runs on the powered-off machine: %+v", u)
		}
	}
	// It stays off: the Lease is renewed no more, not in 15 s (one and a
	// half renew intervals of the hollow kubelet).
	leaseSilent(t, client, rebooted, time.Now(), 15*time.Second)
	if off, err := cloud.InstanceShutdown(ctx, getNode(t, client, rebooted)); err != nil || !off {
		t.Errorf("15 s after the power-off the provider answers shut down %v (%v), want true", off, err)
	}
}

// requestDone: the fake cloud's request for node has ID id and is done.
func requestDone(client kubernetes.Interface, node, id string) func(context.Context) (bool, string, error) {
	return func(ctx context.Context) (bool, string, error) {
		cm, err := client.CoreV1().ConfigMaps(fakecloud.ConfigMapNamespace).Get(ctx, fakecloud.RequestsConfigMapName, metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		r, err := fakecloud.ParseRequest(cm.Data[node])
		return err == nil && r.ID == id && r.Done != nil, cm.Data[node], nil
	}
}
