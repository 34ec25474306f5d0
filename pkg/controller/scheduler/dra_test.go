package scheduler

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	resourcelisters "k8s.io/client-go/listers/resource/v1"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"
	"k8s.io/dynamic-resource-allocation/cel"
	testingclock "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
)

const gpuDriver = "gpu.example.com"

// gpuSlice publishes n devices gpu-0..gpu-n-1 of gpuDriver on node.
func gpuSlice(node string, n int, mut ...func(*resourceapi.Device)) *resourceapi.ResourceSlice {
	s := &resourceapi.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: node + "-gpus"},
		Spec: resourceapi.ResourceSliceSpec{Driver: gpuDriver, NodeName: ptr.To(node),
			Pool: resourceapi.ResourcePool{Name: node, ResourceSliceCount: 1}}}
	for i := range n {
		d := resourceapi.Device{Name: "gpu-" + string(rune('0'+i)),
			Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{"model": {StringValue: ptr.To("a100")}}}
		for _, m := range mut {
			m(&d)
		}
		s.Spec.Devices = append(s.Spec.Devices, d)
	}
	return s
}

func gpuClass(name, expr string) *resourceapi.DeviceClass {
	return &resourceapi.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: expr}}}}}
}

func gpuClaim(name string, count int64, mut ...func(*resourceapi.ResourceClaim)) *resourceapi.ResourceClaim {
	c := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID("uid-" + name), ResourceVersion: "1"},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{Name: "gpu",
			Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: "gpu", AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: count}}}}}}
	for _, m := range mut {
		m(c)
	}
	return c
}

// allocatedTo allocates the claim the devices of node's pool.
func allocatedTo(node string, devices ...string) func(*resourceapi.ResourceClaim) {
	return func(c *resourceapi.ResourceClaim) {
		a := &resourceapi.AllocationResult{NodeSelector: &v1.NodeSelector{NodeSelectorTerms: []v1.NodeSelectorTerm{{
			MatchFields: []v1.NodeSelectorRequirement{{Key: "metadata.name", Operator: v1.NodeSelectorOpIn, Values: []string{node}}}}}}}
		for _, d := range devices {
			a.Devices.Results = append(a.Devices.Results, resourceapi.DeviceRequestAllocationResult{Request: "gpu", Driver: gpuDriver, Pool: node, Device: d})
		}
		c.Status.Allocation = a
	}
}

func withResourceClaims(names ...string) podOpt {
	return func(p *v1.Pod) {
		for _, n := range names {
			p.Spec.ResourceClaims = append(p.Spec.ResourceClaims, v1.PodResourceClaim{Name: n, ResourceClaimName: ptr.To(n)})
		}
	}
}

// draWorld is a DRA environment over fixed objects.
func draWorld(t *testing.T, objs ...runtime.Object) *draEnv {
	t.Helper()
	e := &draEnv{celCache: cel.NewCache(10, cel.Features{}),
		inFlight: map[types.UID]*resourceapi.ResourceClaim{}, assumed: map[types.UID]*resourceapi.ResourceClaim{}}
	var claims []resourceapi.ResourceClaim
	var slices []resourceapi.ResourceSlice
	var classes []resourceapi.DeviceClass
	var rules []resourceapi.DeviceTaintRule
	for _, o := range objs {
		switch x := o.(type) {
		case *resourceapi.ResourceClaim:
			claims = append(claims, *x)
		case *resourceapi.ResourceSlice:
			slices = append(slices, *x)
		case *resourceapi.DeviceClass:
			classes = append(classes, *x)
		case *resourceapi.DeviceTaintRule:
			rules = append(rules, *x)
		default:
			t.Fatalf("unexpected %T", o)
		}
	}
	e.claims = resourcelisters.NewResourceClaimLister(indexOf(claims))
	e.slices = resourcelisters.NewResourceSliceLister(indexOf(slices))
	e.classes = resourcelisters.NewDeviceClassLister(indexOf(classes))
	e.rules = resourcelisters.NewDeviceTaintRuleLister(indexOf(rules))
	return e
}

