package scheduler

import (
	"context"
	"math/rand"
	"testing"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
)

// restartAll makes a pod use a container restart rule with the
// RestartAllContainers action: it requires the node feature
// RestartAllContainersOnContainerExits.
func restartAll(p *v1.Pod) {
	p.Spec.Containers[0].RestartPolicy = ptr.To(v1.ContainerRestartPolicyNever)
	p.Spec.Containers[0].RestartPolicyRules = []v1.ContainerRestartRule{{Action: v1.ContainerRestartRuleActionRestartAllContainers,
		ExitCodes: &v1.ContainerRestartRuleOnExitCodes{Operator: v1.ContainerRestartRuleOnExitCodesOpIn, Values: []int32{42}}}}
}

const restartAllFeature = "RestartAllContainersOnContainerExits"

func declaring(n *v1.Node, features ...string) *v1.Node {
	n.Status.DeclaredFeatures = features
	return n
}

func TestNodeDeclaredFeaturesFilter(t *testing.T) {
	c := world([]*v1.Node{
		declaring(node("with", 1000, 10), "AnUnknownFeature", restartAllFeature),
		declaring(node("other", 1000, 10), "UserNamespacesHostNetworkSupport"),
		node("none", 1000, 10),
	})
	p := pod("p", 0, 100)
	restartAll(p)
	got := statusesOf(c, p)
	if !got["with"].ok() {
		t.Errorf("node declaring the feature: %+v", got["with"])
	}
	for _, n := range []string{"other", "none"} {
		if st := got[n]; st.code != unresolvable || len(st.reasons) != 1 || st.reasons[0] != reasonFeatures {
			t.Errorf("%s: %+v, want unresolvable %q", n, st, reasonFeatures)
		}
	}
	delete(got, "with")
	if msg := fitError(3, got, ""); msg != "0/3 nodes are available: 2 node(s) didn't match Pod's required features." {
		t.Errorf("message %q", msg)
	}
	// A pod that needs no feature skips the filter.
	for n, st := range statusesOf(c, pod("plain", 0, 100)) {
		if !st.ok() {
			t.Errorf("plain pod on %s: %+v", n, st)
		}
	}
	// Features the pod needs only on update (resizes) are not required.
	resizable := pod("r", 0, 100)
	resizable.Spec.Resources = &v1.ResourceRequirements{Requests: v1.ResourceList{v1.ResourceCPU: resource.MustParse("100m")}}
	if fs := requiredFeatures(resizable); !fs.IsEmpty() {
		t.Errorf("pod-level resources require %v", fs)
	}
}

// A pod rejected for its required features is woken by a node whose
// declaredFeatures change, not by heartbeats; other parked pods sleep on.
func TestNodeDeclaredFeaturesWakeUp(t *testing.T) {
	s := newTestScheduler()
	n := node("node1", 1000, 10)
	s.cache.setNode(n)
	park := func(name string, featuresBound bool) {
		s.queue.Add(pod(name, 0, 100))
		p, cycle := pop(t, s.queue)
		p.featuresBound = featuresBound
		s.queue.Requeue(p, cycle, false)
	}
	park("needs-feature", true)
	park("other", false)
	heartbeat := n.DeepCopy()
	heartbeat.Status.Conditions = []v1.NodeCondition{{Type: v1.NodeReady, Status: v1.ConditionTrue}}
	s.onNodeUpdate(n, heartbeat)
	if l := s.queue.Lens(); l[inUnschedulable] != 2 {
		t.Fatalf("a heartbeat woke pods: %v", l)
	}
	declared := declaring(heartbeat.DeepCopy(), restartAllFeature)
	s.onNodeUpdate(heartbeat, declared)
	s.queue.mu.Lock()
	defer s.queue.mu.Unlock()
	if _, parked := s.queue.parked["needs-feature"]; parked {
		t.Error("needs-feature still parked")
	}
	if _, parked := s.queue.parked["other"]; !parked {
		t.Error("other was woken")
	}
	if ok, _ := requiredFeatures(func() *v1.Pod { p := pod("x", 0, 0); restartAll(p); return p }()).IsSubset(s.cache.nodes["node1"].declared); !ok {
		t.Error("the cache did not take the node's new features")
	}
}

