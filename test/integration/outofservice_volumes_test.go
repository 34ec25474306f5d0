package integration

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/nodeshepherd/nodeshepherd/pkg/controller/outofservice"
	"github.com/nodeshepherd/nodeshepherd/pkg/fakecsi"
	"github.com/nodeshepherd/nodeshepherd/pkg/fakenode"
	"github.com/nodeshepherd/nodeshepherd/test/framework"
)

// csiNodes are fast fake nodes in zone-a (three) and zone-b (one) running
// the fake CSI driver.
func csiNodes(client kubernetes.Interface) fakenode.Config {
	cfg := zonedNodes(client, "zone-a=3,zone-b=1", false)
	cfg.CSIDriver = fakecsi.DefaultDriverName
	return cfg
}

// attachments lists the fake driver's VolumeAttachments of a volume.
func attachments(ctx context.Context, client kubernetes.Interface, pv string) ([]storagev1.VolumeAttachment, error) {
	all, err := client.StorageV1().VolumeAttachments().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	return slices.DeleteFunc(all.Items, func(va storagev1.VolumeAttachment) bool {
		return ptr.Deref(va.Spec.Source.PersistentVolumeName, "") != pv
	}), nil
}

// claimVolume is the PV bound to a claim, once bound.
func claimVolume(ctx context.Context, client kubernetes.Interface, claim string) (*v1.PersistentVolume, error) {
	pvc, err := client.CoreV1().PersistentVolumeClaims("default").Get(ctx, claim, metav1.GetOptions{})
	if err != nil || pvc.Spec.VolumeName == "" || pvc.Status.Phase != v1.ClaimBound {
		return nil, err
	}
	return client.CoreV1().PersistentVolumes().Get(ctx, pvc.Spec.VolumeName, metav1.GetOptions{})
}

// runningWithVolume waits until pod runs on a node other than notOn with the
// claim's volume attached there, reported by the attach-detach controller in
// volumesAttached and by the kubelet in volumesInUse; it returns the pod.
func runningWithVolume(t *testing.T, client kubernetes.Interface, pod, claim, notOn string, timeout time.Duration) *v1.Pod {
	t.Helper()
	var got *v1.Pod
	framework.Eventually(t, timeout, pod+" Running with its volume attached", func(ctx context.Context) (bool, string, error) {
		p, err := client.CoreV1().Pods("default").Get(ctx, pod, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, "no pod", nil
		}
		if err != nil {
			return false, "", err
		}
		if p.Status.Phase != v1.PodRunning || p.DeletionTimestamp != nil || p.Spec.NodeName == notOn {
			return false, fmt.Sprintf("pod on %q phase %s deleting %v", p.Spec.NodeName, p.Status.Phase, p.DeletionTimestamp != nil), nil
		}
		pv, err := claimVolume(ctx, client, claim)
		if err != nil || pv == nil {
			return false, fmt.Sprintf("claim not bound (%v)", err), nil
		}
		vas, err := attachments(ctx, client, pv.Name)
		if err != nil {
			return false, "", err
		}
		if !slices.ContainsFunc(vas, func(va storagev1.VolumeAttachment) bool {
			return va.Spec.NodeName == p.Spec.NodeName && va.Status.Attached && slices.Contains(va.Finalizers, fakecsi.Finalizer(fakecsi.DefaultDriverName))
		}) {
			return false, fmt.Sprintf("attachments %v", vaSummary(vas)), nil
		}
		n, err := client.CoreV1().Nodes().Get(ctx, p.Spec.NodeName, metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		name := fakecsi.UniqueVolumeName(fakecsi.DefaultDriverName, pv.Spec.CSI.VolumeHandle)
		if !slices.Contains(n.Status.VolumesInUse, name) || !slices.ContainsFunc(n.Status.VolumesAttached, func(a v1.AttachedVolume) bool { return a.Name == name }) {
			return false, fmt.Sprintf("node %s volumesInUse %v volumesAttached %v", n.Name, n.Status.VolumesInUse, n.Status.VolumesAttached), nil
		}
		got = p
		return true, "", nil
	})
	return got
}

func vaSummary(vas []storagev1.VolumeAttachment) []string {
	var out []string
	for _, va := range vas {
		out = append(out, fmt.Sprintf("%s attached=%v deleting=%v", va.Spec.NodeName, va.Status.Attached, va.DeletionTimestamp != nil))
	}
	return out
}

// never fails the test if cond holds at any check during window: a bounded
// observation that something does not happen.
func never(t *testing.T, window time.Duration, what string, cond func(ctx context.Context) (bool, string, error)) {
	t.Helper()
	var seen string
	testCtx := framework.Context(t)
	// cond gets the test's context: the window's end must not fail a check.
	err := wait.PollUntilContextTimeout(testCtx, 200*time.Millisecond, window, true, func(context.Context) (bool, error) {
		ok, state, err := cond(testCtx)
		seen = state
		return ok, err
	})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("%s within %s (%v): %s", what, window, err, seen)
	}
}

