package fakecsi

import (
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	corelisters "k8s.io/client-go/listers/core/v1"
	storagelisters "k8s.io/client-go/listers/storage/v1"
	"k8s.io/client-go/tools/cache"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
)

func TestNames(t *testing.T) {
	if got := Finalizer("fake.csi/x"); got != "external-attacher/fake.csi-x" {
		t.Errorf("Finalizer: %s", got)
	}
	if got := UniqueVolumeName(DefaultDriverName, "pvc-1"); got != "kubernetes.io/csi/fake.csi.nodeshepherd.io^pvc-1" {
		t.Errorf("UniqueVolumeName: %s", got)
	}
}

// TestAttachedElsewhere: a single-node volume attached to another node is
// refused; a ReadWriteMany one, or one whose other attachment is not
// attached yet, is not.
func TestAttachedElsewhere(t *testing.T) {
	vas := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	pvs := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	d, err := New(Config{Client: fake.NewSimpleClientset()})
	if err != nil {
		t.Fatal(err)
	}
	d.vaLister, d.pvLister = storagelisters.NewVolumeAttachmentLister(vas), corelisters.NewPersistentVolumeLister(pvs)
	va := func(name, node string, attached bool) *storagev1.VolumeAttachment {
		return &storagev1.VolumeAttachment{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: storagev1.VolumeAttachmentSpec{Attacher: DefaultDriverName, NodeName: node,
				Source: storagev1.VolumeAttachmentSource{PersistentVolumeName: ptr.To("pv")}},
			Status: storagev1.VolumeAttachmentStatus{Attached: attached}}
	}
	pv := &v1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "pv"}, Spec: v1.PersistentVolumeSpec{AccessModes: []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce}}}
	_ = pvs.Add(pv)
	_ = vas.Add(va("old", "a", false))
	if got := d.attachedElsewhere(va("new", "b", false)); got != "" {
		t.Errorf("other attachment not attached: got %q", got)
	}
	_ = vas.Update(va("old", "a", true))
	if got := d.attachedElsewhere(va("new", "b", false)); got != "a" {
		t.Errorf("ReadWriteOnce attached to a: got %q", got)
	}
	rwx := pv.DeepCopy()
	rwx.Spec.AccessModes = []v1.PersistentVolumeAccessMode{v1.ReadWriteMany}
	_ = pvs.Update(rwx)
	if got := d.attachedElsewhere(va("new", "b", false)); got != "" {
		t.Errorf("ReadWriteMany: got %q", got)
	}
}

// TestPending: an attach that takes a delay is done once the delay has
// passed since it started, not since it was last looked at.
func TestPending(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(0, 0))
	d, _ := New(Config{Client: fake.NewSimpleClientset(), AttachDelay: 3 * time.Second, Clock: clk})
	if got := d.pending("va", 3*time.Second); got != 3*time.Second {
		t.Fatalf("first look: %v", got)
	}
	clk.Step(2 * time.Second)
	if got := d.pending("va", 3*time.Second); got != time.Second {
		t.Fatalf("after 2s: %v", got)
	}
	clk.Step(time.Second)
	if got := d.pending("va", 3*time.Second); got != 0 {
		t.Fatalf("after 3s: %v", got)
	}
	d.forget("va")
	if got := d.pending("va", 0); got != 0 {
		t.Fatalf("no delay: %v", got)
	}
	if _, err := New(Config{Client: fake.NewSimpleClientset(), DetachDelay: -time.Second}); err == nil {
		t.Error("a negative delay was accepted")
	}
}
