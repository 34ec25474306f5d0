package simulate

import (
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	appslisters "k8s.io/client-go/listers/apps/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"github.com/nodeshepherd/nodeshepherd/pkg/controller/remediation"
	rem "github.com/nodeshepherd/nodeshepherd/pkg/remediation"
)

// TestWorkloadsReadyWaitsForExpectedWorkloads: a Deployment the scenario
// created but the informer has not seen yet keeps the setup waiting (an
// empty cache once looked ready, and the timeline started with no pods).
func TestWorkloadsReadyWaitsForExpectedWorkloads(t *testing.T) {
	newIndexer := func() cache.Indexer {
		return cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	}
	deps, sts, dss := newIndexer(), newIndexer(), newIndexer()
	ready := func(expected ...workloadKey) bool {
		return workloadsReady(appslisters.NewDeploymentLister(deps), appslisters.NewStatefulSetLister(sts), appslisters.NewDaemonSetLister(dss), expected)
	}
	batch := workloadKey{kind: "Deployment", key: "default/batch"}
	if !ready() {
		t.Fatal("no workload expected, none known: want ready")
	}
	if ready(batch) {
		t.Fatal("expected Deployment not in the cache yet: want not ready")
	}
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "batch", Generation: 1},
		Spec: appsv1.DeploymentSpec{Replicas: ptr.To[int32](2)}}
	_ = deps.Add(d)
	if ready(batch) {
		t.Fatal("Deployment not observed by its controller yet: want not ready")
	}
	d = d.DeepCopy()
	d.Status = appsv1.DeploymentStatus{ObservedGeneration: 1, ReadyReplicas: 2}
	_ = deps.Update(d)
	if !ready(batch) {
		t.Fatal("Deployment observed with 2/2 Ready: want ready")
	}
	s := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Namespace: "db", Name: "pg", Generation: 2},
		Spec: appsv1.StatefulSetSpec{Replicas: ptr.To[int32](1)}, Status: appsv1.StatefulSetStatus{ObservedGeneration: 1, ReadyReplicas: 1}}
	_ = sts.Add(s)
	if ready(batch, workloadKey{kind: "StatefulSet", key: "db/pg"}) {
		t.Fatal("StatefulSet's new generation not observed: want not ready")
	}
}

func TestScenarioWorkloadKeys(t *testing.T) {
	sc := &Scenario{Workloads: []Workload{{objects: []manifest{
		{obj: &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "web"}}},
		{obj: &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: "pg", Namespace: "db"}}},
		{obj: &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: "agent", Namespace: "kube-system"}}},
	}}}}
	got := sc.workloadKeys()
	want := []workloadKey{{"Deployment", "default/web"}, {"StatefulSet", "db/pg"}, {"DaemonSet", "kube-system/agent"}}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("key %d: got %v, want %v", i, got[i], want[i])
		}
	}
}