// draStatuses runs the DRA PreFilter and the filters of the nodes.
func draStatuses(t *testing.T, e *draEnv, p *v1.Pod, ns ...*v1.Node) (*draState, map[string]status) {
	t.Helper()
	st, msg, err := e.prefilter(context.Background(), p)
	if err != nil || msg != "" {
		t.Fatalf("prefilter: %q, %v", msg, err)
	}
	out := map[string]status{}
	for _, n := range ns {
		out[n.Name] = st.filter(newNodeInfo(n))
	}
	return st, out
}

var gpuExpr = `device.driver == "` + gpuDriver + `" && device.attributes["` + gpuDriver + `"].model == "a100"`

func TestDRAFilterAllocatesOnTheNodeWithFreeDevices(t *testing.T) {
	n1, n2 := node("node1", 1000, 10), node("node2", 1000, 10)
	e := draWorld(t, gpuSlice("node1", 2), gpuClass("gpu", gpuExpr), gpuClaim("one", 1), gpuClaim("two", 2), gpuClaim("three", 3),
		gpuClaim("taken", 1, allocatedTo("node1", "gpu-0")))
	// One GPU: node1 has two, node2 none.
	st, got := draStatuses(t, e, pod("p", 0, 100, withResourceClaims("one")), n1, n2)
	// kube-scheduler's DynamicResources rejects unresolvably; preemption
	// knows the rejection is for devices.
	if !got["node1"].ok() || got["node2"].ok() || got["node2"].reasons[0] != reasonCannotAllocate || got["node2"].code != unresolvable || !got["node2"].devices {
		t.Fatalf("one GPU: %+v", got)
	}
	bs, err := st.reserve("node1")
	if err != nil || len(bs) != 1 || bs[0].allocation == nil || len(bs[0].allocation.Devices.Results) != 1 {
		t.Fatalf("reserve: %+v, %v", bs, err)
	}
	if r := bs[0].allocation.Devices.Results[0]; r.Device != "gpu-1" || r.Pool != "node1" {
		t.Errorf("allocated %+v, want node1's free gpu-1 (gpu-0 is taken)", r)
	}
	if e.inFlight["uid-one"] == nil {
		t.Error("the allocation is not in flight")
	}
	// While it is in flight its device is taken: a second GPU claim
	// finds none on node1.
	_, got = draStatuses(t, e, pod("q", 0, 100, withResourceClaims("two")), n1)
	if got["node1"].ok() {
		t.Errorf("two GPUs with one free and one in flight: %+v", got)
	}
	e.forgetInFlight(bs)
	// Three GPUs fit nowhere.
	_, got = draStatuses(t, e, pod("r", 0, 100, withResourceClaims("three")), n1, n2)
	if got["node1"].ok() || got["node2"].ok() {
		t.Errorf("three GPUs: %+v", got)
	}
}

func TestDRAFilterClassSelector(t *testing.T) {
	n1 := node("node1", 1000, 10)
	e := draWorld(t, gpuSlice("node1", 2), gpuClass("gpu", `device.attributes["`+gpuDriver+`"].model == "h100"`), gpuClaim("one", 1))
	_, got := draStatuses(t, e, pod("p", 0, 100, withResourceClaims("one")), n1)
	if got["node1"].ok() {
		t.Errorf("a class whose selector matches no device: %+v", got)
	}
	// A CEL expression that fails at run time is an error on every node.
	e = draWorld(t, gpuSlice("node1", 2), gpuClass("gpu", `device.attributes["`+gpuDriver+`"].nosuch == "x"`), gpuClaim("one", 1))
	_, got = draStatuses(t, e, pod("p", 0, 100, withResourceClaims("one")), n1)
	if got["node1"].ok() || got["node1"].code != unresolvable {
		t.Errorf("a failing selector: %+v", got)
	}
}

