package scheduler

import (
	"slices"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/dynamic-resource-allocation/structured"
)

// draVictims is what preemption's dry run needs to tell which devices
// removing pods frees. A pod's removal frees the devices of an allocated
// claim only when every consumer in the claim's reservedFor is a pod
// removed with it: a shared claim still reserved by a surviving pod keeps
// its devices, and so does a claim reserved for something other than a
// pod. The ResourceClaim controller deallocates such a claim once its
// last consumer is gone; the simulation assumes that outcome.
type draVictims struct {
	// held are the claims each pod reserves, among the allocated claims
	// whose consumers are all pods.
	held map[types.UID][]*resourceapi.ResourceClaim
	// holders counts the allocated claims that take each device, so that a
	// device two claims hold (allocated by another scheduler to both) is
	// freed only when both go.
	holders map[structured.DeviceID]int
	// nodes are the cache's nodes: a pod of the cache's node that a dry
	// run's copy no longer has was removed as a victim. Callers hold the
	// cache's read lock.
	nodes map[string]*nodeInfo
}

// forPreemption is a copy of the state for preemption's dry run, whose
// filter allocates as if the pods removed from the node had gone (nil
// when the pod has nothing to allocate: removing pods frees no device it
// could use).
func (st *draState) forPreemption(nodes map[string]*nodeInfo) *draState {
	if st == nil || st.allocator == nil {
		return nil
	}
	v := &draVictims{held: map[types.UID][]*resourceapi.ResourceClaim{}, holders: map[structured.DeviceID]int{}, nodes: nodes}
	for _, c := range st.allocatedClaims {
		for _, id := range takenDevices(c) {
			v.holders[id]++
		}
		if len(c.Status.ReservedFor) == 0 || slices.ContainsFunc(c.Status.ReservedFor, notPod) {
			continue
		}
		for _, r := range c.Status.ReservedFor {
			v.held[r.UID] = append(v.held[r.UID], c)
		}
	}
	return &draState{env: st.env, ctx: st.ctx, pod: st.pod, claims: st.claims, podClaims: st.podClaims,
		onNodes: st.onNodes, toAllocate: st.toAllocate, allocator: st.allocator, leftOut: st.leftOut,
		allocated: st.allocated, allocatedClaims: st.allocatedClaims, slices: st.slices, victims: v}
}

// mayFree is true when a pod of lower priority than the preemptor's on
// the node reserves a claim that only pods reserve: removing pods there
// may free devices. A node rejected for want of devices is tried only
// then.
func (st *draState) mayFree(n *nodeInfo, priority int32) bool {
	if st == nil || st.victims == nil || n == nil {
		return false
	}
	return slices.ContainsFunc(n.pods, func(p *podInfo) bool { return p.priority < priority && len(st.victims.held[p.pod.UID]) > 0 })
}

func notPod(r resourceapi.ResourceClaimConsumerReference) bool {
	return r.APIGroup != "" || r.Resource != "pods"
}

// removedFrom are the pods holding claims that the dry run's copy n of a
// node no longer has.
func (v *draVictims) removedFrom(n *nodeInfo) sets.Set[types.UID] {
	orig := v.nodes[n.name()]
	if orig == nil {
		return nil
	}
	var removed sets.Set[types.UID]
	for _, p := range orig.pods {
		uid := p.pod.UID
		if len(v.held[uid]) == 0 || slices.ContainsFunc(n.pods, func(q *podInfo) bool { return q.pod.UID == uid }) {
			continue
		}
		if removed == nil {
			removed = sets.New[types.UID]()
		}
		removed.Insert(uid)
	}
	return removed
}

// freedBy are the claims that removing the pods frees, and the devices
// that are then free.
func (v *draVictims) freedBy(removed sets.Set[types.UID]) ([]*resourceapi.ResourceClaim, []structured.DeviceID) {
	var claims []*resourceapi.ResourceClaim
	seen := sets.New[types.UID]()
	for uid := range removed {
		for _, c := range v.held[uid] {
			if seen.Has(c.UID) {
				continue
			}
			seen.Insert(c.UID)
			if !slices.ContainsFunc(c.Status.ReservedFor, func(r resourceapi.ResourceClaimConsumerReference) bool { return !removed.Has(r.UID) }) {
				claims = append(claims, c)
			}
		}
	}
	released := map[structured.DeviceID]int{}
	for _, c := range claims {
		for _, id := range takenDevices(c) {
			released[id]++
		}
	}
	var devices []structured.DeviceID
	for id, n := range released {
		if n >= v.holders[id] {
			devices = append(devices, id)
		}
	}
	return claims, devices
}

// allocatorFor is the allocator for the dry run's copy n of a node: the
// cycle's own when the pods removed from n free no device, otherwise one
// that sees those devices free.
func (v *draVictims) allocatorFor(st *draState, n *nodeInfo) (structured.Allocator, error) {
	removed := v.removedFrom(n)
	if removed.Len() == 0 {
		return st.allocator, nil
	}
	_, freed := v.freedBy(removed)
	if len(freed) == 0 {
		return st.allocator, nil
	}
	allocated := st.allocated.Clone().Delete(freed...)
	return structured.NewAllocator(st.ctx, draFeatures, structured.AllocatedState{AllocatedDevices: allocated},
		classLister{st.env.classes}, st.slices, st.env.celCache)
}

// freedClaims are the claims that the victims free, for the preemptor to
// wait for their deallocation (nil outside preemption's copy).
func (st *draState) freedClaims(victims []*podInfo) []*resourceapi.ResourceClaim {
	if st == nil || st.victims == nil {
		return nil
	}
	removed := sets.New[types.UID]()
	for _, p := range victims {
		removed.Insert(p.pod.UID)
	}
	claims, _ := st.victims.freedBy(removed)
	return claims
}

// stillHeld is true while one of the claims a preemption freed is still
// allocated and reserved only by its victims: the ResourceClaim
// controller has not deallocated it yet. A preemptor tried meanwhile
// would find the devices taken and preempt again.
func (e *draEnv) stillHeld(claims []*resourceapi.ResourceClaim, victims []types.UID) bool {
	if e == nil {
		return false
	}
	for _, c := range claims {
		cur, err := e.claim(c.Namespace, c.Name)
		if err != nil || cur.UID != c.UID || cur.Status.Allocation == nil || len(cur.Status.ReservedFor) == 0 {
			continue // gone, replaced, deallocated, or left allocated with no consumer
		}
		if !slices.ContainsFunc(cur.Status.ReservedFor, func(r resourceapi.ResourceClaimConsumerReference) bool { return !slices.Contains(victims, r.UID) }) {
			return true
		}
	}
	return false
}
