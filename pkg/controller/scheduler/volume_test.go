package scheduler

import (
	"context"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	volumehelpers "k8s.io/component-helpers/storage/volume"
	"k8s.io/utils/ptr"
)

// storage is a volume environment over informer stores filled by hand.
func storage(t *testing.T, objs ...any) *volumeEnv {
	t.Helper()
	f := informers.NewSharedInformerFactory(fake.NewClientset(), 0)
	core, st := f.Core().V1(), f.Storage().V1()
	for _, o := range objs {
		var err error
		switch o := o.(type) {
		case *v1.PersistentVolumeClaim:
			err = core.PersistentVolumeClaims().Informer().GetIndexer().Add(o)
		case *v1.PersistentVolume:
			err = core.PersistentVolumes().Informer().GetIndexer().Add(o)
		case *storagev1.StorageClass:
			err = st.StorageClasses().Informer().GetIndexer().Add(o)
		case *storagev1.CSINode:
			err = st.CSINodes().Informer().GetIndexer().Add(o)
		case *storagev1.CSIDriver:
			err = st.CSIDrivers().Informer().GetIndexer().Add(o)
		case *storagev1.CSIStorageCapacity:
			err = st.CSIStorageCapacities().Informer().GetIndexer().Add(o)
		default:
			t.Fatalf("unexpected %T", o)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	return &volumeEnv{pvcs: core.PersistentVolumeClaims().Lister(), pvs: core.PersistentVolumes().Lister(),
		classes: st.StorageClasses().Lister(), csiNodes: st.CSINodes().Lister(), drivers: st.CSIDrivers().Lister(),
		capacities: st.CSIStorageCapacities().Lister(), attachments: st.VolumeAttachments().Lister(),
		assumedPVs: map[string]*v1.PersistentVolume{}, assumedPVCs: map[string]*v1.PersistentVolumeClaim{}}
}

func class(name string, mode storagev1.VolumeBindingMode, provisioner string, zones ...string) *storagev1.StorageClass {
	sc := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Provisioner: provisioner, VolumeBindingMode: &mode}
	if len(zones) > 0 {
		sc.AllowedTopologies = []v1.TopologySelectorTerm{{MatchLabelExpressions: []v1.TopologySelectorLabelRequirement{{Key: v1.LabelTopologyZone, Values: zones}}}}
	}
	return sc
}

func claim(name, class, size string, modes ...v1.PersistentVolumeAccessMode) *v1.PersistentVolumeClaim {
	if len(modes) == 0 {
		modes = []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce}
	}
	return &v1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID("uid-" + name), ResourceVersion: "1"},
		Spec: v1.PersistentVolumeClaimSpec{StorageClassName: &class, AccessModes: modes,
			Resources: v1.VolumeResourceRequirements{Requests: v1.ResourceList{v1.ResourceStorage: resource.MustParse(size)}}}}
}

// boundTo marks a claim bound to a volume, as the PV controller does.
func boundTo(c *v1.PersistentVolumeClaim, pv string) *v1.PersistentVolumeClaim {
	c.Spec.VolumeName = pv
	c.Annotations = map[string]string{volumehelpers.AnnBindCompleted: "yes"}
	c.Status.Phase = v1.ClaimBound
	return c
}

func volume(name, class, size string, onNode string) *v1.PersistentVolume {
	pv := &v1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: name, ResourceVersion: "1"},
		Spec: v1.PersistentVolumeSpec{StorageClassName: class, AccessModes: []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce, v1.ReadWriteOncePod},
			Capacity: v1.ResourceList{v1.ResourceStorage: resource.MustParse(size)}},
		Status: v1.PersistentVolumeStatus{Phase: v1.VolumeAvailable}}
	if onNode != "" {
		pv.Spec.NodeAffinity = &v1.VolumeNodeAffinity{Required: &v1.NodeSelector{NodeSelectorTerms: []v1.NodeSelectorTerm{{
			MatchExpressions: []v1.NodeSelectorRequirement{{Key: "kubernetes.io/hostname", Operator: v1.NodeSelectorOpIn, Values: []string{onNode}}}}}}}
	}
	return pv
}

