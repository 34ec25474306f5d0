package integration

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/nodeshepherd/nodeshepherd/test/framework"
)

const draDriver = "gpu.example.com"

// TestSchedulerDRAAllocatesFakeGPUs: a ResourceSlice publishes two fake
// GPUs on the first node; three pods each get a claim for one GPU from a
// ResourceClaimTemplate (kube-controller-manager's ResourceClaim controller
// creates the claims). nodeshepherd's scheduler, as default-scheduler,
// allocates the claims with the upstream structured allocator: two pods are
// bound to that node, their claims allocated a GPU each and reserved for
// them; the third stays pending with kube-scheduler's reason. Once one of
// the two pods is deleted, the controller releases its claim and the third
// pod gets the freed GPU.
func TestSchedulerDRAAllocatesFakeGPUs(t *testing.T) {
	c := startPreemptionCluster(t, 2, false, nil)
	ctx := framework.Context(t)
	gpuNode := c.nodes[0]
	createFakeGPUs(t, c.client, gpuNode)
	names := []string{"gpu-a", "gpu-b", "gpu-c"}
	for _, name := range names {
		c.create(t, withGPUClaim(spec{name: name, milliCPU: 100}.pod(c.nodes, v1.DefaultSchedulerName)))
	}
	// Two are bound to the GPU node, the third is reported unschedulable.
	var bound, pending []string
	var pendingMsg string
	framework.Eventually(t, 90*time.Second, "two pods bound, one unschedulable", func(ctx context.Context) (bool, string, error) {
		bound, pending = nil, nil
		var state []string
		for _, name := range names {
			p, err := c.client.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, "", err
			}
			if p.Spec.NodeName != "" {
				if p.Spec.NodeName != gpuNode {
					return false, "", fmt.Errorf("pod %s bound to %s, which has no GPU", name, p.Spec.NodeName)
				}
				bound = append(bound, name)
				continue
			}
			for _, cond := range p.Status.Conditions {
				if cond.Type == v1.PodScheduled && cond.Status == v1.ConditionFalse {
					state = append(state, name+": "+cond.Reason+": "+cond.Message)
					if cond.Reason == v1.PodReasonUnschedulable && strings.Contains(cond.Message, "cannot allocate all claims") {
						pending = append(pending, name)
						pendingMsg = cond.Message
					}
				}
			}
		}
		return len(bound) == 2 && len(pending) == 1, fmt.Sprintf("bound %v; %v", bound, state), nil
	})
	// kube-scheduler's message (TestSchedulerParity137 compares it): its
	// DynamicResources rejects a node unresolvably, and no pod of lower
	// priority holds a GPU here for nodeshepherd's preemption to free.
	const want = "0/2 nodes are available: 2 cannot allocate all claims. preemption: 0/2 nodes are available: 2 Preemption is not helpful for scheduling."
	if pendingMsg != want {
		t.Errorf("pending pod's message %q, want %q", pendingMsg, want)
	}
	// The bound pods' claims: allocated a distinct GPU of the node, reserved
	// for their pod, protected by the finalizer.
	devices := map[string]string{}
	for _, name := range bound {
		claim := podClaim(t, c, name)
		a := claim.Status.Allocation
		if a == nil || len(a.Devices.Results) != 1 {
			t.Fatalf("claim %s of %s: allocation %+v", claim.Name, name, a)
		}
		r := a.Devices.Results[0]
		if r.Driver != draDriver || r.Pool != gpuNode || r.Request != "gpu" {
			t.Errorf("claim %s: result %+v", claim.Name, r)
		}
		if other, ok := devices[r.Device]; ok {
			t.Errorf("device %s allocated to both %s and %s", r.Device, other, name)
		}
		devices[r.Device] = name
		if len(claim.Status.ReservedFor) != 1 || claim.Status.ReservedFor[0].Name != name || claim.Status.ReservedFor[0].Resource != "pods" {
			t.Errorf("claim %s: reservedFor %+v", claim.Name, claim.Status.ReservedFor)
		}
		if !slices.Contains(claim.Finalizers, resourceapi.Finalizer) {
			t.Errorf("claim %s: finalizers %v", claim.Name, claim.Finalizers)
		}
		if sel := a.NodeSelector; sel == nil || len(sel.NodeSelectorTerms) != 1 {
			t.Errorf("claim %s: allocation's node selector %+v", claim.Name, sel)
		}
	}
	if claim := podClaim(t, c, pending[0]); claim.Status.Allocation != nil || len(claim.Status.ReservedFor) > 0 {
		t.Errorf("the pending pod's claim %s: %+v", claim.Name, claim.Status)
	}
	// A bound pod goes: its GPU goes to the pending pod.
	freed := bound[0]
	if err := c.client.CoreV1().Pods("default").Delete(ctx, freed, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
		t.Fatal(err)
	}
	var node string
	framework.Eventually(t, 120*time.Second, pending[0]+" bound after "+freed+" went", func(ctx context.Context) (bool, string, error) {
		p, err := c.client.CoreV1().Pods("default").Get(ctx, pending[0], metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		node = p.Spec.NodeName
		return node != "", fmt.Sprintf("conditions %+v", p.Status.Conditions), nil
	})
	if node != gpuNode {
		t.Errorf("%s bound to %s, want %s", pending[0], node, gpuNode)
	}
	if claim := podClaim(t, c, pending[0]); claim.Status.Allocation == nil || len(claim.Status.ReservedFor) != 1 {
		t.Errorf("the last pod's claim %s: %+v", claim.Name, claim.Status)
	}
}

