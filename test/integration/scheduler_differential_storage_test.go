package integration

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/nodeshepherd/nodeshepherd/pkg/fakecsi"
	"github.com/nodeshepherd/nodeshepherd/test/framework"
)

// The differential test's capacity seeds have a CSI driver that reports
// its free storage per node (CSIStorageCapacity, CSIDriver storageCapacity:
// true) and provisions on the node the scheduler selects (pkg/fakecsi, run
// by the test on both runs). A pod in three without a zonal claim gets a
// claim of its class: VolumeBinding's filter keeps the nodes whose capacity
// holds the claim, and its score (StorageCapacityScoring, on in 1.37)
// prefers the node with the most room left. The capacities do not change
// as volumes are provisioned (nothing recomputes them), so each decision
// depends only on the request and the node.
var diffCapacitySeeds = []uint64{10, 11}

const (
	diffCSIDriver = "diff.csi.example.com"
	diffCSIClass  = "diff-csi"
	// diffCSISizeAnnotation: the size (GiB) of the pod's claim of diffCSIClass.
	diffCSISizeAnnotation = "diff.nodeshepherd.io/csi-gib"
	// diffCapacityNamespace holds the CSIStorageCapacity objects, as the
	// driver's namespace would.
	diffCapacityNamespace = metav1.NamespaceDefault
)

// diffAddCapacity gives every zoned node a capacity (none on some, which
// then cannot provision) and a third of the pods without a zonal claim a
// claim of the CSI class.
func diffAddCapacity(w *diffWorkload) {
	r := rand.New(rand.NewPCG(w.Seed, 4))
	w.Capacity = map[string]int64{}
	for _, n := range w.Nodes {
		if _, zoned := n.Labels[zoneKey]; !zoned {
			continue // the driver pins volumes to a zone
		}
		if gib := pick[int64](r, 0, 10, 25, 50, 100); gib > 0 {
			w.Capacity[n.Name] = gib
		}
	}
	for _, p := range w.Pods {
		if diffClaim(p) != nil || r.IntN(3) != 0 {
			continue
		}
		if p.Annotations == nil {
			p.Annotations = map[string]string{}
		}
		p.Annotations[diffCSISizeAnnotation] = strconv.FormatInt(pick[int64](r, 5, 10, 20, 40), 10)
		p.Spec.Volumes = append(p.Spec.Volumes, v1.Volume{Name: "csi", VolumeSource: v1.VolumeSource{
			PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: p.Name + "-csi"}}})
	}
}

// diffCSIClaim is the claim of a pod's "csi" volume; nil without one.
func diffCSIClaim(p *v1.Pod) *v1.PersistentVolumeClaim {
	return diffVolumeClaim(p, "csi", diffCSIClass, p.Annotations[diffCSISizeAnnotation]+"Gi")
}

// diffCSIGiB is the size of the pod's CSI claim; 0 without one.
func diffCSIGiB(p *v1.Pod) int64 {
	gib, _ := strconv.ParseInt(p.Annotations[diffCSISizeAnnotation], 10, 64)
	return gib
}