func csiVolume(name, driver string) *v1.PersistentVolume {
	pv := volume(name, "", "1Gi", "")
	pv.Spec.CSI = &v1.CSIPersistentVolumeSource{Driver: driver, VolumeHandle: "handle-" + name}
	pv.Status.Phase = v1.VolumeBound
	return pv
}

func withClaims(p *v1.Pod, claims ...string) *v1.Pod {
	for _, c := range claims {
		p.Spec.Volumes = append(p.Spec.Volumes, v1.Volume{Name: c, VolumeSource: v1.VolumeSource{
			PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: c}}})
	}
	return p
}

func inZone(n *v1.Node, zone string) *v1.Node {
	n.Labels[v1.LabelTopologyZone] = zone
	return n
}

// volumeVerdicts filters p on every node of c with the volume state.
func volumeVerdicts(t *testing.T, env *volumeEnv, c *cache, p *v1.Pod) (*podQuery, map[string]string) {
	t.Helper()
	q := query(p)
	st, msg := env.prefilter(p, c)
	if msg != "" {
		t.Fatalf("prefilter: %s", msg)
	}
	q.volumes = st
	out := map[string]string{}
	for name, n := range c.nodes {
		out[name] = strings.Join(filter(q, n).reasons, "; ")
	}
	return q, out
}

func wantVerdicts(t *testing.T, got, want map[string]string) {
	t.Helper()
	for n, w := range want {
		if got[n] != w {
			t.Errorf("%s: got %q, want %q", n, got[n], w)
		}
	}
}

const wffc, immediate = storagev1.VolumeBindingWaitForFirstConsumer, storagev1.VolumeBindingImmediate

func TestVolumePreFilterMessages(t *testing.T) {
	c := world(nodes(2, 1000, 10))
	lost := claim("lost", "fast", "1Gi")
	lost.Spec.VolumeName, lost.Status.Phase = "gone", v1.ClaimLost
	deleting := claim("deleting", "fast", "1Gi")
	deleting.DeletionTimestamp = &metav1.Time{Time: epoch}
	foreign := claim("p-scratch", "fast", "1Gi")
	prebound := claim("prebound", "local", "1Gi")
	prebound.Spec.VolumeName = "pv1"
	boundMissing := boundTo(claim("orphan", "fast", "1Gi"), "nowhere")
	env := storage(t, class("fast", immediate, "example.com/csi"), class("local", wffc, volumehelpers.NotSupportedProvisioner),
		claim("unbound", "fast", "1Gi"), claim("classless", "missing-class", "1Gi"), lost, deleting, foreign, prebound, boundMissing)
	ephemeralPod := pod("p", 0, 100)
	ephemeralPod.Spec.Volumes = []v1.Volume{{Name: "scratch", VolumeSource: v1.VolumeSource{Ephemeral: &v1.EphemeralVolumeSource{}}}}
	missingEphemeral := pod("q", 0, 100)
	missingEphemeral.Spec.Volumes = []v1.Volume{{Name: "scratch", VolumeSource: v1.VolumeSource{Ephemeral: &v1.EphemeralVolumeSource{}}}}
	for _, tc := range []struct {
		name string
		pod  *v1.Pod
		want string
	}{
		{"missing claim", withClaims(pod("p", 0, 100), "nope"), `persistentvolumeclaim "nope" not found`},
		{"unbound claim of an Immediate class", withClaims(pod("p", 0, 100), "unbound"), msgUnboundImmediate},
		{"unbound claim of a missing class counts as Immediate", withClaims(pod("p", 0, 100), "classless"), msgUnboundImmediate},
		{"pre-bound claim waits for the PV controller", withClaims(pod("p", 0, 100), "prebound"), msgUnboundImmediate},
		{"lost claim", withClaims(pod("p", 0, 100), "lost"), `persistentvolumeclaim "lost" bound to non-existent persistentvolume "gone"`},
		{"claim being deleted", withClaims(pod("p", 0, 100), "deleting"), `persistentvolumeclaim "deleting" is being deleted`},
		{"ephemeral claim of another owner", ephemeralPod, "PVC default/p-scratch was not created for pod default/p (pod is not owner)"},
		{"ephemeral claim not created yet", missingEphemeral, `waiting for ephemeral volume controller to create the persistentvolumeclaim "q-scratch"`},
		{"bound claim whose volume is missing (VolumeZone)", withClaims(pod("p", 0, 100), "orphan"), `persistentvolume "nowhere" not found`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, got := env.prefilter(tc.pod, c); got != tc.want {
				t.Errorf("got  %q\nwant %q", got, tc.want)
			}
		})
	}
	if st, msg := env.prefilter(pod("plain", 0, 100), c); st != nil || msg != "" {
		t.Errorf("a pod without claims has volume state %v, %q", st, msg)
	}
}