func withImages(n *v1.Node, images ...v1.ContainerImage) *v1.Node {
	n.Status.Images = images
	return n
}

func image(size int64, names ...string) v1.ContainerImage {
	return v1.ContainerImage{Names: names, SizeBytes: size}
}

func TestImageLocalityScore(t *testing.T) {
	const mb = 1024 * 1024
	big := image(500*mb, "registry.example/app:1", "registry.example/app@sha256:abc")
	c := world([]*v1.Node{
		withImages(node("has", 1000, 10), big, image(30*mb, "registry.example/sidecar:latest")),
		node("bare", 1000, 10),
	})
	score := func(p *v1.Pod, n string) int64 {
		return newImageQuery(p, len(c.list)).score(c.nodes[n])
	}
	p := pod("p", 0, 100)
	p.Spec.Containers[0].Image = "registry.example/app:1"
	// 500 MiB × 1/2 of the nodes = 250 MiB: (250 - 23) × 100 / (1000 - 23).
	if got, want := score(p, "has"), int64(100*(250-23)/(1000-23)); got != want {
		t.Errorf("has: %d, want %d", got, want)
	}
	if got := score(p, "bare"); got != 0 {
		t.Errorf("bare: %d", got)
	}
	// The sidecar is named without a tag: ":latest" is implied. Two
	// images: the threshold is 2000 MiB; 265 MiB scaled.
	p.Spec.InitContainers = []v1.Container{{Name: "init", Image: "registry.example/sidecar"}}
	if got, want := score(p, "has"), int64(100*(250*mb+15*mb-23*mb)/(2000*mb-23*mb)); got != want {
		t.Errorf("with the sidecar: %d, want %d", got, want)
	}

	// The per-image node counts follow node updates and deletions.
	c.setNode(withImages(node("bare", 1000, 10), big))
	if st := c.images["registry.example/app:1"]; st == nil || st.nodes != 2 {
		t.Fatalf("after the update: %+v", st)
	}
	p.Spec.InitContainers = nil
	if got, want := score(p, "bare"), int64(100*(500-23)/(1000-23)); got != want {
		t.Errorf("on both nodes: %d, want %d", got, want)
	}
	c.removeNode("has")
	c.setNode(node("bare", 1000, 10))
	if len(c.images) != 0 {
		t.Errorf("images left after removal: %v", c.images)
	}
}

func capacity(name, class, size, zone string) *storagev1.CSIStorageCapacity {
	q := resource.MustParse(size)
	return &storagev1.CSIStorageCapacity{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "kube-system"}, StorageClassName: class,
		Capacity: &q, NodeTopology: &metav1.LabelSelector{MatchLabels: map[string]string{v1.LabelTopologyZone: zone}}}
}

// VolumeBinding's storage-capacity score prefers the node whose storage
// the pod's claims use least.
func TestVolumeCapacityScore(t *testing.T) {
	driver := &storagev1.CSIDriver{ObjectMeta: metav1.ObjectMeta{Name: "csi.example.com"}, Spec: storagev1.CSIDriverSpec{StorageCapacity: ptr.To(true)}}
	env := storage(t, class("fast", wffc, "csi.example.com"), driver, claim("data", "fast", "10Gi"),
		capacity("a", "fast", "100Gi", "a"), capacity("b", "fast", "40Gi", "b"),
		class("local", wffc, "kubernetes.io/no-provisioner"), claim("pinned", "local", "10Gi"),
		volume("small", "local", "20Gi", "a1"), volume("large", "local", "100Gi", "b1"))
	c := world([]*v1.Node{inZone(node("a1", 1000, 10), "a"), inZone(node("b1", 1000, 10), "b")})
	scores := func(p *v1.Pod) map[string]int64 {
		q, verdicts := volumeVerdicts(t, env, c, p)
		out := map[string]int64{}
		for n, v := range verdicts {
			if v != "" {
				t.Fatalf("%s: %s", n, v)
			}
			out[n] = q.volumes.score(c.nodes[n])
		}
		return out
	}
	// Provisioning: 10 of 100 Gi is 10 % used (90), 10 of 40 Gi 25 % (75).
	if got := scores(withClaims(pod("p", 0, 100), "data")); got["a1"] != 90 || got["b1"] != 75 {
		t.Errorf("provisioning: %v", got)
	}
	// Existing volumes: 10 of 20 Gi (50) against 10 of 100 Gi (90).
	if got := scores(withClaims(pod("q", 0, 100), "pinned")); got["a1"] != 50 || got["b1"] != 90 {
		t.Errorf("static: %v", got)
	}
	if got := capacityScore(nil, nil, nil); got != 0 {
		t.Errorf("no claims: %d", got)
	}
}