// TestFakeCSIVolumeProvisionedAttachedRunning: a pod with a claim of the fake
// driver's WaitForFirstConsumer class gets a volume provisioned in its node's
// zone, attached to its node by kube-controller-manager's attach-detach
// controller through a VolumeAttachment the fake attacher marks attached,
// and runs only then; deleting the pod detaches the volume (the finalizer
// goes, the VolumeAttachment with it) and the kubelet stops reporting it in use.
func TestFakeCSIVolumeProvisionedAttachedRunning(t *testing.T) {
	cfg, client := lifecycleCluster(t)
	m := framework.StartFakeNodes(t, csiNodes(client))
	framework.StartNodeShepherd(t, cfg, fastLifecycle(100), nil) // lifts the not-ready taints
	ctx := framework.Context(t)
	waitNodesReady(t, client, m.NodeNames()...)

	for _, name := range m.NodeNames() {
		cn, err := client.StorageV1().CSINodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil || len(cn.Spec.Drivers) != 1 || cn.Spec.Drivers[0].Name != fakecsi.DefaultDriverName {
			t.Fatalf("CSINode %s: %v %+v", name, err, cn)
		}
		if n := getNode(t, client, name); n.Annotations[fakenode.AnnotationControllerManagedAttach] != "true" {
			t.Errorf("node %s annotations %v", name, n.Annotations)
		}
	}
	framework.Eventually(t, 30*time.Second, "CSIDriver and StorageClass", func(ctx context.Context) (bool, string, error) {
		d, err := client.StorageV1().CSIDrivers().Get(ctx, fakecsi.DefaultDriverName, metav1.GetOptions{})
		if err != nil {
			return false, err.Error(), nil
		}
		_, err = client.StorageV1().StorageClasses().Get(ctx, fakecsi.DefaultStorageClassName, metav1.GetOptions{})
		return err == nil && ptr.Deref(d.Spec.AttachRequired, false), fmt.Sprint(err), nil
	})

	pvc := &v1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "data", Namespace: "default"},
		Spec: v1.PersistentVolumeClaimSpec{StorageClassName: ptr.To(fakecsi.DefaultStorageClassName),
			AccessModes: []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce},
			Resources:   v1.VolumeResourceRequirements{Requests: v1.ResourceList{v1.ResourceStorage: resource.MustParse("1Gi")}}}}
	if _, err := client.CoreV1().PersistentVolumeClaims("default").Create(ctx, pvc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: "default"},
		Spec: v1.PodSpec{NodeSelector: map[string]string{v1.LabelTopologyZone: "zone-b"},
			Containers: []v1.Container{{Name: "c", Image: "example.com/db"}},
			Volumes:    []v1.Volume{{Name: "data", VolumeSource: v1.VolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: "data"}}}}}}
	framework.Eventually(t, 30*time.Second, "pod created", func(ctx context.Context) (bool, string, error) {
		_, err := client.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{})
		return err == nil, fmt.Sprint(err), nil
	})
	p := runningWithVolume(t, client, "db", "data", "", 90*time.Second)
	pv, err := claimVolume(ctx, client, "data")
	if err != nil || pv == nil {
		t.Fatalf("claim: %v", err)
	}
	if pv.Spec.CSI.Driver != fakecsi.DefaultDriverName || pv.Spec.NodeAffinity == nil ||
		pv.Spec.NodeAffinity.Required.NodeSelectorTerms[0].MatchExpressions[0].Values[0] != "zone-b" {
		t.Errorf("provisioned volume %+v", pv.Spec)
	}
	// Running is only ever reached after the attachment: the pod started no
	// earlier than the VolumeAttachment was created.
	vas, _ := attachments(ctx, client, pv.Name)
	if len(vas) != 1 || p.Status.StartTime == nil || p.Status.StartTime.Before(&vas[0].CreationTimestamp) {
		t.Errorf("pod started %v, attachments %v", p.Status.StartTime, vaSummary(vas))
	}

	if err := client.CoreV1().Pods("default").Delete(ctx, "db", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, 60*time.Second, "volume detached and no longer in use", func(ctx context.Context) (bool, string, error) {
		vas, err := attachments(ctx, client, pv.Name)
		if err != nil {
			return false, "", err
		}
		n, err := client.CoreV1().Nodes().Get(ctx, p.Spec.NodeName, metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		return len(vas) == 0 && len(n.Status.VolumesInUse) == 0 && len(n.Status.VolumesAttached) == 0,
			fmt.Sprintf("attachments %v, inUse %v, attached %v", vaSummary(vas), n.Status.VolumesInUse, n.Status.VolumesAttached), nil
	})
}