// createFakeGPUs creates the DeviceClass gpu (every device of draDriver),
// a ResourceSlice with two devices gpu-0 and gpu-1 on the node, and the
// ResourceClaimTemplate one-gpu in the default namespace.
func createFakeGPUs(t *testing.T, client kubernetes.Interface, node string) {
	t.Helper()
	ctx := framework.Context(t)
	class := &resourceapi.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: "gpu"}, Spec: resourceapi.DeviceClassSpec{
		Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: `device.driver == "` + draDriver + `"`}}}}}
	if _, err := client.ResourceV1().DeviceClasses().Create(ctx, class, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	slice := &resourceapi.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: node + "-gpus"}, Spec: resourceapi.ResourceSliceSpec{
		Driver: draDriver, NodeName: ptr.To(node), Pool: resourceapi.ResourcePool{Name: node, ResourceSliceCount: 1},
		Devices: []resourceapi.Device{{Name: "gpu-0"}, {Name: "gpu-1"}}}}
	if _, err := client.ResourceV1().ResourceSlices().Create(ctx, slice, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	template := &resourceapi.ResourceClaimTemplate{ObjectMeta: metav1.ObjectMeta{Name: "one-gpu", Namespace: "default"},
		Spec: resourceapi.ResourceClaimTemplateSpec{Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{
			Requests: []resourceapi.DeviceRequest{{Name: "gpu", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: "gpu"}}}}}}}
	if _, err := client.ResourceV1().ResourceClaimTemplates("default").Create(ctx, template, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// withGPUClaim gives the pod a claim for one GPU from the template one-gpu.
func withGPUClaim(p *v1.Pod) *v1.Pod {
	p.Spec.ResourceClaims = []v1.PodResourceClaim{{Name: "gpu", ResourceClaimTemplateName: ptr.To("one-gpu")}}
	p.Spec.Containers[0].Resources.Claims = []v1.ResourceClaim{{Name: "gpu"}}
	return p
}

// TestSchedulerDRAPreemptsForADevice: the node's two fake GPUs are held,
// through claims from a template, by two pods of priority 10 and 20; a pod
// of priority 1000 whose claim asks for one GPU fits nowhere else (the
// other node has no GPU). nodeshepherd's scheduler preempts the
// priority-10 pod alone (its claim is reserved by no one else, so its GPU
// is free once it goes); the ResourceClaim controller deallocates the
// victim's claim, and the preemptor is bound to the node with that GPU
// allocated and reserved for it. The priority-20 pod and its claim are
// left alone.
func TestSchedulerDRAPreemptsForADevice(t *testing.T) {
	c := startPreemptionCluster(t, 2, false, nil)
	ctx := framework.Context(t)
	gpuNode := c.nodes[0]
	createFakeGPUs(t, c.client, gpuNode)
	for _, s := range []spec{{name: "gpu-low", class: "p10", milliCPU: 100}, {name: "gpu-mid", class: "p20", milliCPU: 100}} {
		c.create(t, withGPUClaim(s.pod(c.nodes, v1.DefaultSchedulerName)))
		if node := waitBoundWithin(t, c.client, s.name, 90*time.Second); node != gpuNode {
			t.Fatalf("%s bound to %s, want %s", s.name, node, gpuNode)
		}
	}
	victimClaim, midClaim := podClaim(t, c, "gpu-low"), podClaim(t, c, "gpu-mid")
	if victimClaim.Status.Allocation == nil || midClaim.Status.Allocation == nil {
		t.Fatalf("claims not allocated: %+v, %+v", victimClaim.Status, midClaim.Status)
	}
	freedDevice := victimClaim.Status.Allocation.Devices.Results[0].Device

	c.create(t, withGPUClaim(spec{name: "gpu-high", class: "p1000", milliCPU: 100}.pod(c.nodes, v1.DefaultSchedulerName)))
	if node := waitBoundWithin(t, c.client, "gpu-high", 2*time.Minute); node != gpuNode {
		t.Fatalf("gpu-high bound to %s, want %s", node, gpuNode)
	}
	// The victim is gone and its claim deallocated (the controller then
	// deletes it): the preemptor could not have been given its GPU before.
	framework.Eventually(t, 60*time.Second, "gpu-low deleted", func(ctx context.Context) (bool, string, error) {
		p, err := c.client.CoreV1().Pods("default").Get(ctx, "gpu-low", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, "", nil
		}
		if err != nil {
			return false, "", err
		}
		return false, fmt.Sprintf("deletionTimestamp %v, conditions %+v", p.DeletionTimestamp, p.Status.Conditions), nil
	})
	got, err := c.client.ResourceV1().ResourceClaims("default").Get(ctx, victimClaim.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		t.Fatal(err)
	case got.UID == victimClaim.UID && (got.Status.Allocation != nil || len(got.Status.ReservedFor) > 0):
		t.Errorf("the victim's claim %s is still allocated: %+v", got.Name, got.Status)
	}
	high := podClaim(t, c, "gpu-high")
	if a := high.Status.Allocation; a == nil || len(a.Devices.Results) != 1 || a.Devices.Results[0].Device != freedDevice ||
		a.Devices.Results[0].Pool != gpuNode {
		t.Errorf("gpu-high's claim %s: allocation %+v, want %s's %s", high.Name, a, gpuNode, freedDevice)
	}
	if len(high.Status.ReservedFor) != 1 || high.Status.ReservedFor[0].Name != "gpu-high" {
		t.Errorf("gpu-high's claim %s: reservedFor %+v", high.Name, high.Status.ReservedFor)
	}
	// One victim only: the priority-20 pod keeps its pod and its GPU.
	mid, err := c.client.CoreV1().Pods("default").Get(ctx, "gpu-mid", metav1.GetOptions{})
	if err != nil || mid.DeletionTimestamp != nil {
		t.Fatalf("gpu-mid: %v (deletionTimestamp %v)", err, mid.GetDeletionTimestamp())
	}
	if now := podClaim(t, c, "gpu-mid"); now.UID != midClaim.UID || now.Status.Allocation == nil ||
		now.Status.Allocation.Devices.Results[0].Device != midClaim.Status.Allocation.Devices.Results[0].Device {
		t.Errorf("gpu-mid's claim changed: %+v", now.Status)
	}
	_, msgs := framework.WaitEvents(t, c.client, "involvedObject.name=gpu-low,reason=Preempted", 1)
	if want := fmt.Sprintf("Preempted by pod %s on node %s", highPod(t, c).UID, gpuNode); msgs[0] != want {
		t.Errorf("gpu-low's Preempted event %q, want %q", msgs[0], want)
	}
}

func highPod(t *testing.T, c *preemptionCluster) *v1.Pod {
	t.Helper()
	p, err := c.client.CoreV1().Pods("default").Get(framework.Context(t), "gpu-high", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// waitBoundWithin waits until the pod of the default namespace is bound
// and returns its node.
func waitBoundWithin(t *testing.T, client kubernetes.Interface, name string, timeout time.Duration) string {
	t.Helper()
	var node string
	framework.Eventually(t, timeout, name+" bound", func(ctx context.Context) (bool, string, error) {
		p, err := client.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		node = p.Spec.NodeName
		return node != "", fmt.Sprintf("nominated %q, conditions %+v", p.Status.NominatedNodeName, p.Status.Conditions), nil
	})
	return node
}

// podClaim is the claim the ResourceClaim controller made for the pod.
func podClaim(t *testing.T, c *preemptionCluster, pod string) *resourceapi.ResourceClaim {
	t.Helper()
	ctx := framework.Context(t)
	p, err := c.client.CoreV1().Pods("default").Get(ctx, pod, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Status.ResourceClaimStatuses) != 1 || p.Status.ResourceClaimStatuses[0].ResourceClaimName == nil {
		t.Fatalf("pod %s: resourceClaimStatuses %+v", pod, p.Status.ResourceClaimStatuses)
	}
	claim, err := c.client.ResourceV1().ResourceClaims("default").Get(ctx, *p.Status.ResourceClaimStatuses[0].ResourceClaimName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return claim
}