func TestDRAAllocatedClaimRestrictsNodes(t *testing.T) {
	n1, n2 := node("node1", 1000, 10), node("node2", 1000, 10)
	e := draWorld(t, gpuSlice("node1", 2), gpuClass("gpu", gpuExpr), gpuClaim("shared", 1, allocatedTo("node1", "gpu-0")))
	st, got := draStatuses(t, e, pod("p", 0, 100, withResourceClaims("shared")), n1, n2)
	if !got["node1"].ok() || got["node2"].ok() || got["node2"].reasons[0] != reasonClaimNotOnNode {
		t.Fatalf("%+v", got)
	}
	bs, err := st.reserve("node1")
	if err != nil || len(bs) != 1 || bs[0].allocation != nil {
		t.Fatalf("an allocated claim is only reserved: %+v, %v", bs, err)
	}
	// Already reserved for the pod: nothing to do.
	claim := gpuClaim("shared", 1, allocatedTo("node1", "gpu-0"))
	claim.Status.ReservedFor = []resourceapi.ResourceClaimConsumerReference{{Resource: "pods", Name: "p", UID: "p"}}
	e = draWorld(t, gpuSlice("node1", 2), gpuClass("gpu", gpuExpr), claim)
	st, _ = draStatuses(t, e, pod("p", 0, 100, withResourceClaims("shared")), n1)
	if bs, err := st.reserve("node1"); err != nil || len(bs) != 0 {
		t.Errorf("a claim reserved for the pod: %+v, %v", bs, err)
	}
}

func TestDRAPrefilterWaits(t *testing.T) {
	e := draWorld(t, gpuSlice("node1", 2), gpuClass("gpu", gpuExpr), gpuClaim("one", 1),
		gpuClaim("gen", 1, func(c *resourceapi.ResourceClaim) { c.Name = "p-gpu-abc" }),
		gpuClaim("gone", 1, func(c *resourceapi.ResourceClaim) { c.DeletionTimestamp = ptr.To(metav1.Now()) }),
		gpuClaim("noclass", 1, func(c *resourceapi.ResourceClaim) { c.Spec.Devices.Requests[0].Exactly.DeviceClassName = "nope" }))
	template := func(p *v1.Pod) {
		p.Spec.ResourceClaims = []v1.PodResourceClaim{{Name: "gpu", ResourceClaimTemplateName: ptr.To("gpu-template")}}
	}
	for _, tc := range []struct {
		name string
		pod  *v1.Pod
		want string
	}{
		{"template claim not created yet", pod("p", 0, 100, template), `pod "default/p": ResourceClaim not created yet`},
		{"claim missing", pod("p", 0, 100, withResourceClaims("missing")), `resourceclaim.resource.k8s.io "missing" not found`},
		{"claim being deleted", pod("p", 0, 100, withResourceClaims("gone")), `resourceclaim "gone" is being deleted`},
		{"class missing", pod("p", 0, 100, withResourceClaims("noclass")), "request gpu: device class nope does not exist"},
		{"generated claim not owned by the pod", pod("p", 0, 100, template, func(p *v1.Pod) {
			p.Status.ResourceClaimStatuses = []v1.PodResourceClaimStatus{{Name: "gpu", ResourceClaimName: ptr.To("p-gpu-abc")}}
		}), "ResourceClaim default/p-gpu-abc was not created for Pod default/p (Pod is not owner)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, msg, err := e.prefilter(context.Background(), tc.pod)
			if err != nil || msg != tc.want {
				t.Errorf("got %q, %v; want %q", msg, err, tc.want)
			}
			// Claims not there yet keep the pod from being tried at all
			// (PreEnqueue); a missing class is PreFilter's.
			gate := tc.want
			if tc.name == "class missing" {
				gate = ""
			}
			if got := e.preEnqueue(tc.pod); got != gate {
				t.Errorf("preEnqueue %q, want %q", got, gate)
			}
		})
	}
	// The controller decided that the claim is not needed.
	p := pod("p", 0, 100, template, func(p *v1.Pod) {
		p.Status.ResourceClaimStatuses = []v1.PodResourceClaimStatus{{Name: "gpu"}}
	})
	if st, msg, err := e.prefilter(context.Background(), p); st != nil || msg != "" || err != nil {
		t.Errorf("a claim not made: %v %q %v", st, msg, err)
	}
	// Another pod's allocation of the same claim is in flight.
	st, _ := draStatuses(t, e, pod("a", 0, 100, withResourceClaims("one")), node("node1", 1000, 10))
	if _, err := st.reserve("node1"); err != nil {
		t.Fatal(err)
	}
	_, msg, _ := e.prefilter(context.Background(), pod("b", 0, 100, withResourceClaims("one")))
	if msg != "resource claim default/one is in the process of being allocated" {
		t.Errorf("in flight: %q", msg)
	}
}

