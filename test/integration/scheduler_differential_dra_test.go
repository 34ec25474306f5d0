package integration

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/nodeshepherd/nodeshepherd/test/framework"
)

// The differential test's DRA seeds: the nodes labelled gpu get a pool of
// one to three fake GPUs (a ResourceSlice each, created by the test); a pod
// in four asks for one GPU, from the template diffGPUTemplate of its
// namespace (the ResourceClaim controller creates its claim) or, one of
// those in four, through its namespace's shared claim (diffSharedClaim),
// which every pod using it must follow to the node it was allocated on; a
// GPU pod in five is a preemptor. There are fewer GPUs than GPU pods, so
// claims run out. The additions draw from a generator of their own, so the
// other seeds' workloads do not change.
//
// kube-scheduler 1.37 does not preempt for devices (docs/scheduler.md,
// "Preemption (beyond kube-scheduler 1.37)"); nodeshepherd does. A pod
// kube-scheduler left pending for want of devices that nodeshepherd placed
// by preempting is that documented difference: counted and logged as
// expected, then undone (the pod dropped, its victims put back with their
// devices), so that the replay goes on from kube-scheduler's cluster.

// diffDRASeeds draw device pools and GPU claims (diffAddDevices).
var diffDRASeeds = []uint64{13, 20, 28}

const (
	// diffDRAVersion seeds the DRA additions' generator.
	diffDRAVersion  = 1
	diffGPUClass    = "gpu"
	diffGPUTemplate = "one-gpu"
	diffGPURequest  = "gpu"
	// diffProbeDriver publishes the probe's device (setUp), in a class of
	// its own that no generated claim asks for.
	diffProbeDriver = "probe.example.com"
	diffProbeDevice = "diff-probe-dev"
)

// diffSharedClaim is the name of a namespace's shared claim in a seed.
func diffSharedClaim(seed uint64) string { return fmt.Sprintf("s%d-shared-gpu", seed) }

// diffAddDevices gives the seed's GPU nodes device pools and some pods
// GPU claims.
func diffAddDevices(w *diffWorkload) {
	r := rand.New(rand.NewPCG(w.Seed, diffDRAVersion))
	w.Devices = map[string]int{}
	for _, n := range w.Nodes {
		if n.Labels["gpu"] == "true" {
			w.Devices[n.Name] = 1 + r.IntN(3)
		}
	}
	for _, p := range w.Pods {
		if r.IntN(4) != 0 {
			continue
		}
		claim := v1.PodResourceClaim{Name: "gpu", ResourceClaimTemplateName: ptr.To(diffGPUTemplate)}
		if r.IntN(4) == 0 {
			claim = v1.PodResourceClaim{Name: "gpu", ResourceClaimName: ptr.To(diffSharedClaim(w.Seed))}
		}
		p.Spec.ResourceClaims = []v1.PodResourceClaim{claim}
		p.Spec.Containers[0].Resources.Claims = []v1.ResourceClaim{{Name: "gpu"}}
		// GPU pods tolerate the GPU nodes' taint, as they would.
		gpu := v1.Toleration{Key: diffGPUTaintKey, Operator: v1.TolerationOpEqual, Value: "gpu", Effect: v1.TaintEffectNoSchedule}
		if !slices.Contains(p.Spec.Tolerations, gpu) {
			p.Spec.Tolerations = append(p.Spec.Tolerations, gpu)
		}
		if r.IntN(5) == 0 && p.Spec.PriorityClassName != diffPreemptorClass {
			// A preemptor with its usual small request: when it has to
			// preempt, it is for a device.
			p.Spec.PriorityClassName = diffPreemptorClass
		}
	}
}

// diffGPUClaimOf is the pod's claim: "" without one, the shared claim's
// name (namespace/name), or "template".
func diffGPUClaimOf(p *v1.Pod) string {
	if len(p.Spec.ResourceClaims) == 0 {
		return ""
	}
	if rc := p.Spec.ResourceClaims[0]; rc.ResourceClaimName != nil {
		return p.Namespace + "/" + *rc.ResourceClaimName
	}
	return "template"
}

