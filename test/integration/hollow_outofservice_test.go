package integration

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeshepherd/nodeshepherd/pkg/controller/outofservice"
	"github.com/nodeshepherd/nodeshepherd/pkg/controlplane"
	"github.com/nodeshepherd/nodeshepherd/pkg/hollownode"
	"github.com/nodeshepherd/nodeshepherd/pkg/kube"
	"github.com/nodeshepherd/nodeshepherd/test/framework"
)

// TestHollowOutOfService (issue 47): the outofservice controller on hollow
// nodes, as on fake ones (TestOutOfServiceCloudProviderAndReboot): a hollow
// machine shut down is confirmed off by the fake cloud provider and gets
// the out-of-service taint once NotReady for --out-of-service-after, with
// the boot it was confirmed for; the pod left Terminating on it (no kubelet
// to confirm the deletion) is force-deleted; the machine started again
// boots with a new boot ID, which the real kubelet reports, and the taint
// goes. The hollow kubelet renews its Lease every 10 s, so the grace
// period is kube-controller-manager's order (40 s), not the fake nodes' 3 s.
func TestHollowOutOfService(t *testing.T) {
	cfg, client := lifecycleCluster(t)
	ctx := framework.Context(t)
	fleet, err := hollownode.Start(ctx, hollownode.Config{
		Binary: filepath.Join(controlplane.FindBinDir(), hollownode.Binary),
		Server: cfg, Nodes: 3, Zones: []string{"zone-a"}, Dir: t.TempDir(),
	}, 2*time.Minute, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(fleet.Stop)
	c := oosConfig(cloudConfig("fake", 100, "45%"), 1)
	c.NodeLifecycle.NodeMonitorGracePeriod, c.NodeLifecycle.NodeStartupGracePeriod = 40*time.Second, time.Minute
	framework.StartNodeShepherd(t, cfg, c, withOutOfService)
	names := fleet.Names()
	waitNodesReady(t, client, names...)
	victim := names[1]
	boot := fleet.BootID(victim)
	framework.Eventually(t, 30*time.Second, "the kubelet reporting its boot ID", bootIDReported(client, victim, boot))
	createPod(t, client, "on-hollow", victim, nil)
	framework.Eventually(t, time.Minute, "the pod Ready on the hollow node", podReadyIs(client, "on-hollow", v1.ConditionTrue))

	if err := fleet.MachineShutdown(ctx, victim); err != nil {
		t.Fatal(err)
	}
	off := time.Now()
	framework.Eventually(t, 2*time.Minute, "the node NotReady", func(ctx context.Context) (bool, string, error) {
		n, err := client.CoreV1().Nodes().Get(ctx, victim, metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		return !kube.NodeReady(n), "Ready", nil
	})
	// The deletion no kubelet confirms: the pod stays Terminating.
	if err := client.CoreV1().Pods("default").Delete(ctx, "on-hollow", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, time.Minute, "out-of-service taint", nodeTainted(client, victim, outofservice.Taint, true))
	t.Logf("out-of-service taint %v after the shutdown", time.Since(off).Round(100*time.Millisecond))
	if due := kube.NotBefore(readySince(t, client, victim)).Add(oosAfter); time.Now().Before(due) {
		t.Errorf("tainted before NotReady + %v", oosAfter)
	}
	n := getNode(t, client, victim)
	if n.Annotations[outofservice.AnnotationBootID] != boot || !strings.Contains(n.Annotations[outofservice.AnnotationConfirmedBy], outofservice.SourceCloudProvider) {
		t.Errorf("annotations after the taint: %v, want boot ID %s confirmed by the cloud provider", n.Annotations, boot)
	}
	framework.Eventually(t, 90*time.Second, "the Terminating pod force-deleted", func(ctx context.Context) (bool, string, error) {
		_, err := client.CoreV1().Pods("default").Get(ctx, "on-hollow", metav1.GetOptions{})
		return apierrors.IsNotFound(err), fmt.Sprint(err), nil
	})

	if err := fleet.MachineStart(ctx, victim); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, 2*time.Minute, "taint removed after the reboot", nodeTainted(client, victim, outofservice.Taint, false))
	n = getNode(t, client, victim)
	if !kube.NodeReady(n) || n.Status.NodeInfo.BootID == boot || n.Status.NodeInfo.BootID != fleet.BootID(victim) {
		t.Errorf("taint removed with Ready %v, boot ID %q (first %q, the fleet's now %q)", kube.NodeReady(n), n.Status.NodeInfo.BootID, boot, fleet.BootID(victim))
	}
	if _, msgs := framework.WaitEvents(t, client, oosEvents(outofservice.EventTaintRemoved, victim), 1); !strings.Contains(msgs[0], "after a reboot") {
		t.Errorf("%s events: %v", outofservice.EventTaintRemoved, msgs)
	}
}