// TestRecorderStatefulReplicaMoves: a replica with a volume whose node goes
// NotReady counts as moved once its volume is attached to another node
// (timeToVolumeAttachedElsewhere) and once a pod of its name runs Ready
// there with the volume attached (timeToReplicaRunningElsewhere); the old
// pod Terminating is counted, and a run without such a replica has neither
// figure.
func TestRecorderStatefulReplicaMoves(t *testing.T) {
	now := time.Unix(1000, 0)
	r := newRecorder(func() time.Time { return now })
	node := func(name string, ready bool) *v1.Node {
		st := v1.ConditionTrue
		if !ready {
			st = v1.ConditionUnknown
		}
		return &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: v1.NodeStatus{Conditions: []v1.NodeCondition{{Type: v1.NodeReady, Status: st}}}}
	}
	pod := func(uid, nodeName string, ready, deleting bool) *v1.Pod {
		p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "db-0", Namespace: "default", UID: types.UID(uid),
			OwnerReferences: []metav1.OwnerReference{{Kind: "StatefulSet", Name: "db"}}},
			Spec: v1.PodSpec{NodeName: nodeName, Volumes: []v1.Volume{{Name: "data",
				VolumeSource: v1.VolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: "data-db-0"}}}}}}
		if ready {
			p.Status.Conditions = []v1.PodCondition{{Type: v1.PodReady, Status: v1.ConditionTrue}}
		}
		if deleting {
			p.DeletionTimestamp = &metav1.Time{Time: now}
		}
		return p
	}
	va := func(name, nodeName string, attached bool) *storagev1.VolumeAttachment {
		return &storagev1.VolumeAttachment{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec:   storagev1.VolumeAttachmentSpec{NodeName: nodeName, Source: storagev1.VolumeAttachmentSource{PersistentVolumeName: ptr.To("pv-1")}},
			Status: storagev1.VolumeAttachmentStatus{Attached: attached}}
	}
	r.onNode(node("a", true), false)
	r.onNode(node("b", true), false)
	r.onClaim(&v1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "data-db-0", Namespace: "default"},
		Spec: v1.PersistentVolumeClaimSpec{VolumeName: "pv-1"}}, false)
	r.onAttachment(va("va-a", "a", true), false)
	r.onPod(pod("old", "a", true, false), false)
	r.start()
	if m := r.finish(now); m["timeToReplicaRunningElsewhere"] != nil || m["statefulReplicasOnFailedNodes"] != nil {
		t.Fatalf("no node failed, yet: %v", m)
	}
	if s := r.sample(0); s.Replicas != 1 || s.ReplicasWithVolumes != 1 {
		t.Fatalf("sample before the failure: %+v", s)
	}
	r.fault()
	now = now.Add(40 * time.Second)
	r.onNode(node("a", false), false)
	r.onPod(pod("old", "a", false, true), false)
	if s := r.sample(40); s.PodsTerminating != 1 || s.ReplicasWithVolumes != 0 {
		t.Fatalf("sample after the failure: %+v", s)
	}
	m := r.finish(now)
	if m["timeToVolumeAttachedElsewhere"] != nil || m["timeToReplicaRunningElsewhere"] != nil || *m["podsTerminatingAtEnd"] != 1 || *m["statefulReplicasOnFailedNodes"] != 1 {
		t.Fatalf("while Terminating: %v", m)
	}
	now = now.Add(60 * time.Second)
	r.onPod(pod("old", "a", false, true), true)
	r.onAttachment(va("va-a", "a", true), true)
	r.onPod(pod("new", "b", false, false), false) // scheduled, not running yet
	now = now.Add(10 * time.Second)
	r.onAttachment(va("va-b", "b", true), false)
	now = now.Add(5 * time.Second)
	r.onPod(pod("new", "b", true, false), false)
	m = r.finish(now)
	if got := *m["timeToVolumeAttachedElsewhere"]; got != 110 {
		t.Errorf("timeToVolumeAttachedElsewhere %v s, want 110", got)
	}
	if got := *m["timeToReplicaRunningElsewhere"]; got != 115 {
		t.Errorf("timeToReplicaRunningElsewhere %v s, want 115", got)
	}
	if *m["podsTerminatingAtEnd"] != 0 {
		t.Errorf("podsTerminatingAtEnd %v", *m["podsTerminatingAtEnd"])
	}
}