func TestVolumeBoundClaimNodeAffinityAndZone(t *testing.T) {
	ns := nodes(3, 1000, 10)
	inZone(ns[0], "a")
	inZone(ns[1], "b")
	delete(ns[2].Labels, v1.LabelTopologyZone) // no zone labels: a single-zone cluster
	c := world(ns)
	local := volume("local", "fast", "1Gi", "node1")
	inZoneB := volume("zonal", "fast", "1Gi", "")
	inZoneB.Labels = map[string]string{v1.LabelFailureDomainBetaZone: "b__c"}
	env := storage(t, class("fast", immediate, "x"), local, inZoneB,
		boundTo(claim("l", "fast", "1Gi"), "local"), boundTo(claim("z", "fast", "1Gi"), "zonal"))

	_, got := volumeVerdicts(t, env, c, withClaims(pod("p", 0, 100), "l"))
	wantVerdicts(t, got, map[string]string{"node1": "", "node2": reasonVolumeNodeAff, "node3": reasonVolumeNodeAff})
	// The beta label on the volume is matched against the GA label of the node.
	_, got = volumeVerdicts(t, env, c, withClaims(pod("p", 0, 100), "z"))
	wantVerdicts(t, got, map[string]string{"node1": reasonVolumeZone, "node2": "", "node3": ""})
}

func TestVolumeWaitForFirstConsumerMatchesAvailableVolumes(t *testing.T) {
	c := world(nodes(3, 1000, 10))
	small, big := volume("small", "local", "1Gi", "node1"), volume("big", "local", "10Gi", "node1")
	taken := volume("taken", "local", "10Gi", "node2")
	taken.Spec.ClaimRef = &v1.ObjectReference{Namespace: "default", Name: "someone-else"}
	env := storage(t, class("local", wffc, volumehelpers.NotSupportedProvisioner), small, big, taken,
		claim("a", "local", "500Mi"), claim("b", "local", "500Mi"), claim("c", "local", "500Mi"))

	q, got := volumeVerdicts(t, env, c, withClaims(pod("p", 0, 100), "a"))
	wantVerdicts(t, got, map[string]string{"node1": "", "node2": reasonBindConflict, "node3": reasonBindConflict})
	// The smallest volume that fits is chosen, bound as the PV controller
	// expects, and assumed for the next cycles.
	b, err := q.volumes.reserve(c.nodes["node1"].node)
	if err != nil || len(b.static) != 1 || len(b.provision) != 0 {
		t.Fatalf("reserve: %+v, %v", b, err)
	}
	pv := b.static[0].pv
	if ref := pv.Spec.ClaimRef; pv.Name != "small" || ref == nil || ref.Name != "a" || ref.UID != "uid-a" || ref.Kind != "PersistentVolumeClaim" ||
		pv.Annotations[volumehelpers.AnnBoundByController] != "yes" {
		t.Errorf("binding: %s claimRef %+v annotations %v", pv.Name, pv.Spec.ClaimRef, pv.Annotations)
	}
	if small.Spec.ClaimRef != nil {
		t.Error("the informer's volume was modified")
	}
	// b gets the big volume; then nothing is left for c.
	q, got = volumeVerdicts(t, env, c, withClaims(pod("p2", 0, 100), "b"))
	wantVerdicts(t, got, map[string]string{"node1": ""})
	if b2, err := q.volumes.reserve(c.nodes["node1"].node); err != nil || b2.static[0].pv.Name != "big" {
		t.Fatalf("second reserve: %+v, %v", b2, err)
	}
	_, got = volumeVerdicts(t, env, c, withClaims(pod("p3", 0, 100), "c"))
	wantVerdicts(t, got, map[string]string{"node1": reasonBindConflict})
	// A failed binding gives the volume back.
	env.forgetAssumed(b)
	_, got = volumeVerdicts(t, env, c, withClaims(pod("p3", 0, 100), "c"))
	wantVerdicts(t, got, map[string]string{"node1": ""})
}

