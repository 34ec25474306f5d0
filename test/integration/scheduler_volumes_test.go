package integration

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/nodeshepherd/nodeshepherd/pkg/kube"
	"github.com/nodeshepherd/nodeshepherd/test/framework"
)

// The volume workload's storage: classes, volumes and claims.
const (
	csiDriver      = "csi.example.com"
	annSelected    = "volume.kubernetes.io/selected-node"
	annBoundByCtrl = "pv.kubernetes.io/bound-by-controller"
)

// volumePod is one pod of the volume workload and what must become of it:
// one of the nodes (indices into the cluster's nodes), or pending with
// msg.
type volumePod struct {
	name     string
	claims   []string
	onlyNode int    // nodeSelector on this node's hostname (1-based)
	zone     string // nodeSelector on this zone
	nodes    []int  // acceptable nodes (0-based); none: pending
	msg      string
	// preFilter: a volume plugin's PreFilter rejects the pod on every
	// node. kube-scheduler 1.37 then ends the message with " not found"
	// instead of its preemption verdict: its DynamicResources PostFilter,
	// which runs before DefaultPreemption, fails to read the cycle state
	// that its own PreFilter, never reached, did not write.
	preFilter bool
	// ephemeral: a generic ephemeral volume of this class.
	ephemeral string
}

const notHelpful4 = " preemption: 0/4 nodes are available: 4 Preemption is not helpful for scheduling."

// want is the pending message expected from kube-scheduler (upstream) or
// nodeshepherd.
func (vp volumePod) want(upstream bool) string {
	if upstream && vp.preFilter {
		return strings.TrimSuffix(vp.msg, notHelpful4) + " not found"
	}
	return vp.msg
}

// volumeStages run in order; each stage's pods settle before the next.
// Nodes 0 and 1 are in zone-0, 2 and 3 in zone-1; the local volume is on
// node 2; node 3's CSINode allows one volume of csiDriver.
func volumeStages() [][]volumePod {
	return [][]volumePod{
		{
			{name: "local", claims: []string{"local-claim"}, nodes: []int{2}},
			{name: "immediate", claims: []string{"slow-claim"}, preFilter: true,
				msg: "0/4 nodes are available: pod has unbound immediate PersistentVolumeClaims." + notHelpful4},
			{name: "missing", claims: []string{"nope"}, preFilter: true,
				msg: `0/4 nodes are available: persistentvolumeclaim "nope" not found.` + notHelpful4},
			{name: "zonal", claims: []string{"zonal-claim"}, nodes: []int{2, 3}},
			{name: "zonal-elsewhere", claims: []string{"zonal-claim"}, zone: "zone-0",
				msg: "0/4 nodes are available: 2 node(s) didn't match Pod's node affinity/selector, 2 node(s) had no available volume zone." + notHelpful4},
			{name: "solo-1", claims: []string{"solo-claim"}, onlyNode: 1, nodes: []int{0}},
			{name: "csi-a", claims: []string{"csi-a-claim"}, onlyNode: 4, nodes: []int{3}},
		},
		{
			// The local volume went to the first claim.
			{name: "no-local-left", claims: []string{"local-claim-2"},
				msg: "0/4 nodes are available: 4 node(s) didn't find available persistent volumes to bind." + notHelpful4},
			{name: "solo-2", claims: []string{"solo-claim"},
				msg: "0/4 nodes are available: 4 node(s) unavailable due to PersistentVolumeClaim with ReadWriteOncePod access mode already in-use by another pod." +
					" preemption: 0/4 nodes are available: 4 No preemption victims found for incoming pod."},
			{name: "csi-b", claims: []string{"csi-b-claim"}, onlyNode: 4,
				msg: "0/4 nodes are available: 1 node(s) exceed max volume count, 3 node(s) didn't match Pod's node affinity/selector." +
					" preemption: 0/4 nodes are available: 1 No preemption victims found for incoming pod, 3 Preemption is not helpful for scheduling."},
			// A class that provisions in zone-1 only: the claim gets the
			// selected node; the test then plays the provisioner.
			{name: "topo", claims: []string{"topo-claim"}, nodes: []int{2, 3}},
		},
		{
			// A generic ephemeral volume: kube-controller-manager creates
			// the claim <pod>-<volume>, bound like any other to the local
			// volume of its class on node 1.
			{name: "eph", ephemeral: "local-eph", nodes: []int{1}},
		},
	}
}