// deviceViolation: the pod's GPU claim cannot be allocated on node n (the
// checker's count of the devices every placed pod's claim holds there), or
// its shared claim is allocated on another node.
func (c *diffChecker) deviceViolation(p *v1.Pod, n *v1.Node) []string {
	want := diffGPUClaimOf(p)
	if want == "" {
		return nil
	}
	used := 0
	shared := map[string]bool{}
	for _, q := range c.pods[n.Name] {
		switch k := diffGPUClaimOf(q); k {
		case "":
		case "template":
			used++
		default:
			if !shared[k] {
				shared[k] = true
				used++
			}
		}
	}
	if want != "template" {
		if shared[want] {
			return nil
		}
		for node, ps := range c.pods {
			if node != n.Name && slices.ContainsFunc(ps, func(q *v1.Pod) bool { return diffGPUClaimOf(q) == want }) {
				return []string{"shared claim allocated on " + node}
			}
		}
	}
	if c.devices[n.Name]-used < 1 {
		return []string{fmt.Sprintf("no free device (%d of %d held)", used, c.devices[n.Name])}
	}
	return nil
}

// setUpDevices runs before the pods' claims are created: the pools and
// the shared claims.
func (d *diffRun) setUpDevices(t *testing.T, w *diffWorkload) {
	t.Helper()
	ctx := framework.Context(t)
	for _, node := range slices.Sorted(maps.Keys(w.Devices)) {
		var devices []resourceapi.Device
		for i := range w.Devices[node] {
			devices = append(devices, resourceapi.Device{Name: fmt.Sprintf("gpu-%d", i)})
		}
		slice := &resourceapi.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: node + "-gpus"}, Spec: resourceapi.ResourceSliceSpec{
			Driver: draDriver, NodeName: ptr.To(node), Pool: resourceapi.ResourcePool{Name: node, ResourceSliceCount: 1}, Devices: devices}}
		if _, err := d.client.ResourceV1().ResourceSlices().Create(ctx, slice, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for ns := range diffNamespaces {
		claim := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: diffSharedClaim(w.Seed), Namespace: ns},
			Spec: diffGPUClaimSpec()}
		if _, err := d.client.ResourceV1().ResourceClaims(ns).Create(ctx, claim, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
}

func diffGPUClaimSpec() resourceapi.ResourceClaimSpec {
	return resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{Name: diffGPURequest,
		Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: diffGPUClass}}}}}
}