// A pod whose claim the ResourceClaim controller has not made yet is not
// tried: no event, no condition, no attempt counted, as kube-scheduler's
// PreEnqueue.
func TestDRAGatedPodWritesNothing(t *testing.T) {
	s, client := draScheduler(t)
	p := pod("p", 0, 100, func(p *v1.Pod) {
		p.Spec.ResourceClaims = []v1.PodResourceClaim{{Name: "gpu", ResourceClaimTemplateName: ptr.To("gpu-template")}}
	})
	s.queue.Add(p)
	qp, cycle := pop(t, s.queue)
	s.scheduleOne(context.Background(), qp, cycle)
	s.wg.Wait()
	if acts := client.Actions(); len(acts) != 0 {
		t.Errorf("API calls for a gated pod: %v", acts)
	}
	if n := len(s.recorder.(*record.FakeRecorder).Events); n != 0 {
		t.Errorf("%d events for a gated pod", n)
	}
	if l := s.queue.Lens(); l[inGated] != 1 || qp.attempts != 0 {
		t.Errorf("queues %v, attempts %d; want parked, no attempt", l, qp.attempts)
	}
}

func TestDRARefusesWhatItDoesNotImplement(t *testing.T) {
	e := draWorld(t, gpuSlice("node1", 2), gpuClass("gpu", gpuExpr),
		gpuClaim("prio", 1, func(c *resourceapi.ResourceClaim) {
			c.Spec.Devices.Requests[0] = resourceapi.DeviceRequest{Name: "gpu", FirstAvailable: []resourceapi.DeviceSubRequest{{Name: "a", DeviceClassName: "gpu"}}}
		}),
		gpuClaim("capacity", 1, func(c *resourceapi.ResourceClaim) {
			c.Spec.Devices.Requests[0].Exactly.Capacity = &resourceapi.CapacityRequirements{}
		}),
		gpuClaim("distinct", 1, func(c *resourceapi.ResourceClaim) {
			c.Spec.Devices.Constraints = []resourceapi.DeviceConstraint{{DistinctAttribute: ptr.To(resourceapi.FullyQualifiedName(gpuDriver + "/model"))}}
		}),
		gpuClaim("prio-allocated", 1, allocatedTo("node1", "gpu-0"), func(c *resourceapi.ResourceClaim) {
			c.Spec.Devices.Requests[0] = resourceapi.DeviceRequest{Name: "gpu", FirstAvailable: []resourceapi.DeviceSubRequest{{Name: "a", DeviceClassName: "gpu"}}}
		}))
	for claim, want := range map[string]string{
		"prio":     "prioritized list (firstAvailable) in request gpu of resourceclaim default/prio (DRAPrioritizedList)",
		"capacity": "capacity requests in request gpu of resourceclaim default/capacity (DRAConsumableCapacity)",
		"distinct": "distinctAttribute constraint #0 of resourceclaim default/distinct (DRAConsumableCapacity)",
	} {
		_, _, err := e.prefilter(context.Background(), pod("p", 0, 100, withResourceClaims(claim)))
		var r *draRefusal
		if !errors.As(err, &r) || r.msg != "nodeshepherd-scheduler does not support: "+want+"; use kube-scheduler for this pod" {
			t.Errorf("%s: %v", claim, err)
		}
	}
	// Allocated by someone else: the scheduler only reserves it.
	if _, msg, err := e.prefilter(context.Background(), pod("p", 0, 100, withResourceClaims("prio-allocated"))); err != nil || msg != "" {
		t.Errorf("an allocated claim with a prioritized list: %q %v", msg, err)
	}
	// Without the resource informers every claim is refused.
	if got := unsupported(pod("p", 0, 100, withResourceClaims("x")), true, false); !strings.Contains(got, "spec.resourceClaims (DRA)") {
		t.Errorf("without DRA: %q", got)
	}
	if got := unsupported(pod("p", 0, 100, withResourceClaims("x")), true, true); got != "" {
		t.Errorf("with DRA: %q", got)
	}
}

