// Package fakecsi is the controller side of a fake CSI driver for fake nodes:
// its CSIDriver (attachRequired) and StorageClass, an attacher that attaches
// and detaches VolumeAttachments as external-attacher does (with its
// finalizer, so that a detach is real), and a provisioner that creates
// PersistentVolumes for the claims of its StorageClasses as
// external-provisioner does (WaitForFirstConsumer honours the selected node;
// the volume is pinned to that node's zone). kube-controller-manager's
// attach-detach and PV binder controllers do the rest, unchanged, so their
// Multi-Attach and max-wait-for-unmount behaviour is the real one.
//
// The node side (CSINode objects, volumesInUse, waiting for the attachment
// before a pod runs) is the fake kubelet's, in pkg/fakenode.
package fakecsi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	storagelisters "k8s.io/client-go/listers/storage/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
)

// Defaults.
const (
	// DefaultDriverName is the fake driver's name.
	DefaultDriverName = "fake.csi.nodeshepherd.io"
	// DefaultStorageClassName is the StorageClass the driver creates.
	DefaultStorageClassName = "fake-csi"
	// ZoneKey is the topology key the driver reports and pins volumes with.
	ZoneKey = v1.LabelTopologyZone
	// MaxVolumesPerNode is the attach limit reported in CSINode.
	MaxVolumesPerNode = 64
)

// Annotations the provisioner reads and writes, as external-provisioner does.
const (
	annStorageProvisioner     = "volume.kubernetes.io/storage-provisioner"
	annBetaStorageProvisioner = "volume.beta.kubernetes.io/storage-provisioner"
	annSelectedNode           = "volume.kubernetes.io/selected-node"
	annProvisionedBy          = "pv.kubernetes.io/provisioned-by"
)

// Finalizer is the finalizer the attacher puts on its VolumeAttachments, as
// external-attacher does: the object stays until the volume is detached.
func Finalizer(driver string) string {
	return "external-attacher/" + strings.ReplaceAll(driver, "/", "-")
}

// UniqueVolumeName is the name under which the attach-detach controller and
// the kubelet know a CSI volume (node.status.volumesAttached and volumesInUse).
func UniqueVolumeName(driver, handle string) v1.UniqueVolumeName {
	return v1.UniqueVolumeName("kubernetes.io/csi/" + driver + "^" + handle)
}

// Config says which driver to run, for which nodes.
type Config struct {
	Client kubernetes.Interface
	// DriverName defaults to DefaultDriverName.
	DriverName string
	// StorageClassName is the StorageClass created for the driver
	// (WaitForFirstConsumer, reclaim Delete); DefaultStorageClassName when empty.
	StorageClassName string
	// OwnsNode says whether the driver serves a node: it attaches only to
	// its nodes and provisions only for claims whose selected node is one of
	// them (or that have none), so that several fakenodes processes can share
	// a cluster. Nil serves every node.
	OwnsNode func(name string) bool
	// AttachDelay and DetachDelay are how long ControllerPublish and
	// ControllerUnpublish take.
	AttachDelay, DetachDelay time.Duration
	Clock                    clock.WithTickerAndDelayedExecution
}

func (c *Config) complete() error {
	if c.Client == nil {
		return errors.New("fake CSI driver: a client is required")
	}
	if c.DriverName == "" {
		c.DriverName = DefaultDriverName
	}
	if c.StorageClassName == "" {
		c.StorageClassName = DefaultStorageClassName
	}
	if c.OwnsNode == nil {
		c.OwnsNode = func(string) bool { return true }
	}
	if c.Clock == nil {
		c.Clock = clock.RealClock{}
	}
	if c.AttachDelay < 0 || c.DetachDelay < 0 {
		return fmt.Errorf("fake CSI driver: attach and detach delays must not be negative, got %v and %v", c.AttachDelay, c.DetachDelay)
	}
	return nil
}

// Driver is a running fake CSI driver's controller side.
type Driver struct {
	cfg Config

	vaLister    storagelisters.VolumeAttachmentLister
	scLister    storagelisters.StorageClassLister
	pvcLister   corelisters.PersistentVolumeClaimLister
	pvLister    corelisters.PersistentVolumeLister
	nodeLister  corelisters.NodeLister
	vaQ, pvcQ   workqueue.TypedRateLimitingInterface[string]
	pvQ         workqueue.TypedRateLimitingInterface[string]
	mu          sync.Mutex
	attachingAt map[string]time.Time // VolumeAttachment name → when its publish started
}