// createDeviceClasses: the GPU class, the probe's class, and the GPU
// template in every namespace, shared by the seeds.
func (d *diffRun) createDeviceClasses(t *testing.T) {
	t.Helper()
	ctx := framework.Context(t)
	for name, driver := range map[string]string{diffGPUClass: draDriver, diffProbeDevice: diffProbeDriver} {
		class := &resourceapi.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: resourceapi.DeviceClassSpec{
			Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: `device.driver == "` + driver + `"`}}}}}
		if _, err := d.client.ResourceV1().DeviceClasses().Create(ctx, class, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for ns := range diffNamespaces {
		template := &resourceapi.ResourceClaimTemplate{ObjectMeta: metav1.ObjectMeta{Name: diffGPUTemplate, Namespace: ns},
			Spec: resourceapi.ResourceClaimTemplateSpec{Spec: diffGPUClaimSpec()}}
		if _, err := d.client.ResourceV1().ResourceClaimTemplates(ns).Create(ctx, template, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
}

// probeDevice gives the probe pod a claim of a device on the last node,
// published after every pool: bound, it shows that the scheduler has seen
// every ResourceSlice. It returns what to remove after the probe.
func (d *diffRun) probeDevice(t *testing.T, w *diffWorkload, probe *v1.Pod) func() {
	t.Helper()
	ctx := framework.Context(t)
	last := w.Nodes[len(w.Nodes)-1].Name
	slice := &resourceapi.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("s%d-probe", w.Seed)}, Spec: resourceapi.ResourceSliceSpec{
		Driver: diffProbeDriver, NodeName: ptr.To(last), Pool: resourceapi.ResourcePool{Name: last, ResourceSliceCount: 1},
		Devices: []resourceapi.Device{{Name: "probe"}}}}
	if _, err := d.client.ResourceV1().ResourceSlices().Create(ctx, slice, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	claim := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: "probe-dev", Namespace: metav1.NamespaceDefault},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{Name: "dev",
			Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: diffProbeDevice}}}}}}
	if _, err := d.client.ResourceV1().ResourceClaims(metav1.NamespaceDefault).Create(ctx, claim, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	probe.Spec.ResourceClaims = []v1.PodResourceClaim{{Name: "dev", ResourceClaimName: ptr.To(claim.Name)}}
	probe.Spec.Containers[0].Resources.Claims = []v1.ResourceClaim{{Name: "dev"}}
	return func() {
		// The probe pod is gone: the ResourceClaim controller releases
		// and deallocates its claim, which may then go.
		if err := d.client.ResourceV1().ResourceClaims(metav1.NamespaceDefault).Delete(ctx, claim.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		framework.Eventually(t, time.Minute, "probe claim gone", func(ctx context.Context) (bool, string, error) {
			_, err := d.client.ResourceV1().ResourceClaims(metav1.NamespaceDefault).Get(ctx, claim.Name, metav1.GetOptions{})
			return apierrors.IsNotFound(err), fmt.Sprint(err), nil
		})
		if err := d.client.ResourceV1().ResourceSlices().Delete(ctx, slice.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
}

// settleClaims waits until the ResourceClaim controller has caught up
// with the pods deleted so far: every reservation names an existing pod
// and every allocated claim is reserved. Without it the next pod could be
// decided while a deleted pod's device is still held in one run and
// already free in the other.
func (d *diffRun) settleClaims(t *testing.T) {
	t.Helper()
	framework.Eventually(t, 2*time.Minute, "claims of deleted pods released", func(ctx context.Context) (bool, string, error) {
		pods := map[types.UID]bool{}
		for ns := range diffNamespaces {
			list, err := d.client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
			if err != nil {
				return false, "", err
			}
			for i := range list.Items {
				pods[list.Items[i].UID] = true
			}
		}
		for ns := range diffNamespaces {
			claims, err := d.client.ResourceV1().ResourceClaims(ns).List(ctx, metav1.ListOptions{})
			if err != nil {
				return false, "", err
			}
			for _, c := range claims.Items {
				for _, r := range c.Status.ReservedFor {
					if !pods[r.UID] {
						return false, fmt.Sprintf("claim %s/%s reserved for the deleted pod %s", ns, c.Name, r.Name), nil
					}
				}
				if c.Status.Allocation != nil && len(c.Status.ReservedFor) == 0 {
					return false, fmt.Sprintf("claim %s/%s allocated, reserved for no one", ns, c.Name), nil
				}
			}
		}
		return true, "", nil
	})
}

// placeClaims allocates the claims of a pod the test bound itself (moved
// to kube-scheduler's node, or a victim put back) on a free device of its
// node and reserves them for it, as a scheduler would have.
func (d *diffRun) placeClaims(t *testing.T, p *v1.Pod, node string) {
	t.Helper()
	if len(p.Spec.ResourceClaims) == 0 {
		return
	}
	var pod *v1.Pod
	var name string
	rc := p.Spec.ResourceClaims[0]
	framework.Eventually(t, time.Minute, "claim of "+diffKey(p)+" created", func(ctx context.Context) (bool, string, error) {
		var err error
		pod, err = d.client.CoreV1().Pods(p.Namespace).Get(ctx, p.Name, metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		name = ptr.Deref(rc.ResourceClaimName, "")
		for _, s := range pod.Status.ResourceClaimStatuses {
			if s.Name == rc.Name {
				name = ptr.Deref(s.ResourceClaimName, "")
			}
		}
		if name == "" {
			return false, "no claim in the pod's status", nil
		}
		_, err = d.client.ResourceV1().ResourceClaims(p.Namespace).Get(ctx, name, metav1.GetOptions{})
		return err == nil, fmt.Sprint(err), nil
	})
	framework.Eventually(t, time.Minute, "claim "+p.Namespace+"/"+name+" allocated on "+node, func(ctx context.Context) (bool, string, error) {
		claims := d.client.ResourceV1().ResourceClaims(p.Namespace)
		c, err := claims.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		if !slices.Contains(c.Finalizers, resourceapi.Finalizer) {
			c.Finalizers = append(c.Finalizers, resourceapi.Finalizer)
			if c, err = claims.Update(ctx, c, metav1.UpdateOptions{}); err != nil {
				return false, err.Error(), nil
			}
		}
		if a := c.Status.Allocation; a != nil {
			if a.Devices.Results[0].Pool != node {
				return false, "", fmt.Errorf("claim %s/%s is allocated on %s, not %s", p.Namespace, name, a.Devices.Results[0].Pool, node)
			}
		} else {
			device, err := d.freeDevice(ctx, node)
			if err != nil {
				return false, err.Error(), nil
			}
			c.Status.Allocation = &resourceapi.AllocationResult{
				Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{{
					Request: diffGPURequest, Driver: draDriver, Pool: node, Device: device}}},
				NodeSelector: &v1.NodeSelector{NodeSelectorTerms: []v1.NodeSelectorTerm{{MatchFields: []v1.NodeSelectorRequirement{{
					Key: "metadata.name", Operator: v1.NodeSelectorOpIn, Values: []string{node}}}}}}}
		}
		c.Status.ReservedFor = append(c.Status.ReservedFor, resourceapi.ResourceClaimConsumerReference{Resource: "pods", Name: pod.Name, UID: pod.UID})
		_, err = claims.UpdateStatus(ctx, c, metav1.UpdateOptions{})
		return err == nil, fmt.Sprint(err), nil
	})
}

// freeDevice is a GPU of the node that no claim holds.
func (d *diffRun) freeDevice(ctx context.Context, node string) (string, error) {
	taken := map[string]bool{}
	for ns := range diffNamespaces {
		claims, err := d.client.ResourceV1().ResourceClaims(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return "", err
		}
		for _, c := range claims.Items {
			if a := c.Status.Allocation; a != nil {
				for _, r := range a.Devices.Results {
					taken[r.Pool+"/"+r.Device] = true
				}
			}
		}
	}
	slice, err := d.client.ResourceV1().ResourceSlices().Get(ctx, node+"-gpus", metav1.GetOptions{})
	if err != nil {
		return "", err
	}
	for _, dev := range slice.Spec.Devices {
		if !taken[node+"/"+dev.Name] {
			return dev.Name, nil
		}
	}
	return "", fmt.Errorf("no free GPU on %s", node)
}

// tearDownDevices removes the seed's pools and shared claims once the
// pods are gone, and waits until every claim is.
func (d *diffRun) tearDownDevices(t *testing.T, w *diffWorkload) {
	t.Helper()
	ctx := framework.Context(t)
	for ns := range diffNamespaces {
		if err := d.client.ResourceV1().ResourceClaims(ns).Delete(ctx, diffSharedClaim(w.Seed), metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
	}
	framework.Eventually(t, 2*time.Minute, fmt.Sprintf("seed %d: claims gone", w.Seed), func(ctx context.Context) (bool, string, error) {
		var left []string
		for ns := range diffNamespaces {
			claims, err := d.client.ResourceV1().ResourceClaims(ns).List(ctx, metav1.ListOptions{})
			if err != nil {
				return false, "", err
			}
			for _, c := range claims.Items {
				left = append(left, ns+"/"+c.Name)
			}
		}
		return len(left) == 0, strings.Join(left, ", "), nil
	})
	for node := range w.Devices {
		if err := d.client.ResourceV1().ResourceSlices().Delete(ctx, node+"-gpus", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
}

// diffDRAPreempted: kube-scheduler left the GPU pod pending for want of
// devices and nodeshepherd placed it by preempting, the documented
// difference.
func diffDRAPreempted(p *v1.Pod, want diffDecision, gotNode string, gotVictims []string) bool {
	return diffGPUClaimOf(p) != "" && want.Node == "" && gotNode != "" && len(gotVictims) > 0 && len(want.Victims) == 0 &&
		strings.Contains(want.Message, "cannot allocate all claims")
}

func diffGPUPods(w *diffWorkload) int {
	n := 0
	for _, p := range w.Pods {
		if diffGPUClaimOf(p) != "" {
			n++
		}
	}
	return n
}

func diffGPUs(w *diffWorkload) int {
	n := 0
	for _, c := range w.Devices {
		n += c
	}
	return n
}
