package readinessrestore

import (
	"context"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/nodeshepherd/nodeshepherd/pkg/companion"
)

var (
	markT = time.Date(2026, 11, 24, 12, 4, 41, 0, time.UTC)
	backT = markT.Add(40 * time.Second)
)

// markedPod is what a pod looks like after kube-controller-manager marked
// it NotReady (managedFields as the API server wrote them, read back from
// the local control plane) under a kubelet that never re-posted it.
func markedPod(readyWriter string) *v1.Pod {
	return &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web-1", ManagedFields: []metav1.ManagedFieldsEntry{
		{Manager: "nodeshepherd", Operation: metav1.ManagedFieldsOperationUpdate, Subresource: "status", FieldsType: "FieldsV1",
			FieldsV1: metav1.NewFieldsV1(`{"f:status":{"f:conditions":{"k:{\"type\":\"Ready\"}":{".":{},"f:type":{}}}}}`)},
		{Manager: readyWriter, Operation: metav1.ManagedFieldsOperationUpdate, Subresource: "status", FieldsType: "FieldsV1",
			FieldsV1: metav1.NewFieldsV1(`{"f:status":{"f:conditions":{"k:{\"type\":\"Ready\"}":{"f:lastTransitionTime":{},"f:status":{}}}}}`)},
	}},
		Spec: v1.PodSpec{NodeName: "n1"},
		Status: v1.PodStatus{Conditions: []v1.PodCondition{
			{Type: v1.ContainersReady, Status: v1.ConditionTrue},
			{Type: v1.PodReady, Status: v1.ConditionFalse, LastTransitionTime: metav1.NewTime(markT)},
		}, ContainerStatuses: []v1.ContainerStatus{{Name: "c", Ready: true}}}}
}

func readyNode() *v1.Node {
	return &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}, Status: v1.NodeStatus{Conditions: []v1.NodeCondition{{Type: v1.NodeReady,
		Status: v1.ConditionTrue, LastHeartbeatTime: metav1.NewTime(backT), LastTransitionTime: metav1.NewTime(backT)}}}}
}

func TestMarkedAtOnlyForKubeControllerManagersMark(t *testing.T) {
	if at, ok := markedAt(markedPod(companion.KubeControllerManager)); !ok || !at.Equal(markT) {
		t.Errorf("kube-controller-manager's mark: %v %v", at, ok)
	}
	// The kubelet (or nodeshepherd) set Ready=False: its own verdict, not ours to undo.
	if _, ok := markedAt(markedPod("kubelet")); ok {
		t.Error("a kubelet's Ready=False taken as a mark")
	}
	p := markedPod(companion.KubeControllerManager)
	p.Status.Conditions[1].Status = v1.ConditionTrue
	if _, ok := markedAt(p); ok {
		t.Error("a Ready pod taken as marked")
	}
}

func newController(t *testing.T, objs ...any) (*Controller, *fake.Clientset, *record.FakeRecorder) {
	t.Helper()
	client := fake.NewClientset()
	f := informers.NewSharedInformerFactory(client, 0)
	rec := record.NewFakeRecorder(10)
	c, err := New(Config{Delay: 10 * time.Second}, Deps{Client: client, Nodes: f.Core().V1().Nodes(), Pods: f.Core().V1().Pods(),
		Recorder: rec, Clock: clocktesting.NewFakeClock(backT.Add(time.Minute))})
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		switch o := o.(type) {
		case *v1.Node:
			if err := f.Core().V1().Nodes().Informer().GetStore().Add(o); err != nil {
				t.Fatal(err)
			}
			if err := client.Tracker().Add(o); err != nil {
				t.Fatal(err)
			}
		case *v1.Pod:
			if err := f.Core().V1().Pods().Informer().GetStore().Add(o); err != nil {
				t.Fatal(err)
			}
			if err := client.Tracker().Add(o); err != nil {
				t.Fatal(err)
			}
		}
	}
	return c, client, rec
}

func TestSyncRestoresWhatKubeControllerManagerTook(t *testing.T) {
	ctx := context.Background()
	c, client, rec := newController(t, readyNode(), markedPod(companion.KubeControllerManager))
	c.onNode(readyNode())
	if c.queue.Len() != 0 || !c.queued["default/web-1"] {
		t.Fatalf("the pod is not waiting for the delay: len %d, queued %v", c.queue.Len(), c.queued)
	}
	if err := c.sync(ctx, "default/web-1"); err != nil {
		t.Fatal(err)
	}
	p, _ := client.CoreV1().Pods("default").Get(ctx, "web-1", metav1.GetOptions{})
	for _, cond := range p.Status.Conditions {
		if cond.Type == v1.PodReady && cond.Status != v1.ConditionTrue {
			t.Errorf("Ready %s after the restore", cond.Status)
		}
	}
	if ev := <-rec.Events; !strings.HasPrefix(ev, "Normal PodReadinessRestored Node n1 is Ready again and its kubelet did not re-post this pod's status within 10s; restored Ready=True (set False by kube-controller-manager") {
		t.Errorf("event %q", ev)
	}
}