// New checks the configuration.
func New(cfg Config) (*Driver, error) {
	if err := cfg.complete(); err != nil {
		return nil, err
	}
	return &Driver{cfg: cfg, attachingAt: map[string]time.Time{}}, nil
}

// Name is the driver's name.
func (d *Driver) Name() string { return d.cfg.DriverName }

// Run creates the CSIDriver and StorageClass and serves attachments and
// claims until ctx ends.
func (d *Driver) Run(ctx context.Context) error {
	logger := klog.FromContext(ctx).WithName("fakecsi")
	ctx = klog.NewContext(ctx, logger)
	if err := d.ensureObjects(ctx); err != nil {
		return err
	}
	rl := func(name string) workqueue.TypedRateLimitingInterface[string] {
		return workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.NewTypedItemExponentialFailureRateLimiter[string](100*time.Millisecond, 10*time.Second),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: name, Clock: d.cfg.Clock})
	}
	d.vaQ, d.pvcQ, d.pvQ = rl("fakecsi_attach"), rl("fakecsi_provision"), rl("fakecsi_delete")
	defer d.vaQ.ShutDown()
	defer d.pvcQ.ShutDown()
	defer d.pvQ.ShutDown()

	f := informers.NewSharedInformerFactory(d.cfg.Client, 0)
	vas := f.Storage().V1().VolumeAttachments()
	scs := f.Storage().V1().StorageClasses()
	pvcs := f.Core().V1().PersistentVolumeClaims()
	pvs := f.Core().V1().PersistentVolumes()
	nodes := f.Core().V1().Nodes()
	d.vaLister, d.scLister, d.pvcLister, d.pvLister, d.nodeLister = vas.Lister(), scs.Lister(), pvcs.Lister(), pvs.Lister(), nodes.Lister()
	enqueue := func(q workqueue.TypedRateLimitingInterface[string]) cache.ResourceEventHandlerFuncs {
		add := func(obj any) {
			if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
				q.Add(key)
			}
		}
		return cache.ResourceEventHandlerFuncs{AddFunc: add, UpdateFunc: func(_, o any) { add(o) }, DeleteFunc: add}
	}
	_, _ = vas.Informer().AddEventHandler(enqueue(d.vaQ))
	_, _ = pvcs.Informer().AddEventHandler(enqueue(d.pvcQ))
	_, _ = pvs.Informer().AddEventHandler(enqueue(d.pvQ))
	// A VolumeAttachment that was refused (the volume is attached elsewhere)
	// is tried again when the other one goes.
	_, _ = vas.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{DeleteFunc: func(any) {
		for _, va := range d.listVAs() {
			if !va.Status.Attached {
				d.vaQ.Add(va.Name)
			}
		}
	}})
	_ = scs.Informer()
	_ = nodes.Informer()
	f.Start(ctx.Done())
	defer f.Shutdown()
	for typ, ok := range f.WaitForCacheSync(ctx.Done()) {
		if !ok {
			return fmt.Errorf("fake CSI driver: %v informer did not sync: %w", typ, ctx.Err())
		}
	}
	var wg sync.WaitGroup
	for _, w := range []struct {
		q  workqueue.TypedRateLimitingInterface[string]
		fn func(context.Context, string) (time.Duration, error)
	}{{d.vaQ, d.syncAttachment}, {d.pvcQ, d.syncClaim}, {d.pvQ, d.syncVolume}} {
		for range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for process(ctx, w.q, w.fn) {
				}
			}()
		}
	}
	logger.Info("Fake CSI driver running", "driver", d.cfg.DriverName, "storageClass", d.cfg.StorageClassName)
	<-ctx.Done()
	d.vaQ.ShutDown()
	d.pvcQ.ShutDown()
	d.pvQ.ShutDown()
	wg.Wait()
	return nil
}