// resized is an assigned pod whose spec asks for specCPU while the kubelet
// has allocated and actuated statusCPU.
func resized(name string, specCPU, statusCPU int64, opts ...podOpt) *v1.Pod {
	p := pod(name, 0, specCPU, opts...)
	q := *resource.NewMilliQuantity(statusCPU, resource.DecimalSI)
	p.Status.ContainerStatuses = []v1.ContainerStatus{{Name: "c", AllocatedResources: v1.ResourceList{v1.ResourceCPU: q},
		Resources: &v1.ResourceRequirements{Requests: v1.ResourceList{v1.ResourceCPU: q}}}}
	return p
}

// Assigned pods count the larger of their spec and what the kubelet
// allocated or actuated, as kube-scheduler 1.37's NodeInfo.
func TestResizeAccounting(t *testing.T) {
	for _, tc := range []struct {
		name string
		pod  *v1.Pod
		want int64
	}{
		{"resize up pending", resized("up", 800, 500, onNode("n")), 800},
		{"resize down pending", resized("down", 300, 700, onNode("n")), 700},
		{"resize up infeasible", func() *v1.Pod {
			p := resized("inf", 900, 400, onNode("n"))
			p.Status.Conditions = []v1.PodCondition{{Type: v1.PodResizePending, Status: v1.ConditionTrue, Reason: v1.PodReasonInfeasible}}
			return p
		}(), 400},
	} {
		c := world([]*v1.Node{node("n", 1000, 10)}, tc.pod)
		n := c.nodes["n"]
		if n.requested.milliCPU != tc.want || n.nonZero.milliCPU != tc.want {
			t.Errorf("%s: requested %dm, nonZero %dm, want %dm", tc.name, n.requested.milliCPU, n.nonZero.milliCPU, tc.want)
		}
	}
	// Pod-level requests: containers without a memory request get no
	// default when the pod level sets none either and a container sets it;
	// the pod being scheduled still gets one per container.
	p := pod("pl", 0, 0, onNode("n"))
	p.Spec.Resources = &v1.ResourceRequirements{Requests: v1.ResourceList{v1.ResourceCPU: resource.MustParse("500m")}}
	p.Spec.Containers = append(p.Spec.Containers, v1.Container{Name: "d",
		Resources: v1.ResourceRequirements{Requests: v1.ResourceList{v1.ResourceMemory: resource.MustParse("1Gi")}}})
	if got := newPodInfo(p).nonZero; got.milliCPU != 500 || got.memory != 1<<30 {
		t.Errorf("pod-level pod on a node: %+v", got)
	}
	if got := incomingNonZero(p); got.memory != 1<<30+200<<20 {
		t.Errorf("pod-level pod being scheduled: %+v", got)
	}
}

