// Integration tests of the foundation: the local control plane with
// kube-controller-manager and kube-scheduler, and fake nodes behaving like
// kubelets, all against the real kube-apiserver and etcd.
package integration

import (
	"context"
	"fmt"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/nodeshepherd/nodeshepherd/pkg/controlplane"
	"github.com/nodeshepherd/nodeshepherd/pkg/fakenode"
	"github.com/nodeshepherd/nodeshepherd/pkg/kube"
	"github.com/nodeshepherd/nodeshepherd/test/framework"
)

// upstreamCluster runs kube-controller-manager with all its controllers
// (nodeshepherd's node lifecycle controller is not in these tests, and some
// node lifecycle controller must lift the not-ready taint) and kube-scheduler.
func upstreamCluster(t *testing.T) (*controlplane.ControlPlane, kubernetes.Interface) {
	cp := framework.StartControlPlane(t, controlplane.Config{ControllerManager: true, Controllers: "*", Scheduler: true})
	return cp, framework.Client(t, cp)
}

func TestFakeNodesAndDeployment(t *testing.T) {
	_, client := upstreamCluster(t)
	m := framework.StartFakeNodes(t, fakenode.Config{Client: client, Nodes: 50, Zones: []fakenode.Zone{{Name: "zone-a"}, {Name: "zone-b"}, {Name: "zone-c"}}})

	t.Run("50 fake nodes over 3 zones become Ready", func(t *testing.T) {
		framework.Eventually(t, 90*time.Second, "50 Ready, schedulable nodes", func(ctx context.Context) (bool, string, error) {
			nodes, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
			if err != nil {
				return false, "", err
			}
			ready := 0
			for i := range nodes.Items {
				if kube.NodeReady(&nodes.Items[i]) && !kube.HasTaint(&nodes.Items[i], v1.TaintNodeNotReady) {
					ready++
				}
			}
			return ready == 50, fmt.Sprintf("%d of %d nodes Ready without the not-ready taint", ready, len(nodes.Items)), nil
		})
		ctx := framework.Context(t)
		nodes, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		perZone := map[string]int{}
		for _, n := range nodes.Items {
			perZone[n.Labels["topology.kubernetes.io/zone"]]++
			if n.Labels["kubernetes.io/hostname"] != n.Name || n.Labels["topology.kubernetes.io/region"] != fakenode.DefaultRegion {
				t.Errorf("node %s: labels %v", n.Name, n.Labels)
			}
			if n.Status.Allocatable.Cpu().IsZero() || n.Status.NodeInfo.KubeletVersion == "" || len(n.Status.Addresses) == 0 {
				t.Errorf("node %s: incomplete status %+v", n.Name, n.Status)
			}
			lease, err := client.CoordinationV1().Leases("kube-node-lease").Get(ctx, n.Name, metav1.GetOptions{})
			if err != nil {
				t.Fatalf("lease of %s: %v", n.Name, err)
			}
			if *lease.Spec.LeaseDurationSeconds != 40 || len(lease.OwnerReferences) != 1 || lease.OwnerReferences[0].UID != n.UID {
				t.Errorf("lease of %s: duration %d, owners %+v", n.Name, *lease.Spec.LeaseDurationSeconds, lease.OwnerReferences)
			}
		}
		if perZone["zone-a"] != 17 || perZone["zone-b"] != 17 || perZone["zone-c"] != 16 {
			t.Errorf("nodes per zone: %v, want 17/17/16", perZone)
		}
	})

	t.Run("100-replica Deployment Running and Ready through kube-scheduler", func(t *testing.T) {
		ctx := framework.Context(t)
		dep := deployment("web", 100)
		if _, err := client.AppsV1().Deployments("default").Create(ctx, dep, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		framework.Eventually(t, 2*time.Minute, "100 pods Running and Ready", func(ctx context.Context) (bool, string, error) {
			pods, err := client.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=web"})
			if err != nil {
				return false, "", err
			}
			ready := 0
			for i := range pods.Items {
				p := &pods.Items[i]
				if p.Status.Phase == v1.PodRunning && kube.PodReady(p) && p.Status.PodIP != "" {
					ready++
				}
			}
			return ready == 100, fmt.Sprintf("%d of %d pods Running and Ready", ready, len(pods.Items)), nil
		})
		pods, err := client.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=web"})
		if err != nil {
			t.Fatal(err)
		}
		ips, nodes := map[string]bool{}, map[string]bool{}
		for _, p := range pods.Items {
			if ips[p.Status.PodIP] {
				t.Errorf("pod IP %s handed out twice", p.Status.PodIP)
			}
			ips[p.Status.PodIP] = true
			nodes[p.Spec.NodeName] = true
			if m.Zone(p.Spec.NodeName) == "" {
				t.Errorf("pod %s runs on %q, not a fake node", p.Name, p.Spec.NodeName)
			}
		}
		if len(nodes) < 10 {
			t.Errorf("100 pods landed on only %d nodes", len(nodes))
		}
		d, err := client.AppsV1().Deployments("default").Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		framework.Eventually(t, 30*time.Second, "Deployment status", func(ctx context.Context) (bool, string, error) {
			d, err = client.AppsV1().Deployments("default").Get(ctx, "web", metav1.GetOptions{})
			if err != nil {
				return false, "", err
			}
			return d.Status.ReadyReplicas == 100, fmt.Sprintf("readyReplicas %d", d.Status.ReadyReplicas), nil
		})
	})
}

func deployment(name string, replicas int32) *appsv1.Deployment {
	labels := map[string]string{"app": name}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(replicas),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: v1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: v1.PodSpec{Containers: []v1.Container{{Name: "app", Image: "registry.k8s.io/pause:3.10",
					Resources: v1.ResourceRequirements{Requests: v1.ResourceList{v1.ResourceCPU: resource.MustParse("100m")}}}}},
			},
		},
	}
}