// startDiffCSI creates the driver's CSIDriver and StorageClass (before the
// scheduler starts) and runs its provisioner until the test ends.
func (d *diffRun) startDiffCSI(t *testing.T) {
	t.Helper()
	ctx := framework.Context(t)
	if _, err := d.client.StorageV1().CSIDrivers().Create(ctx, &storagev1.CSIDriver{ObjectMeta: metav1.ObjectMeta{Name: diffCSIDriver},
		Spec: storagev1.CSIDriverSpec{AttachRequired: ptr.To(false), StorageCapacity: ptr.To(true),
			VolumeLifecycleModes: []storagev1.VolumeLifecycleMode{storagev1.VolumeLifecyclePersistent}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	sc := storageClass(diffCSIClass, diffCSIDriver, storagev1.VolumeBindingWaitForFirstConsumer)
	sc.ReclaimPolicy = ptr.To(v1.PersistentVolumeReclaimDelete)
	if _, err := d.client.StorageV1().StorageClasses().Create(ctx, sc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	drv, err := fakecsi.New(fakecsi.Config{Client: d.client, DriverName: diffCSIDriver, StorageClassName: diffCSIClass})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- drv.Run(runCtx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("fake CSI driver: %v", err)
		}
	})
}

// setUpCapacity publishes each node's capacity for the CSI class.
func (d *diffRun) setUpCapacity(t *testing.T, w *diffWorkload) {
	t.Helper()
	for _, name := range slices.Sorted(func(yield func(string) bool) {
		for n := range w.Capacity {
			if !yield(n) {
				return
			}
		}
	}) {
		c := &storagev1.CSIStorageCapacity{ObjectMeta: metav1.ObjectMeta{Name: "cap-" + name, Namespace: diffCapacityNamespace},
			NodeTopology:     &metav1.LabelSelector{MatchLabels: map[string]string{v1.LabelHostname: name}},
			StorageClassName: diffCSIClass, Capacity: resource.NewQuantity(w.Capacity[name]<<30, resource.BinarySI)}
		if _, err := d.client.StorageV1().CSIStorageCapacities(diffCapacityNamespace).Create(framework.Context(t), c, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
}

// tearDownCapacity removes the capacities and waits until the driver has
// deleted every volume it provisioned (their claims are gone), so that no
// volume of the class is left for the next seed to bind.
func (d *diffRun) tearDownCapacity(t *testing.T) {
	t.Helper()
	ctx := framework.Context(t)
	if err := d.client.StorageV1().CSIStorageCapacities(diffCapacityNamespace).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, 2*time.Minute, "the CSI class's volumes deleted", func(ctx context.Context) (bool, string, error) {
		pvs, err := d.client.CoreV1().PersistentVolumes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, "", err
		}
		var left []string
		for _, pv := range pvs.Items {
			if pv.Spec.StorageClassName == diffCSIClass {
				left = append(left, pv.Name+" "+string(pv.Status.Phase))
			}
		}
		return len(left) == 0, fmt.Sprint(left), nil
	})
}

// dropCSIClaim deletes the claim and waits until it and its volume (if it
// had one) are gone.
func (d *diffRun) dropCSIClaim(t *testing.T, c *v1.PersistentVolumeClaim) {
	t.Helper()
	cur, err := d.client.CoreV1().PersistentVolumeClaims(c.Namespace).Get(framework.Context(t), c.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	d.deleteClaim(t, c.Namespace, c.Name)
	framework.Eventually(t, 2*time.Minute, "claim "+c.Namespace+"/"+c.Name+" and its volume gone", func(ctx context.Context) (bool, string, error) {
		_, err := d.client.CoreV1().PersistentVolumeClaims(c.Namespace).Get(ctx, c.Name, metav1.GetOptions{})
		if !apierrors.IsNotFound(err) {
			return false, fmt.Sprintf("claim: %v", err), nil
		}
		if cur.Spec.VolumeName == "" {
			return true, "", nil
		}
		_, err = d.client.CoreV1().PersistentVolumes().Get(ctx, cur.Spec.VolumeName, metav1.GetOptions{})
		return apierrors.IsNotFound(err), fmt.Sprintf("volume %s: %v", cur.Spec.VolumeName, err), nil
	})
}

// pinCSIClaim gives the pod's CSI claim a volume of node's zone, as
// kube-scheduler's run has: kept when it has one there, provisioned anew
// for node otherwise (the selected-node annotation, as the scheduler sets).
func (d *diffRun) pinCSIClaim(t *testing.T, c *v1.PersistentVolumeClaim, node *v1.Node) {
	t.Helper()
	ctx := framework.Context(t)
	cur, err := d.client.CoreV1().PersistentVolumeClaims(c.Namespace).Get(ctx, c.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if cur.Spec.VolumeName != "" && d.volumeZone(t, cur.Spec.VolumeName) == node.Labels[zoneKey] {
		return
	}
	if cur.Spec.VolumeName != "" || cur.Annotations["volume.kubernetes.io/selected-node"] != "" {
		d.dropCSIClaim(t, c)
		if _, err := d.client.CoreV1().PersistentVolumeClaims(c.Namespace).Create(ctx, c, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	patch := fmt.Sprintf(`{"metadata":{"annotations":{"volume.kubernetes.io/selected-node":%q}}}`, node.Name)
	if _, err := d.client.CoreV1().PersistentVolumeClaims(c.Namespace).Patch(ctx, c.Name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, 2*time.Minute, "claim "+c.Namespace+"/"+c.Name+" provisioned for "+node.Name, func(ctx context.Context) (bool, string, error) {
		cur, err := d.client.CoreV1().PersistentVolumeClaims(c.Namespace).Get(ctx, c.Name, metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		return cur.Status.Phase == v1.ClaimBound, string(cur.Status.Phase), nil
	})
}

// capacityViolation: the node has no capacity for the pod's CSI claim.
func (c *diffChecker) capacityViolation(p *v1.Pod, n *v1.Node) []string {
	gib := diffCSIGiB(p)
	if gib == 0 {
		return nil
	}
	if have := c.capacity[n.Name]; have < gib {
		return []string{fmt.Sprintf("CSI capacity %dGi < %dGi", have, gib)}
	}
	return nil
}

// probeCapacity binds a pod with a claim of the CSI class to the node whose
// capacity was published last, and then removes both: once it is bound the
// scheduler has seen every capacity (each kind's events reach it in order),
// so no pod of the seed is tried before its node's capacity is known.
func (d *diffRun) probeCapacity(t *testing.T, w *diffWorkload) {
	t.Helper()
	if len(w.Capacity) == 0 {
		return
	}
	var last string
	for n := range w.Capacity {
		last = max(last, n)
	}
	claim := persistentClaim("probe-csi", diffCSIClass, "", v1.ReadWriteOnce)
	claim.Spec.Resources.Requests = v1.ResourceList{v1.ResourceStorage: resource.MustParse("1Gi")}
	ctx := framework.Context(t)
	if _, err := d.client.CoreV1().PersistentVolumeClaims(claim.Namespace).Create(ctx, claim, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	probe := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "probe-csi", Namespace: metav1.NamespaceDefault},
		Spec: v1.PodSpec{SchedulerName: v1.DefaultSchedulerName, NodeSelector: map[string]string{v1.LabelHostname: last},
			Tolerations: []v1.Toleration{{Operator: v1.TolerationOpExists}},
			Containers: []v1.Container{{Name: "c", Image: diffPauseImage, Resources: v1.ResourceRequirements{
				Requests: v1.ResourceList{v1.ResourceCPU: resource.MustParse("1m")}}}},
			Volumes: []v1.Volume{{Name: "csi", VolumeSource: v1.VolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: claim.Name}}}}}}
	d.create(t, probe)
	framework.Eventually(t, 2*time.Minute, fmt.Sprintf("seed %d: CSI probe pod bound to %s", w.Seed, last), func(ctx context.Context) (bool, string, error) {
		p, err := d.client.CoreV1().Pods(probe.Namespace).Get(ctx, probe.Name, metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		if p.Spec.NodeName != "" && p.Spec.NodeName != last {
			return false, "", fmt.Errorf("CSI probe pod bound to %s", p.Spec.NodeName)
		}
		return p.Spec.NodeName == last, fmt.Sprintf("conditions %v", p.Status.Conditions), nil
	})
	d.remove(t, probe)
	d.dropCSIClaim(t, claim)
}

// TestDiffFeatureSeedsReachTheirRules: the resize and capacity seeds
// generate what they are there for (no control plane): resized pods whose
// allocation exceeds their spec, CSI claims larger than some nodes'
// capacity and smaller than others', and nodes without any.
func TestDiffFeatureSeedsReachTheirRules(t *testing.T) {
	for _, seed := range diffResizeSeeds {
		w := diffWorkloadFor(seed)
		above := 0
		for _, p := range w.Pods {
			if m, ok := p.Annotations[diffAllocatedAnnotation]; ok {
				spec := p.Spec.Containers[0].Resources.Requests[v1.ResourceCPU]
				if n, _ := strconv.ParseInt(m, 10, 64); n > spec.MilliValue() {
					above++
				}
			}
		}
		if above < 5 {
			t.Errorf("seed %d: %d pods allocated more CPU than their spec asks, want at least 5", seed, above)
		}
	}
	for _, seed := range diffCapacitySeeds {
		w := diffWorkloadFor(seed)
		narrowed, claims := 0, 0
		for _, p := range w.Pods {
			gib := diffCSIGiB(p)
			if gib == 0 {
				continue
			}
			claims++
			fit := 0
			for _, have := range w.Capacity {
				if have >= gib {
					fit++
				}
			}
			if fit > 0 && fit < len(w.Capacity) {
				narrowed++
			}
		}
		if claims < 5 || narrowed < 3 {
			t.Errorf("seed %d: %d pods with a CSI claim, %d of which some nodes' capacity holds and others' does not; want at least 5 and 3", seed, claims, narrowed)
		}
		if len(w.Capacity) == 0 || len(w.Capacity) == len(w.Nodes) {
			t.Errorf("seed %d: %d of %d nodes have capacity; want some, not all", seed, len(w.Capacity), len(w.Nodes))
		}
	}
}
