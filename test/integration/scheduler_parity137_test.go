package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/nodeshepherd/nodeshepherd/pkg/controller/scheduler"
	"github.com/nodeshepherd/nodeshepherd/pkg/controlplane"
	"github.com/nodeshepherd/nodeshepherd/pkg/manager"
	"github.com/nodeshepherd/nodeshepherd/test/framework"
)

// The parity workload's node groups (label parity=<group>): image holds
// three nodes, one with the big image; features two, one declaring the
// restart-all feature; resize one node of 1 CPU; gpu one node with two
// fake GPUs (a ResourceSlice).
const (
	parityNamespace  = "default"
	parityImage      = "registry.example/big:1"
	parityImageSize  = 900 * 1024 * 1024
	parityFeature    = "RestartAllContainersOnContainerExits"
	parityPauseImage = "registry.k8s.io/pause:3.10"
)

type parityNode struct {
	name, group string
	images      []v1.ContainerImage
	features    []string
	alloc       v1.ResourceList // nil: 1 CPU, 4Gi, 110 pods
}

func parityNodes() []parityNode {
	return []parityNode{
		{name: "img-1", group: "image"},
		{name: "img-2", group: "image", images: []v1.ContainerImage{{Names: []string{parityImage}, SizeBytes: parityImageSize}}},
		{name: "img-3", group: "image"},
		{name: "feat-1", group: "features"},
		{name: "feat-2", group: "features", features: []string{parityFeature}},
		{name: "rsz-1", group: "resize"},
		{name: "gpu-1", group: "gpu"},
	}
}

