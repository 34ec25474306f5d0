package scheduler

import (
	"context"
	"math/rand"
	"slices"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/record"
	testingclock "k8s.io/utils/clock/testing"
)

// A binding is observed in kube-scheduler's
// scheduler_framework_extension_point_duration_seconds{extension_point="Bind"},
// with its status and the profile (the dashboard's binding latency panel).
func TestBindObservedAsExtensionPoint(t *testing.T) {
	client := fake.NewSimpleClientset(node("node1", 1000, 10), pod("p", 0, 500))
	factory := informers.NewSharedInformerFactory(client, 0)
	clk := testingclock.NewFakeClock(epoch)
	reg := prometheus.NewRegistry()
	cfg := DefaultConfig()
	s, err := New(cfg, Deps{Client: client, Nodes: factory.Core().V1().Nodes(), Pods: factory.Core().V1().Pods(),
		PDBs: factory.Policy().V1().PodDisruptionBudgets(), Recorder: record.NewFakeRecorder(100), Registry: reg, Clock: clk,
		Rand: rand.New(rand.NewSource(1))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	factory.Start(ctx.Done())
	go func() { done <- s.Run(ctx) }()
	until(t, clk, client, "the binding", func(w []string) bool { return slices.Contains(w, "create pods/binding p->node1") })
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	factory.Shutdown()

	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, mf := range families {
		if mf.GetName() != "scheduler_framework_extension_point_duration_seconds" {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			got = append(got, labels["extension_point"]+"/"+labels["status"]+"/"+labels["profile"])
			if n := m.GetHistogram().GetSampleCount(); n != 1 {
				t.Errorf("%v: %d observations, want 1", labels, n)
			}
		}
	}
	if want := []string{"Bind/Success/" + cfg.SchedulerName}; !slices.Equal(got, want) {
		t.Errorf("extension point series %q, want %q", got, want)
	}
}