// Admin access (DRAAdminAccess) is allocated: a device other claims hold
// can be given, and the admin result takes it from nobody.
func TestDRAAdminAccess(t *testing.T) {
	n1 := node("node1", 1000, 10)
	admin := func(on bool) func(*resourceapi.ResourceClaim) {
		return func(c *resourceapi.ResourceClaim) { c.Spec.Devices.Requests[0].Exactly.AdminAccess = ptr.To(on) }
	}
	e := draWorld(t, gpuSlice("node1", 1), gpuClass("gpu", gpuExpr), gpuClaim("taken", 1, allocatedTo("node1", "gpu-0")),
		gpuClaim("admin", 1, admin(true)), gpuClaim("plain", 1), gpuClaim("not-admin", 1, admin(false)))
	st, got := draStatuses(t, e, pod("p", 0, 100, withResourceClaims("admin")), n1)
	if !got["node1"].ok() {
		t.Fatalf("admin access to a device in use: %+v", got)
	}
	bs, err := st.reserve("node1")
	if err != nil {
		t.Fatal(err)
	}
	if r := bs[0].allocation.Devices.Results[0]; r.Device != "gpu-0" || !ptr.Deref(r.AdminAccess, false) {
		t.Errorf("admin result %+v, want gpu-0 with adminAccess", r)
	}
	// The plain claim still finds gpu-0 taken by "taken" (and a request
	// that says adminAccess: false is a plain one); the admin allocation
	// in flight does not count.
	for _, claim := range []string{"plain", "not-admin"} {
		if _, got := draStatuses(t, e, pod("q", 0, 100, withResourceClaims(claim)), n1); got["node1"].ok() || got["node1"].reasons[0] != reasonCannotAllocate {
			t.Errorf("%s with the device held: %+v", claim, got)
		}
	}
	e = draWorld(t, gpuSlice("node1", 1), gpuClass("gpu", gpuExpr), gpuClaim("plain", 1),
		gpuClaim("watching", 1, admin(true), allocatedTo("node1", "gpu-0"), func(c *resourceapi.ResourceClaim) {
			c.Status.Allocation.Devices.Results[0].AdminAccess = ptr.To(true)
		}))
	if _, got := draStatuses(t, e, pod("q", 0, 100, withResourceClaims("plain")), n1); !got["node1"].ok() {
		t.Errorf("a device held only with admin access is free: %+v", got)
	}
}