// TestOutOfServiceStatefulSetVolumeMoves: the node of a StatefulSet replica
// with a ReadWriteOnce volume is powered off. Without a confirmation its pod
// is evicted but stays Terminating (no kubelet confirms), no replacement
// appears and the volume stays attached to the dead node, which still lists
// it in use. Once a person confirms the death, nodeshepherd's outofservice
// controller taints the node, kube-controller-manager's pod GC force-deletes
// the pod, its attach-detach controller detaches the volume at once, and the
// replica runs again on another node of the zone with its volume attached
// there. Powered on again, the node boots anew, reports no volume in use and
// loses the taint.
func TestOutOfServiceStatefulSetVolumeMoves(t *testing.T) {
	cfg, client := lifecycleCluster(t)
	m := framework.StartFakeNodes(t, csiNodes(client))
	framework.StartNodeShepherd(t, cfg, oosConfig(fastLifecycle(100), 1), withOutOfService)
	waitNodesReady(t, client, m.NodeNames()...)
	ctx := framework.Context(t)

	labels := map[string]string{"app": "db"}
	sts := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: "default"},
		Spec: appsv1.StatefulSetSpec{Replicas: ptr.To[int32](1), ServiceName: "db",
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: v1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: v1.PodSpec{NodeSelector: map[string]string{v1.LabelTopologyZone: "zone-a"}, Tolerations: tolerations(ptr.To[int64](0)),
					Containers: []v1.Container{{Name: "c", Image: "example.com/db",
						VolumeMounts: []v1.VolumeMount{{Name: "data", MountPath: "/data"}}}}}},
			VolumeClaimTemplates: []v1.PersistentVolumeClaim{{ObjectMeta: metav1.ObjectMeta{Name: "data"},
				Spec: v1.PersistentVolumeClaimSpec{StorageClassName: ptr.To(fakecsi.DefaultStorageClassName),
					AccessModes: []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce},
					Resources:   v1.VolumeResourceRequirements{Requests: v1.ResourceList{v1.ResourceStorage: resource.MustParse("1Gi")}}}}}}}
	if _, err := client.AppsV1().StatefulSets("default").Create(ctx, sts, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	first := runningWithVolume(t, client, "db-0", "data-db-0", "", 90*time.Second)
	dead := first.Spec.NodeName
	pv, _ := claimVolume(ctx, client, "data-db-0")
	volName := fakecsi.UniqueVolumeName(fakecsi.DefaultDriverName, pv.Spec.CSI.VolumeHandle)

	deadBoot := getNode(t, client, dead).Status.NodeInfo.BootID
	partition(t, m, fakenode.MachineShutdown, fakenode.Target{Nodes: []string{dead}})
	framework.Eventually(t, 30*time.Second, "dead node not Ready", nodeCondition(client, dead, v1.NodeReady, v1.ConditionUnknown))
	framework.Eventually(t, 30*time.Second, "pod evicted, Terminating", func(ctx context.Context) (bool, string, error) {
		p, err := client.CoreV1().Pods("default").Get(ctx, "db-0", metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		return p.UID == first.UID && p.DeletionTimestamp != nil, fmt.Sprintf("uid %s deleting %v", p.UID, p.DeletionTimestamp), nil
	})

	// Today's cluster: the pod stays Terminating, nothing replaces it, the
	// volume stays attached to the dead node, which still reports it in use.
	never(t, 30*time.Second, "the replica moved without a confirmation", func(ctx context.Context) (bool, string, error) {
		p, err := client.CoreV1().Pods("default").Get(ctx, "db-0", metav1.GetOptions{})
		if err != nil {
			return true, fmt.Sprintf("pod: %v", err), nil
		}
		if p.UID != first.UID {
			return true, "a replacement exists on " + p.Spec.NodeName, nil
		}
		vas, err := attachments(ctx, client, pv.Name)
		if err != nil {
			return false, "", err
		}
		if len(vas) != 1 || vas[0].Spec.NodeName != dead || !vas[0].Status.Attached {
			return true, fmt.Sprintf("attachments %v", vaSummary(vas)), nil
		}
		n, err := client.CoreV1().Nodes().Get(ctx, dead, metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		if !slices.Contains(n.Status.VolumesInUse, volName) {
			return true, fmt.Sprintf("dead node's volumesInUse %v", n.Status.VolumesInUse), nil
		}
		if n.Status.NodeInfo.BootID != deadBoot {
			return true, "boot ID " + n.Status.NodeInfo.BootID + ", was " + deadBoot, nil
		}
		return false, "", nil
	})

	annotateOutOfService(t, client, dead, ptr.To("powered off, checked at the BMC"))
	framework.Eventually(t, 30*time.Second, "out-of-service taint", nodeTainted(client, dead, outofservice.Taint, true))
	moved := runningWithVolume(t, client, "db-0", "data-db-0", dead, 120*time.Second)
	if moved.UID == first.UID {
		t.Fatal("the old pod is reported Running on a new node")
	}
	framework.Eventually(t, 30*time.Second, "no attachment left on the dead node", func(ctx context.Context) (bool, string, error) {
		vas, err := attachments(ctx, client, pv.Name)
		if err != nil {
			return false, "", err
		}
		return !slices.ContainsFunc(vas, func(va storagev1.VolumeAttachment) bool { return va.Spec.NodeName == dead }), fmt.Sprint(vaSummary(vas)), nil
	})
	// The dead node posts nothing: its last report of volumes in use stays.
	if n := getNode(t, client, dead); !slices.Contains(n.Status.VolumesInUse, volName) {
		t.Errorf("the powered-off node's volumesInUse changed: %v", n.Status.VolumesInUse)
	}

	// Powered on again: a new boot, nothing in use any more, the taint taken back.
	partition(t, m, fakenode.MachineStart, fakenode.Target{Nodes: []string{dead}})
	framework.Eventually(t, 60*time.Second, "rebooted node Ready, nothing in use, untainted", func(ctx context.Context) (bool, string, error) {
		n, err := client.CoreV1().Nodes().Get(ctx, dead, metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		tainted := slices.ContainsFunc(n.Spec.Taints, func(t v1.Taint) bool { return t.Key == outofservice.Taint.Key })
		return n.Status.NodeInfo.BootID != deadBoot && len(n.Status.VolumesInUse) == 0 && !tainted,
			fmt.Sprintf("boot %s inUse %v out-of-service %v", n.Status.NodeInfo.BootID, n.Status.VolumesInUse, tainted), nil
	})
}