// TestRecorderRepairs: the repair measures follow the nodes' repair
// records (a record that appears starts a repair, each new step in it is a
// step started, the nodes with one are in repair), the remediation
// controller's events (each RemediationDone occurrence, the nodes with
// RemediationBlocked or RemediationExhausted; an event seen before the
// timeline counts from the count it had then), and the nodes' boot IDs and
// UIDs (a new boot is a reboot, a new Node a replacement). Without
// policies only the machine measures are recorded.
func TestRecorderRepairs(t *testing.T) {
	now := time.Unix(1000, 0)
	r := newRecorder(func() time.Time { return now })
	r.trackRepairs()
	node := func(name, uid, boot string, step int, stepSince time.Time) *v1.Node {
		n := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID(uid)},
			Status: v1.NodeStatus{NodeInfo: v1.NodeSystemInfo{BootID: boot}, Conditions: []v1.NodeCondition{{Type: v1.NodeReady, Status: v1.ConditionTrue}}}}
		if step >= 0 {
			n.Annotations = map[string]string{rem.AnnotationState: rem.EncodeState("general", rem.ActionTaint,
				rem.State{Step: step, StepSince: stepSince, RepairSince: stepSince.Add(-time.Duration(step) * time.Minute)})}
		}
		return n
	}
	event := func(uid, reason, nodeName string, count int32) *v1.Event {
		return &v1.Event{ObjectMeta: metav1.ObjectMeta{UID: types.UID(uid), Namespace: "default", Name: uid}, Reason: reason, Count: count,
			InvolvedObject: v1.ObjectReference{Kind: "Node", Name: nodeName}, LastTimestamp: metav1.NewTime(now)}
	}
	r.onNode(node("a", "ua", "boot-a", -1, time.Time{}), false)
	r.onNode(node("b", "ub", "boot-b", -1, time.Time{}), false)
	r.onNode(node("c", "uc", "", -1, time.Time{}), false) // no boot ID reported yet
	r.onEvent(event("old-done", remediation.EventDone, "a", 3))
	r.start()
	r.fault()

	now = now.Add(30 * time.Second)
	r.onNode(node("c", "uc", "boot-c", -1, time.Time{}), false) // its first boot ID: no reboot
	r.onNode(node("a", "ua", "boot-a", 0, now), false)
	r.onNode(node("a", "ua", "boot-a", 0, now), false) // the same step again (a status update)
	r.onNode(node("b", "ub", "boot-b", 0, now), false)
	if s := r.sample(30); s.InRepair != 2 {
		t.Errorf("sample: %d in repair, want 2", s.InRepair)
	}
	now = now.Add(90 * time.Second)
	r.onNode(node("a", "ua", "boot-a", 1, now), false) // Reboot
	r.onNode(node("a", "ua", "boot-a2", 1, now), false)
	r.onNode(node("b", "ub", "boot-b", 0, now), true) // replaced: the Node goes ...
	r.onNode(node("b", "ub2", "boot-b2", -1, time.Time{}), false)
	r.onNode(node("a", "ua", "boot-a2", -1, time.Time{}), false) // repaired
	r.onEvent(event("done-a", remediation.EventDone, "a", 1))
	r.onEvent(event("done-a", remediation.EventDone, "a", 1))   // the same occurrence, seen again
	r.onEvent(event("old-done", remediation.EventDone, "a", 4)) // one more occurrence of an old event
	r.onEvent(event("blocked-c1", remediation.EventBlocked, "c", 1))
	r.onEvent(event("blocked-c2", remediation.EventBlocked, "c", 2))
	r.onEvent(event("exhausted-b", remediation.EventExhausted, "b", 1))
	pod := event("pod", remediation.EventBlocked, "x", 1)
	pod.InvolvedObject.Kind = "Pod" // not about a Node
	r.onEvent(pod)

	m := r.finish(now)
	want := map[string]float64{"repairsStarted": 2, "repairStepsStarted": 3, "maxNodesInRepair": 2, "repairsDone": 2,
		"repairsBlocked": 1, "repairsExhausted": 1, "nodesRebooted": 1, "nodesReplaced": 1}
	for name, w := range want {
		if v := m[name]; v == nil || *v != w {
			t.Errorf("%s = %v, want %v", name, v, w)
		}
	}
	if s := r.sample(120); s.InRepair != 0 || s.RepairsDone != 2 || s.Rebooted != 1 || s.Replaced != 1 {
		t.Errorf("sample at the end: %+v", s)
	}

	plain := newRecorder(func() time.Time { return now })
	plain.start()
	m = plain.finish(now)
	if _, ok := m["repairsDone"]; ok || m["nodesRebooted"] == nil || *m["nodesRebooted"] != 0 {
		t.Errorf("without policies: %v", m)
	}
}