func TestVolumeWaitForFirstConsumerProvisioning(t *testing.T) {
	ns := nodes(2, 1000, 10)
	inZone(ns[0], "a")
	inZone(ns[1], "b")
	c := world(ns)
	selected := claim("selected", "anywhere", "1Gi")
	selected.Annotations = map[string]string{volumehelpers.AnnSelectedNode: "node2"}
	env := storage(t, class("zonal", wffc, "example.com/csi", "a"), class("anywhere", wffc, "example.com/csi"),
		claim("z", "zonal", "1Gi"), claim("any", "anywhere", "1Gi"), selected)

	q, got := volumeVerdicts(t, env, c, withClaims(pod("p", 0, 100), "z"))
	wantVerdicts(t, got, map[string]string{"node1": "", "node2": reasonBindConflict})
	b, err := q.volumes.reserve(c.nodes["node1"].node)
	if err != nil || len(b.provision) != 1 || b.provision[0].Annotations[volumehelpers.AnnSelectedNode] != "node1" {
		t.Fatalf("reserve: %+v, %v", b, err)
	}
	_, got = volumeVerdicts(t, env, c, withClaims(pod("p", 0, 100), "any"))
	wantVerdicts(t, got, map[string]string{"node1": "", "node2": ""})
	// A claim whose node was selected already goes there only.
	_, got = volumeVerdicts(t, env, c, withClaims(pod("p", 0, 100), "selected"))
	wantVerdicts(t, got, map[string]string{"node1": reasonBindConflict, "node2": ""})
}

func TestVolumeReadWriteOncePodConflict(t *testing.T) {
	holder := withClaims(pod("holder", 0, 100, onNode("node2")), "solo")
	c := world(nodes(2, 1000, 10), holder)
	env := storage(t, class("fast", immediate, "x"), volume("pv", "fast", "1Gi", ""),
		boundTo(claim("solo", "fast", "1Gi", v1.ReadWriteOncePod), "pv"))

	q, got := volumeVerdicts(t, env, c, withClaims(pod("p", 10, 100), "solo"))
	wantVerdicts(t, got, map[string]string{"node1": reasonRWOPConflict, "node2": reasonRWOPConflict})
	if filter(q, c.nodes["node1"]).code != unschedulable {
		t.Error("a ReadWriteOncePod conflict should leave preemption a chance")
	}
	// Preemption removes the holder from node2: the pod fits there.
	n := c.nodes["node2"].clone()
	n.removePod(holder.UID)
	if st := filter(q, n); !st.ok() {
		t.Errorf("without the holder: %v", st.reasons)
	}
	pr := newTestPreemptor(c)
	victims, _, st := pr.selectVictims(q, c.nodes["node2"].clone())
	if !st.ok() || len(victims) != 1 || victims[0].pod.Name != "holder" {
		t.Errorf("victims %v, status %v", names(victims), st.reasons)
	}
}

func TestVolumeCSILimits(t *testing.T) {
	c := world(nodes(2, 1000, 10), withClaims(pod("old", 0, 100, onNode("node1")), "used"))
	limit := &storagev1.CSINode{ObjectMeta: metav1.ObjectMeta{Name: "node1"},
		Spec: storagev1.CSINodeSpec{Drivers: []storagev1.CSINodeDriver{{Name: "d", NodeID: "n1", Allocatable: &storagev1.VolumeNodeResources{Count: ptr.To[int32](1)}}}}}
	env := storage(t, limit, class("fast", immediate, "d"), csiVolume("pv-used", "d"), csiVolume("pv-new", "d"),
		boundTo(claim("used", "fast", "1Gi"), "pv-used"), boundTo(claim("new", "fast", "1Gi"), "pv-new"))

	q, got := volumeVerdicts(t, env, c, withClaims(pod("p", 10, 100), "new"))
	wantVerdicts(t, got, map[string]string{"node1": reasonMaxVolumeCount, "node2": ""})
	if filter(q, c.nodes["node1"]).code != unschedulable {
		t.Error("a full node should leave preemption a chance")
	}
	// The volume already attached is not counted twice.
	_, got = volumeVerdicts(t, env, c, withClaims(pod("p", 10, 100), "used"))
	wantVerdicts(t, got, map[string]string{"node1": "", "node2": ""})
}

