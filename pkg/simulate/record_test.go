package simulate

import (
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	appslisters "k8s.io/client-go/listers/apps/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
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
