package integration

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	fakecloud "github.com/nodeshepherd/nodeshepherd/pkg/cloudprovider/fake"
	"github.com/nodeshepherd/nodeshepherd/pkg/cloudprovider/providers"
	"github.com/nodeshepherd/nodeshepherd/pkg/controller/drain"
	"github.com/nodeshepherd/nodeshepherd/pkg/controller/outofservice"
	ctrl "github.com/nodeshepherd/nodeshepherd/pkg/controller/remediation"
	"github.com/nodeshepherd/nodeshepherd/pkg/controllers"
	"github.com/nodeshepherd/nodeshepherd/pkg/controlplane"
	"github.com/nodeshepherd/nodeshepherd/pkg/fakecsi"
	"github.com/nodeshepherd/nodeshepherd/pkg/fakenode"
	"github.com/nodeshepherd/nodeshepherd/pkg/manager"
	"github.com/nodeshepherd/nodeshepherd/pkg/remediation"
	"github.com/nodeshepherd/nodeshepherd/test/framework"
)

// fenceLadder: a node silent (Ready Unknown) for 1s is tainted, then
// fenced. The Fence step's timeout is 20s: a machine that still runs 10s
// (half of it) after the power-off request was accepted vetoes the Fence.
const fenceLadder = `
apiVersion: nodeshepherd.io/v1alpha1
kind: RemediationPolicy
metadata: {name: gpu}
spec:
  nodeSelector: {matchLabels: {pool: gpu}}
  unhealthy:
  - {type: Ready, status: Unknown, for: 1s}
  healthyHold: 5s
  steps:
  - {action: Taint, timeout: 10s, taint: {key: nodeshepherd.io/unhealthy, effect: NoSchedule}}
  - {action: Fence, timeout: 20s}
`

func createPolicy(t *testing.T, policies dynamic.NamespaceableResourceInterface, doc string) {
	t.Helper()
	var pol unstructured.Unstructured
	if err := yaml.Unmarshal([]byte(doc), &pol.Object); err != nil {
		t.Fatal(err)
	}
	if _, err := policies.Create(framework.Context(t), &pol, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating the policy: %v", err)
	}
}

// fenceCluster starts a control plane with kube-controller-manager (pod
// GC, attach-detach) and kube-scheduler, the remediation CRD, fake nodes
// labelled pool=gpu and nodeshepherd with the node lifecycle, drain,
// remediation and outofservice controllers and the fake cloud provider;
// tune, if any, changes nodeshepherd's settings.
func fenceCluster(t *testing.T, nodes func(kubernetes.Interface) fakenode.Config, tune ...func(*controllers.Config)) (kubernetes.Interface, dynamic.NamespaceableResourceInterface, *fakenode.Manager, *framework.NodeShepherd) {
	t.Helper()
	cp := framework.StartControlPlane(t, controlplane.Config{ControllerManager: true, Scheduler: true})
	client := framework.Client(t, cp)
	policies := installRemediationCRD(t, dynamic.NewForConfigOrDie(cp.RESTConfig()))
	createPolicy(t, policies, fenceLadder)
	nc := nodes(client)
	nc.Labels = map[string]string{"pool": "gpu"}
	m := framework.StartFakeNodes(t, nc)
	cfg := oosConfig(fastLifecycle(100), 2)
	cfg.CloudNodeLifecycle.Cloud = providers.Options{Name: "fake"}
	for _, f := range tune {
		f(&cfg)
	}
	ns := framework.StartNodeShepherd(t, cp.RESTConfig(), cfg, func(o *manager.Options) {
		o.Controllers = append(o.Controllers, drain.Name, ctrl.Name, outofservice.Name)
	})
	waitNodesReady(t, client, m.NodeNames()...)
	return client, policies, m, ns
}

// fenceRecord waits for the node's repair record to reach the Fence step.
func fenceRecord(client kubernetes.Interface, node string) func(context.Context) (bool, string, error) {
	return func(ctx context.Context) (bool, string, error) {
		n, err := client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		r, ok, _ := remediation.RequestOf(n)
		return ok && r.Action == remediation.ActionFence, fmt.Sprintf("%+v", r), nil
	}
}

