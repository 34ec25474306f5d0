package scheduler

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	resourcelisters "k8s.io/client-go/listers/resource/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/resourceclaim"
	"k8s.io/dynamic-resource-allocation/structured"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"github.com/nodeshepherd/nodeshepherd/pkg/kube"
)

// Reasons of kube-scheduler 1.37's DynamicResources plugin, word for word.
const (
	reasonCannotAllocate  = "cannot allocate all claims"
	reasonClaimNotOnNode  = "resourceclaim not available on the node"
	msgClaimInUse         = "resourceclaim in use"
	implicitExtendedClass = "deviceclass.resource.kubernetes.io/"
)

// draFeatures are the allocator features nodeshepherd's scheduler turns on.
// Device taints are the allocator's own business (a device with a NoSchedule
// or NoExecute taint that no toleration of the request tolerates is not
// allocated), with the taints of DeviceTaintRules added to the devices they
// select, as kube-scheduler does. Admin access too: a request with
// adminAccess may get a device other claims hold, and its result, marked
// adminAccess, takes nothing from them (takenDevices); the API server
// admits such claims only in namespaces labelled for it. The features
// kube-scheduler 1.37 also has on (prioritized lists, partitionable
// devices, consumable capacity, binding conditions, extended resources
// backed by DRA) are refused (claims) or left out (devices), each named in
// the pod's message: see claimRefusals and leftOut.
var draFeatures = structured.Features{DeviceTaints: true, AdminAccess: true}

// draEnv is what DRA scheduling reads: the resource listers, and the
// allocations decided by scheduling cycles that the informer has not shown
// yet (kube-scheduler's assume cache and in-flight allocations), so that the
// next cycle neither hands the same device to another claim nor allocates
// a shared claim twice.
type draEnv struct {
	claims  resourcelisters.ResourceClaimLister
	slices  resourcelisters.ResourceSliceLister
	classes resourcelisters.DeviceClassLister
	// rules is nil when DeviceTaintRules are not watched.
	rules    resourcelisters.DeviceTaintRuleLister
	celCache *cel.Cache

	mu sync.Mutex
	// inFlight are claims with an allocation decided by a cycle whose
	// write has not returned yet, by UID.
	inFlight map[types.UID]*resourceapi.ResourceClaim
	// assumed are claims as written by the scheduler, by UID, until the
	// informer shows a version at least as new.
	assumed map[types.UID]*resourceapi.ResourceClaim
}

// classLister adapts the DeviceClass lister to the allocator's interface.
type classLister struct {
	l resourcelisters.DeviceClassLister
}

func (c classLister) List() ([]*resourceapi.DeviceClass, error) { return c.l.List(labels.Everything()) }
func (c classLister) Get(name string) (*resourceapi.DeviceClass, error) {
	return c.l.Get(name)
}

