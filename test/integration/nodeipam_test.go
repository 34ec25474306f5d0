package integration

import (
	"context"
	"fmt"
	"net/netip"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/nodeshepherd/nodeshepherd/pkg/controller/nodeipam"
	"github.com/nodeshepherd/nodeshepherd/pkg/controllers"
	"github.com/nodeshepherd/nodeshepherd/pkg/controlplane"
	"github.com/nodeshepherd/nodeshepherd/pkg/fakenode"
	"github.com/nodeshepherd/nodeshepherd/pkg/manager"
	"github.com/nodeshepherd/nodeshepherd/test/framework"
)

func ipamConfig(clusterCIDR string, masks ...int) controllers.Config {
	c := controllers.Default()
	c.NodeIPAM = nodeipam.Config{AllocateNodeCIDRs: true, ClusterCIDR: clusterCIDR, ServiceClusterIPRange: controlplane.ServiceClusterIPRange}
	switch len(masks) {
	case 1:
		c.NodeIPAM.NodeCIDRMaskSize = masks[0]
	case 2:
		c.NodeIPAM.NodeCIDRMaskSizeIPv4, c.NodeIPAM.NodeCIDRMaskSizeIPv6 = masks[0], masks[1]
	}
	return c
}

func onlyIPAM(o *manager.Options) { o.Controllers = []string{nodeipam.Name} }

// podCIDRs waits until want nodes have pod CIDRs and returns them by node.
func podCIDRs(t *testing.T, client kubernetes.Interface, want int) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	framework.Eventually(t, 90*time.Second, fmt.Sprintf("%d nodes with pod CIDRs", want), func(ctx context.Context) (bool, string, error) {
		nodes, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, "", err
		}
		out = map[string][]string{}
		for _, n := range nodes.Items {
			if len(n.Spec.PodCIDRs) > 0 {
				out[n.Name] = n.Spec.PodCIDRs
				if n.Spec.PodCIDR != n.Spec.PodCIDRs[0] {
					return false, "", fmt.Errorf("%s: podCIDR %s != podCIDRs[0] %s", n.Name, n.Spec.PodCIDR, n.Spec.PodCIDRs[0])
				}
			}
		}
		return len(out) == want, fmt.Sprintf("%d of %d", len(out), want), nil
	})
	return out
}

func assertDistinct(t *testing.T, cidrs map[string][]string) {
	t.Helper()
	seen := map[string]string{}
	for node, cs := range cidrs {
		for _, c := range cs {
			if other, dup := seen[c]; dup {
				t.Errorf("%s handed to both %s and %s", c, node, other)
			}
			seen[c] = node
		}
	}
}

func TestNodeIPAMDualStack200Nodes(t *testing.T) {
	cp := framework.StartControlPlane(t, controlplane.Config{})
	client := framework.Client(t, cp)
	framework.StartNodeShepherd(t, cp.RESTConfig(), ipamConfig("10.244.0.0/16,fd00:10:244::/56", 24, 64), onlyIPAM)
	framework.StartFakeNodes(t, fakenode.Config{Client: client, Nodes: 200})
	cidrs := podCIDRs(t, client, 200)
	assertDistinct(t, cidrs)
	v4, v6 := netip.MustParsePrefix("10.244.0.0/16"), netip.MustParsePrefix("fd00:10:244::/56")
	for node, cs := range cidrs {
		if len(cs) != 2 {
			t.Fatalf("%s: %v, want one CIDR per family", node, cs)
		}
		a, b := netip.MustParsePrefix(cs[0]), netip.MustParsePrefix(cs[1])
		if !v4.Contains(a.Addr()) || a.Bits() != 24 || !v6.Contains(b.Addr()) || b.Bits() != 64 {
			t.Errorf("%s: %v", node, cs)
		}
	}
}

// TestNodeIPAMReuseExhaustionAndRestart: a /24 split into /26 blocks; the
// fifth node waits with CIDRNotAvailable until a node is deleted, then gets
// its block; a restart with existing nodes allocates only to new ones.
func TestNodeIPAMReuseExhaustionAndRestart(t *testing.T) {
	asServiceAccount(t)
	cp := framework.StartControlPlane(t, controlplane.Config{})
	client := framework.Client(t, cp)
	cfg := ipamConfig("10.10.0.0/24", 26)
	ctx := framework.Context(t)
	createNode := func(name string) {
		if _, err := client.CoreV1().Nodes().Create(ctx, &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 3; i++ {
		createNode(fmt.Sprintf("n%d", i))
	}
	first := framework.StartNodeShepherd(t, cp.RESTConfig(), cfg, onlyIPAM)
	before := podCIDRs(t, client, 3)
	first.Stop()

	// Restart with existing nodes: only the new ones are allocated, nothing moves.
	framework.StartNodeShepherd(t, cp.RESTConfig(), cfg, onlyIPAM)
	createNode("n3")
	createNode("n4") // the range has 4 blocks: n4 must wait
	after := podCIDRs(t, client, 4)
	assertDistinct(t, after)
	for n, cs := range before {
		if fmt.Sprint(after[n]) != fmt.Sprint(cs) {
			t.Errorf("%s changed from %v to %v across a restart", n, cs, after[n])
		}
	}
	framework.Eventually(t, time.Minute, "CIDRNotAvailable event for n4", func(ctx context.Context) (bool, string, error) {
		evs, err := client.CoreV1().Events("default").List(ctx, metav1.ListOptions{FieldSelector: "reason=CIDRNotAvailable,involvedObject.name=n4"})
		if err != nil || len(evs.Items) == 0 {
			return false, fmt.Sprint(err), nil
		}
		return true, evs.Items[0].Message, nil
	})
	freed := after["n1"]
	if err := client.CoreV1().Nodes().Delete(ctx, "n1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, time.Minute, "n4 gets the freed block", func(ctx context.Context) (bool, string, error) {
		n, err := client.CoreV1().Nodes().Get(ctx, "n4", metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		return fmt.Sprint(n.Spec.PodCIDRs) == fmt.Sprint(freed), fmt.Sprint(n.Spec.PodCIDRs), nil
	})
}

func TestNodeIPAMLeavesForeignCIDRsAlone(t *testing.T) {
	cp := framework.StartControlPlane(t, controlplane.Config{})
	client := framework.Client(t, cp)
	ctx := framework.Context(t)
	for name, cidr := range map[string]string{"outside": "192.168.7.0/24", "first": "10.10.0.0/26", "dup": "10.10.0.0/26"} {
		n := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1.NodeSpec{PodCIDR: cidr, PodCIDRs: []string{cidr}}}
		if _, err := client.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	framework.StartNodeShepherd(t, cp.RESTConfig(), ipamConfig("10.10.0.0/24", 26), onlyIPAM)
	framework.Eventually(t, time.Minute, "events for the unusable CIDRs", func(ctx context.Context) (bool, string, error) {
		evs, err := client.CoreV1().Events("default").List(ctx, metav1.ListOptions{FieldSelector: "reason=" + nodeipam.EventCIDRAssignmentFailed})
		if err != nil {
			return false, "", err
		}
		return len(evs.Items) == 2, fmt.Sprintf("%d events", len(evs.Items)), nil
	})
	for name, cidr := range map[string]string{"outside": "192.168.7.0/24", "dup": "10.10.0.0/26"} {
		n, err := client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil || n.Spec.PodCIDR != cidr {
			t.Errorf("%s changed: %v %v", name, n.Spec.PodCIDRs, err)
		}
	}
}