func process(ctx context.Context, q workqueue.TypedRateLimitingInterface[string], fn func(context.Context, string) (time.Duration, error)) bool {
	key, quit := q.Get()
	if quit {
		return false
	}
	defer q.Done(key)
	after, err := fn(ctx, key)
	switch {
	case err != nil:
		klog.FromContext(ctx).V(2).Info("Fake CSI driver: sync failed, retrying", "key", key, "err", err)
		q.AddRateLimited(key)
	case after > 0:
		q.Forget(key)
		q.AddAfter(key, after)
	default:
		q.Forget(key)
	}
	return true
}

// ensureObjects creates the CSIDriver (attach required, as for a cloud
// disk) and the driver's StorageClass, leaving existing ones alone.
func (d *Driver) ensureObjects(ctx context.Context) error {
	drv := &storagev1.CSIDriver{
		ObjectMeta: metav1.ObjectMeta{Name: d.cfg.DriverName},
		Spec: storagev1.CSIDriverSpec{AttachRequired: ptr.To(true), PodInfoOnMount: ptr.To(false),
			VolumeLifecycleModes: []storagev1.VolumeLifecycleMode{storagev1.VolumeLifecyclePersistent}},
	}
	if _, err := d.cfg.Client.StorageV1().CSIDrivers().Create(ctx, drv, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("fake CSI driver: creating CSIDriver %s: %w", d.cfg.DriverName, err)
	}
	sc := &storagev1.StorageClass{
		ObjectMeta:        metav1.ObjectMeta{Name: d.cfg.StorageClassName},
		Provisioner:       d.cfg.DriverName,
		ReclaimPolicy:     ptr.To(v1.PersistentVolumeReclaimDelete),
		VolumeBindingMode: ptr.To(storagev1.VolumeBindingWaitForFirstConsumer),
	}
	if _, err := d.cfg.Client.StorageV1().StorageClasses().Create(ctx, sc, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("fake CSI driver: creating StorageClass %s: %w", d.cfg.StorageClassName, err)
	}
	return nil
}

// CSINode is the CSINode a kubelet writes once the driver's node plugin has
// registered: the node's ID for the driver, its topology key and attach
// limit, owned by the Node so that it goes with it.
func CSINode(driver string, node *v1.Node) *storagev1.CSINode {
	return &storagev1.CSINode{
		ObjectMeta: metav1.ObjectMeta{Name: node.Name,
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: node.Name, UID: node.UID}}},
		Spec: storagev1.CSINodeSpec{Drivers: []storagev1.CSINodeDriver{{
			Name: driver, NodeID: node.Name, TopologyKeys: []string{ZoneKey},
			Allocatable: &storagev1.VolumeNodeResources{Count: ptr.To[int32](MaxVolumesPerNode)},
		}}},
	}
}

// --- attacher ---------------------------------------------------------------

func (d *Driver) listVAs() []*storagev1.VolumeAttachment {
	all, _ := d.vaLister.List(everything)
	return slices.DeleteFunc(all, func(va *storagev1.VolumeAttachment) bool {
		return va.Spec.Attacher != d.cfg.DriverName || !d.cfg.OwnsNode(va.Spec.NodeName)
	})
}

