package integration

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"

	fakecloud "github.com/nodeshepherd/nodeshepherd/pkg/cloudprovider/fake"
	"github.com/nodeshepherd/nodeshepherd/pkg/controlplane"
	"github.com/nodeshepherd/nodeshepherd/pkg/hollownode"
	"github.com/nodeshepherd/nodeshepherd/test/framework"
)

// TestHollowNodeBootID (issue 47, point 2): a hollow node (nodeshepherd's
// build of kubemark, --boot-id) reports the boot ID the fleet gave it; a
// kubelet restart keeps it and records no Rebooted event; a machine
// shutdown kills the kubelet (its Lease is renewed no more, a kubelet start
// leaves the machine off, the fake cloud provider answers it shut down); a
// machine start boots it with a new boot ID, which the kubelet reports,
// recording one Rebooted event on the Node, and the node is Ready again,
// its pod Running and Ready, the condition set without surviving reboots
// cleared and the one that survives kept; a machine deleted and started
// again is a new machine (another boot ID, no condition kept). Every start
// of kubemark, a restart or a boot, uses a root directory of its own.
func TestHollowNodeBootID(t *testing.T) {
	cp := framework.StartControlPlane(t, controlplane.Config{ControllerManager: true})
	client := framework.Client(t, cp)
	ctx := framework.Context(t)
	dir := t.TempDir()
	fleet, err := hollownode.Start(ctx, hollownode.Config{
		Binary: filepath.Join(controlplane.FindBinDir(), hollownode.Binary),
		Server: cp.RESTConfig(), Nodes: 1, Zones: []string{"zone-a"}, Dir: dir,
	}, 2*time.Minute, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(fleet.Stop)
	name := fleet.Names()[0]
	cloud := fakecloud.New(client)

	boot1 := fleet.BootID(name)
	if boot1 == "" {
		t.Fatal("the fleet gave the node no boot ID")
	}
	framework.Eventually(t, 30*time.Second, "the kubelet reporting the first boot ID", bootIDReported(client, name, boot1))
	createPod(t, client, "on-hollow", name, nil)
	framework.Eventually(t, time.Minute, "the pod Ready on the hollow node", podReadyIs(client, "on-hollow", v1.ConditionTrue))

	// A kubelet restart: the same boot.
	posted := readyHeartbeat(t, client, name)
	if err := fleet.KubeletStop(name); err != nil {
		t.Fatal(err)
	}
	restarted := time.Now() // the old kubelet is gone
	if err := fleet.KubeletStart(name); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, time.Minute, "the restarted kubelet renewing its Lease", leaseRenewedSince(client, name, restarted))
	framework.Eventually(t, time.Minute, "the restarted kubelet posting Ready", readyPosted(client, name, posted))
	t.Logf("kubelet restart: the Lease renewed and Ready posted %v after the start", time.Since(restarted).Round(100*time.Millisecond))
	if got := getNode(t, client, name).Status.NodeInfo.BootID; got != boot1 || fleet.BootID(name) != boot1 {
		t.Errorf("after a kubelet restart the node reports boot ID %q (the fleet %q), want the first, %q", got, fleet.BootID(name), boot1)
	}

	// Conditions of another reporter, one of them surviving reboots.
	kernelDeadlock, readonlyFS := v1.NodeConditionType("KernelDeadlock"), v1.NodeConditionType("ReadonlyFilesystem")
	if err := fleet.SetCondition(ctx, v1.NodeCondition{Type: kernelDeadlock, Status: v1.ConditionTrue}, name); err != nil {
		t.Fatal(err)
	}
	if err := fleet.SetLastingCondition(ctx, v1.NodeCondition{Type: readonlyFS, Status: v1.ConditionTrue}, name); err != nil {
		t.Fatal(err)
	}

	// The power cycle: off.
	posted = readyHeartbeat(t, client, name)
	shutdown := time.Now()
	if err := fleet.MachineShutdown(ctx, name); err != nil {
		t.Fatal(err)
	}
	if u := fleet.Usage(); len(u) != 0 {
		t.Errorf("after the machine's shutdown kubelets run: %+v", u)
	}
	if off, err := cloud.InstanceShutdown(ctx, getNode(t, client, name)); err != nil || !off {
		t.Errorf("the fake cloud provider answers shut down %v (%v), want true", off, err)
	}
	// A kubelet start and a heal leave a machine that is off as it is.
	if err := fleet.KubeletStart(name); err != nil {
		t.Fatal(err)
	}
	if err := fleet.Heal(name); err != nil {
		t.Fatal(err)
	}
	if u := fleet.Usage(); len(u) != 0 {
		t.Errorf("a kubelet start on a machine that is off started one: %+v", u)
	}
	// The Lease is renewed no more: not in 15 s, one and a half renew
	// intervals (10 s).
	leaseSilent(t, client, name, shutdown, 15*time.Second)

	// On again.
	started := time.Now()
	if err := fleet.MachineStart(ctx, name); err != nil {
		t.Fatal(err)
	}
	boot2 := fleet.BootID(name)
	if boot2 == "" || boot2 == boot1 {
		t.Fatalf("the boot ID after the machine's start is %q, the first was %q", boot2, boot1)
	}
	framework.Eventually(t, time.Minute, "the kubelet reporting the new boot ID", bootIDReported(client, name, boot2))
	t.Logf("machine start: the new boot ID reported %v after it", time.Since(started).Round(100*time.Millisecond))
	framework.Eventually(t, time.Minute, "the booted node posting Ready", readyPosted(client, name, posted))
	t.Logf("machine start: Ready posted %v after it", time.Since(started).Round(100*time.Millisecond))
	framework.Eventually(t, time.Minute, "the kubelet's Rebooted event", rebootedEvents(client, name, boot2, 1))
	framework.Eventually(t, time.Minute, "the booted kubelet renewing its Lease", leaseRenewedSince(client, name, started))
	framework.Eventually(t, time.Minute, "the pod Ready again after the boot", podReadyIs(client, "on-hollow", v1.ConditionTrue))
	framework.Eventually(t, time.Minute, "the pod's container started again by the booted kubelet", containerStartedSince(client, "on-hollow", started))
	t.Logf("machine start: the Rebooted event, the Lease renewed and the pod Ready %v after it", time.Since(started).Round(100*time.Millisecond))
	for typ, want := range map[v1.NodeConditionType]v1.ConditionStatus{kernelDeadlock: v1.ConditionFalse, readonlyFS: v1.ConditionTrue} {
		if ok, got, err := nodeCondition(client, name, typ, want)(ctx); err != nil || !ok {
			t.Errorf("after the boot: %s (%v), want %s=%s", got, err, typ, want)
		}
	}
	if off, err := cloud.InstanceShutdown(ctx, getNode(t, client, name)); err != nil || off {
		t.Errorf("after the start the fake cloud provider answers shut down %v (%v), want false", off, err)
	}

	// Deleted and started again: a new machine.
	if err := fleet.MachineDelete(ctx, name); err != nil {
		t.Fatal(err)
	}
	if exists, err := cloud.InstanceExists(ctx, getNode(t, client, name)); err != nil || exists {
		t.Errorf("after the machine's deletion the fake cloud provider answers it exists %v (%v), want false", exists, err)
	}
	if err := fleet.MachineStart(ctx, name); err != nil {
		t.Fatal(err)
	}
	boot3 := fleet.BootID(name)
	if boot3 == boot1 || boot3 == boot2 {
		t.Fatalf("the new machine's boot ID %q is an old one", boot3)
	}
	framework.Eventually(t, time.Minute, "the new machine's kubelet reporting its boot ID", bootIDReported(client, name, boot3))
	framework.Eventually(t, time.Minute, "the new machine's Rebooted event", rebootedEvents(client, name, boot3, 2))
	framework.Eventually(t, 30*time.Second, "the surviving condition cleared on a new machine", nodeCondition(client, name, readonlyFS, v1.ConditionFalse))
	if exists, err := cloud.InstanceExists(ctx, getNode(t, client, name)); err != nil || !exists {
		t.Errorf("after the new machine's start the fake cloud provider answers it exists %v (%v), want true", exists, err)
	}

	// Four starts of kubemark (first, restart, two boots): four root
	// directories.
	data, err := os.ReadFile(filepath.Join(dir, name, "kubelet.log"))
	if err != nil {
		t.Fatal(err)
	}
	roots := map[string]bool{}
	for _, m := range regexp.MustCompile(`Using (\S+) as root dir for hollow-kubelet`).FindAllStringSubmatch(string(data), -1) {
		roots[m[1]] = true
	}
	if len(roots) != 4 {
		t.Errorf("the kubelet's log names %d root directories, want 4 (one per start): %v", len(roots), roots)
	}
}

