package fakenode

import (
	"context"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
)

// claimsReady, as kubelet's DRA manager: a pod waits for its claim's name,
// the claim, its allocation and its reservation, in that order; then the
// node's devices of the claim are reported Ready, retried on a conflict.
// (The API server's side: TestFakeNodesDevices.)
func TestClaimsReady(t *testing.T) {
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "pod-uid"},
		Spec: v1.PodSpec{ResourceClaims: []v1.PodResourceClaim{{Name: "gpu", ResourceClaimTemplateName: ptr.To("one-gpu")}}}}
	owner := metav1.OwnerReference{APIVersion: "v1", Kind: "Pod", Name: "p", UID: "pod-uid", Controller: ptr.To(true)}
	claim := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: "p-gpu-x", Namespace: "ns", UID: "c1",
		OwnerReferences: []metav1.OwnerReference{owner}}}
	n := &node{name: "n1", devices: []DeviceSet{{Driver: "gpu.example.com", Count: 2}}}
	check := func(client *fake.Clientset, pod *v1.Pod, want string) {
		t.Helper()
		m := &Manager{cfg: Config{Client: client, Clock: clock.RealClock{}}}
		got, err := m.claimsReady(context.Background(), pod, n)
		if err != nil || !strings.Contains(got, want) || (want == "") != (got == "") {
			t.Errorf("waiting %q, %v; want %q", got, err, want)
		}
	}
	check(fake.NewClientset(), pod, "ResourceClaim not created yet")

	named := pod.DeepCopy()
	named.Status.ResourceClaimStatuses = []v1.PodResourceClaimStatus{{Name: "gpu", ResourceClaimName: ptr.To("p-gpu-x")}}
	check(fake.NewClientset(), named, "ResourceClaim p-gpu-x of pod claim gpu not found")

	other := claim.DeepCopy()
	other.OwnerReferences[0].UID = "another-pod"
	check(fake.NewClientset(other), named, "was not created for Pod ns/p")

	check(fake.NewClientset(claim), named, "ResourceClaim p-gpu-x is not allocated")

	allocated := claim.DeepCopy()
	allocated.Status.Allocation = &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{
		Results: []resourceapi.DeviceRequestAllocationResult{{Request: "gpu", Driver: "gpu.example.com", Pool: "n1", Device: "gpu-1"}}}}
	check(fake.NewClientset(allocated), named, "is not allowed to use ResourceClaim p-gpu-x")

	reserved := allocated.DeepCopy()
	reserved.Status.ReservedFor = []resourceapi.ResourceClaimConsumerReference{{Resource: "pods", Name: "p", UID: "pod-uid"}}
	client := fake.NewClientset(reserved)
	conflicts := 0
	client.PrependReactor("update", "resourceclaims", func(a clienttesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() == "status" && conflicts == 0 {
			conflicts++
			return true, nil, apierrors.NewConflict(schema.GroupResource{Group: "resource.k8s.io", Resource: "resourceclaims"}, "p-gpu-x", nil)
		}
		return false, nil, nil
	})
	check(client, named, "")
	got, err := client.ResourceV1().ResourceClaims("ns").Get(context.Background(), "p-gpu-x", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if conflicts != 1 || len(got.Status.Devices) != 1 || got.Status.Devices[0].Device != "gpu-1" || got.Status.Devices[0].Conditions[0].Type != "Ready" {
		t.Errorf("after %d conflicts, status.devices %+v", conflicts, got.Status.Devices)
	}
}
