package remediation

import (
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	rem "github.com/nodeshepherd/nodeshepherd/pkg/remediation"
)

// atStep is deadlocked(name, boot) whose repair under rebootPolicy is at
// step i since since.
func atStep(name, boot string, i int, action rem.Action, since time.Time) *v1.Node {
	n := deadlocked(name, boot)
	n.Annotations = map[string]string{rem.AnnotationState: rem.EncodeState("gpu", action,
		rem.State{Step: i, Key: rem.StepKey(i, rem.Step{Action: action}), StepSince: since, RepairSince: t0.Add(-11 * time.Minute), BootID: boot})}
	rem.SetRecordExpiry(n, t0.Add(time.Hour)) // no renewal due
	return n
}

// Chaos seed 200048: the write that moved a node to its Reboot step lost
// its answer and landed late, after the list the next decision was made on
// and before that decision's write read the node. That write must not go
// over the landed one: the step would start again (a new stepSince, its
// clock and its timeout restarted). Here the cache and the fresh list
// show step 1 past its timeout; the API server's node, as read before the
// write, is already at step 2 since 2 s ago.
func TestStepNotWrittenOverALateLanding(t *testing.T) {
	ctx := t.Context()
	stale := atStep("n", "b1", 0, rem.ActionReboot, t0.Add(-11*time.Minute))
	landed := atStep("n", "b1", 1, rem.ActionReplace, t0.Add(-2*time.Second))
	client := fake.NewClientset(landed)
	client.PrependReactor("list", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, &v1.NodeList{Items: []v1.Node{*stale.DeepCopy()}}, nil // answered before the late write landed
	})
	r := &fakeRepairer{}
	c := behindController(t, client, stale.DeepCopy(), r)
	if err := c.sync(ctx, "n"); err != nil {
		t.Fatal(err)
	}
	n, err := client.CoreV1().Nodes().Get(ctx, "n", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	st, err := rem.ReadRecord(n, "gpu")
	if err != nil || st.Step != 1 || !st.StepSince.Equal(t0.Add(-2*time.Second)) {
		t.Fatalf("record %+v (%v): step 2 started again over the one that landed", st, err)
	}
	if len(r.ids) != 0 {
		t.Errorf("asked %v on a decision the API server had moved past", r.ids)
	}
}
