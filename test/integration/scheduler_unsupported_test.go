package integration

import (
	"context"
	"fmt"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodeshepherd/nodeshepherd/pkg/controller/scheduler"
	"github.com/nodeshepherd/nodeshepherd/pkg/kube"
	"github.com/nodeshepherd/nodeshepherd/test/framework"
)

// waitPodScheduledFalse waits until a pending pod's PodScheduled condition
// is False with reason and message.
func waitPodScheduledFalse(t *testing.T, c *preemptionCluster, name, reason, msg string) {
	t.Helper()
	framework.Eventually(t, 30*time.Second, name+" PodScheduled=False "+reason, func(ctx context.Context) (bool, string, error) {
		p, err := c.client.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		cond := kube.PodCondition(p, v1.PodScheduled)
		if cond == nil {
			return false, "no PodScheduled condition", nil
		}
		return p.Spec.NodeName == "" && cond.Status == v1.ConditionFalse && cond.Reason == reason && cond.Message == msg,
			fmt.Sprintf("node %q, %s %s %q", p.Spec.NodeName, cond.Status, cond.Reason, cond.Message), nil
	})
}

// TestSchedulerRefusesUnsupported: pods using what nodeshepherd's scheduler
// does not implement stay pending with a message naming it, one
// FailedScheduling event each, and are not retried by cluster events; gated
// pods carry SchedulingGated until their gates go.
func TestSchedulerRefusesUnsupported(t *testing.T) {
	c := startPreemptionCluster(t, 3, false, func(s *scheduler.Config) { s.SchedulerName = scheduler.DefaultSchedulerName })
	n := c.nodes
	ctx := framework.Context(t)

	// Inline in-tree disks stay refused (claim volumes are scheduled: see
	// scheduler_volumes_test.go).
	disk := ours(spec{name: "disk", class: "p20", milliCPU: 100}, n)
	disk.Spec.Volumes = []v1.Volume{{Name: "data", VolumeSource: v1.VolumeSource{GCEPersistentDisk: &v1.GCEPersistentDiskVolumeSource{PDName: "data"}}}}
	// A claim bound to a legacy in-tree volume is refused too (bound
	// before the pod exists, so that its only verdict is the refusal).
	legacyPV := persistentVolume("legacy-pv", "", v1.ReadWriteOnce, v1.PersistentVolumeSource{GCEPersistentDisk: &v1.GCEPersistentDiskVolumeSource{PDName: "old"}})
	if _, err := c.client.CoreV1().PersistentVolumes().Create(ctx, legacyPV, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.client.CoreV1().PersistentVolumeClaims("default").Create(ctx, persistentClaim("old", "", "legacy-pv", v1.ReadWriteOnce), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitClaimBound(t, c, "old", "legacy-pv")
	legacy := ours(spec{name: "legacy", class: "p20", milliCPU: 100}, n)
	legacy.Spec.Volumes = []v1.Volume{{Name: "data", VolumeSource: v1.VolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: "old"}}}}
	// A claim asking for what the DRA filter does not implement (a
	// prioritized list) is refused; plain claims are scheduled (see
	// scheduler_dra_test.go).
	claim := "gpu-claim"
	prio := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: claim, Namespace: "default"},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{
			Name: "gpu", FirstAvailable: []resourceapi.DeviceSubRequest{{Name: "any", DeviceClassName: "gpu"}}}}}}}
	if _, err := c.client.ResourceV1().ResourceClaims("default").Create(ctx, prio, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	dra := ours(spec{name: "dra", class: "p20", milliCPU: 100}, n)
	dra.Spec.ResourceClaims = []v1.PodResourceClaim{{Name: "gpu", ResourceClaimName: &claim}}
	gatedPod := ours(spec{name: "gated", class: "p10", milliCPU: 100}, n)
	gatedPod.Spec.SchedulingGates = []v1.PodSchedulingGate{{Name: "example.com/wait"}}
	// probe is plainly unschedulable: parked until a node gets disk=ssd.
	probe := ours(spec{name: "probe", class: "p10", milliCPU: 100}, n)
	probe.Spec.NodeSelector = map[string]string{"disk": "ssd"}
	for _, p := range []*v1.Pod{disk, legacy, dra, gatedPod, probe} {
		c.create(t, p)
	}

	refused := map[string]string{
		"disk":   `nodeshepherd-scheduler does not support: inline gcePersistentDisk, awsElasticBlockStore, rbd, iscsi, azureDisk, cinder, vsphereVolume or portworxVolume volumes ("data"); use kube-scheduler for this pod`,
		"legacy": `nodeshepherd-scheduler does not support: in-tree gcePersistentDisk persistentvolume "legacy-pv" (pvc "old"); use kube-scheduler for this pod`,
		"dra":    `nodeshepherd-scheduler does not support: prioritized list (firstAvailable) in request gpu of resourceclaim default/gpu-claim (DRAPrioritizedList); use kube-scheduler for this pod`,
	}
	for name, msg := range refused {
		waitPodScheduledFalse(t, c, name, v1.PodReasonSchedulerError, msg)
		framework.WaitEvents(t, c.client, "involvedObject.name="+name+",reason=FailedScheduling", 1)
	}
	// The API server sets SchedulingGated on creation; the scheduler leaves it.
	waitPodScheduledFalse(t, c, "gated", v1.PodReasonSchedulingGated, "Scheduling is blocked due to non-empty scheduling gates")
	waitUnschedulable(t, c, "probe", "node(s) didn't match Pod's node affinity/selector")
	attempts := func() float64 {
		return c.ns.Metric(t, "scheduler_schedule_attempts_total", map[string]string{"result": "unschedulable", "profile": scheduler.DefaultSchedulerName})
	}
	before := attempts()

	// A node change wakes the unschedulable pool. Had it woken the refused
	// pods (higher priority, parked earlier, same backoff), they would be
	// retried before the probe is scheduled.
	if _, err := c.client.CoreV1().Nodes().Patch(ctx, n[0], types.MergePatchType, []byte(`{"metadata":{"labels":{"disk":"ssd"}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	waitRunningOn(t, c, "probe", n[0])
	framework.WaitEvents(t, c.client, "involvedObject.name=probe,reason=Scheduled", 1)
	if got := attempts(); got != before {
		t.Errorf("refused pods were retried: %v unschedulable attempts after the node change, want %v", got, before)
	}
	for name := range refused {
		if count, msgs := framework.WaitEvents(t, c.client, "involvedObject.name="+name+",reason=FailedScheduling", 1); count != 1 {
			t.Errorf("%s: %d FailedScheduling events, want 1: %q", name, count, msgs)
		}
		if p := podGet(t, c, name); p.Spec.NodeName != "" {
			t.Errorf("%s was bound to %s", name, p.Spec.NodeName)
		}
	}

	// Removing the gate hands the pod to the scheduler.
	if _, err := c.client.CoreV1().Pods("default").Patch(ctx, "gated", types.JSONPatchType, []byte(`[{"op":"remove","path":"/spec/schedulingGates"}]`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	waitRunningOn(t, c, "gated", "")
}
