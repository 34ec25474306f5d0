package fakenode

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"github.com/nodeshepherd/nodeshepherd/pkg/fakecsi"
)

// AnnotationControllerManagedAttach is the annotation a kubelet registers
// its Node with by default: volumes are attached and detached by the
// attach-detach controller, which only looks after nodes carrying it.
const AnnotationControllerManagedAttach = "volumes.kubernetes.io/controller-managed-attach-detach"

// volumeRetry is how often a pod waiting for its volumes is looked at again
// when no event says anything changed.
const volumeRetry = time.Second

// volumes is the kubelet's volume manager for the fake CSI driver's volumes:
// the listers it decides from and the driver it runs.
type volumes struct {
	driver    string
	pvcLister corelisters.PersistentVolumeClaimLister
	pvLister  corelisters.PersistentVolumeLister
	vaIndexer cache.Indexer
	synced    []cache.InformerSynced
}

const vaByNodeIndex = "byNode"

// startVolumes starts the informers the volume manager reads and the fake
// CSI driver's controller side, for this process's nodes.
func (m *Manager) startVolumes(ctx context.Context, wg *sync.WaitGroup) error {
	if m.cfg.CSIDriver == "" {
		return nil
	}
	d, err := fakecsi.New(fakecsi.Config{Client: m.cfg.Client, DriverName: m.cfg.CSIDriver,
		OwnsNode: func(name string) bool { return m.nodes[name] != nil }, AttachDelay: m.cfg.VolumeAttachDelay,
		DetachDelay: m.cfg.VolumeAttachDelay, Clock: m.cfg.Clock})
	if err != nil {
		return err
	}
	f := informers.NewSharedInformerFactory(m.cfg.Client, 0)
	pvcs := f.Core().V1().PersistentVolumeClaims()
	pvs := f.Core().V1().PersistentVolumes()
	vas := f.Storage().V1().VolumeAttachments().Informer()
	if err := vas.AddIndexers(cache.Indexers{vaByNodeIndex: func(obj any) ([]string, error) {
		return []string{obj.(*storagev1.VolumeAttachment).Spec.NodeName}, nil
	}}); err != nil {
		return err
	}
	// An attachment that changes wakes the pods of its node.
	vaReg, err := vas.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    m.onAttachment,
		UpdateFunc: func(_, obj any) { m.onAttachment(obj) },
	})
	if err != nil {
		return err
	}
	// So does a claim bound or a volume provisioned.
	pvcReg, err := pvcs.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{UpdateFunc: func(_, obj any) { m.onClaim(obj.(*v1.PersistentVolumeClaim)) }})
	if err != nil {
		return err
	}
	m.vols = &volumes{driver: m.cfg.CSIDriver, pvcLister: pvcs.Lister(), pvLister: pvs.Lister(), vaIndexer: vas.GetIndexer(),
		synced: []cache.InformerSynced{vaReg.HasSynced, pvcReg.HasSynced, pvs.Informer().HasSynced}}
	f.Start(ctx.Done())
	wg.Add(1)
	go func() {
		defer wg.Done()
		<-ctx.Done()
		f.Shutdown()
	}()
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := d.Run(ctx); err != nil {
			klog.FromContext(ctx).Error(err, "The fake CSI driver stopped; pods with its volumes will not start")
		}
	}()
	return nil
}

func (m *Manager) onAttachment(obj any) {
	va, ok := obj.(*storagev1.VolumeAttachment)
	if !ok || m.podQ == nil {
		return
	}
	if n := m.nodes[va.Spec.NodeName]; n != nil {
		m.resyncPods(n, false)
	}
}

func (m *Manager) onClaim(pvc *v1.PersistentVolumeClaim) {
	if m.podQ == nil {
		return
	}
	if sel := pvc.Annotations["volume.kubernetes.io/selected-node"]; sel != "" {
		if n := m.nodes[sel]; n != nil {
			m.resyncPods(n, false)
		}
	}
}

// ensureCSINode writes the node's CSINode as a kubelet does once the
// driver's node plugin registered; a CSINode left from a deleted Node of the
// same name is taken over.
func (m *Manager) ensureCSINode(ctx context.Context, node *v1.Node) error {
	if m.cfg.CSIDriver == "" {
		return nil
	}
	want := fakecsi.CSINode(m.cfg.CSIDriver, node)
	csiNodes := m.cfg.Client.StorageV1().CSINodes()
	_, err := csiNodes.Create(ctx, want, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		var cur *storagev1.CSINode
		if cur, err = csiNodes.Get(ctx, node.Name, metav1.GetOptions{}); err == nil &&
			(len(cur.OwnerReferences) != 1 || cur.OwnerReferences[0].UID != node.UID || len(cur.Spec.Drivers) != 1 || cur.Spec.Drivers[0].Name != m.cfg.CSIDriver) {
			want.ResourceVersion = cur.ResourceVersion
			_, err = csiNodes.Update(ctx, want, metav1.UpdateOptions{})
		}
	}
	if err != nil {
		return fmt.Errorf("writing CSINode %s: %w", node.Name, err)
	}
	return nil
}

