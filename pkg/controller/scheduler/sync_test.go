package scheduler

import (
	"context"
	"math/rand"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/nodeshepherd/nodeshepherd/pkg/controllertest"
)

// The scheduler through New and Run over a fake clientset and a fake clock:
// a pod that fits is bound; a high-priority pod that does not fit preempts
// the lowest-priority victim (DisruptionTarget, delete), is nominated, and
// is bound once the victim is gone.

func runScheduler(t *testing.T, objs ...runtime.Object) (*fake.Clientset, *testingclock.FakeClock, *record.FakeRecorder) {
	t.Helper()
	// NewSimpleClientset: NewClientset's type converter costs ~1 s per race
	// test binary, and nothing here uses server-side apply.
	client := fake.NewSimpleClientset(objs...)
	// The fake records a binding but leaves the pod unbound; the API server
	// sets spec.nodeName. Without it the bound pod would come back Pending
	// with its next update (the nomination, written in the background) and
	// be scheduled again, which no real cluster does.
	client.PrependReactor("create", "pods", func(a clienttesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() != "binding" {
			return false, nil, nil
		}
		b := a.(clienttesting.CreateAction).GetObject().(*v1.Binding)
		gvr := v1.SchemeGroupVersion.WithResource("pods")
		obj, err := client.Tracker().Get(gvr, a.GetNamespace(), b.Name)
		if err != nil {
			return true, nil, err
		}
		p := obj.(*v1.Pod).DeepCopy()
		p.Spec.NodeName = b.Target.Name
		return true, b, client.Tracker().Update(gvr, p, a.GetNamespace())
	})
	factory := informers.NewSharedInformerFactory(client, 0)
	clk := testingclock.NewFakeClock(epoch)
	rec := record.NewFakeRecorder(100)
	s, err := New(DefaultConfig(), Deps{Client: client, Nodes: factory.Core().V1().Nodes(), Pods: factory.Core().V1().Pods(),
		PDBs: factory.Policy().V1().PodDisruptionBudgets(), Recorder: rec, Registry: prometheus.NewRegistry(), Clock: clk,
		Rand: rand.New(rand.NewSource(1))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	factory.Start(ctx.Done())
	go func() { done <- s.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil && ctx.Err() == nil {
			t.Error(err)
		}
		factory.Shutdown()
	})
	return client, clk, rec
}

// until steps the fake clock a second at a time (the queue's flush tick)
// until cond holds, for at most a minute of real time (a busy machine under
// -race; a passing test takes milliseconds).
func until(t *testing.T, clk *testingclock.FakeClock, client *fake.Clientset, what string, cond func([]string) bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond(controllertest.Writes(client)) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s; writes %q", what, controllertest.Writes(client))
		}
		time.Sleep(5 * time.Millisecond) // let the informers and workers run
		clk.Step(time.Second)
	}
}

func TestRunBindsAPodThatFits(t *testing.T) {
	client, clk, _ := runScheduler(t, node("node1", 1000, 10), pod("p", 0, 500))
	until(t, clk, client, "the binding", func(w []string) bool { return slices.Contains(w, "create pods/binding p->node1") })
	for _, w := range controllertest.Writes(client) {
		if strings.HasPrefix(w, "delete") {
			t.Errorf("deleted a pod although p fits: %q", w)
		}
	}
}

func TestRunPreemptsTheLowestPriorityVictim(t *testing.T) {
	client, clk, rec := runScheduler(t, node("node1", 1000, 10),
		pod("low", 10, 400, onNode("node1")), pod("mid", 50, 400, onNode("node1")), pod("high", 100, 500))
	until(t, clk, client, "the preemptor bound", func(w []string) bool { return slices.Contains(w, "create pods/binding high->node1") })
	w := controllertest.Writes(client)
	idx := func(s string) int { return slices.Index(w, s) }
	if idx("delete pods low") < 0 || idx("patch pods/status low") < 0 || idx("patch pods/status low") > idx("delete pods low") {
		t.Errorf("writes %q: want low marked DisruptionTarget, then deleted", w)
	}
	if idx("delete pods mid") >= 0 {
		t.Errorf("deleted mid, more than needed: %q", w)
	}
	// The nomination is written in the background, so on a fake clientset
	// (where the victim goes at once) it may land after the binding; the
	// victim's deletion must come first.
	if idx("patch pods/status high") < 0 {
		t.Errorf("writes %q: want high nominated", w)
	}
	if idx("delete pods low") > idx("create pods/binding high->node1") {
		t.Errorf("writes %q: want high bound only after its victim is deleted", w)
	}
	found := false
	for len(rec.Events) > 0 {
		if e := <-rec.Events; strings.Contains(e, preemptedReason) {
			found = true
		}
	}
	if !found {
		t.Errorf("no %s event", preemptedReason)
	}
}
