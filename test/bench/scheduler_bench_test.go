package bench

import (
	"context"
	"fmt"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/nodeshepherd/nodeshepherd/pkg/controller/scheduler"
	"github.com/nodeshepherd/nodeshepherd/pkg/controlplane"
	"github.com/nodeshepherd/nodeshepherd/pkg/fakenode"
	"github.com/nodeshepherd/nodeshepherd/test/framework"
)

// BenchmarkScheduler runs kube-scheduler and nodeshepherd's scheduler
// against the same control plane and BENCH_NODES (1,000) fake nodes of 4 CPUs,
// one after the other, each as its own process with the same client QPS
// (BENCH_QPS, 1,000):
//
//	(a) BENCH_PODS (10,000) pods of 100m created at once: pods bound per
//	    second, median and p99 time from creation to binding;
//	(b) every node filled with 4 pods of priority 10 and 1 CPU (placed
//	    directly), then BENCH_PREEMPTORS (1,000) pods of priority 1000 and
//	    1 CPU: preemptors bound per second and victims per preemptor.
//
// The node lifecycle controller (for the not-ready taints) runs in a third
// process. It prints one table with both schedulers and their ratios.
func BenchmarkScheduler(b *testing.B) {
	nodes, pods, preemptors := envInt("BENCH_NODES", 1000), envInt("BENCH_PODS", 10000), envInt("BENCH_PREEMPTORS", 1000)
	qps := envInt("BENCH_QPS", 1000)
	qpsArgs := []string{fmt.Sprintf("--kube-api-qps=%d", qps), fmt.Sprintf("--kube-api-burst=%d", qps)}
	cp := framework.StartControlPlane(b, controlplane.Config{ControllerManager: true, Scheduler: true, SchedulerArgs: qpsArgs})
	client := framework.Client(b, cp)
	ctx := framework.Context(b)
	fn := framework.StartFakeNodes(b, fakenode.Config{Client: client, Nodes: nodes, CPU: resource.MustParse("4"), PodStartDelay: time.Second})
	framework.StartBinary(b, "run", "--kubeconfig", cp.KubeconfigPath(), "--controllers=nodelifecycle", "--leader-elect=false", "--metrics-bind-address=0")
	oursAddr := freeAddr(b)
	ours := framework.StartBinary(b, append([]string{"run", "--kubeconfig", cp.KubeconfigPath(), "--controllers=scheduler", "--leader-elect=false",
		"--metrics-bind-address=" + oursAddr}, qpsArgs...)...)
	oursMetrics := &framework.NodeShepherd{Addr: oursAddr}
	framework.WaitAllNodesReady(b, client, nodes, 10*time.Minute)
	for name, value := range map[string]int32{"bench-low": 10, "bench-high": 1000} {
		if _, err := client.SchedulingV1().PriorityClasses().Create(ctx, &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Value: value}, metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	watch := newBindWatch(b, client)
	sides := []struct {
		name, schedulerName string
		pid                 int
	}{
		{"kube-scheduler", v1.DefaultSchedulerName, cp.PID(controlplane.Scheduler)},
		{"nodeshepherd", scheduler.DefaultSchedulerName, ours.Process.Pid},
	}
	type result struct {
		throughput, p50, p99, cpuA float64
		preemptRate, victims, cpuB float64
		placedA, placedB           int
	}
	results := map[string]result{}
	for _, side := range sides {
		var r result
		// (a) throughput
		cpu0 := cpuSeconds(b, side.pid)
		r.placedA, r.throughput, r.p50, r.p99 = watch.round(b, client, pods, func(i int) *v1.Pod {
			return benchPod(fmt.Sprintf("a-%d", i), side.schedulerName, "", "", "100m")
		})
		r.cpuA = cpuSeconds(b, side.pid) - cpu0
		deleteAllPods(b, client)

		// (b) preemption
		names := fn.NodeNames()
		createMany(b, client, len(names)*4, func(i int) *v1.Pod {
			return benchPod(fmt.Sprintf("low-%d", i), side.schedulerName, names[i/4], "bench-low", "1")
		})
		lowBefore := countPods(b, client, "low-")
		cpu0 = cpuSeconds(b, side.pid)
		r.placedB, r.preemptRate, _, _ = watch.round(b, client, preemptors, func(i int) *v1.Pod {
			return benchPod(fmt.Sprintf("high-%d", i), side.schedulerName, "", "bench-high", "1")
		})
		r.cpuB = cpuSeconds(b, side.pid) - cpu0
		r.victims = float64(lowBefore-countPods(b, client, "low-")) / float64(preemptors)
		deleteAllPods(b, client)
		results[side.name] = r
		if side.name == "nodeshepherd" {
			fmt.Fprintf(os.Stderr, "nodeshepherd metrics: %.0f binding errors, %.0f preemption attempts, %.0f preemptions\n",
				oursMetrics.Metric(b, "scheduler_schedule_attempts_total", map[string]string{"result": "error"}),
				oursMetrics.Metric(b, "scheduler_preemption_attempts_total", nil), oursMetrics.Metric(b, "scheduler_preemption_victims", nil))
		}
		fmt.Fprintf(os.Stderr, "%s: (a) %d pods in %.0f pods/s, p50 %.2fs, p99 %.2fs, %.1f CPU-s; (b) %d preemptors at %.1f/s, %.2f victims each, %.1f CPU-s",
			side.name, r.placedA, r.throughput, r.p50, r.p99, r.cpuA, r.placedB, r.preemptRate, r.victims, r.cpuB)
		fmt.Fprintln(os.Stderr)
	}
	k, n := results["kube-scheduler"], results["nodeshepherd"]
	fmt.Fprintf(os.Stderr, "\n%d nodes, client QPS %d for both schedulers\n", nodes, qps)
	fmt.Fprintf(os.Stderr, "%-40s %14s %14s %8s\n", "", "kube-scheduler", "nodeshepherd", "ratio")
	row := func(what string, kv, nv float64, format string) {
		fmt.Fprintf(os.Stderr, "%-40s %14s %14s %7.2fx\n", what, fmt.Sprintf(format, kv), fmt.Sprintf(format, nv), nv/kv)
	}
	row(fmt.Sprintf("(a) %d pods: pods/s", pods), k.throughput, n.throughput, "%.0f")
	row("(a) creation to binding p50 (s)", k.p50, n.p50, "%.2f")
	row("(a) creation to binding p99 (s)", k.p99, n.p99, "%.2f")
	row("(a) scheduler CPU (s)", k.cpuA, n.cpuA, "%.1f")
	row(fmt.Sprintf("(b) %d preemptors: placed/s", preemptors), k.preemptRate, n.preemptRate, "%.1f")
	row("(b) victims per preemptor", k.victims, n.victims, "%.2f")
	row("(b) scheduler CPU (s)", k.cpuB, n.cpuB, "%.1f")
}

func benchPod(name, schedulerName, node, class, cpu string) *v1.Pod {
	return &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: v1.PodSpec{SchedulerName: schedulerName, NodeName: node, PriorityClassName: class, TerminationGracePeriodSeconds: new(int64(0)),
			Containers: []v1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10",
				Resources: v1.ResourceRequirements{Requests: v1.ResourceList{v1.ResourceCPU: resource.MustParse(cpu)}}}}}}
}

