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
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	nscloud "github.com/nodeshepherd/nodeshepherd/pkg/cloudprovider"
	fakecloud "github.com/nodeshepherd/nodeshepherd/pkg/cloudprovider/fake"
	"github.com/nodeshepherd/nodeshepherd/pkg/controller/scheduler"
	"github.com/nodeshepherd/nodeshepherd/pkg/controlplane"
	"github.com/nodeshepherd/nodeshepherd/pkg/fakenode"
	"github.com/nodeshepherd/nodeshepherd/pkg/manager"
	"github.com/nodeshepherd/nodeshepherd/test/framework"
)

const fakeGPUDriver = "gpu.fake.nodeshepherd.io"

// TestFakeNodesDevices: fake nodes of a group gpu publish two fake GPUs
// each (fakenode.Config Devices), a group plain none. Each gpu node has one
// ResourceSlice owned by its Node, pool named after it, and the fake nodes
// created the DeviceClass of the driver. nodeshepherd's scheduler
// schedules pods with a claim from a ResourceClaimTemplate onto the gpu
// nodes; the fake kubelet starts them once their claims are allocated and
// reserved for them, and reports the allocated GPU prepared in the claim's
// status.devices (Ready True). With every GPU taken, a further pod's claim
// cannot be allocated: it stays pending, unschedulable, until a running pod
// is deleted: its claim (devices reported prepared) is deallocated and
// deleted, and the pending pod runs with the freed GPU. A pod bound by hand
// to a gpu node with a claim nobody allocated is not started: the fake
// kubelet records FailedPrepareDynamicResources. A gpu node's Node deleted:
// the fake kubelet registers it anew and publishes its slice again, owned
// by the new Node; so does the other gpu node once the fake cloud replaced
// its machine (Node gone, new machine registering it anew).
func TestFakeNodesDevices(t *testing.T) {
	cp := startControlPlaneAlone(t, controlplane.Config{ControllerManager: true})
	client := framework.Client(t, cp)
	ctx := framework.Context(t)
	fn := fastNodes(client, 0, false)
	// A kubelet finds its Node deleted when it next posts its status, and
	// registers it anew: a short report frequency makes that soon.
	fn.NodeStatusReportFrequency = 2 * time.Second
	fn.ReplaceDowntime = 2 * time.Second
	fn.Groups = []fakenode.NodeGroup{
		{Name: "gpu", Zone: "zone-a", Count: 2, Devices: []fakenode.DeviceSet{{Driver: fakeGPUDriver, Count: 2, Model: "fake-a100", Memory: resource.MustParse("80Gi")}}},
		{Name: "plain", Zone: "zone-a", Count: 1},
	}
	m := framework.StartFakeNodes(t, fn)
	ctrl := fastLifecycle(100)
	ctrl.Scheduler.SchedulerName = v1.DefaultSchedulerName
	ctrl.Scheduler.PodInitialBackoff = 100 * time.Millisecond
	ctrl.Scheduler.PodMaxBackoff = time.Second
	framework.StartNodeShepherd(t, cp.RESTConfig(), ctrl, func(o *manager.Options) { o.Controllers = []string{"nodelifecycle", scheduler.Name} })
	names := m.NodeNames()
	gpuNodes, plainNode := names[:2], names[2]
	waitNodesReady(t, client, names...)

	// The slices: one per gpu node, none for the plain node.
	for _, name := range gpuNodes {
		s := waitSliceOwnedBy(t, client, name)
		if s.Spec.Driver != fakeGPUDriver || s.Spec.Pool.Name != name || s.Spec.Pool.ResourceSliceCount != 1 || len(s.Spec.Devices) != 2 ||
			s.Spec.Devices[0].Name != "gpu-0" || ptr.Deref(s.Spec.Devices[1].Attributes["model"].StringValue, "") != "fake-a100" {
			t.Errorf("slice %s: %+v", s.Name, s.Spec)
		}
	}
	all, err := client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range all.Items {
		if ptr.Deref(s.Spec.NodeName, "") == plainNode {
			t.Errorf("the plain node publishes %s", s.Name)
		}
	}
	class, err := client.ResourceV1().DeviceClasses().Get(ctx, fakeGPUDriver, metav1.GetOptions{})
	if err != nil || class.Spec.Selectors[0].CEL.Expression != `device.driver == "`+fakeGPUDriver+`"` {
		t.Fatalf("DeviceClass %s: %+v, %v", fakeGPUDriver, class, err)
	}
	template := &resourceapi.ResourceClaimTemplate{ObjectMeta: metav1.ObjectMeta{Name: "one-gpu", Namespace: "default"},
		Spec: resourceapi.ResourceClaimTemplateSpec{Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{
			Requests: []resourceapi.DeviceRequest{{Name: "gpu", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: fakeGPUDriver}}}}}}}
	if _, err := client.ResourceV1().ResourceClaimTemplates("default").Create(ctx, template, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var pods []string
	for i := range 5 {
		p := spec{name: fmt.Sprintf("gpu-%d", i), milliCPU: 100}.pod(names, v1.DefaultSchedulerName)
		p.Spec.ResourceClaims = []v1.PodResourceClaim{{Name: "gpu", ResourceClaimTemplateName: ptr.To("one-gpu")}}
		p.Spec.Containers[0].Resources.Claims = []v1.ResourceClaim{{Name: "gpu"}}
		createPodEventually(t, client, p)
		pods = append(pods, p.Name)
	}
	// Four GPUs: four pods run on the gpu nodes, one stays pending.
	var running []string
	var pending string
	framework.Eventually(t, 2*time.Minute, "four pods running, one unschedulable", func(ctx context.Context) (bool, string, error) {
		running, pending = nil, ""
		var state []string
		for _, name := range pods {
			p, err := client.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, "", err
			}
			state = append(state, fmt.Sprintf("%s: %s on %q", name, p.Status.Phase, p.Spec.NodeName))
			if p.Status.Phase == v1.PodRunning {
				if !slices.Contains(gpuNodes, p.Spec.NodeName) {
					return false, "", fmt.Errorf("pod %s runs on %s, which has no GPU", name, p.Spec.NodeName)
				}
				running = append(running, name)
			}
			for _, c := range p.Status.Conditions {
				if c.Type == v1.PodScheduled && c.Status == v1.ConditionFalse && strings.Contains(c.Message, "cannot allocate all claims") {
					pending = name
				}
			}
		}
		return len(running) == 4 && pending != "", strings.Join(state, "; "), nil
	})
	// Each running pod's claim: one GPU of its node, reported prepared.
	for _, name := range running {
		p, claim := podAndClaim(t, client, name)
		r := claim.Status.Allocation.Devices.Results[0]
		if r.Driver != fakeGPUDriver || r.Pool != p.Spec.NodeName {
			t.Errorf("claim %s of %s on %s: result %+v", claim.Name, name, p.Spec.NodeName, r)
		}
		if len(claim.Status.Devices) != 1 {
			t.Fatalf("claim %s of %s: status.devices %+v", claim.Name, name, claim.Status.Devices)
		}
		d := claim.Status.Devices[0]
		if d.Driver != r.Driver || d.Pool != r.Pool || d.Device != r.Device || len(d.Conditions) != 1 ||
			d.Conditions[0].Type != "Ready" || d.Conditions[0].Status != metav1.ConditionTrue {
			t.Errorf("claim %s of %s: status.devices %+v, want %s Ready", claim.Name, name, claim.Status.Devices, r.Device)
		}
	}
	if p, claim := podAndClaim(t, client, pending); p.Spec.NodeName != "" || claim.Status.Allocation != nil || len(claim.Status.Devices) > 0 {
		t.Errorf("the pending pod %s on %q, its claim %+v", pending, p.Spec.NodeName, claim.Status)
	}
	// explain pod judges it with the same DynamicResources: no node has a
	// free GPU, in the scheduler's words.
	e := explainPodJSON(t, cp.KubeconfigPath(), pending)
	fits := 0
	for _, n := range e.Nodes {
		if n.Fits {
			fits++
		}
	}
	if !e.Pending || e.Refused != "" || fits != 0 || len(e.Nodes) != 3 || !strings.HasPrefix(e.Summary, "0/3 nodes are available: 3 cannot allocate all claims.") {
		t.Errorf("explain pod %s: pending %v, refused %q, %d of %d nodes fit, summary %q", pending, e.Pending, e.Refused, fits, len(e.Nodes), e.Summary)
	}

	// A running pod goes (the fake kubelet confirms its deletion): the
	// ResourceClaim controller deallocates and deletes its claim, prepared
	// devices and all, and the pending pod gets the freed GPU and runs.
	_, freedClaim := podAndClaim(t, client, running[0])
	if err := client.CoreV1().Pods("default").Delete(ctx, running[0], metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, 2*time.Minute, pending+" running on the freed GPU", func(ctx context.Context) (bool, string, error) {
		p, err := client.CoreV1().Pods("default").Get(ctx, pending, metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		c, err := client.ResourceV1().ResourceClaims("default").Get(ctx, freedClaim.Name, metav1.GetOptions{})
		gone := apierrors.IsNotFound(err)
		return p.Status.Phase == v1.PodRunning && gone, fmt.Sprintf("%s on %q; the freed claim: %v %+v", p.Status.Phase, p.Spec.NodeName, err, c.Status), nil
	})
	if p, claim := podAndClaim(t, client, pending); len(claim.Status.Devices) != 1 || claim.Status.Devices[0].Device != freedClaim.Status.Allocation.Devices.Results[0].Device ||
		p.Spec.NodeName != freedClaim.Status.Allocation.Devices.Results[0].Pool {
		t.Errorf("%s on %s: its claim's devices %+v, want the freed %+v", pending, p.Spec.NodeName, claim.Status.Devices, freedClaim.Status.Allocation.Devices.Results[0])
	}

	// A pod bound by hand with a claim nobody allocated: not started.
	unalloc := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: "unallocated", Namespace: "default"},
		Spec: template.Spec.Spec}
	if _, err := client.ResourceV1().ResourceClaims("default").Create(ctx, unalloc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	bound := spec{name: "bound-by-hand", milliCPU: 100, node: 1}.pod(names, v1.DefaultSchedulerName)
	bound.Spec.ResourceClaims = []v1.PodResourceClaim{{Name: "gpu", ResourceClaimName: ptr.To("unallocated")}}
	bound.Spec.Containers[0].Resources.Claims = []v1.ResourceClaim{{Name: "gpu"}}
	createPodEventually(t, client, bound)
	_, msgs := framework.WaitEvents(t, client, "involvedObject.name=bound-by-hand,reason="+fakenode.ReasonFailedPrepareDynamicResources, 1)
	if !strings.Contains(msgs[0], "ResourceClaim unallocated is not allocated") {
		t.Errorf("event %q", msgs[0])
	}
	if p, err := client.CoreV1().Pods("default").Get(ctx, "bound-by-hand", metav1.GetOptions{}); err != nil || p.Status.Phase == v1.PodRunning {
		t.Errorf("bound-by-hand: %v, phase %s; want not started", err, p.Status.Phase)
	}

	// The Node of a gpu node is deleted: the fake kubelet, registering it
	// anew, publishes its slice again, owned by the new Node (the old
	// one's, if the garbage collector has not removed it yet, is taken
	// over).
	old, err := client.CoreV1().Nodes().Get(ctx, gpuNodes[1], metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := client.CoreV1().Nodes().Delete(ctx, old.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	s := waitSliceOwnedBy(t, client, old.Name)
	if s.OwnerReferences[0].UID == old.UID {
		t.Errorf("slice %s still owned by the deleted Node %s", s.Name, old.UID)
	}

	// The fake cloud replaces the other gpu node's machine: its Node goes
	// (the garbage collector takes the slice) and the new machine
	// registers it anew and publishes its devices again.
	replaced := getNode(t, client, gpuNodes[0])
	if err := fakecloud.New(client).Replace(ctx, replaced, nscloud.RequestID(replaced, "replace"), nscloud.NoPremise); err != nil {
		t.Fatalf("replace: %v", err)
	}
	framework.Eventually(t, time.Minute, gpuNodes[0]+" registered by a new machine", func(ctx context.Context) (bool, string, error) {
		n, err := client.CoreV1().Nodes().Get(ctx, replaced.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, "Node gone", nil
		}
		return err == nil && n.UID != replaced.UID, fmt.Sprint(err), err
	})
	if s := waitSliceOwnedBy(t, client, replaced.Name); len(s.Spec.Devices) != 2 {
		t.Errorf("the new machine's slice %s: %+v", s.Name, s.Spec)
	}
}

// createPodEventually creates a pod of the default namespace, again while
// the namespace's service account does not exist yet.
func createPodEventually(t *testing.T, client kubernetes.Interface, p *v1.Pod) {
	t.Helper()
	framework.Eventually(t, 30*time.Second, "pod "+p.Name+" created", func(ctx context.Context) (bool, string, error) {
		_, err := client.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{})
		return err == nil || apierrors.IsAlreadyExists(err), fmt.Sprint(err), nil
	})
}

// waitSliceOwnedBy waits until the node's slice of the fake GPU driver is
// owned by the node's current Node, and returns it.
func waitSliceOwnedBy(t *testing.T, client kubernetes.Interface, node string) *resourceapi.ResourceSlice {
	t.Helper()
	var slice *resourceapi.ResourceSlice
	framework.Eventually(t, time.Minute, "slice of "+node+" owned by its Node", func(ctx context.Context) (bool, string, error) {
		n, err := client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, "no Node", nil
		}
		if err != nil {
			return false, "", err
		}
		slice, err = client.ResourceV1().ResourceSlices().Get(ctx, fakenode.ResourceSliceName(node, fakeGPUDriver), metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, "no slice", nil
		}
		if err != nil {
			return false, "", err
		}
		o := slice.OwnerReferences
		return len(o) == 1 && o[0].Kind == "Node" && o[0].UID == n.UID, fmt.Sprintf("owners %+v, Node %s", o, n.UID), nil
	})
	return slice
}

