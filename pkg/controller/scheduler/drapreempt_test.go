package scheduler

import (
	"context"
	"slices"
	"testing"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
)

// reservedFor reserves the claim for the pods (the test pods' UIDs are
// their names).
func reservedFor(pods ...string) func(*resourceapi.ResourceClaim) {
	return func(c *resourceapi.ResourceClaim) {
		for _, p := range pods {
			c.Status.ReservedFor = append(c.Status.ReservedFor, resourceapi.ResourceClaimConsumerReference{Resource: "pods", Name: p, UID: types.UID(p)})
		}
	}
}

// draPreempt runs a cycle's filters for p over the cache c and the DRA
// objects, then preemption, as scheduleOne does.
func draPreempt(t *testing.T, c *cache, p *v1.Pod, objs ...runtime.Object) preemptOutcome {
	t.Helper()
	e := draWorld(t, objs...)
	q := query(p)
	st, msg, err := e.prefilter(context.Background(), p)
	if err != nil || msg != "" {
		t.Fatalf("prefilter: %q, %v", msg, err)
	}
	q.dra = st
	statuses := map[string]status{}
	for name, n := range c.nodes {
		if statuses[name] = c.filterWithNominated(q, n); statuses[name].ok() {
			t.Fatalf("%s fits on %s without preemption", p.Name, name)
		}
	}
	return newTestPreemptor(c).preempt(context.Background(), q, statuses, len(c.list))
}

func claimNames(cs []*resourceapi.ResourceClaim) []string {
	out := make([]string, len(cs))
	for i, c := range cs {
		out[i] = c.Name
	}
	slices.Sort(out)
	return out
}

// Two GPUs on node1, each held by a lower-priority pod through its claim;
// node2 has none. The preemptor's claim for one GPU makes one victim, the
// lowest in priority: its claim is freed in the dry run.
func TestDRAPreemptionFreesTheVictimsDevices(t *testing.T) {
	c := world(nodes(2, 1000, 10), pod("low", 1, 100, onNode("node1")), pod("mid", 5, 100, onNode("node1")))
	objs := []runtime.Object{gpuSlice("node1", 2), gpuClass("gpu", gpuExpr), gpuClaim("hi-gpu", 1),
		gpuClaim("low-gpu", 1, allocatedTo("node1", "gpu-0"), reservedFor("low")),
		gpuClaim("mid-gpu", 1, allocatedTo("node1", "gpu-1"), reservedFor("mid"))}
	out := draPreempt(t, c, pod("hi", 10, 100, withResourceClaims("hi-gpu")), objs...)
	if out.chosen == nil || out.chosen.node != "node1" || !slices.Equal(names(out.chosen.victims), []string{"low"}) {
		t.Fatalf("outcome %+v, want node1 with victim low", out)
	}
	if got := claimNames(out.chosen.freedClaims); !slices.Equal(got, []string{"low-gpu"}) {
		t.Errorf("freed claims %v, want [low-gpu]", got)
	}
	// Two GPUs: both pods go.
	out = draPreempt(t, c, pod("hi", 10, 100, withResourceClaims("hi-two")), append(objs, gpuClaim("hi-two", 2))...)
	if out.chosen == nil || !slices.Equal(slices.Sorted(slices.Values(names(out.chosen.victims))), []string{"low", "mid"}) {
		t.Fatalf("two GPUs: %+v, want victims low and mid", out)
	}
	// Three GPUs: no victims can help. kube-scheduler never tries a node
	// its DynamicResources rejected: the message is its own.
	out = draPreempt(t, c, pod("hi", 10, 100, withResourceClaims("hi-three")), append(objs, gpuClaim("hi-three", 3))...)
	if out.chosen != nil || out.msg != "0/2 nodes are available: 2 Preemption is not helpful for scheduling." {
		t.Errorf("three GPUs: chosen %v, message %q", out.chosen, out.msg)
	}
	// The victim must be of lower priority: a pod of the preemptor's
	// priority keeps its GPU.
	c = world(nodes(1, 1000, 10), pod("low", 10, 100, onNode("node1")), pod("mid", 10, 100, onNode("node1")))
	out = draPreempt(t, c, pod("hi", 10, 100, withResourceClaims("hi-gpu")), objs...)
	if out.chosen != nil || out.msg != "0/1 nodes are available: 1 Preemption is not helpful for scheduling." {
		t.Errorf("equal priorities: chosen %v, message %q", out.chosen, out.msg)
	}
}