// createMany creates n pods with 32 parallel clients and returns when all
// are created.
func createMany(b *testing.B, client kubernetes.Interface, n int, mk func(int) *v1.Pod) {
	parallel(b, n, func(i int) error {
		_, err := client.CoreV1().Pods("default").Create(context.Background(), mk(i), metav1.CreateOptions{})
		return err
	})
}

// parallel runs fn for 0..n-1 on 32 goroutines; the first error fails b.
func parallel(b *testing.B, n int, fn func(int) error) {
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 1)
	for range 32 {
		wg.Go(func() {
			for i := int(next.Add(1)) - 1; i < n; i = int(next.Add(1)) - 1 {
				if err := fn(i); err != nil {
					select {
					case errs <- err:
					default:
					}
					return
				}
			}
		})
	}
	wg.Wait()
	select {
	case err := <-errs:
		b.Fatal(err)
	default:
	}
}

func countPods(b *testing.B, client kubernetes.Interface, prefix string) int {
	l, err := client.CoreV1().Pods("default").List(framework.Context(b), metav1.ListOptions{})
	if err != nil {
		b.Fatal(err)
	}
	n := 0
	for _, p := range l.Items {
		if len(p.Name) >= len(prefix) && p.Name[:len(prefix)] == prefix && p.DeletionTimestamp == nil {
			n++
		}
	}
	return n
}