func storageClass(name, provisioner string, mode storagev1.VolumeBindingMode, zones ...string) *storagev1.StorageClass {
	sc := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Provisioner: provisioner, VolumeBindingMode: &mode}
	if len(zones) > 0 {
		sc.AllowedTopologies = []v1.TopologySelectorTerm{{MatchLabelExpressions: []v1.TopologySelectorLabelRequirement{{Key: zoneKey, Values: zones}}}}
	}
	return sc
}

func persistentVolume(name, class string, mode v1.PersistentVolumeAccessMode, src v1.PersistentVolumeSource) *v1.PersistentVolume {
	return &v1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1.PersistentVolumeSpec{StorageClassName: class, AccessModes: []v1.PersistentVolumeAccessMode{mode},
			Capacity: v1.ResourceList{v1.ResourceStorage: resource.MustParse("1Gi")}, PersistentVolumeSource: src,
			PersistentVolumeReclaimPolicy: v1.PersistentVolumeReclaimRetain}}
}

func onHost(pv *v1.PersistentVolume, node string) *v1.PersistentVolume {
	pv.Spec.NodeAffinity = &v1.VolumeNodeAffinity{Required: &v1.NodeSelector{NodeSelectorTerms: []v1.NodeSelectorTerm{{
		MatchExpressions: []v1.NodeSelectorRequirement{{Key: v1.LabelHostname, Operator: v1.NodeSelectorOpIn, Values: []string{node}}}}}}}
	return pv
}

func hostPath(path string) v1.PersistentVolumeSource {
	return v1.PersistentVolumeSource{HostPath: &v1.HostPathVolumeSource{Path: path}}
}

func csiSource(handle string) v1.PersistentVolumeSource {
	return v1.PersistentVolumeSource{CSI: &v1.CSIPersistentVolumeSource{Driver: csiDriver, VolumeHandle: handle}}
}

func persistentClaim(name, class, volume string, mode v1.PersistentVolumeAccessMode) *v1.PersistentVolumeClaim {
	return &v1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: v1.PersistentVolumeClaimSpec{StorageClassName: &class, VolumeName: volume, AccessModes: []v1.PersistentVolumeAccessMode{mode},
			Resources: v1.VolumeResourceRequirements{Requests: v1.ResourceList{v1.ResourceStorage: resource.MustParse("500Mi")}}}}
}