// podVolume is one volume of the driver a pod uses.
type podVolume struct {
	name v1.UniqueVolumeName
	pv   string
}

// podVolumes lists the driver's volumes a pod uses; waiting says what is
// not known yet (a claim not bound), as a kubelet waits for it.
func (m *Manager) podVolumes(pod *v1.Pod) (vols []podVolume, waiting string) {
	if m.vols == nil {
		return nil, ""
	}
	for _, vol := range pod.Spec.Volumes {
		claim := ""
		switch {
		case vol.PersistentVolumeClaim != nil:
			claim = vol.PersistentVolumeClaim.ClaimName
		case vol.Ephemeral != nil:
			claim = pod.Name + "-" + vol.Name
		default:
			continue
		}
		pvc, err := m.vols.pvcLister.PersistentVolumeClaims(pod.Namespace).Get(claim)
		if err != nil || pvc.Spec.VolumeName == "" {
			return vols, fmt.Sprintf("claim %s not bound", claim)
		}
		pv, err := m.vols.pvLister.Get(pvc.Spec.VolumeName)
		if err != nil {
			return vols, fmt.Sprintf("volume %s of claim %s not found", pvc.Spec.VolumeName, claim)
		}
		if pv.Spec.CSI != nil && pv.Spec.CSI.Driver == m.vols.driver {
			vols = append(vols, podVolume{name: fakecsi.UniqueVolumeName(pv.Spec.CSI.Driver, pv.Spec.CSI.VolumeHandle), pv: pv.Name})
		}
	}
	return vols, ""
}

// volumesReady says whether a pod's volumes are mounted, as far as a fake
// kubelet can tell: each attached to the node (the attach-detach controller
// lists it in node.status.volumesAttached, and its VolumeAttachment says
// attached) and reported in volumesInUse, which a kubelet does before it
// mounts. Otherwise it says what the pod waits for.
func (m *Manager) volumesReady(pod *v1.Pod, n *node) (bool, string) {
	vols, waiting := m.podVolumes(pod)
	if waiting != "" {
		return false, waiting
	}
	if len(vols) == 0 {
		return true, ""
	}
	apiNode, err := m.nodeLister.Get(n.name)
	if err != nil {
		return false, "node not in the cache yet"
	}
	n.mu.Lock()
	inUse := slices.Clone(n.volumesInUse)
	n.mu.Unlock()
	vas, _ := m.vols.vaIndexer.ByIndex(vaByNodeIndex, n.name)
	for _, v := range vols {
		if !slices.ContainsFunc(vas, func(obj any) bool {
			va := obj.(*storagev1.VolumeAttachment)
			return va.Spec.Attacher == m.vols.driver && ptr.Deref(va.Spec.Source.PersistentVolumeName, "") == v.pv &&
				va.Status.Attached && va.DeletionTimestamp == nil
		}) {
			return false, fmt.Sprintf("volume %s not attached to the node (VolumeAttachment)", v.pv)
		}
		if !slices.ContainsFunc(apiNode.Status.VolumesAttached, func(a v1.AttachedVolume) bool { return a.Name == v.name }) {
			return false, fmt.Sprintf("volume %s not in node.status.volumesAttached", v.pv)
		}
		if !slices.Contains(inUse, v.name) {
			m.statusQ.Add(n.name) // report it in use, then mount
			return false, fmt.Sprintf("volume %s not reported in volumesInUse yet", v.pv)
		}
	}
	return true, ""
}

// volumesInUse is what the kubelet reports in node.status.volumesInUse: the
// driver's volumes of every pod on the node whose deletion it has not
// confirmed, sorted.
func (m *Manager) volumesInUse(n *node) []v1.UniqueVolumeName {
	objs, _ := m.podIndexer.ByIndex(byNodeIndex, n.name)
	out := []v1.UniqueVolumeName{}
	for _, obj := range objs {
		pod := obj.(*v1.Pod)
		if pod.Status.Phase == v1.PodSucceeded || pod.Status.Phase == v1.PodFailed {
			continue
		}
		vols, _ := m.podVolumes(pod)
		for _, v := range vols {
			if !slices.Contains(out, v.name) {
				out = append(out, v.name)
			}
		}
	}
	slices.Sort(out)
	return out
}

// attachedChanged says whether the attach-detach controller changed a
// node's volumesAttached, which may let its pods start.
func attachedChanged(old, cur *v1.Node) bool {
	return !slices.Equal(old.Status.VolumesAttached, cur.Status.VolumesAttached)
}
