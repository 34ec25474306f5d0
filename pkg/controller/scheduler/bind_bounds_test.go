package scheduler

import (
	"context"
	"math/rand"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/record"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/nodeshepherd/nodeshepherd/pkg/kube"
)

// Issue 45 (4d): each write of a binding goroutine (the binding, a
// volume's or a claim's update) is bounded by kube.WriteTimeout and is a
// tracked step while it runs, so that one that never ended would show in
// /healthz; it ends with the write.
func TestBindingWritesBoundedAndTracked(t *testing.T) {
	client := fake.NewClientset()
	factory := informers.NewSharedInformerFactory(client, 0)
	clk := testingclock.NewFakeClock(epoch)
	s, err := New(DefaultConfig(), Deps{Client: client, Nodes: factory.Core().V1().Nodes(), Pods: factory.Core().V1().Pods(),
		PDBs: factory.Policy().V1().PodDisruptionBudgets(), Recorder: record.NewFakeRecorder(100), Clock: clk,
		Rand: rand.New(rand.NewSource(1))})
	if err != nil {
		t.Fatal(err)
	}
	var deadline time.Duration
	var during error
	_, err = boundWrite(context.Background(), s, "binding pod default/p to node n1", func(ctx context.Context) (struct{}, error) {
		if dl, ok := ctx.Deadline(); ok {
			deadline = time.Until(dl)
		}
		during = s.Healthy(clk.Now().Add(time.Hour))
		return struct{}{}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if deadline <= 0 || deadline > kube.WriteTimeout {
		t.Errorf("the write's deadline is %v away, want within %v", deadline, kube.WriteTimeout)
	}
	if during == nil || !strings.Contains(during.Error(), "busy on binding pod default/p to node n1") {
		t.Errorf("health during the write (an hour later): %v, want the step named", during)
	}
	if after := s.Healthy(clk.Now().Add(time.Hour)); after != nil {
		t.Errorf("health after the write: %v", after)
	}
}