func TestDRADeviceTaintsAndLeftOutDevices(t *testing.T) {
	n1 := node("node1", 1000, 10)
	noSchedule := resourceapi.DeviceTaint{Key: "broken", Effect: resourceapi.DeviceTaintEffectNoSchedule}
	// A tainted device is not allocated unless the request tolerates it.
	tainted := gpuSlice("node1", 1, func(d *resourceapi.Device) { d.Taints = []resourceapi.DeviceTaint{noSchedule} })
	e := draWorld(t, tainted, gpuClass("gpu", gpuExpr), gpuClaim("one", 1),
		gpuClaim("tolerant", 1, func(c *resourceapi.ResourceClaim) {
			c.Spec.Devices.Requests[0].Exactly.Tolerations = []resourceapi.DeviceToleration{{Key: "broken", Operator: resourceapi.DeviceTolerationOpExists}}
		}))
	if _, got := draStatuses(t, e, pod("p", 0, 100, withResourceClaims("one")), n1); got["node1"].ok() {
		t.Errorf("a tainted device was allocated: %+v", got)
	}
	if _, got := draStatuses(t, e, pod("p", 0, 100, withResourceClaims("tolerant")), n1); !got["node1"].ok() {
		t.Errorf("a tolerated taint: %+v", got)
	}
	// A DeviceTaintRule taints the device it selects.
	rule := &resourceapi.DeviceTaintRule{ObjectMeta: metav1.ObjectMeta{Name: "r"}, Spec: resourceapi.DeviceTaintRuleSpec{
		DeviceSelector: &resourceapi.DeviceTaintSelector{Driver: ptr.To(gpuDriver), Device: ptr.To("gpu-0")}, Taint: noSchedule}}
	e = draWorld(t, gpuSlice("node1", 2), gpuClass("gpu", gpuExpr), gpuClaim("two", 2), gpuClaim("one", 1), rule)
	if _, got := draStatuses(t, e, pod("p", 0, 100, withResourceClaims("two")), n1); got["node1"].ok() {
		t.Errorf("two GPUs, one tainted by a rule: %+v", got)
	}
	st, got := draStatuses(t, e, pod("p", 0, 100, withResourceClaims("one")), n1)
	if !got["node1"].ok() {
		t.Fatalf("one GPU, one of two tainted by a rule: %+v", got)
	}
	if bs, _ := st.reserve("node1"); bs[0].allocation.Devices.Results[0].Device != "gpu-1" {
		t.Errorf("allocated %+v, want the untainted gpu-1", bs[0].allocation.Devices.Results)
	}
	// Devices of features the scheduler does not implement are left out,
	// and said so.
	shared := gpuSlice("node1", 2, func(d *resourceapi.Device) { d.AllowMultipleAllocations = ptr.To(true) })
	shared.Spec.Devices[1].AllowMultipleAllocations = nil
	shared.Spec.Devices[1].BindingConditions = []string{"ready"}
	e = draWorld(t, shared, gpuClass("gpu", gpuExpr), gpuClaim("one", 1))
	st, got = draStatuses(t, e, pod("p", 0, 100, withResourceClaims("one")), n1)
	if got["node1"].ok() {
		t.Errorf("left-out devices were allocated: %+v", got)
	}
	want := "nodeshepherd-scheduler does not allocate 1 devices with binding conditions (DRADeviceBindingConditions), 1 shared devices (allowMultipleAllocations, DRAConsumableCapacity); use kube-scheduler for pods that need them."
	if st.leftOut != want {
		t.Errorf("leftOut %q, want %q", st.leftOut, want)
	}
}

// Partitionable devices (DRAPartitionableDevices: devices that consume a
// pool's shared counters, slices with per-device node selection) are not
// allocated, and the pod that finds no device is told so.
func TestDRAPartitionableDevicesLeftOut(t *testing.T) {
	n1 := node("node1", 1000, 10)
	counters := &resourceapi.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: "node1-counters"}, Spec: resourceapi.ResourceSliceSpec{
		Driver: gpuDriver, NodeName: ptr.To("node1"), Pool: resourceapi.ResourcePool{Name: "node1", ResourceSliceCount: 2},
		SharedCounters: []resourceapi.CounterSet{{Name: "mem", Counters: map[string]resourceapi.Counter{"gb": {Value: resource.MustParse("80")}}}}}}
	partitions := gpuSlice("node1", 2, func(d *resourceapi.Device) {
		d.ConsumesCounters = []resourceapi.DeviceCounterConsumption{{CounterSet: "mem", Counters: map[string]resourceapi.Counter{"gb": {Value: resource.MustParse("40")}}}}
	})
	partitions.Spec.Pool.ResourceSliceCount = 2
	perDevice := gpuSlice("node1", 1, func(d *resourceapi.Device) { d.NodeName = ptr.To("node1") })
	perDevice.Name, perDevice.Spec.Pool.Name, perDevice.Spec.NodeName, perDevice.Spec.PerDeviceNodeSelection = "node1-other", "other", nil, ptr.To(true)
	e := draWorld(t, counters, partitions, perDevice, gpuClass("gpu", gpuExpr), gpuClaim("one", 1))
	st, got := draStatuses(t, e, pod("p", 0, 100, withResourceClaims("one")), n1)
	if got["node1"].ok() || !draRejected(got) {
		t.Fatalf("partitionable devices were allocated: %+v", got)
	}
	want := "nodeshepherd-scheduler does not allocate 3 partitionable devices (DRAPartitionableDevices); use kube-scheduler for pods that need them."
	if st.leftOut != want {
		t.Errorf("leftOut %q, want %q", st.leftOut, want)
	}
}