// An assigned pod whose allocation shrinks wakes the pods that lack room
// for what it freed; a status update that frees nothing wakes nobody.
func TestResizeDownWakesResourceBound(t *testing.T) {
	s := newTestScheduler()
	s.spread = &spreadEnv{}
	s.cache.setNode(node("node1", 1000, 10))
	big := resized("big", 800, 800, onNode("node1"))
	s.onPod(nil, big)
	park := func(name string, cpu int64, resourceBound bool) {
		s.queue.Add(pod(name, 100, cpu))
		p, cycle := pop(t, s.queue)
		p.resourceBound = resourceBound
		s.queue.Requeue(p, cycle, false)
	}
	park("needs-cpu", 500, true)
	park("needs-memory", 0, true)
	park("not-for-room", 500, false)
	parked := func(name string) bool {
		s.queue.mu.Lock()
		defer s.queue.mu.Unlock()
		_, ok := s.queue.parked[types.UID(name)]
		return ok
	}
	same := big.DeepCopy()
	same.Status.Conditions = []v1.PodCondition{{Type: v1.PodReady, Status: v1.ConditionTrue}}
	s.onPod(big, same)
	if !parked("needs-cpu") {
		t.Fatal("a status update that frees nothing woke needs-cpu")
	}
	shrunkPod := resized("big", 300, 300, onNode("node1"))
	s.onPod(same, shrunkPod)
	if got := s.cache.nodes["node1"].requested.milliCPU; got != 300 {
		t.Errorf("node1 counts %dm after the resize, want 300m", got)
	}
	for name, want := range map[string]bool{"needs-cpu": false, "needs-memory": true, "not-for-room": true} {
		if got := parked(name); got != want {
			t.Errorf("%s parked=%v, want %v", name, got, want)
		}
	}
}

// kube-scheduler filters a node with nominated pods of at least the pod's
// priority twice, with and without them: a pod whose required affinity only
// a nominated pod satisfies does not go to that node.
func TestNominatedPodsTwoPassFilter(t *testing.T) {
	c := world(nodes(2, 1000, 10))
	c.nominate(newPodInfo(pod("db", 100, 100, labelled("app", "db"))), "node1")
	p := pod("p", 10, 100, affinityTo(term("kubernetes.io/hostname", sel("app", "db"))))
	q := affinityQuery(c, p, nil)
	if st := filter(q, c.withNominated(q.podInfo, c.nodes["node1"])); !st.ok() {
		t.Fatalf("with the nominated pod counted, node1 should fit: %+v", st)
	}
	for n, st := range map[string]status{"node1": c.filterWithNominated(q, c.nodes["node1"]), "node2": c.filterWithNominated(q, c.nodes["node2"])} {
		if st.ok() || st.reasons[0] != reasonPodAffinity {
			t.Errorf("%s: %+v, want %q", n, st, reasonPodAffinity)
		}
	}
	// A nominated pod of lower priority is not counted: one pass.
	low := world(nodes(1, 1000, 10))
	low.nominate(newPodInfo(pod("db", 1, 100, labelled("app", "db"))), "node1")
	if st := low.filterWithNominated(affinityQuery(low, p, nil), low.nodes["node1"]); st.ok() {
		t.Errorf("lower-priority nominated pod satisfied the affinity: %+v", st)
	}
	// Resources still count the nominated pod (first pass).
	room := world(nodes(1, 1000, 10))
	room.nominate(newPodInfo(pod("big", 100, 800)), "node1")
	if st := room.filterWithNominated(query(pod("p", 10, 300)), room.nodes["node1"]); st.ok() {
		t.Error("the nominated pod's room was given away")
	}
}

// namingAffinity is a required node affinity of one term per name list,
// each naming nodes by matchFields metadata.name In, as the DaemonSet
// controller writes it; extra requirements join the first term.
func namingAffinity(p *v1.Pod, extra []v1.NodeSelectorRequirement, names ...[]string) *v1.Pod {
	var terms []v1.NodeSelectorTerm
	for _, ns := range names {
		terms = append(terms, v1.NodeSelectorTerm{MatchFields: []v1.NodeSelectorRequirement{{Key: metav1.ObjectNameField, Operator: v1.NodeSelectorOpIn, Values: ns}}})
	}
	terms[0].MatchExpressions = extra
	p.Spec.Affinity = &v1.Affinity{NodeAffinity: &v1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &v1.NodeSelector{NodeSelectorTerms: terms}}}
	return p
}

