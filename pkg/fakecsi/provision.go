package fakecsi

import (
	"context"
	"fmt"
	"time"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
)

var everything = labels.Everything()

// syncClaim provisions a volume for a pending claim of one of the driver's
// StorageClasses, once the PV binder asked for it (the storage-provisioner
// annotation) and, with WaitForFirstConsumer, once the scheduler chose a
// node (the selected-node annotation). The PV binder binds the two.
func (d *Driver) syncClaim(ctx context.Context, key string) (time.Duration, error) {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return 0, nil
	}
	pvc, err := d.pvcLister.PersistentVolumeClaims(ns).Get(name)
	if apierrors.IsNotFound(err) {
		return 0, nil
	}
	if err != nil || pvc.Spec.VolumeName != "" || pvc.DeletionTimestamp != nil || pvc.Spec.StorageClassName == nil {
		return 0, err
	}
	if p := pvc.Annotations[annStorageProvisioner]; p != d.cfg.DriverName && pvc.Annotations[annBetaStorageProvisioner] != d.cfg.DriverName {
		return 0, nil
	}
	sc, err := d.scLister.Get(*pvc.Spec.StorageClassName)
	if apierrors.IsNotFound(err) {
		return 0, nil // the binder reports it; a new class brings an update
	}
	if err != nil || sc.Provisioner != d.cfg.DriverName {
		return 0, err
	}
	var zone string
	selected := pvc.Annotations[annSelectedNode]
	if ptr.Deref(sc.VolumeBindingMode, storagev1.VolumeBindingImmediate) == storagev1.VolumeBindingWaitForFirstConsumer {
		if selected == "" {
			return 0, nil // the scheduler annotates it when a pod needs it
		}
		if !d.cfg.OwnsNode(selected) {
			return 0, nil // another fakenodes process's node
		}
		node, err := d.nodeLister.Get(selected)
		if apierrors.IsNotFound(err) {
			return 0, nil // the scheduler chooses again
		}
		if err != nil {
			return 0, err
		}
		zone = node.Labels[ZoneKey]
	}
	pvName := "pvc-" + string(pvc.UID)
	if _, err := d.pvLister.Get(pvName); err == nil {
		return 0, nil
	}
	size, ok := pvc.Spec.Resources.Requests[v1.ResourceStorage]
	if !ok {
		return 0, nil // the API server refuses such claims; nothing to do
	}
	pv := &v1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: pvName, Annotations: map[string]string{annProvisionedBy: d.cfg.DriverName}},
		Spec: v1.PersistentVolumeSpec{
			Capacity:    v1.ResourceList{v1.ResourceStorage: size},
			AccessModes: pvc.Spec.AccessModes,
			ClaimRef: &v1.ObjectReference{Kind: "PersistentVolumeClaim", APIVersion: "v1", Namespace: pvc.Namespace, Name: pvc.Name,
				UID: pvc.UID, ResourceVersion: pvc.ResourceVersion},
			PersistentVolumeReclaimPolicy: ptr.Deref(sc.ReclaimPolicy, v1.PersistentVolumeReclaimDelete),
			StorageClassName:              sc.Name,
			MountOptions:                  sc.MountOptions,
			VolumeMode:                    pvc.Spec.VolumeMode,
			PersistentVolumeSource: v1.PersistentVolumeSource{CSI: &v1.CSIPersistentVolumeSource{
				Driver: d.cfg.DriverName, VolumeHandle: pvName, FSType: "ext4"}},
		},
	}
	if zone != "" {
		pv.Spec.NodeAffinity = &v1.VolumeNodeAffinity{Required: &v1.NodeSelector{NodeSelectorTerms: []v1.NodeSelectorTerm{{
			MatchExpressions: []v1.NodeSelectorRequirement{{Key: ZoneKey, Operator: v1.NodeSelectorOpIn, Values: []string{zone}}}}}}}
	}
	if _, err := d.cfg.Client.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return 0, fmt.Errorf("provisioning %s for claim %s: %w", pvName, key, err)
	}
	klog.FromContext(ctx).V(2).Info("Provisioned", "pv", pvName, "claim", key, "zone", zone)
	return 0, nil
}

// syncVolume deletes a released volume the driver provisioned whose reclaim
// policy is Delete, as external-provisioner does.
func (d *Driver) syncVolume(ctx context.Context, name string) (time.Duration, error) {
	pv, err := d.pvLister.Get(name)
	if apierrors.IsNotFound(err) {
		return 0, nil
	}
	if err != nil || pv.Annotations[annProvisionedBy] != d.cfg.DriverName || pv.DeletionTimestamp != nil ||
		pv.Status.Phase != v1.VolumeReleased || pv.Spec.PersistentVolumeReclaimPolicy != v1.PersistentVolumeReclaimDelete {
		return 0, err
	}
	// Never while attached: the attach-detach controller detaches first.
	all, _ := d.vaLister.List(everything)
	for _, va := range all {
		if ptr.Deref(va.Spec.Source.PersistentVolumeName, "") == name {
			return 5 * time.Second, nil
		}
	}
	err = d.cfg.Client.CoreV1().PersistentVolumes().Delete(ctx, name, metav1.DeleteOptions{Preconditions: metav1.NewUIDPreconditions(string(pv.UID))})
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return 0, nil
	}
	return 0, err
}