// bootIDReported: the Node's status.nodeInfo.bootID is want.
func bootIDReported(client kubernetes.Interface, name, want string) func(context.Context) (bool, string, error) {
	return func(ctx context.Context) (bool, string, error) {
		n, err := client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		got := n.Status.NodeInfo.BootID
		return got == want, "bootID " + got, nil
	}
}

// readyHeartbeat is the heartbeat of the node's Ready condition.
func readyHeartbeat(t *testing.T, client kubernetes.Interface, name string) metav1.Time {
	t.Helper()
	for _, c := range getNode(t, client, name).Status.Conditions {
		if c.Type == v1.NodeReady {
			return c.LastHeartbeatTime
		}
	}
	t.Fatalf("node %s has no Ready condition", name)
	return metav1.Time{}
}

// readyPosted: the node's Ready=True was posted again, with a heartbeat
// other than before (a kubelet posts its whole status when it starts).
func readyPosted(client kubernetes.Interface, name string, before metav1.Time) func(context.Context) (bool, string, error) {
	return func(ctx context.Context) (bool, string, error) {
		n, err := client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		for _, c := range n.Status.Conditions {
			if c.Type == v1.NodeReady {
				return c.Status == v1.ConditionTrue && !c.LastHeartbeatTime.Equal(&before),
					fmt.Sprintf("Ready=%s heartbeat %s (before: %s)", c.Status, c.LastHeartbeatTime.Format(time.RFC3339), before.Format(time.RFC3339)), nil
			}
		}
		return false, "no Ready condition", nil
	}
}