// A claim shared by several pods frees its devices only when every pod
// that reserves it is a victim; one reserved for something other than a
// pod never does.
func TestDRAPreemptionSharedClaims(t *testing.T) {
	c := world(nodes(1, 1000, 10), pod("low", 1, 100, onNode("node1")), pod("mid", 5, 100, onNode("node1")),
		pod("keeper", 20, 100, onNode("node1")))
	// gpu-0 is shared by low and keeper (which outranks the preemptor),
	// gpu-1 is mid's alone: mid is the victim, low stays.
	objs := []runtime.Object{gpuSlice("node1", 2), gpuClass("gpu", gpuExpr), gpuClaim("hi-gpu", 1), gpuClaim("hi-two", 2),
		gpuClaim("shared", 1, allocatedTo("node1", "gpu-0"), reservedFor("low", "keeper")),
		gpuClaim("mid-gpu", 1, allocatedTo("node1", "gpu-1"), reservedFor("mid"))}
	out := draPreempt(t, c, pod("hi", 10, 100, withResourceClaims("hi-gpu")), objs...)
	if out.chosen == nil || !slices.Equal(names(out.chosen.victims), []string{"mid"}) ||
		!slices.Equal(claimNames(out.chosen.freedClaims), []string{"mid-gpu"}) {
		t.Fatalf("outcome %+v, want victim mid freeing mid-gpu", out)
	}
	// Two GPUs: the shared one stays with keeper, so nothing helps.
	out = draPreempt(t, c, pod("hi", 10, 100, withResourceClaims("hi-two")), objs...)
	if out.chosen != nil || out.msg != "0/1 nodes are available: 1 Preemption is not helpful for scheduling." {
		t.Errorf("two GPUs with one kept by a survivor: chosen %v, message %q", out.chosen, out.msg)
	}

	// gpu-0 is shared by two low pods, gpu-1 is keeper's: both low pods
	// go, one alone would free nothing.
	c = world(nodes(1, 1000, 10), pod("low1", 1, 100, onNode("node1")), pod("low2", 1, 100, onNode("node1")),
		pod("keeper", 20, 100, onNode("node1")))
	objs = []runtime.Object{gpuSlice("node1", 2), gpuClass("gpu", gpuExpr), gpuClaim("hi-gpu", 1),
		gpuClaim("shared", 1, allocatedTo("node1", "gpu-0"), reservedFor("low1", "low2")),
		gpuClaim("keeper-gpu", 1, allocatedTo("node1", "gpu-1"), reservedFor("keeper"))}
	out = draPreempt(t, c, pod("hi", 10, 100, withResourceClaims("hi-gpu")), objs...)
	if out.chosen == nil || !slices.Equal(slices.Sorted(slices.Values(names(out.chosen.victims))), []string{"low1", "low2"}) ||
		!slices.Equal(claimNames(out.chosen.freedClaims), []string{"shared"}) {
		t.Fatalf("outcome %+v, want victims low1 and low2 freeing shared", out)
	}

	// Reserved for low and for a non-pod consumer: low's going frees
	// nothing.
	c = world(nodes(1, 1000, 10), pod("low", 1, 100, onNode("node1")))
	objs = []runtime.Object{gpuSlice("node1", 1), gpuClass("gpu", gpuExpr), gpuClaim("hi-gpu", 1),
		gpuClaim("held", 1, allocatedTo("node1", "gpu-0"), reservedFor("low"), func(c *resourceapi.ResourceClaim) {
			c.Status.ReservedFor = append(c.Status.ReservedFor, resourceapi.ResourceClaimConsumerReference{APIGroup: "example.com", Resource: "things", Name: "t", UID: "t"})
		})}
	out = draPreempt(t, c, pod("hi", 10, 100, withResourceClaims("hi-gpu")), objs...)
	if out.chosen != nil {
		t.Errorf("a claim with a non-pod consumer was freed: %+v", out.chosen)
	}
}