// TestRecorderFences: a Fence confirmed (the record's fenceBootID
// written), a Fence vetoed (FenceVetoed events, one node however many),
// the out-of-service taint, and pods removed from the API while their node
// is not Ready (force-deleted) against one whose kubelet confirmed it.
func TestRecorderFences(t *testing.T) {
	now := time.Unix(1000, 0)
	r := newRecorder(func() time.Time { return now })
	r.trackRepairs()
	node := func(name string, ready bool, fenceBoot string, outOfService bool) *v1.Node {
		st := v1.ConditionTrue
		if !ready {
			st = v1.ConditionUnknown
		}
		n := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("u" + name)},
			Status: v1.NodeStatus{NodeInfo: v1.NodeSystemInfo{BootID: "boot-" + name}, Conditions: []v1.NodeCondition{{Type: v1.NodeReady, Status: st}}}}
		if !ready {
			n.Annotations = map[string]string{rem.AnnotationState: rem.EncodeState("gpu", rem.ActionFence,
				rem.State{Step: 1, StepSince: now, RepairSince: now, FenceBootID: fenceBoot})}
		}
		if outOfService {
			n.Spec.Taints = []v1.Taint{{Key: v1.TaintNodeOutOfService, Value: "nodeshutdown", Effect: v1.TaintEffectNoExecute}}
		}
		return n
	}
	pod := func(uid, nodeName string) *v1.Pod {
		return &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: uid, Namespace: "default", UID: types.UID(uid)}, Spec: v1.PodSpec{NodeName: nodeName}}
	}
	event := func(uid, nodeName string, count int32) *v1.Event {
		return &v1.Event{ObjectMeta: metav1.ObjectMeta{UID: types.UID(uid), Namespace: "default", Name: uid}, Reason: remediation.EventFenceVetoed, Count: count,
			InvolvedObject: v1.ObjectReference{Kind: "Node", Name: nodeName}, LastTimestamp: metav1.NewTime(now)}
	}
	for _, n := range []string{"a", "b", "c"} {
		r.onNode(node(n, true, "", false), false)
	}
	r.onPod(pod("on-a", "a"), false)
	r.onPod(pod("on-b", "b"), false)
	r.onPod(pod("on-c", "c"), false)
	r.start()
	r.fault()
	now = now.Add(time.Minute)
	r.onPod(pod("on-c", "c"), true) // c is Ready: its kubelet confirmed the deletion
	r.onNode(node("a", false, "", false), false)
	r.onNode(node("b", false, "", false), false)
	r.onEvent(event("veto-a", "a", 1))
	r.onEvent(event("veto-a", "a", 2))
	r.onNode(node("b", false, "boot-b", false), false) // the power-off confirmed
	r.onNode(node("b", false, "boot-b", false), false) // seen again
	r.onNode(node("b", false, "boot-b", true), false)
	r.onPod(pod("on-b", "b"), true) // pod GC under the out-of-service taint
	m := r.finish(now)
	want := map[string]float64{"fencesConfirmed": 1, "fencesVetoed": 1, "nodesOutOfService": 1, "podsForceDeleted": 1}
	for name, w := range want {
		if v := m[name]; v == nil || *v != w {
			t.Errorf("%s = %v, want %v", name, v, w)
		}
	}
	plain := newRecorder(func() time.Time { return now })
	plain.start()
	m = plain.finish(now)
	if _, ok := m["fencesVetoed"]; ok || m["nodesOutOfService"] == nil || m["podsForceDeleted"] == nil {
		t.Errorf("without policies: %v", m)
	}
}