// fastNodes are fake nodes with compressed kubelet timings, so that lease
// behaviour shows within seconds.
func fastNodes(client kubernetes.Interface, n int, stale bool) fakenode.Config {
	return fakenode.Config{Client: client, Nodes: n, LeaseDuration: 4 * time.Second, LeaseRenewInterval: 500 * time.Millisecond,
		NodeStatusUpdateFrequency: 500 * time.Millisecond, PodStartDelay: 100 * time.Millisecond, EmulateStalePodStatus: stale}
}

// waitRenewals waits until a node's lease has been renewed count more times.
func waitRenewals(t *testing.T, client kubernetes.Interface, node string, count int) {
	t.Helper()
	ctx := framework.Context(t)
	last, err := framework.LeaseRenewTime(ctx, client, node)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < count; i++ {
		framework.Eventually(t, time.Minute, "lease renewal of "+node, func(ctx context.Context) (bool, string, error) {
			rt, err := framework.LeaseRenewTime(ctx, client, node)
			if err != nil {
				return false, "", err
			}
			if rt.After(last) {
				last = rt
				return true, "", nil
			}
			return false, "renewTime " + rt.String(), nil
		})
	}
}

func TestPartitionStopsLeaseRenewal(t *testing.T) {
	_, client := upstreamCluster(t)
	m := framework.StartFakeNodes(t, fastNodes(client, 3, false))
	ctx := framework.Context(t)
	names := m.NodeNames()
	victim, witness := names[0], names[1]
	waitRenewals(t, client, victim, 1)

	if _, err := m.Apply(ctx, fakenode.Fault{Action: fakenode.Partition, Target: fakenode.Target{Nodes: []string{victim}}}); err != nil {
		t.Fatal(err)
	}
	// Once a renewal that started before the partition has landed, the
	// victim's lease must not move while the witness renews several times.
	waitRenewals(t, client, witness, 1)
	frozen, err := framework.LeaseRenewTime(ctx, client, victim)
	if err != nil {
		t.Fatal(err)
	}
	waitRenewals(t, client, witness, 4)
	if now, _ := framework.LeaseRenewTime(ctx, client, victim); !now.Equal(frozen) {
		t.Fatalf("partitioned node's lease was renewed: %v -> %v", frozen, now)
	}

	if _, err := m.Apply(ctx, fakenode.Fault{Action: fakenode.Heal, Target: fakenode.Target{Nodes: []string{victim}}}); err != nil {
		t.Fatal(err)
	}
	waitRenewals(t, client, victim, 2)

	// A partition with a duration ends by itself.
	if _, err := m.Apply(ctx, fakenode.Fault{Action: fakenode.Partition, Target: fakenode.Target{Nodes: []string{victim}}, Duration: 2 * time.Second}); err != nil {
		t.Fatal(err)
	}
	waitRenewals(t, client, victim, 2)
}

func TestInjectedConditionShowsAndClears(t *testing.T) {
	_, client := upstreamCluster(t)
	m := framework.StartFakeNodes(t, fastNodes(client, 6, false))
	ctx := framework.Context(t)
	target := fakenode.Target{Zone: "zone-b"}
	inZone := 0
	for _, n := range m.NodeNames() {
		if m.Zone(n) == "zone-b" {
			inZone++
		}
	}
	conditionCount := func(typ v1.NodeConditionType, status v1.ConditionStatus) func(context.Context) (bool, string, error) {
		return func(ctx context.Context) (bool, string, error) {
			nodes, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: "topology.kubernetes.io/zone=zone-b"})
			if err != nil {
				return false, "", err
			}
			n := 0
			for i := range nodes.Items {
				if c := kube.NodeCondition(&nodes.Items[i], typ); c != nil && c.Status == status {
					n++
				}
			}
			return n == inZone, fmt.Sprintf("%d of %d zone-b nodes have %s=%s", n, inZone, typ, status), nil
		}
	}
	for _, typ := range []v1.NodeConditionType{"KernelDeadlock", v1.NodeMemoryPressure} {
		if _, err := m.Apply(ctx, fakenode.Fault{Action: fakenode.SetCondition, Target: target,
			Condition: &fakenode.Condition{Type: typ, Status: v1.ConditionTrue}}); err != nil {
			t.Fatal(err)
		}
		framework.Eventually(t, time.Minute, string(typ)+" set", conditionCount(typ, v1.ConditionTrue))
		if _, err := m.Apply(ctx, fakenode.Fault{Action: fakenode.ClearCondition, Target: target,
			Condition: &fakenode.Condition{Type: typ}}); err != nil {
			t.Fatal(err)
		}
		framework.Eventually(t, time.Minute, string(typ)+" cleared", conditionCount(typ, v1.ConditionFalse))
	}
	// With a duration the condition clears by itself.
	if _, err := m.Apply(ctx, fakenode.Fault{Action: fakenode.SetCondition, Target: target, Duration: 2 * time.Second,
		Condition: &fakenode.Condition{Type: v1.NodeDiskPressure, Status: v1.ConditionTrue}}); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, time.Minute, "DiskPressure set", conditionCount(v1.NodeDiskPressure, v1.ConditionTrue))
	framework.Eventually(t, time.Minute, "DiskPressure cleared after 2s", conditionCount(v1.NodeDiskPressure, v1.ConditionFalse))
}