// A victim that frees room for CPU and a device at once, and the freed
// device among several nodes: the preemption's node choice is unchanged
// (lowest victim priority first).
func TestDRAPreemptionNodeChoice(t *testing.T) {
	c := world(nodes(2, 1000, 10), pod("a", 3, 900, onNode("node1")), pod("b", 2, 900, onNode("node2")))
	objs := []runtime.Object{gpuSlice("node1", 1), gpuSlice("node2", 1), gpuClass("gpu", gpuExpr), gpuClaim("hi-gpu", 1),
		gpuClaim("a-gpu", 1, allocatedTo("node1", "gpu-0"), reservedFor("a")),
		gpuClaim("b-gpu", 1, allocatedTo("node2", "gpu-0"), reservedFor("b"))}
	out := draPreempt(t, c, pod("hi", 10, 500, withResourceClaims("hi-gpu")), objs...)
	if out.chosen == nil || out.chosen.node != "node2" || !slices.Equal(names(out.chosen.victims), []string{"b"}) ||
		!slices.Equal(claimNames(out.chosen.freedClaims), []string{"b-gpu"}) {
		t.Fatalf("outcome %+v, want node2 (the lower victim) with b", out)
	}
}

// A preemptor waits after its victims are gone until the claims only they
// reserved are deallocated (the ResourceClaim controller's part), not when
// a survivor reserves them meanwhile or they go.
func TestDRAPreemptorHeldUntilClaimsDeallocated(t *testing.T) {
	victims := []types.UID{"v"}
	for _, tc := range []struct {
		name  string
		claim *resourceapi.ResourceClaim
		held  bool
	}{
		{"still reserved by the victim", gpuClaim("v-gpu", 1, allocatedTo("node1", "gpu-0"), reservedFor("v")), true},
		{"deallocated", gpuClaim("v-gpu", 1), false},
		{"allocated, no consumer left", gpuClaim("v-gpu", 1, allocatedTo("node1", "gpu-0")), false},
		{"reserved by another pod too", gpuClaim("v-gpu", 1, allocatedTo("node1", "gpu-0"), reservedFor("v", "other")), false},
		{"replaced", gpuClaim("v-gpu", 1, allocatedTo("node1", "gpu-0"), reservedFor("v"), func(c *resourceapi.ResourceClaim) { c.UID = "new" }), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newTestScheduler()
			s.cache.setNode(node("node1", 1000, 10))
			s.dra = draWorld(t, tc.claim)
			p := pod("high", 100, 500)
			freed := gpuClaim("v-gpu", 1, allocatedTo("node1", "gpu-0"), reservedFor("v"))
			s.preempting[p.UID] = &inflightPreemption{victims: victims, claims: []*resourceapi.ResourceClaim{freed}}
			if got := s.holdWhilePreempting(p); got != tc.held {
				t.Errorf("held %v, want %v", got, tc.held)
			}
		})
	}
	// The claim is gone (deleted by the controller with its pod).
	s := newTestScheduler()
	s.dra = draWorld(t)
	p := pod("high", 100, 500)
	s.preempting[p.UID] = &inflightPreemption{victims: victims, claims: []*resourceapi.ResourceClaim{gpuClaim("v-gpu", 1)}}
	if s.holdWhilePreempting(p) {
		t.Error("held for a claim that is gone")
	}
}