func TestSyncLeavesPodsAlone(t *testing.T) {
	ctx := context.Background()
	for name, mod := range map[string]func(p *v1.Pod, n *v1.Node){
		"node silent since the mark": func(_ *v1.Pod, n *v1.Node) {
			n.Status.Conditions[0].LastHeartbeatTime = metav1.NewTime(markT.Add(-time.Second))
			n.Status.Conditions[0].LastTransitionTime = metav1.NewTime(markT.Add(-time.Hour))
		},
		"container not ready":   func(p *v1.Pod, _ *v1.Node) { p.Status.ContainerStatuses[0].Ready = false },
		"marked by the kubelet": func(p *v1.Pod, _ *v1.Node) { p.ManagedFields[1].Manager = "kubelet" },
		"being deleted":         func(p *v1.Pod, _ *v1.Node) { p.DeletionTimestamp = &metav1.Time{Time: markT} },
	} {
		p, n := markedPod(companion.KubeControllerManager), readyNode()
		mod(p, n)
		c, client, _ := newController(t, n, p)
		if err := c.sync(ctx, "default/web-1"); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		got, _ := client.CoreV1().Pods("default").Get(ctx, "web-1", metav1.GetOptions{})
		if got.Status.Conditions[1].Status != v1.ConditionFalse {
			t.Errorf("%s: readiness restored", name)
		}
	}
}

// TestLostRestoreAnswerCountedOnce: the restore lands but its answer is lost
// (the client's deadline). The retry reads the pod, finds Ready=True with
// the transition time it wrote, and counts the restore once, with one
// event, without writing again.
func TestLostRestoreAnswerCountedOnce(t *testing.T) {
	ctx := context.Background()
	c, client, rec := newController(t, readyNode(), markedPod(companion.KubeControllerManager))
	lost := 0
	client.PrependReactor("update", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if lost > 0 {
			return false, nil, nil
		}
		lost++
		if _, _, err := k8stesting.ObjectReaction(client.Tracker())(a); err != nil {
			t.Errorf("applying the restore whose answer is lost: %v", err)
		}
		return true, nil, context.DeadlineExceeded
	})
	if err := c.sync(ctx, "default/web-1"); err == nil {
		t.Fatal("a restore without an answer reported success")
	}
	if err := c.sync(ctx, "default/web-1"); err != nil {
		t.Fatal(err)
	}
	updates := 0
	for _, a := range client.Actions() {
		if a.GetVerb() == "update" {
			updates++
		}
	}
	if updates != 1 {
		t.Errorf("%d updates, want 1 (the retry re-reads, it does not write again)", updates)
	}
	var m dto.Metric
	if err := c.restored.Write(&m); err != nil {
		t.Fatal(err)
	}
	if got := m.GetCounter().GetValue(); got != 1 {
		t.Errorf("restores counted %v, want 1", got)
	}
	if len(rec.Events) != 1 {
		t.Errorf("%d events, want 1", len(rec.Events))
	}
}

// TestLostRestoreOfDeletedPodForgotten: a pod whose restore's answer was
// lost and which is deleted before the retry takes its entry with it (no
// entry per deleted pod left for the process's life).
func TestLostRestoreOfDeletedPodForgotten(t *testing.T) {
	ctx := context.Background()
	c, client, _ := newController(t, readyNode(), markedPod(companion.KubeControllerManager))
	client.PrependReactor("update", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, context.DeadlineExceeded
	})
	if err := c.sync(ctx, "default/web-1"); err == nil {
		t.Fatal("a restore without an answer reported success")
	}
	if len(c.lost) != 1 {
		t.Fatalf("%d lost restores remembered, want 1", len(c.lost))
	}
	if err := client.CoreV1().Pods("default").Delete(ctx, "web-1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := c.sync(ctx, "default/web-1"); err != nil {
		t.Fatal(err)
	}
	if len(c.lost) != 0 {
		t.Errorf("the deleted pod's lost restore is still remembered: %v", c.lost)
	}
}