// policyRepairs reads the policy's status.repairs as written.
func policyRepairs(ctx context.Context, policies dynamic.NamespaceableResourceInterface, name string) ([]map[string]any, error) {
	u, err := policies.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	list, _, _ := unstructured.NestedSlice(u.Object, "status", "repairs")
	var out []map[string]any
	for _, r := range list {
		if m, ok := r.(map[string]any); ok {
			out = append(out, m)
		}
	}
	return out, nil
}

// TestRemediationFenceRunningMachineVetoed (issue 46, point 1): the
// remediation controller takes a partitioned node whose machine runs
// through its ladder to the Fence step. The fake cloud accepts the power-off
// request, but the machine keeps running (a BMC that fails silently) and
// the provider goes on answering so: the Fence is vetoed (a FenceVetoed
// event, the policy's status), the record never confirms the death, no
// out-of-service taint is put on the node and its Terminating pod is not
// force-deleted. Before the fix the Fence step was a timer: outofservice
// took the record as a confirmation and tainted the running machine.
func TestRemediationFenceRunningMachineVetoed(t *testing.T) {
	client, policies, m, _ := fenceCluster(t, func(c kubernetes.Interface) fakenode.Config {
		// One zone of three: one silent node leaves it Normal, so no
		// disruption rule holds outofservice back; only the Fence's veto.
		cfg := zonedNodes(c, "zone-a=3", false)
		cfg.IgnorePowerOff = true
		return cfg
	})
	ctx := framework.Context(t)
	victim := m.NodeNames()[0]
	createPod(t, client, "writer", victim, tolerations(ptr.To[int64](0)))
	framework.Eventually(t, time.Minute, "writer Ready", podReadyIs(client, "writer", v1.ConditionTrue))
	writer, err := client.CoreV1().Pods("default").Get(ctx, "writer", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}

	partition(t, m, fakenode.Partition, fakenode.Target{Nodes: []string{victim}})
	framework.Eventually(t, time.Minute, victim+" at the Fence step", fenceRecord(client, victim))
	// Well past the settle time (10s), the step's timeout (20s) and
	// --out-of-service-after (3s): nothing fences the running machine.
	never(t, 35*time.Second, "the running machine fenced", func(ctx context.Context) (bool, string, error) {
		n, err := client.CoreV1().Nodes().Get(ctx, victim, metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		if slices.ContainsFunc(n.Spec.Taints, func(t v1.Taint) bool { return t.Key == outofservice.Taint.Key }) {
			return true, fmt.Sprintf("out-of-service taint on %s: annotations %v", victim, n.Annotations), nil
		}
		p, err := client.CoreV1().Pods("default").Get(ctx, "writer", metav1.GetOptions{})
		if apierrors.IsNotFound(err) || err == nil && p.UID != writer.UID {
			return true, "the writer pod was force-deleted", nil
		}
		return false, "", err
	})
	if r, ok, _ := remediation.RequestOf(getNode(t, client, victim)); !ok || r.Action != remediation.ActionFence || r.FenceBootID != "" {
		t.Errorf("record %+v (in repair %v): want the Fence step, its death unconfirmed", r, ok)
	}
	if n, msgs := eventCount(t, client, victim, "FenceVetoed", 1); n != 1 || !strings.Contains(msgs[0], "runs") {
		t.Errorf("%d FenceVetoed events (one per change of decision): %q", n, msgs)
	}
	framework.Eventually(t, 30*time.Second, "the policy's status says the Fence is vetoed", func(ctx context.Context) (bool, string, error) {
		rs, err := policyRepairs(ctx, policies, "gpu")
		if err != nil {
			return false, "", err
		}
		for _, r := range rs {
			if r["node"] == victim && strings.Contains(fmt.Sprint(r["fence"]), "vetoed") {
				return true, "", nil
			}
		}
		return false, fmt.Sprint(rs), nil
	})
	if n, _ := eventCount(t, client, victim, outofservice.EventTaintAdded, 0); n != 0 {
		t.Errorf("%d %s events", n, outofservice.EventTaintAdded)
	}
}

// TestRemediationFencePoweredOffVolumeMoves (issue 46, point 1): the
// remediation controller takes a partitioned node that runs a StatefulSet
// replica with a ReadWriteOnce volume through its ladder to the Fence step;
// the fake cloud powers the machine off on the request, the provider
// confirms it shut down for the boot the request was for, and only then
// does the record confirm the death: outofservice taints the node, the pod
// is force-deleted, the volume detached, and the replica runs Ready on
// another node with its volume attached there.
func TestRemediationFencePoweredOffVolumeMoves(t *testing.T) {
	client, policies, m, _ := fenceCluster(t, func(c kubernetes.Interface) fakenode.Config {
		cfg := zonedNodes(c, "zone-a=3", false)
		cfg.CSIDriver = fakecsi.DefaultDriverName
		return cfg
	})
	ctx := framework.Context(t)
	labels := map[string]string{"app": "db"}
	sts := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: "default"},
		Spec: appsv1.StatefulSetSpec{Replicas: ptr.To[int32](1), ServiceName: "db",
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: v1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: v1.PodSpec{Tolerations: tolerations(ptr.To[int64](0)),
					Containers: []v1.Container{{Name: "c", Image: "example.com/db",
						VolumeMounts: []v1.VolumeMount{{Name: "data", MountPath: "/data"}}}}}},
			VolumeClaimTemplates: []v1.PersistentVolumeClaim{{ObjectMeta: metav1.ObjectMeta{Name: "data"},
				Spec: v1.PersistentVolumeClaimSpec{StorageClassName: ptr.To(fakecsi.DefaultStorageClassName),
					AccessModes: []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce},
					Resources:   v1.VolumeResourceRequirements{Requests: v1.ResourceList{v1.ResourceStorage: resource.MustParse("1Gi")}}}}}}}
	if _, err := client.AppsV1().StatefulSets("default").Create(ctx, sts, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	first := runningWithVolume(t, client, "db-0", "data-db-0", "", 90*time.Second)
	victim := first.Spec.NodeName
	boot := getNode(t, client, victim).Status.NodeInfo.BootID
	pv, _ := claimVolume(ctx, client, "data-db-0")

	partition(t, m, fakenode.Partition, fakenode.Target{Nodes: []string{victim}})
	framework.Eventually(t, time.Minute, victim+" at the Fence step", fenceRecord(client, victim))
	framework.Eventually(t, time.Minute, "the Fence confirmed for boot "+boot, func(ctx context.Context) (bool, string, error) {
		n, err := client.CoreV1().Nodes().Get(ctx, victim, metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		r, _, _ := remediation.RequestOf(n)
		return r.FenceBootID == boot, fmt.Sprintf("%+v", r), nil
	})
	framework.Eventually(t, time.Minute, "out-of-service taint", nodeTainted(client, victim, outofservice.Taint, true))
	if n, msgs := eventCount(t, client, victim, "FenceVetoed", 0); n != 0 {
		t.Errorf("FenceVetoed events for a machine powered off: %q", msgs)
	}
	if _, msgs := eventCount(t, client, victim, ctrl.EventStep, 3); !strings.Contains(strings.Join(msgs, "\n"), "powered off") {
		t.Errorf("%s events: %q", ctrl.EventStep, msgs)
	}
	moved := runningWithVolume(t, client, "db-0", "data-db-0", victim, 2*time.Minute)
	if moved.UID == first.UID {
		t.Fatal("the old pod is reported Running on a new node")
	}
	framework.Eventually(t, time.Minute, "db-0 Ready on "+moved.Spec.NodeName, podReadyIs(client, "db-0", v1.ConditionTrue))
	framework.Eventually(t, 30*time.Second, "no attachment left on the fenced node", func(ctx context.Context) (bool, string, error) {
		vas, err := attachments(ctx, client, pv.Name)
		if err != nil {
			return false, "", err
		}
		return !slices.ContainsFunc(vas, func(va storagev1.VolumeAttachment) bool { return va.Spec.NodeName == victim }), fmt.Sprint(vaSummary(vas)), nil
	})
	framework.Eventually(t, 30*time.Second, "the policy's status says the machine is fenced", func(ctx context.Context) (bool, string, error) {
		rs, err := policyRepairs(ctx, policies, "gpu")
		if err != nil {
			return false, "", err
		}
		for _, r := range rs {
			if r["node"] == victim && strings.Contains(fmt.Sprint(r["fence"]), "powered off") {
				return true, "", nil
			}
		}
		return false, fmt.Sprint(rs), nil
	})
}

// TestRemediationFenceConfirmedByTheFencingEndpoint (issue 46, point 1): a
// Fence is confirmed by the fencing endpoint (--out-of-service-fencing-
// webhook-url, question PoweredOff) as by the cloud provider, and vetoed by
// it. Two partitioned nodes reach the Fence step; the fake cloud accepts
// each power-off request and carries it out RepairDelay later, by when the
// test has blinded the provider to both machines (every question about
// them fails: no answer). The endpoint answers from the fake machines for
// the first node: once its machine is off, the Fence is confirmed for its
// boot on the endpoint's word alone (the event names the endpoint and not
// the provider). Of the second it answers that the machine runs (its BMC
// says so): FenceVetoed, naming the endpoint, and no confirmation. Before
// the fix only the provider was asked: neither Fence was ever decided.
func TestRemediationFenceConfirmedByTheFencingEndpoint(t *testing.T) {
	var nodes atomic.Pointer[fakenode.Manager]
	var running atomic.Value // the node whose machine the endpoint answers running
	running.Store("")
	ep := fencingEndpoint(t, func(node string) bool {
		m := nodes.Load()
		if m == nil || node == running.Load().(string) {
			return false
		}
		for _, s := range m.States() {
			if s.Name == node {
				return s.Machine == fakecloud.Shutdown || s.Machine == fakecloud.Deleted
			}
		}
		return false
	})
	const repairDelay = 5 * time.Second // under the settle time (10s): the powered-off machine is never vetoed
	client, _, m, _ := fenceCluster(t, func(c kubernetes.Interface) fakenode.Config {
		// Two silent nodes of four leave the zone Normal.
		cfg := zonedNodes(c, "zone-a=4", false)
		cfg.RepairDelay = repairDelay
		return cfg
	}, func(c *controllers.Config) { c.OutOfService.Fencing = ep })
	nodes.Store(m)
	fenced, vetoed := m.NodeNames()[0], m.NodeNames()[1]
	running.Store(vetoed)
	boot := getNode(t, client, fenced).Status.NodeInfo.BootID

	partition(t, m, fakenode.Partition, fakenode.Target{Nodes: []string{fenced, vetoed}})
	// Each machine's provider blinded as soon as its power-off is
	// requested, while the fake cloud has not yet carried it out.
	blind := map[string]bool{}
	framework.Eventually(t, 2*time.Minute, "both power-off requests seen and the provider blinded", func(ctx context.Context) (bool, string, error) {
		cm, err := client.CoreV1().ConfigMaps(fakecloud.ConfigMapNamespace).Get(ctx, fakecloud.RequestsConfigMapName, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, "no request yet", nil
		}
		if err != nil {
			return false, "", err
		}
		for _, node := range []string{fenced, vetoed} {
			if r, err := fakecloud.ParseRequest(cm.Data[node]); blind[node] || err != nil || r.Action != fakecloud.ActionPowerOff {
				continue
			}
			if err := m.SetCloudError(ctx, []string{node}, true); err != nil {
				return false, "", err
			}
			blind[node] = true
			for _, s := range m.States() {
				if s.Name == node && s.Machine != "" {
					return false, "", fmt.Errorf("the machine of %s was %s before the provider was blinded: RepairDelay %v too short here", node, s.Machine, repairDelay)
				}
			}
		}
		return blind[fenced] && blind[vetoed], fmt.Sprint(cm.Data), nil
	})
	framework.Eventually(t, time.Minute, "the Fence of "+fenced+" confirmed for boot "+boot, func(ctx context.Context) (bool, string, error) {
		n, err := client.CoreV1().Nodes().Get(ctx, fenced, metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		r, _, _ := remediation.RequestOf(n)
		return r.FenceBootID == boot, fmt.Sprintf("%+v", r), nil
	})
	if _, msgs := eventCount(t, client, fenced, ctrl.EventStep, 3); !slices.ContainsFunc(msgs, func(m string) bool {
		return strings.Contains(m, "powered off: the fencing endpoint "+ep.URL+" answers that the machine of node "+fenced+" is off")
	}) || slices.ContainsFunc(msgs, func(m string) bool { return strings.Contains(m, "powered off: the cloud provider") }) {
		t.Errorf("%s events of %s: %q, want the confirmation by the fencing endpoint alone", ctrl.EventStep, fenced, msgs)
	}
	if n, msgs := eventCount(t, client, fenced, ctrl.EventFenceVetoed, 0); n != 0 {
		t.Errorf("FenceVetoed events for %s, whose machine is off: %q", fenced, msgs)
	}

	if n, msgs := eventCount(t, client, vetoed, ctrl.EventFenceVetoed, 1); n != 1 ||
		!strings.Contains(msgs[0], "the fencing endpoint "+ep.URL+" answers that the machine of node "+vetoed+" runs") {
		t.Errorf("%d FenceVetoed events of %s: %q, want one naming the fencing endpoint", n, vetoed, msgs)
	}
	if r, ok, _ := remediation.RequestOf(getNode(t, client, vetoed)); !ok || r.Action != remediation.ActionFence || r.FenceBootID != "" {
		t.Errorf("record of %s %+v (in repair %v): want the Fence step, its death unconfirmed", vetoed, r, ok)
	}
}

// TestRemediationFencePolicyRefusedWithoutPowerOff (issue 46, point 1): a
// policy with a Fence step, and no cloud provider to power machines off and
// confirm it, is refused when it is created (Accepted=False, reason
// CannotFence, and an event), not discovered at the step: a node that
// becomes unhealthy under it is not repaired.
func TestRemediationFencePolicyRefusedWithoutPowerOff(t *testing.T) {
	fencePolicyRefused(t, controllers.Default(), ctrl.ReasonCannotFence, "step 2 (Fence)", "power")
}

// fencePolicyRefused starts fenceLadder's policy (on KernelDeadlock) with
// drain and remediation under cfg, waits for Accepted=False with reason and
// a message holding every want, then makes a node unhealthy and checks that
// no repair starts.
func fencePolicyRefused(t *testing.T, cfg controllers.Config, reason string, want ...string) {
	t.Helper()
	cp := framework.StartControlPlane(t, controlplane.Config{})
	client := framework.Client(t, cp)
	policies := installRemediationCRD(t, dynamic.NewForConfigOrDie(cp.RESTConfig()))
	createPolicy(t, policies, strings.Replace(fenceLadder, "{type: Ready, status: Unknown, for: 1s}", "{type: KernelDeadlock, status: \"True\", for: 1s}", 1))
	nc := fastNodes(client, 2, false)
	nc.Labels = map[string]string{"pool": "gpu"}
	m := framework.StartFakeNodes(t, nc)
	for _, n := range m.NodeNames() {
		framework.Eventually(t, time.Minute, n+" Ready", nodeCondition(client, n, v1.NodeReady, v1.ConditionTrue))
	}
	framework.StartNodeShepherd(t, cp.RESTConfig(), cfg, func(o *manager.Options) { o.Controllers = []string{drain.Name, ctrl.Name} })
	framework.Eventually(t, time.Minute, "Accepted=False, "+reason, policyStatus(policies, "gpu", func(st remediation.PolicyStatus) bool {
		for _, c := range st.Conditions {
			if c.Type == ctrl.ConditionAccepted && c.Status == metav1.ConditionFalse && c.Reason == reason {
				for _, w := range want {
					if !strings.Contains(c.Message, w) {
						return false
					}
				}
				return true
			}
		}
		return false
	}))
	victim := m.NodeNames()[0]
	if _, err := m.Apply(framework.Context(t), fakenode.Fault{Action: fakenode.SetCondition, Target: fakenode.Target{Nodes: []string{victim}},
		Condition: &fakenode.Condition{Type: "KernelDeadlock", Status: v1.ConditionTrue, Reason: "DockerHung"}}); err != nil {
		t.Fatal(err)
	}
	never(t, 10*time.Second, "a repair started under the refused policy", func(ctx context.Context) (bool, string, error) {
		n, err := client.CoreV1().Nodes().Get(ctx, victim, metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		_, ok := n.Annotations[remediation.AnnotationState]
		return ok, fmt.Sprint(n.Annotations), nil
	})
}

// A policy with a Fence step while the outofservice controller does not
// run is refused when it is read (issue 46 point 5): its power-off would
// take nothing out of service. Accepted=False, NeedsOutOfService, naming
// the step and what to run; no repair starts.
func TestRemediationFencePolicyRefusedWithoutOutOfService(t *testing.T) {
	cfg := controllers.Default()
	cfg.CloudNodeLifecycle.Cloud = providers.Options{Name: "fake"} // it can power off: only outofservice is missing
	fencePolicyRefused(t, cfg, ctrl.ReasonNeedsOutOfService, "step 2 (Fence)", "--controllers=*,remediation,outofservice")
}