func TestDRAExtendedResourceRefused(t *testing.T) {
	class := gpuClass("gpu", gpuExpr)
	class.Spec.ExtendedResourceName = ptr.To("example.com/gpu")
	e := draWorld(t, class)
	p := pod("p", 0, 100)
	p.Spec.Containers[0].Resources.Requests["example.com/gpu"] = resource.MustParse("1")
	want := "nodeshepherd-scheduler does not support: extended resource example.com/gpu backed by DRA through DeviceClass gpu (DRAExtendedResource); use kube-scheduler for this pod"
	if got := e.extendedResourceRefusal(newPodInfo(p)); got != want {
		t.Errorf("got %q", got)
	}
	p = pod("p", 0, 100)
	p.Spec.Containers[0].Resources.Requests["deviceclass.resource.kubernetes.io/gpu"] = resource.MustParse("1")
	if got := e.extendedResourceRefusal(newPodInfo(p)); !strings.Contains(got, "deviceclass.resource.kubernetes.io/gpu backed by DRA") {
		t.Errorf("implicit: %q", got)
	}
	p = pod("p", 0, 100)
	p.Spec.Containers[0].Resources.Requests["example.com/fpga"] = resource.MustParse("1")
	if got := e.extendedResourceRefusal(newPodInfo(p)); got != "" {
		t.Errorf("a device-plugin resource: %q", got)
	}
}

// draScheduler is a scheduler with the resource informers over a fake
// clientset, not running: PreBind is called directly.
func draScheduler(t *testing.T, objs ...runtime.Object) (*Scheduler, *fake.Clientset) {
	t.Helper()
	client := fake.NewSimpleClientset(objs...)
	// As the API server: an update of an older resourceVersion conflicts;
	// one that lands gets the next version.
	client.PrependReactor("update", "resourceclaims", func(a clienttesting.Action) (bool, runtime.Object, error) {
		c := a.(clienttesting.UpdateAction).GetObject().(*resourceapi.ResourceClaim)
		cur, err := client.Tracker().Get(resourceapi.SchemeGroupVersion.WithResource("resourceclaims"), c.Namespace, c.Name)
		if err != nil {
			return true, nil, err
		}
		rv := cur.(*resourceapi.ResourceClaim).ResourceVersion
		if c.ResourceVersion != rv {
			return true, nil, apierrors.NewConflict(resourceapi.Resource("resourceclaims"), c.Name, errors.New("the object has been modified"))
		}
		n, _ := strconv.Atoi(rv)
		c.ResourceVersion = strconv.Itoa(n + 1)
		return false, nil, nil
	})
	factory := informers.NewSharedInformerFactory(client, 0)
	s, err := New(DefaultConfig(), Deps{Client: client, Nodes: factory.Core().V1().Nodes(), Pods: factory.Core().V1().Pods(),
		PDBs: factory.Policy().V1().PodDisruptionBudgets(), Recorder: record.NewFakeRecorder(100), Registry: prometheus.NewRegistry(),
		Clock:          testingclock.NewFakeClock(epoch),
		ResourceClaims: factory.Resource().V1().ResourceClaims(), ResourceSlices: factory.Resource().V1().ResourceSlices(),
		DeviceClasses: factory.Resource().V1().DeviceClasses()})
	if err != nil {
		t.Fatal(err)
	}
	return s, client
}