// A pod whose required node affinity names its nodes by matchFields
// metadata.name (every DaemonSet pod) gets kube-scheduler 1.37's message:
// the nodes left out before filtering (NodeAffinity's PreFilter result)
// are counted as "node(s) didn't satisfy plugin(s) [NodeAffinity]", the
// named nodes by the filters that reject them (NodeAffinity's own "didn't
// match Pod's node affinity/selector" when the term's other requirements
// fail there), terms naming no node in common are a PreFilter rejection
// ("pod affinity terms conflict"); none of these can be helped by
// preemption. The scheduling cycle (findNode) and explain agree.
func TestNamedNodesMessages(t *testing.T) {
	ns := []*v1.Node{node("n1", 1000, 10), node("n2", 1000, 10), node("n3", 1000, 10)}
	ns[1].Labels["pool"] = "gpu"
	poolGPU := []v1.NodeSelectorRequirement{{Key: "pool", Operator: v1.NodeSelectorOpIn, Values: []string{"gpu"}}}
	for _, tc := range []struct {
		name string
		pod  *v1.Pod
		want string // "" : it fits on fits
		fits string
	}{
		{"fits on the named node", namingAffinity(pod("ds", 0, 500), nil, []string{"n3"}), "", "n3"},
		{"too big for the named node", namingAffinity(pod("ds", 0, 2000), nil, []string{"n1"}),
			"0/3 nodes are available: 1 Insufficient cpu, 2 node(s) didn't satisfy plugin(s) [NodeAffinity].", ""},
		{"the named node lacks the term's label", namingAffinity(pod("ds", 0, 500), poolGPU, []string{"n1"}),
			"0/3 nodes are available: 1 node(s) didn't match Pod's node affinity/selector, 2 node(s) didn't satisfy plugin(s) [NodeAffinity].", ""},
		{"two terms, one fits", namingAffinity(pod("ds", 0, 500), poolGPU, []string{"n1"}, []string{"n2"}), "", "n2"},
		{"the named node is gone", namingAffinity(pod("ds", 0, 500), nil, []string{"n9"}),
			"0/3 nodes are available: 3 node(s) didn't satisfy plugin(s) [NodeAffinity].", ""},
		{"no name in common", func() *v1.Pod {
			p := namingAffinity(pod("ds", 0, 500), nil, []string{"n1"})
			term := &p.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms[0]
			term.MatchFields = append(term.MatchFields, v1.NodeSelectorRequirement{Key: metav1.ObjectNameField, Operator: v1.NodeSelectorOpIn, Values: []string{"n2"}})
			return p
		}(), "0/3 nodes are available: pod affinity terms conflict.", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			snap := Snapshot{}
			for _, n := range ns {
				snap.Nodes = append(snap.Nodes, *n)
			}
			r, err := Explain(context.Background(), tc.pod, snap)
			if err != nil {
				t.Fatal(err)
			}
			// Explain adds preemption's dry run, as the PodScheduled
			// message does: no node where it could help.
			want := tc.want
			if want != "" {
				want += " preemption: 0/3 nodes are available: 3 Preemption is not helpful for scheduling."
			}
			if r.Message != want {
				t.Errorf("explain: %q, want %q", r.Message, want)
			}
			for _, nf := range r.Nodes {
				if nf.Fits != (nf.Node == tc.fits) || nf.PreemptionMayHelp {
					t.Errorf("explain on %s: %+v", nf.Node, nf)
				}
			}
			if query(tc.pod).prefilterNamed() != "" {
				return // a PreFilter rejection: the cycle never reaches findNode
			}
			s := &Scheduler{cfg: DefaultConfig(), cache: world(ns), rand: rand.New(rand.NewSource(1))}
			s.cache.mu.RLock()
			got, statuses, n := s.findNode(context.Background(), query(tc.pod))
			s.cache.mu.RUnlock()
			if got != tc.fits {
				t.Errorf("findNode chose %q, want %q", got, tc.fits)
			}
			if tc.want != "" {
				if msg := fitError(n, statuses, ""); msg != tc.want {
					t.Errorf("findNode: %q, want %q", msg, tc.want)
				}
				for name, st := range statuses {
					if st.code != unresolvable {
						t.Errorf("%s: %+v, want unresolvable", name, st)
					}
				}
			}
		})
	}
}