// setUpStorage labels the zones and creates the workload's storage; the
// claims pre-bound to a volume are Bound by the PV controller on return.
func setUpStorage(t *testing.T, c *preemptionCluster) {
	t.Helper()
	ctx := framework.Context(t)
	for i, n := range c.nodes {
		patch := fmt.Sprintf(`{"metadata":{"labels":{%q:"zone-%d"}}}`, zoneKey, i/2)
		if _, err := c.client.CoreV1().Nodes().Patch(ctx, n, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	noProvisioner := "kubernetes.io/no-provisioner"
	for _, sc := range []*storagev1.StorageClass{
		storageClass("local", noProvisioner, storagev1.VolumeBindingWaitForFirstConsumer),
		storageClass("local-eph", noProvisioner, storagev1.VolumeBindingWaitForFirstConsumer),
		storageClass("manual", noProvisioner, storagev1.VolumeBindingImmediate),
		storageClass("slow", "example.com/nobody", storagev1.VolumeBindingImmediate),
		storageClass("topo", "example.com/topo", storagev1.VolumeBindingWaitForFirstConsumer, "zone-1"),
	} {
		if _, err := c.client.StorageV1().StorageClasses().Create(ctx, sc, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	zonal := persistentVolume("zonal-pv", "manual", v1.ReadWriteOnce, hostPath("/tmp/zonal"))
	zonal.Labels = map[string]string{zoneKey: "zone-1"}
	for _, pv := range []*v1.PersistentVolume{
		onHost(persistentVolume("local-pv", "local", v1.ReadWriteOnce, v1.PersistentVolumeSource{Local: &v1.LocalVolumeSource{Path: "/mnt/disk"}}), c.nodes[2]),
		onHost(persistentVolume("local-eph-pv", "local-eph", v1.ReadWriteOnce, v1.PersistentVolumeSource{Local: &v1.LocalVolumeSource{Path: "/mnt/eph"}}), c.nodes[1]),
		zonal,
		persistentVolume("solo-pv", "manual", v1.ReadWriteOncePod, hostPath("/tmp/solo")),
		persistentVolume("csi-a-pv", "manual", v1.ReadWriteOnce, csiSource("a")),
		persistentVolume("csi-b-pv", "manual", v1.ReadWriteOnce, csiSource("b")),
	} {
		if _, err := c.client.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	claims := []*v1.PersistentVolumeClaim{
		persistentClaim("local-claim", "local", "", v1.ReadWriteOnce),
		persistentClaim("local-claim-2", "local", "", v1.ReadWriteOnce),
		persistentClaim("slow-claim", "slow", "", v1.ReadWriteOnce),
		persistentClaim("topo-claim", "topo", "", v1.ReadWriteOnce),
		persistentClaim("zonal-claim", "manual", "zonal-pv", v1.ReadWriteOnce),
		persistentClaim("solo-claim", "manual", "solo-pv", v1.ReadWriteOncePod),
		persistentClaim("csi-a-claim", "manual", "csi-a-pv", v1.ReadWriteOnce),
		persistentClaim("csi-b-claim", "manual", "csi-b-pv", v1.ReadWriteOnce),
	}
	for _, pvc := range claims {
		if _, err := c.client.CoreV1().PersistentVolumeClaims("default").Create(ctx, pvc, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	csiNode := &storagev1.CSINode{ObjectMeta: metav1.ObjectMeta{Name: c.nodes[3]}, Spec: storagev1.CSINodeSpec{Drivers: []storagev1.CSINodeDriver{
		{Name: csiDriver, NodeID: c.nodes[3], Allocatable: &storagev1.VolumeNodeResources{Count: ptr.To[int32](1)}}}}}
	if _, err := c.client.StorageV1().CSINodes().Create(ctx, csiNode, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, pvc := range claims {
		if pvc.Spec.VolumeName != "" {
			waitClaimBound(t, c, pvc.Name, pvc.Spec.VolumeName)
		}
	}
	framework.Eventually(t, 30*time.Second, "zone labels", func(ctx context.Context) (bool, string, error) {
		nodes, err := c.client.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: zoneKey})
		return err == nil && len(nodes.Items) == len(c.nodes), fmt.Sprint(err), nil
	})
}

// waitClaimBound waits until the PV controller has bound the claim to pv.
func waitClaimBound(t *testing.T, c *preemptionCluster, name, pv string) {
	t.Helper()
	framework.Eventually(t, 60*time.Second, "claim "+name+" bound", func(ctx context.Context) (bool, string, error) {
		pvc, err := c.client.CoreV1().PersistentVolumeClaims("default").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		return pvc.Status.Phase == v1.ClaimBound && pvc.Spec.VolumeName == pv, fmt.Sprintf("%s to %q", pvc.Status.Phase, pvc.Spec.VolumeName), nil
	})
}

// volumeOutcome is where each pod went (node index, -1 pending) and the
// pending pods' messages.
type volumeOutcome struct {
	node map[string]int
	msg  map[string]string
}

func runVolumeWorkload(t *testing.T, upstream bool) volumeOutcome {
	c := startPreemptionCluster(t, 4, upstream, nil)
	setUpStorage(t, c)
	ctx := framework.Context(t)
	out := volumeOutcome{node: map[string]int{}, msg: map[string]string{}}
	for _, stage := range volumeStages() {
		for _, vp := range stage {
			p := spec{name: vp.name, milliCPU: 100, onlyNode: vp.onlyNode}.pod(c.nodes, v1.DefaultSchedulerName)
			if vp.zone != "" {
				p.Spec.NodeSelector = map[string]string{zoneKey: vp.zone}
			}
			for _, cl := range vp.claims {
				p.Spec.Volumes = append(p.Spec.Volumes, v1.Volume{Name: cl, VolumeSource: v1.VolumeSource{
					PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: cl}}})
			}
			if vp.ephemeral != "" {
				tmpl := persistentClaim("", vp.ephemeral, "", v1.ReadWriteOnce)
				p.Spec.Volumes = append(p.Spec.Volumes, v1.Volume{Name: "scratch", VolumeSource: v1.VolumeSource{
					Ephemeral: &v1.EphemeralVolumeSource{VolumeClaimTemplate: &v1.PersistentVolumeClaimTemplate{Spec: tmpl.Spec}}}})
			}
			c.create(t, p)
		}
		for _, vp := range stage {
			if vp.name == "topo" {
				provisionSelected(t, c, "topo-claim")
			}
			framework.Eventually(t, 60*time.Second, vp.name+" settled", func(ctx context.Context) (bool, string, error) {
				p, err := c.client.CoreV1().Pods("default").Get(ctx, vp.name, metav1.GetOptions{})
				if err != nil {
					return false, "", err
				}
				if p.Spec.NodeName != "" {
					out.node[vp.name] = slices.Index(c.nodes, p.Spec.NodeName)
					return true, "", nil
				}
				out.node[vp.name] = -1
				cond := kube.PodCondition(p, v1.PodScheduled)
				if cond == nil || cond.Reason != v1.PodReasonUnschedulable {
					return false, "no verdict", nil
				}
				out.msg[vp.name] = cond.Message
				return len(vp.nodes) == 0 && cond.Message == vp.want(upstream), "pending: " + cond.Message, nil
			})
		}
	}
	for _, stage := range volumeStages() {
		for _, vp := range stage {
			if got := out.node[vp.name]; len(vp.nodes) > 0 && !slices.Contains(vp.nodes, got) {
				t.Errorf("%s on node %d, want one of %v", vp.name, got, vp.nodes)
			}
		}
	}
	// The local volume was bound to the claim by the scheduler, the claim
	// by the PV controller.
	waitClaimBound(t, c, "local-claim", "local-pv")
	pv, err := c.client.CoreV1().PersistentVolumes().Get(ctx, "local-pv", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if pv.Annotations[annBoundByCtrl] != "yes" || pv.Spec.ClaimRef == nil || pv.Spec.ClaimRef.Name != "local-claim" {
		t.Errorf("local-pv: claimRef %+v, annotations %v", pv.Spec.ClaimRef, pv.Annotations)
	}
	waitClaimBound(t, c, "eph-scratch", "local-eph-pv")
	return out
}

// provisionSelected plays a provisioner: once the scheduler has selected a
// node for the claim, it creates a volume there pre-bound to the claim,
// which the PV controller then binds.
func provisionSelected(t *testing.T, c *preemptionCluster, claim string) {
	t.Helper()
	var node string
	var uid types.UID
	framework.Eventually(t, 60*time.Second, claim+" has a selected node", func(ctx context.Context) (bool, string, error) {
		pvc, err := c.client.CoreV1().PersistentVolumeClaims("default").Get(ctx, claim, metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		node, uid = pvc.Annotations[annSelected], pvc.UID
		return node != "", fmt.Sprintf("annotations %v", pvc.Annotations), nil
	})
	if i := slices.Index(c.nodes, node); i < 2 {
		t.Errorf("selected node %q (index %d) is not in zone-1", node, i)
	}
	pv := onHost(persistentVolume(claim+"-pv", "topo", v1.ReadWriteOnce, hostPath("/tmp/"+claim)), node)
	pv.Spec.ClaimRef = &v1.ObjectReference{Kind: "PersistentVolumeClaim", APIVersion: "v1", Namespace: "default", Name: claim, UID: uid}
	if _, err := c.client.CoreV1().PersistentVolumes().Create(framework.Context(t), pv, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// TestSchedulerVolumesMatchKubeScheduler: the same storage and pods,
// scheduled by kube-scheduler and by nodeshepherd's scheduler, with the
// real PV controller: a WaitForFirstConsumer claim is bound to the local
// volume of the node the pod goes to, a provisioning claim gets the
// selected node in its class's allowed zone, and unbound Immediate claims,
// missing claims, volume zones, ReadWriteOncePod and CSI attach limits
// leave pods pending with the same messages.
func TestSchedulerVolumesMatchKubeScheduler(t *testing.T) {
	results := map[bool]volumeOutcome{}
	for _, upstream := range []bool{true, false} {
		who := map[bool]string{true: "kube-scheduler", false: "nodeshepherd"}[upstream]
		t.Run(who, func(t *testing.T) {
			results[upstream] = runVolumeWorkload(t, upstream)
		})
	}
	ks, ns := results[true], results[false]
	for _, stage := range volumeStages() {
		for _, vp := range stage {
			pending := ks.node[vp.name] < 0
			if pending != (ns.node[vp.name] < 0) || pending && (ks.msg[vp.name] != vp.want(true) || ns.msg[vp.name] != vp.want(false)) {
				t.Errorf("%s: kube-scheduler node %d %q, nodeshepherd node %d %q", vp.name, ks.node[vp.name], ks.msg[vp.name], ns.node[vp.name], ns.msg[vp.name])
			}
		}
	}
}
