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
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
	class := &resourceapi.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: "gpu"}, Spec: resourceapi.DeviceClassSpec{
		Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: `device.driver == "` + draDriver + `"`}}}}}
	if _, err := c.client.ResourceV1().DeviceClasses().Create(ctx, class, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	gpuNode := c.nodes[0]
	slice := &resourceapi.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: gpuNode + "-gpus"}, Spec: resourceapi.ResourceSliceSpec{
		Driver: draDriver, NodeName: ptr.To(gpuNode), Pool: resourceapi.ResourcePool{Name: gpuNode, ResourceSliceCount: 1},
		Devices: []resourceapi.Device{{Name: "gpu-0"}, {Name: "gpu-1"}}}}
	if _, err := c.client.ResourceV1().ResourceSlices().Create(ctx, slice, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	template := &resourceapi.ResourceClaimTemplate{ObjectMeta: metav1.ObjectMeta{Name: "one-gpu", Namespace: "default"},
		Spec: resourceapi.ResourceClaimTemplateSpec{Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{
			Requests: []resourceapi.DeviceRequest{{Name: "gpu", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: "gpu"}}}}}}}
	if _, err := c.client.ResourceV1().ResourceClaimTemplates("default").Create(ctx, template, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	names := []string{"gpu-a", "gpu-b", "gpu-c"}
	for _, name := range names {
		p := spec{name: name, milliCPU: 100}.pod(c.nodes, v1.DefaultSchedulerName)
		p.Spec.ResourceClaims = []v1.PodResourceClaim{{Name: "gpu", ResourceClaimTemplateName: ptr.To("one-gpu")}}
		p.Spec.Containers[0].Resources.Claims = []v1.ResourceClaim{{Name: "gpu"}}
		c.create(t, p)
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
	const wantPrefix = "0/2 nodes are available: 2 cannot allocate all claims."
	if !strings.HasPrefix(pendingMsg, wantPrefix) {
		t.Errorf("pending pod's message %q, want it to start with %q", pendingMsg, wantPrefix)
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