// deleteAllPods deletes every pod one by one (a collection delete of
// 10,000 pods outlasts the API server's request timeout).
func deleteAllPods(b *testing.B, client kubernetes.Interface) {
	l, err := client.CoreV1().Pods("default").List(framework.Context(b), metav1.ListOptions{})
	if err != nil {
		b.Fatal(err)
	}
	parallel(b, len(l.Items), func(i int) error {
		err := client.CoreV1().Pods("default").Delete(context.Background(), l.Items[i].Name, metav1.DeleteOptions{GracePeriodSeconds: new(int64(0))})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return err
	})
	framework.Eventually(b, 5*time.Minute, "all pods gone", func(ctx context.Context) (bool, string, error) {
		l, err := client.CoreV1().Pods("default").List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, "", err
		}
		return len(l.Items) == 0, fmt.Sprintf("%d left", len(l.Items)), nil
	})
}

// bindWatch records when each pod was first seen bound, from a watch.
type bindWatch struct {
	mu      sync.Mutex
	created map[string]time.Time
	bound   map[string]time.Time
}

func newBindWatch(b *testing.B, client kubernetes.Interface) *bindWatch {
	w := &bindWatch{created: map[string]time.Time{}, bound: map[string]time.Time{}}
	f := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithNamespace("default"))
	seen := func(obj any) {
		p, ok := obj.(*v1.Pod)
		if !ok || p.Spec.NodeName == "" {
			return
		}
		w.mu.Lock()
		if _, ok := w.created[p.Name]; ok {
			if _, done := w.bound[p.Name]; !done {
				w.bound[p.Name] = time.Now()
			}
		}
		w.mu.Unlock()
	}
	_, _ = f.Core().V1().Pods().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: seen, UpdateFunc: func(_, o any) { seen(o) }})
	ctx := framework.Context(b)
	f.Start(ctx.Done())
	f.WaitForCacheSync(ctx.Done())
	return w
}

// round creates n pods at once and waits until all are bound; it returns
// how many were bound, pods per second from the first creation to the last
// binding, and the median and p99 creation-to-binding latency in seconds.
func (w *bindWatch) round(b *testing.B, client kubernetes.Interface, n int, mk func(int) *v1.Pod) (int, float64, float64, float64) {
	w.mu.Lock()
	w.created, w.bound = map[string]time.Time{}, map[string]time.Time{}
	w.mu.Unlock()
	start := time.Now()
	createMany(b, client, n, func(i int) *v1.Pod {
		p := mk(i)
		w.mu.Lock()
		w.created[p.Name] = time.Now()
		w.mu.Unlock()
		return p
	})
	var lat []float64
	last := start
	framework.Eventually(b, 30*time.Minute, "all pods bound", func(context.Context) (bool, string, error) {
		w.mu.Lock()
		defer w.mu.Unlock()
		return len(w.bound) >= n, fmt.Sprintf("%d of %d bound", len(w.bound), n), nil
	})
	w.mu.Lock()
	for name, t := range w.bound {
		lat = append(lat, t.Sub(w.created[name]).Seconds())
		if t.After(last) {
			last = t
		}
	}
	w.mu.Unlock()
	slices.Sort(lat)
	return len(lat), float64(n) / last.Sub(start).Seconds(), lat[len(lat)/2], lat[len(lat)*99/100]
}