// rebootedEvents: want Rebooted events on the node, one of them the
// kubelet's naming boot; more is an error.
func rebootedEvents(client kubernetes.Interface, name, boot string, want int) func(context.Context) (bool, string, error) {
	return func(ctx context.Context) (bool, string, error) {
		l, err := client.CoreV1().Events("").List(ctx, metav1.ListOptions{FieldSelector: fields.Set{
			"involvedObject.kind": "Node", "involvedObject.name": name, "reason": "Rebooted"}.String()})
		if err != nil {
			return false, "", err
		}
		var seen []string
		for _, e := range l.Items {
			seen = append(seen, fmt.Sprintf("%s/%s x%d: %s", e.Source.Component, e.Source.Host, e.Count, e.Message))
		}
		state := fmt.Sprintf("%d Rebooted events %v", len(l.Items), seen)
		if len(l.Items) > want {
			return false, state, fmt.Errorf("more Rebooted events than boots: %s", state)
		}
		for _, e := range l.Items {
			if e.Source.Component == "kubelet" && e.Source.Host == name && e.Type == v1.EventTypeWarning && strings.Contains(e.Message, boot) {
				return len(l.Items) == want, state, nil
			}
		}
		return false, state, nil
	}
}

// leaseSilent fails unless the node's Lease goes unrenewed from since
// until since+quiet.
func leaseSilent(t *testing.T, client kubernetes.Interface, name string, since time.Time, quiet time.Duration) {
	t.Helper()
	framework.Eventually(t, quiet+30*time.Second, fmt.Sprintf("the Lease unrenewed for %v", quiet), func(ctx context.Context) (bool, string, error) {
		l, err := client.CoordinationV1().Leases(v1.NamespaceNodeLease).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		if l.Spec.RenewTime == nil {
			return false, "", fmt.Errorf("lease %s has no renewTime", name)
		}
		if r := l.Spec.RenewTime.Time; r.After(since) {
			return false, "", fmt.Errorf("the Lease was renewed at %s, after the machine's shutdown at %s", r.Format(time.RFC3339Nano), since.Format(time.RFC3339Nano))
		}
		return time.Since(since) >= quiet, "renewed last at " + l.Spec.RenewTime.Format(time.RFC3339Nano), nil
	})
}

// leaseRenewedSince: the node's Lease was renewed after t.
func leaseRenewedSince(client kubernetes.Interface, name string, t time.Time) func(context.Context) (bool, string, error) {
	return func(ctx context.Context) (bool, string, error) {
		l, err := client.CoordinationV1().Leases(v1.NamespaceNodeLease).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		if l.Spec.RenewTime == nil {
			return false, "no renewTime", nil
		}
		return l.Spec.RenewTime.After(t), "renewed last at " + l.Spec.RenewTime.Format(time.RFC3339Nano), nil
	}
}

// containerStartedSince: the pod's containers run, started at t or later.
func containerStartedSince(client kubernetes.Interface, pod string, t time.Time) func(context.Context) (bool, string, error) {
	return func(ctx context.Context) (bool, string, error) {
		p, err := client.CoreV1().Pods("default").Get(ctx, pod, metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		var seen []string
		ok := len(p.Status.ContainerStatuses) > 0
		for _, c := range p.Status.ContainerStatuses {
			seen = append(seen, fmt.Sprintf("%s restarts %d state %+v", c.Name, c.RestartCount, c.State))
			r := c.State.Running
			// Start times are in whole seconds.
			ok = ok && r != nil && !r.StartedAt.Time.Before(t.Truncate(time.Second))
		}
		return ok, strings.Join(seen, "; "), nil
	}
}