// createParityNode creates a Node without a kubelet: Ready, 1 CPU, its
// images and declared features, and without the not-ready taint the API
// server's admission gives new nodes.
func createParityNode(t *testing.T, client kubernetes.Interface, pn parityNode) {
	t.Helper()
	ctx := framework.Context(t)
	n := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: pn.name, Labels: map[string]string{v1.LabelHostname: pn.name, "parity": pn.group}}}
	if _, err := client.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	alloc := pn.alloc
	if alloc == nil {
		alloc = v1.ResourceList{v1.ResourceCPU: resource.MustParse("1"), v1.ResourceMemory: resource.MustParse("4Gi"), v1.ResourcePods: resource.MustParse("110")}
	}
	status := v1.NodeStatus{Capacity: alloc, Allocatable: alloc, Images: pn.images, DeclaredFeatures: pn.features,
		Conditions: []v1.NodeCondition{{Type: v1.NodeReady, Status: v1.ConditionTrue, Reason: "KubeletReady",
			LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}}}
	patchNodeStatus(t, client, pn.name, status)
	if _, err := client.CoreV1().Nodes().Patch(ctx, pn.name, types.MergePatchType, []byte(`{"spec":{"taints":null}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}

func patchNodeStatus(t *testing.T, client kubernetes.Interface, name string, status any) {
	t.Helper()
	data, err := json.Marshal(map[string]any{"status": status})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.CoreV1().Nodes().Patch(framework.Context(t), name, types.MergePatchType, data, metav1.PatchOptions{}, "status"); err != nil {
		t.Fatal(err)
	}
}

// parityPod is a default-scheduler pod of 100m (cpu) on a node group.
func parityPod(name, group string, milliCPU int64) *v1.Pod {
	return &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: parityNamespace},
		Spec: v1.PodSpec{SchedulerName: v1.DefaultSchedulerName, NodeSelector: map[string]string{"parity": group},
			TerminationGracePeriodSeconds: ptr.To[int64](0),
			Containers: []v1.Container{{Name: "c", Image: parityPauseImage, Resources: v1.ResourceRequirements{
				Requests: v1.ResourceList{v1.ResourceCPU: *resource.NewMilliQuantity(milliCPU, resource.DecimalSI)}}}}}}
}

// setAllocated writes what a kubelet reports for the pod's container: the
// CPU it allocated and actuated (an in-place resize it accepted).
func setAllocated(t *testing.T, client kubernetes.Interface, name, cpu string) {
	t.Helper()
	q := resource.MustParse(cpu)
	status := map[string]any{"status": map[string]any{"phase": v1.PodRunning, "containerStatuses": []v1.ContainerStatus{{
		Name: "c", Image: parityPauseImage, ImageID: parityPauseImage, Ready: true, Started: ptr.To(true),
		State:              v1.ContainerState{Running: &v1.ContainerStateRunning{StartedAt: metav1.Now()}},
		AllocatedResources: v1.ResourceList{v1.ResourceCPU: q},
		Resources:          &v1.ResourceRequirements{Requests: v1.ResourceList{v1.ResourceCPU: q}},
	}}}}
	data, err := json.Marshal(status)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.CoreV1().Pods(parityNamespace).Patch(framework.Context(t), name, types.StrategicMergePatchType, data, metav1.PatchOptions{}, "status"); err != nil {
		t.Fatal(err)
	}
}

// parityOutcome is what one scheduler decided, by step.
type parityOutcome map[string]framework.PodDecision

func waitBound(t *testing.T, client kubernetes.Interface, name string) string {
	t.Helper()
	var node string
	framework.Eventually(t, 60*time.Second, name+" bound", func(ctx context.Context) (bool, string, error) {
		p, err := client.CoreV1().Pods(parityNamespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		node = p.Spec.NodeName
		return node != "", fmt.Sprintf("conditions %v", p.Status.Conditions), nil
	})
	return node
}

// bothSchedulersDecide runs a parity workload through kube-scheduler and
// through nodeshepherd's scheduler, each on a control plane of its own,
// and checks every decision of each against want.
func bothSchedulersDecide(t *testing.T, want parityOutcome, run func(t *testing.T, upstream bool) parityOutcome) {
	bothSchedulersDecideApart(t, want, nil, run)
}

// bothSchedulersDecideApart is bothSchedulersDecide where the schedulers
// are known to differ: apart[upstream] holds the steps where that
// scheduler's decision is its own.
func bothSchedulersDecideApart(t *testing.T, want parityOutcome, apart map[bool]parityOutcome, run func(t *testing.T, upstream bool) parityOutcome) {
	for _, upstream := range []bool{true, false} {
		who := map[bool]string{true: "kube-scheduler", false: "nodeshepherd"}[upstream]
		t.Run(who, func(t *testing.T) {
			got := run(t, upstream)
			all := maps.Clone(want)
			maps.Copy(all, apart[upstream])
			for step, w := range all {
				if got[step] != w {
					t.Errorf("%s: %s decided %+v, want %+v", step, who, got[step], w)
				}
			}
		})
	}
}

// startParityScheduler runs nodeshepherd's scheduler alone, as
// default-scheduler, with short backoffs.
func startParityScheduler(t *testing.T, cp *controlplane.ControlPlane) {
	t.Helper()
	ctrl := fastLifecycle(100)
	ctrl.Scheduler.SchedulerName = v1.DefaultSchedulerName
	ctrl.Scheduler.PodInitialBackoff = 100 * time.Millisecond
	ctrl.Scheduler.PodMaxBackoff = time.Second
	framework.StartNodeShepherd(t, cp.RESTConfig(), ctrl, func(o *manager.Options) { o.Controllers = []string{scheduler.Name} })
}

// runParity137 runs the workload with kube-scheduler (upstream) or
// nodeshepherd's scheduler and returns its decisions.
func runParity137(t *testing.T, upstream bool) parityOutcome {
	// kube-controller-manager creates the default ServiceAccount pods need.
	cp := startControlPlaneAlone(t, controlplane.Config{ControllerManager: true, Scheduler: upstream})
	client := framework.Client(t, cp)
	if !upstream {
		startParityScheduler(t, cp)
	}
	for _, pn := range parityNodes() {
		createParityNode(t, client, pn)
	}
	pc := &preemptionCluster{client: client}
	out := parityOutcome{}
	decide := func(p *v1.Pod) framework.PodDecision {
		pc.create(t, p)
		d := framework.WaitPodDecision(t, client, parityNamespace, p.Name, 60*time.Second)
		out[p.Name] = d
		return d
	}

	// ImageLocality: three equal nodes, one with the pod's 900 MiB image.
	withImage := parityPod("image", "image", 100)
	withImage.Spec.Containers[0].Image = parityImage
	decide(withImage)

	// NodeDeclaredFeatures: a container restart rule that restarts all
	// containers needs RestartAllContainersOnContainerExits.
	restartAll := func(name string) *v1.Pod {
		p := parityPod(name, "features", 100)
		p.Spec.RestartPolicy = v1.RestartPolicyNever
		p.Spec.Containers[0].RestartPolicy = ptr.To(v1.ContainerRestartPolicyNever)
		p.Spec.Containers[0].RestartPolicyRules = []v1.ContainerRestartRule{{Action: v1.ContainerRestartRuleActionRestartAllContainers,
			ExitCodes: &v1.ContainerRestartRuleOnExitCodes{Operator: v1.ContainerRestartRuleOnExitCodesOpIn, Values: []int32{42}}}}
		return p
	}
	decide(restartAll("feature"))
	// On the node that does not declare it, it waits until the node does.
	pinned := restartAll("feature-pinned")
	pinned.Spec.NodeSelector[v1.LabelHostname] = "feat-1"
	decide(pinned)
	patchNodeStatus(t, client, "feat-1", map[string]any{"declaredFeatures": []string{parityFeature}})
	out["feature-pinned-after"] = framework.PodDecision{Node: waitBound(t, client, "feature-pinned")}

	// In-place resize: a pod bound to the 1-CPU node asks for 300m but its
	// kubelet allocated 800m (a resize it accepted, spec not yet changed):
	// 800m count, and a 500m pod does not fit until the allocation shrinks.
	running := parityPod("resized", "resize", 300)
	running.Spec.NodeName = "rsz-1"
	pc.create(t, running)
	setAllocated(t, client, "resized", "800m")
	decide(parityPod("needs-room", "resize", 500))
	setAllocated(t, client, "resized", "300m")
	out["needs-room-after"] = framework.PodDecision{Node: waitBound(t, client, "needs-room")}

	// A DaemonSet's pod names its node by matchFields metadata.name: the
	// other nodes are excluded before any filter runs (NodeAffinity's
	// PreFilter), and kube-scheduler says so in words of its own.
	daemon := parityPod("daemon-too-big", "resize", 2000)
	delete(daemon.Spec.NodeSelector, "parity")
	daemon.Spec.Affinity = &v1.Affinity{NodeAffinity: &v1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &v1.NodeSelector{
		NodeSelectorTerms: []v1.NodeSelectorTerm{{MatchFields: []v1.NodeSelectorRequirement{{Key: "metadata.name", Operator: v1.NodeSelectorOpIn, Values: []string{"rsz-1"}}}}}}}}
	decide(daemon)

	// DRA preemption: gpu-1's two GPUs are held, through claims from a
	// template, by pods of priority 10 and 20; a pod of priority 1000 asks
	// for one GPU. Then: is the priority-10 pod still there?
	createPriorityClasses(t, client)
	createFakeGPUs(t, client, "gpu-1")
	for name, class := range map[string]string{"gpu-low": "p10", "gpu-mid": "p20"} {
		p := withGPUClaim(parityPod(name, "gpu", 100))
		p.Spec.PriorityClassName = class
		decide(p)
	}
	// A pod of priority 10 finds no GPU and no victim of lower priority.
	// It goes before the next step, whose freed GPU it could take.
	same := withGPUClaim(parityPod("gpu-same", "gpu", 100))
	same.Spec.PriorityClassName = "p10"
	decide(same)
	deletePodAndWait(t, client, "gpu-same")
	high := withGPUClaim(parityPod("gpu-high", "gpu", 100))
	high.Spec.PriorityClassName = "p1000"
	pc.create(t, high)
	out["gpu-high"] = framework.WaitPodOutcome(t, client, parityNamespace, "gpu-high", 2*time.Minute)
	out["gpu-low-after"] = podState(t, client, "gpu-low")
	out["gpu-mid-after"] = podState(t, client, "gpu-mid")

	// Admin access (in a namespace labelled for it): both GPUs are held,
	// and a claim with adminAccess gets one of them anyway.
	ns := fmt.Sprintf(`{"metadata":{"labels":{%q:"true"}}}`, resourceapi.DRAAdminNamespaceLabelKey)
	if _, err := client.CoreV1().Namespaces().Patch(framework.Context(t), parityNamespace, types.MergePatchType, []byte(ns), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	adminClaim := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: "gpu-admin", Namespace: parityNamespace},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{Name: "gpu",
			Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: "gpu", AdminAccess: ptr.To(true)}}}}}}
	if _, err := client.ResourceV1().ResourceClaims(parityNamespace).Create(framework.Context(t), adminClaim, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	admin := parityPod("gpu-admin", "gpu", 100)
	admin.Spec.ResourceClaims = []v1.PodResourceClaim{{Name: "gpu", ResourceClaimName: ptr.To("gpu-admin")}}
	decide(admin)
	if c, err := client.ResourceV1().ResourceClaims(parityNamespace).Get(framework.Context(t), "gpu-admin", metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	} else if a := c.Status.Allocation; a == nil || len(a.Devices.Results) != 1 || !ptr.Deref(a.Devices.Results[0].AdminAccess, false) {
		t.Errorf("claim gpu-admin: allocation %+v, want one device with adminAccess", a)
	}
	return out
}

func deletePodAndWait(t *testing.T, client kubernetes.Interface, name string) {
	t.Helper()
	if err := client.CoreV1().Pods(parityNamespace).Delete(framework.Context(t), name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, time.Minute, name+" deleted", func(ctx context.Context) (bool, string, error) {
		_, err := client.CoreV1().Pods(parityNamespace).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, "", nil
		}
		return false, fmt.Sprint(err), nil
	})
}

// podState is a pod's node, or reason "Deleted" for a pod gone or being
// deleted.
func podState(t *testing.T, client kubernetes.Interface, name string) framework.PodDecision {
	t.Helper()
	p, err := client.CoreV1().Pods(parityNamespace).Get(framework.Context(t), name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err) || err == nil && p.DeletionTimestamp != nil:
		return framework.PodDecision{Reason: "Deleted"}
	case err != nil:
		t.Fatal(err)
	}
	return framework.PodDecision{Node: p.Spec.NodeName}
}

// TestSchedulerParity137: kube-scheduler 1.37's ImageLocality score,
// NodeDeclaredFeatures filter, in-place-resize accounting, the message
// for the nodes a DaemonSet pod's matchFields leaves out, and DRA claims
// on a node's two fake GPUs (admin access included), run through kube-scheduler and through
// nodeshepherd's scheduler on plain nodes of the real API server: both
// make the same decisions and messages, except that nodeshepherd preempts
// a lower-priority GPU holder for a pod that needs its device, which
// kube-scheduler 1.37 does not do.
func TestSchedulerParity137(t *testing.T) {
	const others = "6 node(s) didn't match Pod's node affinity/selector."
	want := parityOutcome{
		"image":   {Node: "img-2"},
		"feature": {Node: "feat-2"},
		"feature-pinned": {Reason: v1.PodReasonUnschedulable, Message: "0/7 nodes are available: 1 node(s) didn't match Pod's required features, " + others +
			" preemption: 0/7 nodes are available: 7 Preemption is not helpful for scheduling."},
		"feature-pinned-after": {Node: "feat-1"},
		"needs-room": {Reason: v1.PodReasonUnschedulable, Message: "0/7 nodes are available: 1 Insufficient cpu, " + others +
			" preemption: 0/7 nodes are available: 1 No preemption victims found for incoming pod, 6 Preemption is not helpful for scheduling."},
		"needs-room-after": {Node: "rsz-1"},
		// 2 CPUs on a node of 1: too big for any preemption to help.
		"daemon-too-big": {Reason: v1.PodReasonUnschedulable, Message: "0/7 nodes are available: 1 Insufficient cpu, 6 node(s) didn't satisfy plugin(s) [NodeAffinity]." +
			" preemption: 0/7 nodes are available: 7 Preemption is not helpful for scheduling."},
	}
	// DRA: both GPU holders are placed; a pod of priority 10, which no
	// holder is below, is told by both that no preemption helps
	// (kube-scheduler's DynamicResources rejects a node unresolvably).
	noGPU := "0/7 nodes are available: 1 cannot allocate all claims, " + others + " preemption: 0/7 nodes are available: 7 Preemption is not helpful for scheduling."
	gpu1 := framework.PodDecision{Node: "gpu-1"}
	want["gpu-low"], want["gpu-mid"], want["gpu-mid-after"] = gpu1, gpu1, gpu1
	want["gpu-same"] = framework.PodDecision{Reason: v1.PodReasonUnschedulable, Message: noGPU}
	want["gpu-admin"] = gpu1
	// Where they differ: kube-scheduler 1.37 does not preempt for devices
	// (DRA preemption, KEP-5690, is not in 1.37): the priority-1000 pod
	// stays pending with the same message. nodeshepherd preempts the
	// priority-10 holder, whose claim the ResourceClaim controller
	// deallocates, and binds the pod to that GPU.
	apart := map[bool]parityOutcome{
		true:  {"gpu-high": {Reason: v1.PodReasonUnschedulable, Message: noGPU}, "gpu-low-after": gpu1},
		false: {"gpu-high": gpu1, "gpu-low-after": {Reason: "Deleted"}},
	}
	bothSchedulersDecideApart(t, want, apart, runParity137)
}