// podAndClaim returns a pod and the claim the ResourceClaim controller made
// for it from its template.
func podAndClaim(t *testing.T, client kubernetes.Interface, pod string) (*v1.Pod, *resourceapi.ResourceClaim) {
	t.Helper()
	ctx := framework.Context(t)
	p, err := client.CoreV1().Pods("default").Get(ctx, pod, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Status.ResourceClaimStatuses) != 1 || p.Status.ResourceClaimStatuses[0].ResourceClaimName == nil {
		t.Fatalf("pod %s: resourceClaimStatuses %+v", pod, p.Status.ResourceClaimStatuses)
	}
	claim, err := client.ResourceV1().ResourceClaims("default").Get(ctx, *p.Status.ResourceClaimStatuses[0].ResourceClaimName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return p, claim
}

// TestFakeNodesDevicesCommand: `nodeshepherd fakenodes --devices`, twice
// (two drivers, one with class=), as a process of its own: each node
// publishes one slice per driver with the flag's count, model and memory,
// and the process creates the two DeviceClasses.
func TestFakeNodesDevicesCommand(t *testing.T) {
	cp := startControlPlaneAlone(t, controlplane.Config{})
	client := framework.Client(t, cp)
	exited := startFakeNodesCommand(t, cp.KubeconfigPath(), "--nodes=2", "--zones=zone-a", "--csi-driver=",
		"--devices=gpu.fake.nodeshepherd.io=3,model=a10,memory=24Gi", "--devices=nic.fake.nodeshepherd.io=1,class=nic")
	framework.Eventually(t, time.Minute, "the nodes' slices and the classes", func(ctx context.Context) (bool, string, error) {
		if err := exited(); err != nil {
			return false, "", err
		}
		for _, node := range []string{"fake-node-0000", "fake-node-0001"} {
			for driver, count := range map[string]int{"gpu.fake.nodeshepherd.io": 3, "nic.fake.nodeshepherd.io": 1} {
				s, err := client.ResourceV1().ResourceSlices().Get(ctx, fakenode.ResourceSliceName(node, driver), metav1.GetOptions{})
				if err != nil {
					return false, fmt.Sprintf("slice of %s for %s: %v", driver, node, err), nil
				}
				if len(s.Spec.Devices) != count || ptr.Deref(s.Spec.NodeName, "") != node {
					return false, fmt.Sprintf("slice %s: %+v", s.Name, s.Spec), nil
				}
				if driver == "gpu.fake.nodeshepherd.io" {
					d := s.Spec.Devices[2]
					mem := d.Capacity["memory"].Value
					if d.Name != "gpu-2" || ptr.Deref(d.Attributes["model"].StringValue, "") != "a10" || mem.String() != "24Gi" {
						return false, fmt.Sprintf("device %+v", d), nil
					}
				}
			}
		}
		for _, class := range []string{"gpu.fake.nodeshepherd.io", "nic"} {
			if _, err := client.ResourceV1().DeviceClasses().Get(ctx, class, metav1.GetOptions{}); err != nil {
				return false, "DeviceClass " + class + ": " + err.Error(), nil
			}
		}
		return true, "", nil
	})
}