// syncAttachment attaches or detaches one VolumeAttachment of the driver.
func (d *Driver) syncAttachment(ctx context.Context, name string) (time.Duration, error) {
	va, err := d.vaLister.Get(name)
	if apierrors.IsNotFound(err) {
		d.forget(name)
		return 0, nil
	}
	if err != nil || va.Spec.Attacher != d.cfg.DriverName || !d.cfg.OwnsNode(va.Spec.NodeName) {
		return 0, err
	}
	fin := Finalizer(d.cfg.DriverName)
	vas := d.cfg.Client.StorageV1().VolumeAttachments()
	if va.DeletionTimestamp != nil {
		if !slices.Contains(va.Finalizers, fin) {
			return 0, nil
		}
		if wait := d.pending(name, d.cfg.DetachDelay); wait > 0 {
			return wait, nil
		}
		// ControllerUnpublish done: detached, then the finalizer goes and
		// the object with it.
		if va.Status.Attached {
			c := va.DeepCopy()
			c.Status.Attached, c.Status.AttachmentMetadata, c.Status.DetachError = false, nil, nil
			if _, err := vas.UpdateStatus(ctx, c, metav1.UpdateOptions{}); err != nil {
				return 0, ignoreGone(err)
			}
		}
		d.forget(name)
		return 0, ignoreGone(d.patchFinalizers(ctx, va, slices.DeleteFunc(slices.Clone(va.Finalizers), func(f string) bool { return f == fin })))
	}
	if !slices.Contains(va.Finalizers, fin) {
		// As external-attacher: the finalizer first, so that no attachment
		// can exist without a detach.
		return 0, ignoreGone(d.patchFinalizers(ctx, va, append(slices.Clone(va.Finalizers), fin)))
	}
	if va.Status.Attached {
		return 0, nil
	}
	// A single-node volume attached elsewhere is refused, as a cloud disk
	// API refuses it: the attach-detach controller should never ask.
	if other := d.attachedElsewhere(va); other != "" {
		msg := fmt.Sprintf("volume %s is attached to node %s; it can be attached to one node at a time", ptr.Deref(va.Spec.Source.PersistentVolumeName, ""), other)
		if va.Status.AttachError == nil || va.Status.AttachError.Message != msg {
			c := va.DeepCopy()
			c.Status.AttachError = &storagev1.VolumeError{Time: metav1.NewTime(d.cfg.Clock.Now()), Message: msg}
			if _, err := vas.UpdateStatus(ctx, c, metav1.UpdateOptions{}); err != nil {
				return 0, ignoreGone(err)
			}
		}
		return 5 * time.Second, nil
	}
	if wait := d.pending(name, d.cfg.AttachDelay); wait > 0 {
		return wait, nil
	}
	c := va.DeepCopy()
	c.Status.Attached, c.Status.AttachError = true, nil
	c.Status.AttachmentMetadata = map[string]string{"devicePath": "/dev/fake/" + ptr.Deref(va.Spec.Source.PersistentVolumeName, "inline")}
	if _, err := vas.UpdateStatus(ctx, c, metav1.UpdateOptions{}); err != nil {
		return 0, ignoreGone(err)
	}
	d.forget(name)
	klog.FromContext(ctx).V(2).Info("Attached", "volumeAttachment", name, "node", va.Spec.NodeName)
	return 0, nil
}

// attachedElsewhere names the node a ReadWriteOnce volume is attached to, if
// not va's.
func (d *Driver) attachedElsewhere(va *storagev1.VolumeAttachment) string {
	pvName := ptr.Deref(va.Spec.Source.PersistentVolumeName, "")
	if pvName == "" {
		return ""
	}
	if pv, err := d.pvLister.Get(pvName); err == nil && slices.ContainsFunc(pv.Spec.AccessModes, func(m v1.PersistentVolumeAccessMode) bool {
		return m == v1.ReadWriteMany || m == v1.ReadOnlyMany
	}) {
		return ""
	}
	all, _ := d.vaLister.List(everything)
	for _, o := range all {
		if o.Name != va.Name && o.Spec.Attacher == va.Spec.Attacher && ptr.Deref(o.Spec.Source.PersistentVolumeName, "") == pvName &&
			o.Spec.NodeName != va.Spec.NodeName && o.Status.Attached {
			return o.Spec.NodeName
		}
	}
	return ""
}

// pending starts or continues a publish or unpublish that takes delay and
// returns how long is left.
func (d *Driver) pending(name string, delay time.Duration) time.Duration {
	if delay <= 0 {
		return 0
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	now := d.cfg.Clock.Now()
	start, ok := d.attachingAt[name]
	if !ok {
		d.attachingAt[name] = now
		return delay
	}
	return max(start.Add(delay).Sub(now), 0)
}

func (d *Driver) forget(name string) {
	d.mu.Lock()
	delete(d.attachingAt, name)
	d.mu.Unlock()
}

func (d *Driver) patchFinalizers(ctx context.Context, va *storagev1.VolumeAttachment, fins []string) error {
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"finalizers": fins, "resourceVersion": va.ResourceVersion}})
	_, err := d.cfg.Client.StorageV1().VolumeAttachments().Patch(ctx, va.Name, types.MergePatchType, patch, metav1.PatchOptions{})
	return err
}

func ignoreGone(err error) error {
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil // the informer brings the new state back to the queue
	}
	return err
}