// claim is the claim as the scheduler last wrote it if the informer has
// nothing newer.
func (e *draEnv) claim(ns, name string) (*resourceapi.ResourceClaim, error) {
	c, err := e.claims.ResourceClaims(ns).Get(name)
	if err != nil {
		return nil, err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.assumedLocked(c), nil
}

func (e *draEnv) assumedLocked(c *resourceapi.ResourceClaim) *resourceapi.ResourceClaim {
	if a := e.assumed[c.UID]; a != nil {
		if olderThan(c.ResourceVersion, a.ResourceVersion) {
			return a
		}
		delete(e.assumed, c.UID)
	}
	return c
}

// allocatedDevices are the devices of every allocated claim (as assumed)
// and of the allocations in flight, except those allocated with admin
// access, which do not take the device; and those claims, for preemption
// to tell which of them its victims hold.
func (e *draEnv) allocatedDevices() (sets.Set[structured.DeviceID], []*resourceapi.ResourceClaim, error) {
	all, err := e.claims.List(labels.Everything())
	if err != nil {
		return nil, nil, err
	}
	out := sets.New[structured.DeviceID]()
	var claims []*resourceapi.ResourceClaim
	add := func(c *resourceapi.ResourceClaim) {
		if c.Status.Allocation == nil {
			return
		}
		claims = append(claims, c)
		for _, id := range takenDevices(c) {
			out.Insert(id)
		}
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, c := range all {
		if _, ok := e.inFlight[c.UID]; !ok {
			add(e.assumedLocked(c))
		}
	}
	for _, c := range e.inFlight {
		add(c)
	}
	return out, claims, nil
}

// takenDevices are the devices an allocated claim takes: those of its
// results without admin access.
func takenDevices(c *resourceapi.ResourceClaim) []structured.DeviceID {
	var out []structured.DeviceID
	for _, r := range c.Status.Allocation.Devices.Results {
		if !ptr.Deref(r.AdminAccess, false) {
			out = append(out, structured.MakeDeviceID(r.Driver, r.Pool, r.Device))
		}
	}
	return out
}

// draState is DRA's view of one pod for one cycle (the plugin's PreFilter),
// read by the filters of every node in parallel.
type draState struct {
	env *draEnv
	// ctx is the cycle's, for the allocator.
	ctx context.Context
	pod *v1.Pod
	// claims are the pod's claims in spec order (those the pod does not
	// need, a template's claim the controller chose not to create, left
	// out), with the pod's entry for each.
	claims    []*resourceapi.ResourceClaim
	podClaims []v1.PodResourceClaim
	// onNodes restricts the nodes of each allocated claim (nil: any node).
	onNodes []*nodeaffinity.NodeSelector
	// toAllocate are the claims the scheduler allocates; allocator is nil
	// when there are none.
	toAllocate []*resourceapi.ResourceClaim
	allocator  structured.Allocator
	// allocated, allocatedClaims and slices are what the allocator was
	// given, for preemption's dry run to give another one the devices
	// its victims free.
	allocated       sets.Set[structured.DeviceID]
	allocatedClaims []*resourceapi.ResourceClaim
	slices          []*resourceapi.ResourceSlice
	// victims is set only on preemption's copy of the state
	// (forPreemption): the filter then allocates as if the pods missing
	// from the node had gone, with the claims only they reserve.
	victims *draVictims
	// leftOut names the devices the allocator was not given, for the
	// message of a pod that fits nowhere ("" for none).
	leftOut string

	mu sync.Mutex
	// results are the allocations found per node by the filter.
	results map[string][]resourceapi.AllocationResult
}

// draRefusal is a pod's DRA use that the scheduler refuses.
type draRefusal struct{ msg string }

func (r *draRefusal) Error() string { return r.msg }

// prefilter is DynamicResources' PreFilter. It returns the state (nil for a
// pod without claims), or a message that holds for every node ("" when
// there is none), or an error: a *draRefusal for a feature the scheduler
// does not implement, any other for a failure to read the cluster's state.
func (e *draEnv) prefilter(ctx context.Context, pod *v1.Pod) (*draState, string, error) {
	if e == nil || len(pod.Spec.ResourceClaims) == 0 {
		return nil, "", nil
	}
	st := &draState{env: e, ctx: ctx, pod: pod}
	var msg string
	var err error
	if st.claims, st.podClaims, msg, err = e.podClaims(pod); msg != "" || err != nil {
		return nil, msg, err
	}
	if len(st.claims) == 0 {
		return nil, "", nil
	}
	if found := claimRefusals(st.claims); len(found) > 0 {
		return nil, "", &draRefusal{msg: refusal(found)}
	}
	st.onNodes = make([]*nodeaffinity.NodeSelector, len(st.claims))
	for i, claim := range st.claims {
		if claim.Status.Allocation != nil {
			if !resourceclaim.CanBeReserved(claim) && !resourceclaim.IsReservedForPod(pod, claim, false) {
				return nil, msgClaimInUse, nil
			}
			if sel := claim.Status.Allocation.NodeSelector; sel != nil {
				ns, err := nodeaffinity.NewNodeSelector(sel)
				if err != nil {
					return nil, "", fmt.Errorf("resourceclaim %s: allocation's node selector: %w", klog.KObj(claim), err)
				}
				st.onNodes[i] = ns
			}
			continue
		}
		e.mu.Lock()
		_, inFlight := e.inFlight[claim.UID]
		e.mu.Unlock()
		if inFlight {
			return nil, fmt.Sprintf("resource claim %s is in the process of being allocated", klog.KObj(claim)), nil
		}
		for _, r := range claim.Spec.Devices.Requests {
			if r.Exactly == nil {
				continue // refused above
			}
			if r.Exactly.DeviceClassName == "" {
				return nil, "", fmt.Errorf("request %s: unsupported request type", r.Name)
			}
			if _, err := e.classes.Get(r.Exactly.DeviceClassName); apierrors.IsNotFound(err) {
				return nil, fmt.Sprintf("request %s: device class %s does not exist", r.Name, r.Exactly.DeviceClassName), nil
			}
		}
		st.toAllocate = append(st.toAllocate, claim)
	}
	if len(st.toAllocate) == 0 {
		return st, "", nil
	}
	allocated, allocatedClaims, err := e.allocatedDevices()
	if err != nil {
		return nil, "", err
	}
	slices, leftOut, err := e.usableSlices()
	if err != nil {
		return nil, "", err
	}
	st.leftOut = leftOut
	st.allocated, st.allocatedClaims, st.slices = allocated, allocatedClaims, slices
	a, err := structured.NewAllocator(ctx, draFeatures, structured.AllocatedState{AllocatedDevices: allocated},
		classLister{e.classes}, slices, e.celCache)
	if err != nil {
		return nil, "", err
	}
	st.allocator = a
	st.results = map[string][]resourceapi.AllocationResult{}
	return st, "", nil
}

// podClaims are the pod's claims in spec order, with the pod's entry for
// each (those the pod does not need, a template's claim the controller
// chose not to create, left out); or the message of a claim that is not
// there yet, being deleted, or not the pod's; or an error reading them.
func (e *draEnv) podClaims(pod *v1.Pod) ([]*resourceapi.ResourceClaim, []v1.PodResourceClaim, string, error) {
	var claims []*resourceapi.ResourceClaim
	var pcs []v1.PodResourceClaim
	for i := range pod.Spec.ResourceClaims {
		pc := pod.Spec.ResourceClaims[i]
		name, mustCheckOwner, err := resourceclaim.Name(pod, &pc)
		if err != nil {
			return nil, nil, err.Error(), nil
		}
		if name == nil {
			continue
		}
		claim, err := e.claim(pod.Namespace, *name)
		if err != nil {
			if apierrors.IsNotFound(err) {
				return nil, nil, err.Error(), nil
			}
			return nil, nil, "", err
		}
		if claim.DeletionTimestamp != nil {
			return nil, nil, fmt.Sprintf("resourceclaim %q is being deleted", claim.Name), nil
		}
		if mustCheckOwner {
			if err := resourceclaim.IsForPod(pod, claim, false); err != nil {
				return nil, nil, err.Error(), nil
			}
		}
		claims = append(claims, claim)
		pcs = append(pcs, pc)
	}
	return claims, pcs, "", nil
}

// preEnqueue is DynamicResources' PreEnqueue: why the pod's claims are not
// all there yet ("" when they are). kube-scheduler does not try such a pod
// (no event, no condition) until a claim is added or the controller names
// the pod's claims in its status.
func (e *draEnv) preEnqueue(pod *v1.Pod) string {
	if e == nil || len(pod.Spec.ResourceClaims) == 0 {
		return ""
	}
	// A failure to read is left to the cycle, which retries it with backoff.
	_, _, msg, _ := e.podClaims(pod)
	return msg
}

// claimRefusals names what the claims use that the scheduler does not
// implement: every DRA feature of kube-scheduler 1.37 that changes what a
// claim gets, other than the plain requests and matchAttribute constraints
// that the allocator handles with these features off.
func claimRefusals(claims []*resourceapi.ResourceClaim) []string {
	var found []string
	for _, c := range claims {
		if c.Status.Allocation != nil {
			continue // allocated already: the scheduler only reserves it
		}
		for _, r := range c.Spec.Devices.Requests {
			switch {
			case len(r.FirstAvailable) > 0:
				found = append(found, fmt.Sprintf("prioritized list (firstAvailable) in request %s of resourceclaim %s (DRAPrioritizedList)", r.Name, klog.KObj(c)))
			case r.Exactly == nil:
				found = append(found, fmt.Sprintf("request %s of resourceclaim %s of an unknown type", r.Name, klog.KObj(c)))
			case r.Exactly.Capacity != nil:
				found = append(found, fmt.Sprintf("capacity requests in request %s of resourceclaim %s (DRAConsumableCapacity)", r.Name, klog.KObj(c)))
			case len(r.Exactly.DerivedAttributes) > 0:
				found = append(found, fmt.Sprintf("derived attributes in request %s of resourceclaim %s (DRADerivedAttributes)", r.Name, klog.KObj(c)))
			}
		}
		for i, con := range c.Spec.Devices.Constraints {
			if con.DistinctAttribute != nil {
				found = append(found, fmt.Sprintf("distinctAttribute constraint #%d of resourceclaim %s (DRAConsumableCapacity)", i, klog.KObj(c)))
			}
		}
	}
	return found
}

// usableSlices are the ResourceSlices given to the allocator: the taints of
// DeviceTaintRules are added to the devices they select, and the devices the
// scheduler does not handle are taken out (the allocator, with those
// features off, already skips devices that consume counters, slices with
// shared counters or per-device node selection, and devices with binding
// conditions); leftOut says what was not used. Slices are copied only when
// changed.
func (e *draEnv) usableSlices() ([]*resourceapi.ResourceSlice, string, error) {
	all, err := e.slices.List(labels.Everything())
	if err != nil {
		return nil, "", err
	}
	var rules []*resourceapi.DeviceTaintRule
	if e.rules != nil {
		if rules, err = e.rules.List(labels.Everything()); err != nil {
			return nil, "", err
		}
	}
	counts := map[string]int{}
	out := make([]*resourceapi.ResourceSlice, 0, len(all))
	for _, s := range all {
		if ptr.Deref(s.Spec.PerDeviceNodeSelection, false) || len(s.Spec.SharedCounters) > 0 {
			// The allocator skips these: a pool's shared counters (such a
			// slice has no devices) or devices each with a node selection
			// of its own.
			if n := len(s.Spec.Devices); n > 0 {
				counts["partitionable devices (DRAPartitionableDevices)"] += n
			}
			out = append(out, s)
			continue
		}
		var copied *resourceapi.ResourceSlice
		for i := range s.Spec.Devices {
			d := &s.Spec.Devices[i]
			drop := droppedDevice(d)
			taints := ruleTaints(rules, s, d)
			if copied == nil {
				if drop == "" && len(taints) == 0 {
					continue
				}
				// The first device to change: copy the slice with the
				// devices before it, which are unchanged.
				copied = s.DeepCopy()
				copied.Spec.Devices = copied.Spec.Devices[:i]
			}
			switch {
			case drop != "":
				counts[drop]++
			case len(taints) > 0:
				dc := d.DeepCopy()
				dc.Taints = append(dc.Taints, taints...)
				copied.Spec.Devices = append(copied.Spec.Devices, *dc)
			default:
				copied.Spec.Devices = append(copied.Spec.Devices, *d.DeepCopy())
			}
		}
		if copied == nil {
			out = append(out, s)
			continue
		}
		out = append(out, copied)
	}
	return out, describeLeftOut(counts), nil
}

// droppedDevice names why usableSlices takes a device out ("" to keep
// it): features of kube-scheduler 1.37 that the scheduler does not
// implement.
func droppedDevice(d *resourceapi.Device) string {
	switch {
	case ptr.Deref(d.AllowMultipleAllocations, false):
		return "shared devices (allowMultipleAllocations, DRAConsumableCapacity)"
	case len(d.ConsumesCounters) > 0:
		return "partitionable devices (DRAPartitionableDevices)"
	case len(d.BindingConditions) > 0 || ptr.Deref(d.BindsToNode, false):
		return "devices with binding conditions (DRADeviceBindingConditions)"
	}
	return ""
}

// ruleTaints are the taints of the rules that select the device: every
// criterion set must match; a rule without a selector selects nothing.
func ruleTaints(rules []*resourceapi.DeviceTaintRule, s *resourceapi.ResourceSlice, d *resourceapi.Device) []resourceapi.DeviceTaint {
	var out []resourceapi.DeviceTaint
	for _, r := range rules {
		sel := r.Spec.DeviceSelector
		if sel == nil {
			continue
		}
		if (sel.Driver != nil && *sel.Driver != s.Spec.Driver) || (sel.Pool != nil && *sel.Pool != s.Spec.Pool.Name) ||
			(sel.Device != nil && *sel.Device != d.Name) {
			continue
		}
		out = append(out, r.Spec.Taint)
	}
	return out
}

func describeLeftOut(counts map[string]int) string {
	if len(counts) == 0 {
		return ""
	}
	parts := make([]string, 0, len(counts))
	for what, n := range counts {
		parts = append(parts, fmt.Sprintf("%d %s", n, what))
	}
	slices.Sort(parts)
	return "nodeshepherd-scheduler does not allocate " + strings.Join(parts, ", ") + "; use kube-scheduler for pods that need them."
}

// filter is DynamicResources' Filter: the allocated claims' node
// selectors, then whether the unallocated claims can all be allocated on
// the node (the allocation found is kept for reserve, except in
// preemption's dry run, whose allocations assume victims gone).
func (st *draState) filter(n *nodeInfo) status {
	if st == nil {
		return status{}
	}
	if st.allocator != nil {
		a := st.allocator
		if st.victims != nil {
			var err error
			if a, err = st.victims.allocatorFor(st, n); err != nil {
				return reject(unresolvable, err.Error())
			}
		}
		res, err := a.Allocate(st.ctx, n.node, st.toAllocate)
		if err != nil {
			if errors.Is(err, structured.ErrFailedAllocationOnNode) {
				return lacksDevices(err.Error())
			}
			// Something wrong with a claim or class (a CEL expression that
			// fails): it holds on every node.
			return reject(unresolvable, err.Error())
		}
		if len(res) != len(st.toAllocate) {
			return lacksDevices(reasonCannotAllocate)
		}
		if st.victims == nil {
			st.mu.Lock()
			st.results[n.name()] = res
			st.mu.Unlock()
		}
	}
	for _, sel := range st.onNodes {
		if sel != nil && !sel.Match(n.node) {
			return reject(unresolvable, reasonClaimNotOnNode)
		}
	}
	return status{}
}

// lacksDevices is the filter's rejection of a node whose devices cannot
// satisfy the claims (see status.devices).
func lacksDevices(reason string) status {
	return status{code: unresolvable, reasons: []string{reason}, devices: true}
}

// draRejected is true when some node could not allocate the claims.
func draRejected(statuses map[string]status) bool {
	for _, st := range statuses {
		if slices.Contains(st.reasons, reasonCannotAllocate) {
			return true
		}
	}
	return false
}

// claimBinding is what PreBind does for one claim: allocate it (allocation
// set) and reserve it for the pod, or only reserve it.
type claimBinding struct {
	claim      *resourceapi.ResourceClaim
	podClaim   v1.PodResourceClaim
	allocation *resourceapi.AllocationResult
}

// reserve is DynamicResources' Reserve for the chosen node: the allocations
// found there become in flight, so that no other cycle hands their devices
// out, and the claims not yet reserved for the pod are returned.
func (st *draState) reserve(node string) ([]claimBinding, error) {
	if st == nil {
		return nil, nil
	}
	var res []resourceapi.AllocationResult
	if st.allocator != nil {
		st.mu.Lock()
		r, ok := st.results[node]
		st.mu.Unlock()
		if !ok || len(r) != len(st.toAllocate) {
			return nil, fmt.Errorf("claim allocation not found for node %s", node)
		}
		res = r
	}
	var out []claimBinding
	next := 0
	st.env.mu.Lock()
	defer st.env.mu.Unlock()
	for i, c := range st.claims {
		b := claimBinding{claim: c, podClaim: st.podClaims[i]}
		if c.Status.Allocation == nil {
			alloc := res[next].DeepCopy()
			next++
			b.allocation = alloc
			pending := c.DeepCopy()
			pending.Status.Allocation = alloc
			st.env.inFlight[c.UID] = pending
		} else if resourceclaim.IsReservedForPod(st.pod, c, false) {
			continue
		}
		out = append(out, b)
	}
	return out, nil
}

// forgetInFlight ends the in-flight allocations of bindings.
func (e *draEnv) forgetInFlight(bs []claimBinding) {
	if e == nil {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, b := range bs {
		if b.allocation != nil {
			delete(e.inFlight, b.claim.UID)
		}
	}
}

// assume records a claim as written, until the informer catches up.
func (e *draEnv) assume(c *resourceapi.ResourceClaim) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.assumed[c.UID] = c
}

// forget drops what is assumed of a deleted claim.
func (e *draEnv) forget(uid types.UID) {
	e.mu.Lock()
	defer e.mu.Unlock()
	delete(e.assumed, uid)
}

// usesDRA is true for pods with resource claims.
func usesDRA(p *queuedPod) bool { return len(p.info.pod.Spec.ResourceClaims) > 0 }

// extendedResourceRefusal refuses a pod that requests an extended resource
// that a DeviceClass provides (DRAExtendedResource: kube-scheduler 1.37
// allocates such a request from devices where no node offers the
// resource), or a class's implicit extended resource.
func (e *draEnv) extendedResourceRefusal(pi *podInfo) string {
	if e == nil || len(pi.request.scalar) == 0 {
		return ""
	}
	var classes []*resourceapi.DeviceClass
	var found []string
	for name := range pi.request.scalar {
		if strings.HasPrefix(string(name), implicitExtendedClass) {
			found = append(found, fmt.Sprintf("extended resource %s backed by DRA (DRAExtendedResource)", name))
			continue
		}
		if classes == nil {
			classes, _ = e.classes.List(labels.Everything())
		}
		for _, c := range classes {
			if ptr.Deref(c.Spec.ExtendedResourceName, "") == string(name) {
				found = append(found, fmt.Sprintf("extended resource %s backed by DRA through DeviceClass %s (DRAExtendedResource)", name, c.Name))
			}
		}
	}
	slices.Sort(found)
	return refusal(found)
}

// watchDRA builds the DRA environment from the resource informers and
// wakes the pods that use claims on the events kube-scheduler's plugin
// registers: claims, slices and classes added or changed, claims deleted
// (their devices are free again).
func (s *Scheduler) watchDRA(d Deps) error {
	if d.ResourceClaims == nil {
		return nil
	}
	if d.ResourceSlices == nil || d.DeviceClasses == nil {
		return errors.New("scheduler: the ResourceClaims informer needs the ResourceSlices and DeviceClasses informers")
	}
	s.dra = &draEnv{claims: d.ResourceClaims.Lister(), slices: d.ResourceSlices.Lister(), classes: d.DeviceClasses.Lister(),
		celCache: cel.NewCache(10, cel.Features{}),
		inFlight: map[types.UID]*resourceapi.ResourceClaim{}, assumed: map[types.UID]*resourceapi.ResourceClaim{}}
	infs := []struct {
		inf   toolscache.SharedIndexInformer
		event string
	}{
		{d.ResourceClaims.Informer(), "ResourceClaim"},
		{d.ResourceSlices.Informer(), "ResourceSlice"},
		{d.DeviceClasses.Informer(), "DeviceClass"},
	}
	if d.DeviceTaintRules != nil {
		s.dra.rules = d.DeviceTaintRules.Lister()
		infs = append(infs, struct {
			inf   toolscache.SharedIndexInformer
			event string
		}{d.DeviceTaintRules.Informer(), "DeviceTaintRule"})
	}
	for _, w := range infs {
		event := w.event
		reg, err := w.inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
			AddFunc:    func(any) { s.queue.MoveAll(event+"Add", usesDRA) },
			UpdateFunc: func(any, any) { s.queue.MoveAll(event+"Update", usesDRA) },
			DeleteFunc: func(obj any) {
				if c, ok := kube.Untombstone(obj).(*resourceapi.ResourceClaim); ok {
					s.dra.forget(c.UID)
				}
				s.queue.MoveAll(event+"Delete", usesDRA)
			},
		})
		if err != nil {
			return err
		}
		s.synced = append(s.synced, reg.HasSynced) // the handler's first list, as for nodes and pods
	}
	return nil
}
