package integration

import (
	"context"
	"fmt"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	nscloud "github.com/nodeshepherd/nodeshepherd/pkg/cloudprovider"
	fakecloud "github.com/nodeshepherd/nodeshepherd/pkg/cloudprovider/fake"
	"github.com/nodeshepherd/nodeshepherd/test/framework"
)

// TestFakeCloudRebootAndReplace (issue 33, point 3): the fake provider's
// repair requests, carried out by fakenodes, on the real control plane. A
// reboot switches the machine off (the node falls silent) and on again with
// a new boot ID; the same request sent again, before or after it was carried
// out (an answer lost), is carried out once. A replace deletes the Node, its
// Lease and its pods, and a new machine registers the Node anew: a new UID,
// a new boot ID, Ready, no pods.
func TestFakeCloudRebootAndReplace(t *testing.T) {
	_, client := lifecycleCluster(t)
	nodes := fastNodes(client, 2, false)
	nodes.RebootDowntime, nodes.ReplaceDowntime = 3*time.Second, 3*time.Second
	m := framework.StartFakeNodes(t, nodes)
	names := m.NodeNames()
	for _, n := range names { // no node lifecycle controller runs: Ready is enough
		framework.Eventually(t, time.Minute, n+" Ready", nodeCondition(client, n, v1.NodeReady, v1.ConditionTrue))
	}
	ctx := framework.Context(t)
	p := fakecloud.New(client)

	before := getNode(t, client, names[0])
	id := nscloud.RequestID(before, "reboot")
	for range 2 { // the second: the same request, its answer lost
		if err := p.Reboot(ctx, before, id, nscloud.NoPremise); err != nil {
			t.Fatalf("reboot: %v", err)
		}
	}
	done := func(node, id string) func(context.Context) (bool, string, error) {
		return func(ctx context.Context) (bool, string, error) {
			cm, err := client.CoreV1().ConfigMaps(fakecloud.ConfigMapNamespace).Get(ctx, fakecloud.RequestsConfigMapName, metav1.GetOptions{})
			if err != nil {
				return false, "", err
			}
			r, err := fakecloud.ParseRequest(cm.Data[node])
			return err == nil && r.ID == id && r.Done != nil, cm.Data[node], nil
		}
	}
	framework.Eventually(t, 30*time.Second, "reboot carried out", done(names[0], id))
	framework.Eventually(t, 60*time.Second, names[0]+" Ready again with a new boot", func(ctx context.Context) (bool, string, error) {
		n, err := client.CoreV1().Nodes().Get(ctx, names[0], metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		ready := false
		for _, c := range n.Status.Conditions {
			ready = ready || (c.Type == v1.NodeReady && c.Status == v1.ConditionTrue)
		}
		boot := n.Status.NodeInfo.BootID
		return ready && boot != before.Status.NodeInfo.BootID && n.UID == before.UID, fmt.Sprintf("boot %s, ready %v", boot, ready), nil
	})
	// Sent again after it was carried out: still done, not carried out again.
	if err := p.Reboot(ctx, before, id, nscloud.NoPremise); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, 5*time.Second, "the old request left done", done(names[0], id))

	old := getNode(t, client, names[1])
	// The pod's ServiceAccount, which kube-controller-manager may not have
	// created yet.
	sa := &v1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default", Namespace: "default"}}
	if _, err := client.CoreV1().ServiceAccounts("default").Create(ctx, sa, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	pod := createTEPod(t, client, "on-old-machine", names[1], nil, nil)
	framework.Eventually(t, 30*time.Second, "pod running", func(ctx context.Context) (bool, string, error) {
		p, err := client.CoreV1().Pods("default").Get(ctx, pod.Name, metav1.GetOptions{})
		return err == nil && p.Status.Phase == v1.PodRunning, "", err
	})
	if err := p.Replace(ctx, old, nscloud.RequestID(old, "replace"), nscloud.NoPremise); err != nil {
		t.Fatalf("replace: %v", err)
	}
	framework.Eventually(t, 90*time.Second, names[1]+" registered anew by a new machine", func(ctx context.Context) (bool, string, error) {
		n, err := client.CoreV1().Nodes().Get(ctx, names[1], metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, "Node gone", nil
		}
		if err != nil {
			return false, "", err
		}
		ready := false
		for _, c := range n.Status.Conditions {
			ready = ready || (c.Type == v1.NodeReady && c.Status == v1.ConditionTrue)
		}
		return n.UID != old.UID && ready && n.Status.NodeInfo.BootID != old.Status.NodeInfo.BootID,
			fmt.Sprintf("uid %s, ready %v, boot %s", n.UID, ready, n.Status.NodeInfo.BootID), nil
	})
	if _, err := client.CoreV1().Pods("default").Get(ctx, pod.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the replaced machine's pod is still there: %v", err)
	}
}
