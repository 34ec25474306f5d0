package fakenode

import (
	"slices"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"

	"github.com/nodeshepherd/nodeshepherd/pkg/fakecsi"
)

// TestVolumesReadyAndInUse walks a pod's volume through what a kubelet
// waits for before it starts the pod: claim bound, attachment attached,
// listed in volumesAttached, reported in volumesInUse. volumesInUse lists
// the driver's volumes of every pod on the node not yet gone, once each,
// sorted; other drivers' volumes and finished pods are left out.
func TestVolumesReadyAndInUse(t *testing.T) {
	m, err := New(Config{Client: fake.NewSimpleClientset(), Nodes: 1, CSIDriver: fakecsi.DefaultDriverName})
	if err != nil {
		t.Fatal(err)
	}
	n := m.nodes[m.names[0]]
	idx := func(indexers cache.Indexers) cache.Indexer {
		return cache.NewIndexer(cache.MetaNamespaceKeyFunc, indexers)
	}
	pods := idx(cache.Indexers{byNodeIndex: func(obj any) ([]string, error) { return []string{obj.(*v1.Pod).Spec.NodeName}, nil }})
	nodes, pvcs, pvs := idx(cache.Indexers{}), idx(cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc}), idx(cache.Indexers{})
	vas := idx(cache.Indexers{vaByNodeIndex: func(obj any) ([]string, error) { return []string{obj.(*storagev1.VolumeAttachment).Spec.NodeName}, nil }})
	m.podIndexer, m.nodeLister = pods, corelisters.NewNodeLister(nodes)
	m.vols = &volumes{driver: fakecsi.DefaultDriverName, pvcLister: corelisters.NewPersistentVolumeClaimLister(pvcs),
		pvLister: corelisters.NewPersistentVolumeLister(pvs), vaIndexer: vas}
	m.statusQ = workqueue.NewTypedDelayingQueue[string]()
	defer m.statusQ.ShutDown()

	pod := func(name string, phase v1.PodPhase, claims ...string) *v1.Pod {
		p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"}, Spec: v1.PodSpec{NodeName: n.name}, Status: v1.PodStatus{Phase: phase}}
		for _, c := range claims {
			p.Spec.Volumes = append(p.Spec.Volumes, v1.Volume{Name: c, VolumeSource: v1.VolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: c}}})
		}
		return p
	}
	claim := func(name, pv string) {
		_ = pvcs.Add(&v1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"}, Spec: v1.PersistentVolumeClaimSpec{VolumeName: pv}})
	}
	volume := func(name, driver string) {
		_ = pvs.Add(&v1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: v1.PersistentVolumeSpec{PersistentVolumeSource: v1.PersistentVolumeSource{CSI: &v1.CSIPersistentVolumeSource{Driver: driver, VolumeHandle: name}}}})
	}
	db := pod("db", v1.PodPending, "data")
	_ = pods.Add(db)
	wantWait := func(want string) {
		t.Helper()
		if ok, got := m.volumesReady(db, n); ok || !strings.Contains(got, want) {
			t.Fatalf("ready %v waiting %q, want waiting for %q", ok, got, want)
		}
	}
	_ = nodes.Add(&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: n.name}})
	wantWait("claim data not bound")
	claim("data", "pv-b")
	volume("pv-b", fakecsi.DefaultDriverName)
	wantWait("not attached")
	_ = vas.Add(&storagev1.VolumeAttachment{ObjectMeta: metav1.ObjectMeta{Name: "va"},
		Spec: storagev1.VolumeAttachmentSpec{Attacher: fakecsi.DefaultDriverName, NodeName: n.name,
			Source: storagev1.VolumeAttachmentSource{PersistentVolumeName: ptr.To("pv-b")}},
		Status: storagev1.VolumeAttachmentStatus{Attached: true}})
	wantWait("volumesAttached")
	nameB := fakecsi.UniqueVolumeName(fakecsi.DefaultDriverName, "pv-b")
	_ = nodes.Update(&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: n.name}, Status: v1.NodeStatus{VolumesAttached: []v1.AttachedVolume{{Name: nameB}}}})
	wantWait("volumesInUse")
	if m.statusQ.Len() != 1 {
		t.Error("a volume to report in use did not ask for a status post")
	}

	// Another pod sharing the volume, one with a volume of another driver,
	// one finished: in use once, sorted.
	claim("data-a", "pv-a")
	volume("pv-a", fakecsi.DefaultDriverName)
	claim("other", "pv-other")
	volume("pv-other", "ebs.csi.aws.com")
	_ = pods.Add(pod("reader", v1.PodRunning, "data", "data-a", "other"))
	claim("old", "pv-old")
	volume("pv-old", fakecsi.DefaultDriverName)
	_ = pods.Add(pod("done", v1.PodSucceeded, "old"))
	inUse := m.volumesInUse(n)
	if want := []v1.UniqueVolumeName{fakecsi.UniqueVolumeName(fakecsi.DefaultDriverName, "pv-a"), nameB}; !slices.Equal(inUse, want) {
		t.Fatalf("volumesInUse %v, want %v", inUse, want)
	}
	n.volumesInUse = inUse // posted
	if ok, waiting := m.volumesReady(db, n); !ok {
		t.Fatalf("all done, still waiting for %q", waiting)
	}
	if ok, _ := m.volumesReady(pod("plain", v1.PodPending), n); !ok {
		t.Error("a pod without volumes waits")
	}
}
