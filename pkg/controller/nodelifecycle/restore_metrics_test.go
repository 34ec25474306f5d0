package nodelifecycle

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	k8stesting "k8s.io/client-go/testing"
)

// A readiness restore whose write the API server refuses counts in
// nodeshepherd_nodelifecycle_pod_readiness_restore_errors_total (the alert
// NodeShepherdReadinessRestoresFailing reads it); a conflict, where the
// kubelet wrote first, does not; a restore that lands counts as restored.
func TestRestoreErrorsCounted(t *testing.T) {
	cl := newCluster(t, DefaultConfig(), map[string]int{"a": 1})
	c, node := cl.c, cl.nodes[0]
	mark := metav1.NewTime(cl.clk.Now().Add(-time.Minute))
	for _, name := range []string{"refused", "conflict", "ok"} {
		p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID("uid-" + name)},
			Spec: v1.PodSpec{NodeName: node},
			Status: v1.PodStatus{Conditions: []v1.PodCondition{
				{Type: v1.ContainersReady, Status: v1.ConditionTrue},
				{Type: v1.PodReady, Status: v1.ConditionFalse, LastTransitionTime: mark},
				{Type: MarkedCondition, Status: v1.ConditionTrue, LastTransitionTime: mark},
			}, ContainerStatuses: []v1.ContainerStatus{{Name: "c", Ready: true}}}}
		if _, err := c.client.CoreV1().Pods("default").Create(context.Background(), p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	c.client.(interface {
		PrependReactor(string, string, k8stesting.ReactionFunc)
	}).PrependReactor("update", "pods",
		func(a k8stesting.Action) (bool, runtime.Object, error) {
			u := a.(k8stesting.UpdateAction)
			switch u.GetObject().(*v1.Pod).Name {
			case "refused":
				return true, nil, apierrors.NewServiceUnavailable("etcd is down")
			case "conflict":
				return true, nil, apierrors.NewConflict(schema.GroupResource{Resource: "pods"}, "conflict", errors.New("the object has been modified"))
			}
			return false, nil, nil
		})
	ctx := context.Background()
	for _, name := range []string{"refused", "conflict", "ok"} {
		c.restoreQueue.Add("default/" + name)
		if !c.processRestore(ctx) {
			t.Fatal("the restore queue shut down")
		}
	}
	if got := counterValue(t, c.metrics.restoreErrors); got != 1 {
		t.Errorf("restore errors %v, want 1 (the refused write; the conflict is the kubelet's)", got)
	}
	if got := counterValue(t, c.metrics.podReadinessRestored); got != 1 {
		t.Errorf("restored %v, want 1", got)
	}
}

func counterValue(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}