func TestDRAPrebindWritesAllocationAndReservation(t *testing.T) {
	claim := gpuClaim("one", 1)
	s, client := draScheduler(t, claim)
	p := pod("p", 0, 100, withResourceClaims("one"))
	s.cache.assume(newPodInfo(p), "node1")
	alloc := &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{
		{Request: "gpu", Driver: gpuDriver, Pool: "node1", Device: "gpu-0"}}}}
	// The first status write conflicts (another writer), the retry reads
	// the claim again and succeeds.
	conflicts := 1
	client.PrependReactor("update", "resourceclaims", func(a clienttesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() == "status" && conflicts > 0 {
			conflicts--
			return true, nil, apierrors.NewConflict(resourceapi.Resource("resourceclaims"), "one", errors.New("changed"))
		}
		return false, nil, nil
	})
	bs := []claimBinding{{claim: claim, podClaim: p.Spec.ResourceClaims[0], allocation: alloc}}
	s.dra.inFlight[claim.UID] = claim
	written, err := s.prebindClaims(context.Background(), p, "node1", bs)
	if err != nil || len(written) != 1 {
		t.Fatalf("prebind: %v, %d written", err, len(written))
	}
	got, err := client.ResourceV1().ResourceClaims("default").Get(context.Background(), "one", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.Status.Allocation == nil || got.Status.Allocation.Devices.Results[0].Device != "gpu-0" ||
		len(got.Status.ReservedFor) != 1 || got.Status.ReservedFor[0].UID != p.UID || got.Status.ReservedFor[0].Resource != "pods" ||
		len(got.Finalizers) != 1 || got.Finalizers[0] != resourceapi.Finalizer {
		t.Fatalf("claim after prebind: finalizers %v, status %+v", got.Finalizers, got.Status)
	}
	if len(s.dra.inFlight) != 0 || s.dra.assumed[claim.UID] == nil {
		t.Errorf("in flight %v, assumed %v", s.dra.inFlight, s.dra.assumed)
	}
	// The binding failed: the reservation, the allocation and the finalizer
	// are undone.
	s.unreserveClaims(context.Background(), p, written)
	got, _ = client.ResourceV1().ResourceClaims("default").Get(context.Background(), "one", metav1.GetOptions{})
	if got.Status.Allocation != nil || len(got.Status.ReservedFor) != 0 || len(got.Finalizers) != 0 {
		t.Errorf("claim after unreserve: finalizers %v, status %+v", got.Finalizers, got.Status)
	}
}

func TestDRAPrebindSharedClaimAndLostRace(t *testing.T) {
	other := resourceapi.ResourceClaimConsumerReference{Resource: "pods", Name: "other", UID: "other"}
	shared := gpuClaim("shared", 1, allocatedTo("node1", "gpu-0"), func(c *resourceapi.ResourceClaim) {
		c.Status.ReservedFor = []resourceapi.ResourceClaimConsumerReference{other}
	})
	// Allocated meanwhile by another scheduler (version 2).
	fresh := gpuClaim("fresh", 1, allocatedTo("node1", "gpu-1"), func(c *resourceapi.ResourceClaim) { c.ResourceVersion = "2" })
	s, client := draScheduler(t, shared, fresh)
	p := pod("p", 0, 100, withResourceClaims("shared", "fresh"))
	s.cache.assume(newPodInfo(p), "node1")
	unallocated := gpuClaim("fresh", 1)
	bs := []claimBinding{{claim: shared, podClaim: p.Spec.ResourceClaims[0]},
		{claim: unallocated, podClaim: p.Spec.ResourceClaims[1], allocation: &resourceapi.AllocationResult{}}}
	written, err := s.prebindClaims(context.Background(), p, "node1", bs)
	if err == nil || !strings.Contains(err.Error(), "got allocated elsewhere") || len(written) != 1 {
		t.Fatalf("prebind: %v, %d written", err, len(written))
	}
	got, _ := client.ResourceV1().ResourceClaims("default").Get(context.Background(), "shared", metav1.GetOptions{})
	if len(got.Status.ReservedFor) != 2 || got.Status.Allocation == nil {
		t.Fatalf("shared claim: %+v", got.Status)
	}
	s.unreserveClaims(context.Background(), p, written)
	got, _ = client.ResourceV1().ResourceClaims("default").Get(context.Background(), "shared", metav1.GetOptions{})
	if len(got.Status.ReservedFor) != 1 || got.Status.ReservedFor[0].UID != "other" || got.Status.Allocation == nil {
		t.Errorf("shared claim after unreserve: %+v", got.Status)
	}
}