// PreBind's check: done once the PV controller has bound every claim; an
// error when the binding was undone or the pod went away.
func TestVolumesBoundCheck(t *testing.T) {
	n := node("node1", 1000, 10)
	p := withClaims(pod("p", 0, 100), "a", "b")
	written := volume("pv-a", "local", "1Gi", "node1")
	written.ResourceVersion = "5"
	written.Spec.ClaimRef = &v1.ObjectReference{Namespace: "default", Name: "a", UID: "uid-a"}
	selected := claim("b", "topo", "1Gi")
	selected.ResourceVersion = "7"
	selected.Annotations = map[string]string{volumehelpers.AnnSelectedNode: "node1"}
	static := []staticBinding{{pv: written, pvc: claim("a", "local", "1Gi")}}
	provision := []*v1.PersistentVolumeClaim{selected}

	check := func(objs ...any) (bool, error) {
		s := &Scheduler{volumes: storage(t, objs...), cache: newCache()}
		s.cache.assume(newPodInfo(p), "node1")
		return s.volumesBound(p, n, static, provision)
	}
	stale := volume("pv-a", "local", "1Gi", "node1") // the informer has not seen the write yet
	stale.ResourceVersion = "4"
	boundA := boundTo(claim("a", "local", "1Gi"), "pv-a")
	provisioned := boundTo(selected.DeepCopy(), "pv-b")
	provisioned.Annotations[volumehelpers.AnnSelectedNode] = "node1"
	pvB := volume("pv-b", "topo", "1Gi", "node1")
	if done, err := check(stale, boundA, provisioned, pvB); done || err != nil {
		t.Errorf("stale volume: %v, %v", done, err)
	}
	if done, err := check(written, boundA, provisioned, pvB); !done || err != nil {
		t.Errorf("all bound: %v, %v", done, err)
	}
	if done, err := check(written, claim("a", "local", "1Gi"), provisioned, pvB); done || err != nil {
		t.Errorf("claim a not bound yet: %v, %v", done, err)
	}
	reset := written.DeepCopy()
	reset.ResourceVersion, reset.Spec.ClaimRef = "6", nil
	if _, err := check(reset, boundA, provisioned, pvB); err == nil || err.Error() != `ClaimRef got reset for pv "pv-a"` {
		t.Errorf("claimRef reset: %v", err)
	}
	given := provisioned.DeepCopy()
	given.ResourceVersion = "8"
	delete(given.Annotations, volumehelpers.AnnSelectedNode)
	if _, err := check(written, boundA, given, pvB); err == nil || err.Error() != `provisioning failed for PVC "b"` {
		t.Errorf("selected node removed: %v", err)
	}
	s := &Scheduler{volumes: storage(t, written, boundA, provisioned, pvB), cache: newCache()}
	if _, err := s.volumesBound(p, n, static, provision); err != errPodGone {
		t.Errorf("pod gone: %v", err)
	}
}

// Preemption only considers nodes where removing pods can help: a node
// the pod's local volume excludes is no candidate, even with cheaper
// victims there.
func TestVolumePreemptionSkipsVolumeConflicts(t *testing.T) {
	c := world(nodes(2, 1000, 10), pod("cheap", 0, 900, onNode("node2")), pod("dear", 50, 900, onNode("node1")))
	env := storage(t, class("local", wffc, volumehelpers.NotSupportedProvisioner), volume("pv", "local", "1Gi", "node1"),
		boundTo(claim("data", "local", "1Gi"), "pv"))
	p := withClaims(pod("p", 100, 500), "data")
	q := query(p)
	st, msg := env.prefilter(p, c)
	if msg != "" {
		t.Fatal(msg)
	}
	q.volumes = st
	statuses := map[string]status{}
	for name, n := range c.nodes {
		statuses[name] = filter(q, n)
	}
	// node2 fails on cpu first (kube-scheduler's filter order): it is
	// dry-run, and without its pod the volume rules it out.
	out := newTestPreemptor(c).preempt(context.Background(), q, statuses, 2)
	if out.chosen == nil || out.chosen.node != "node1" || names(out.chosen.victims)[0] != "dear" {
		t.Fatalf("preemption chose %+v (%s)", out.chosen, out.msg)
	}
}