// TestPodStatusAfterPartition is the seed 002 incident: while a node is away,
// a controller sets its pods Ready=False. The fixed kubelet re-posts Ready=True
// when the node is back; the 1.15 kubelet (--emulate-stale-pod-status) never
// does, until it is restarted.
func TestPodStatusAfterPartition(t *testing.T) {
	for _, stale := range []bool{false, true} {
		t.Run(fmt.Sprintf("emulateStalePodStatus=%v", stale), func(t *testing.T) {
			_, client := upstreamCluster(t)
			m := framework.StartFakeNodes(t, fastNodes(client, 2, stale))
			ctx := framework.Context(t)
			node := m.NodeNames()[0]
			pod := &v1.Pod{
				ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "default"},
				Spec: v1.PodSpec{NodeName: node, Containers: []v1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}},
					// The control plane is upstream's: keep its node lifecycle
					// controller from evicting during the partition.
					Tolerations: []v1.Toleration{{Operator: v1.TolerationOpExists}}},
			}
			framework.Eventually(t, 30*time.Second, "pod created", func(ctx context.Context) (bool, string, error) {
				// The default ServiceAccount appears once kube-controller-manager made it.
				_, err := client.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{})
				return err == nil, fmt.Sprint(err), nil
			})
			podReady := func(want v1.ConditionStatus) func(context.Context) (bool, string, error) {
				return func(ctx context.Context) (bool, string, error) {
					p, err := client.CoreV1().Pods("default").Get(ctx, "p", metav1.GetOptions{})
					if err != nil {
						return false, "", err
					}
					c := kube.PodCondition(p, v1.PodReady)
					return c != nil && c.Status == want, fmt.Sprintf("phase %s, Ready %+v", p.Status.Phase, c), nil
				}
			}
			framework.Eventually(t, time.Minute, "pod Ready", podReady(v1.ConditionTrue))

			target := fakenode.Target{Nodes: []string{node}}
			if _, err := m.Apply(ctx, fakenode.Fault{Action: fakenode.Partition, Target: target}); err != nil {
				t.Fatal(err)
			}
			setPodNotReady(t, client)
			if _, err := m.Apply(ctx, fakenode.Fault{Action: fakenode.Heal, Target: target}); err != nil {
				t.Fatal(err)
			}
			if !stale {
				framework.Eventually(t, time.Minute, "pod re-posted Ready=True after the partition", podReady(v1.ConditionTrue))
				return
			}
			// The node is back (its lease renews) yet the pod stays NotReady.
			waitRenewals(t, client, node, 4)
			if ok, state, _ := podReady(v1.ConditionFalse)(ctx); !ok {
				t.Fatalf("stale kubelet re-posted the pod status: %s", state)
			}
			// Restarting the kubelet, the 1.15 workaround, re-posts it.
			for _, a := range []fakenode.Action{fakenode.KubeletStop, fakenode.KubeletStart} {
				if _, err := m.Apply(ctx, fakenode.Fault{Action: a, Target: target}); err != nil {
					t.Fatal(err)
				}
			}
			framework.Eventually(t, time.Minute, "pod Ready after a kubelet restart", podReady(v1.ConditionTrue))
		})
	}
}

// setPodNotReady does what a node lifecycle controller does to pods of a
// node that went away.
func setPodNotReady(t *testing.T, client kubernetes.Interface) {
	t.Helper()
	ctx := framework.Context(t)
	p, err := client.CoreV1().Pods("default").Get(ctx, "p", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range p.Status.Conditions {
		if p.Status.Conditions[i].Type == v1.PodReady {
			p.Status.Conditions[i].Status = v1.ConditionFalse
			p.Status.Conditions[i].Reason = "NodeNotReady"
		}
	}
	if _, err := client.CoreV1().Pods("default").UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}
