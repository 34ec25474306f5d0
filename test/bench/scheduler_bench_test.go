package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/time/rate"
	v1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/nodeshepherd/nodeshepherd/pkg/benchenv"
	"github.com/nodeshepherd/nodeshepherd/pkg/controller/scheduler"
	"github.com/nodeshepherd/nodeshepherd/pkg/controlplane"
	"github.com/nodeshepherd/nodeshepherd/test/framework"
)

// BenchmarkScheduler runs kube-scheduler and nodeshepherd's scheduler
// against the same control plane and BENCH_NODES (1,000) fake nodes of 4 CPUs
// in three zones, one after the other, each as its own process with the same
// client QPS and burst (BENCH_QPS, 1,000). Workloads (BENCH_WORKLOADS, a
// comma-separated subset; all by default), each of BENCH_PODS (10,000) pods
// of 100m created at once by 32 clients:
//
//	plain:        no constraints;
//	paced:        plain pods, but created at BENCH_CREATE_RATE (100) pods/s
//	              by all clients together: the same storm for both
//	              schedulers. Unpaced, the storm depends on the scheduler
//	              under test: on a small machine the creators and the API
//	              server get the CPU that the scheduler leaves, so a lean
//	              scheduler faces a harsher storm than a hungry one;
//	antiaffinity: groups of 10 pods, each group required anti-affine on
//	              kubernetes.io/hostname (10 groups per node at 1,000 nodes);
//	spread:       topology spread DoNotSchedule, maxSkew 1 on zone, and
//	              ScheduleAnyway, maxSkew 1 on hostname;
//
// each measured as pods bound per second from the first creation to the last
// binding, and the median and p99 time from creation (just before the create
// call) to binding (seen by a watch); and
//
//	preemption:   every node filled with 4 pods of priority 10 and 1 CPU
//	              (placed directly), then BENCH_PREEMPTORS (1,000) pods of
//	              priority 1000 and 1 CPU: preemptors bound per second and
//	              victims per preemptor.
//
// With BENCH_SATURATE=1 every workload is measured at saturation, as
// scheduler_perf's SchedulingThroughput: the scheduler under test is frozen
// (SIGSTOP) while every pod of the round is created and seen by the
// benchmark's watch, then let go (SIGCONT); pods/s counts from that moment
// to the last binding, so that the creators' rate no longer caps it (the
// latencies are from the release too). Both schedulers are frozen the same
// way; their watches may be closed by the API server meanwhile and re-list.
//
// BENCH_TRIALS (5) trials on the same control plane; the scheduler that goes
// first alternates. The node lifecycle controller (for the not-ready taints)
// runs in a third process. It prints every trial, then one table with the
// median and range of both schedulers' figures and of their ratios.
func BenchmarkScheduler(b *testing.B) {
	nodes, pods, preemptors := benchenv.Int(b, "BENCH_NODES", 1000), benchenv.Int(b, "BENCH_PODS", 10000), benchenv.Int(b, "BENCH_PREEMPTORS", 1000)
	qps, trials := benchenv.Int(b, "BENCH_QPS", 1000), benchenv.Int(b, "BENCH_TRIALS", 5)
	workloads := benchenv.List(b, "BENCH_WORKLOADS", []string{"plain", "paced", "antiaffinity", "spread", "preemption"})
	paceRate := benchenv.Int(b, "BENCH_CREATE_RATE", 100)
	saturate := benchenv.Bool(b, "BENCH_SATURATE")
	// Read with the others, so that a malformed value stops the run before
	// the control plane starts (BENCH_TIMELINE=0 is off, not on).
	timeline := benchenv.Bool(b, "BENCH_TIMELINE")
	qpsArgs := []string{fmt.Sprintf("--kube-api-qps=%d", qps), fmt.Sprintf("--kube-api-burst=%d", qps)}
	// kube-scheduler gets its client limits in its configuration file (with
	// its default backoffs), and the benchmark reads them back from its
	// /configz, as simulate does: flags that a configuration overrides
	// would otherwise compare unlike with unlike, silently.
	schedCfg := controlplane.SchedulerConfig{QPS: float32(qps), Burst: int32(qps), PodInitialBackoffSeconds: 1, PodMaxBackoffSeconds: 10}
	// BENCH_APISERVER_ARGS (space-separated), e.g. -v=1 to log the watchers
	// that kube-apiserver closes for falling behind.
	cp := framework.StartControlPlane(b, controlplane.Config{ControllerManager: true, Scheduler: true, SchedulerConfig: &schedCfg,
		APIServerArgs: strings.Fields(os.Getenv("BENCH_APISERVER_ARGS"))})
	client := framework.Client(b, cp)
	ctx := framework.Context(b)
	got, err := cp.SchedulerConfigz(ctx)
	if err != nil {
		b.Fatal(err)
	}
	if got.QPS != schedCfg.QPS || got.Burst != schedCfg.Burst {
		b.Fatalf("kube-scheduler's /configz reports client QPS %g and burst %d, not the %g and %d it was given", got.QPS, got.Burst, schedCfg.QPS, schedCfg.Burst)
	}
	fmt.Fprintf(os.Stderr, "kube-scheduler /configz: client QPS %g, burst %d, backoff %ds to %ds; load average at start: %s\n",
		got.QPS, got.Burst, got.PodInitialBackoffSeconds, got.PodMaxBackoffSeconds, loadAverage())
	// The fake nodes run in their own process, so that the watch measuring
	// bindings does not share this process's CPU with 1,000 fake kubelets.
	sockDir := b.TempDir()
	if err := os.Chmod(sockDir, 0o700); err != nil { // the control socket must be private
		b.Fatal(err)
	}
	framework.StartBinary(b, "fakenodes", "--kubeconfig", cp.KubeconfigPath(), "--nodes", strconv.Itoa(nodes), "--cpu", "4",
		"--pod-start-delay", "1s", "--control-socket", filepath.Join(sockDir, "fakenodes.sock"))
	framework.StartBinary(b, "run", "--kubeconfig", cp.KubeconfigPath(), "--controllers=nodelifecycle", "--leader-elect=false", "--metrics-bind-address=0")
	oursAddr := freeAddr(b)
	// Our scheduler runs as kube-scheduler's user: the same RBAC, and the
	// same FlowSchema and priority level (workload-high) in the API server,
	// where an admin would be exempt from queueing.
	ours := framework.StartBinary(b, append([]string{"run", "--kubeconfig", cp.SchedulerKubeconfigPath(), "--controllers=scheduler", "--leader-elect=false",
		"--metrics-bind-address=" + oursAddr}, qpsArgs...)...)
	oursMetrics := &framework.NodeShepherd{Addr: oursAddr}
	framework.WaitAllNodesReady(b, client, nodes, 10*time.Minute)
	for name, value := range map[string]int32{"bench-low": 10, "bench-high": 1000} {
		if _, err := client.SchedulingV1().PriorityClasses().Create(ctx, &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Value: value}, metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	watch := newBindWatch(b, client)
	watch.timeline = timeline
	sides := []struct {
		name, schedulerName string
		pid                 int
	}{
		{"kube-scheduler", v1.DefaultSchedulerName, cp.PID(controlplane.Scheduler)},
		{"nodeshepherd", scheduler.DefaultSchedulerName, ours.Process.Pid},
	}
	// figures[workload][measure][side] holds one value per trial.
	figures := map[string]map[string]map[string][]float64{}
	record := func(workload, measure, side string, v float64) {
		if figures[workload] == nil {
			figures[workload] = map[string]map[string][]float64{}
		}
		if figures[workload][measure] == nil {
			figures[workload][measure] = map[string][]float64{}
		}
		figures[workload][measure][side] = append(figures[workload][measure][side], v)
	}
	for trial := range trials {
		for _, workload := range workloads {
			for k := range sides {
				side := sides[(k+trial)%len(sides)]
				cpu0 := cpuSeconds(b, side.pid)
				watch.probe = nil
				if side.pid == ours.Process.Pid {
					// Where a pod's time goes: seen by the scheduler's
					// informer, scheduled, then bound (the watch).
					watch.probe = func() string {
						return fmt.Sprintf(" | ours: seen %5.0f scheduled %5.0f bind calls answered %5.0f in flight %4.0f",
							oursMetrics.Metric(b, "scheduler_queue_incoming_pods_total", map[string]string{"event": "PodAdd"}),
							oursMetrics.Metric(b, "scheduler_schedule_attempts_total", map[string]string{"result": "scheduled"}),
							oursMetrics.Metric(b, "scheduler_framework_extension_point_duration_seconds", map[string]string{"extension_point": "Bind"}),
							oursMetrics.Metric(b, "nodeshepherd_scheduler_bindings_in_flight", nil))
					}
				}
				var r roundResult
				watch.hold = 0
				if saturate {
					watch.hold = side.pid
					if workload == "paced" {
						b.Fatalf("BENCH_SATURATE=1 and the paced workload measure opposite things: leave paced out of BENCH_WORKLOADS")
					}
				}
				switch workload {
				case "preemption":
					names := nodeNames(b, client)
					createMany(b, client, len(names)*4, func(i int) *v1.Pod {
						return benchPod(fmt.Sprintf("low-%d", i), side.schedulerName, names[i/4], "bench-low", "1")
					})
					lowBefore := countPods(b, client, "low-")
					cpu0 = cpuSeconds(b, side.pid)
					r = watch.round(b, client, preemptors, func(i int) *v1.Pod {
						return benchPod(fmt.Sprintf("high-%d", i), side.schedulerName, "", "bench-high", "1")
					})
					victims := float64(lowBefore-countPods(b, client, "low-")) / float64(preemptors)
					record(workload, "victims per preemptor", side.name, victims)
					fmt.Fprintf(os.Stderr, "trial %d preemption %s: %.2f victims per preemptor\n", trial+1, side.name, victims)
				default:
					mk := workloadPod(b, workload)
					watch.pace = nil
					if workload == "paced" {
						watch.pace = rate.NewLimiter(rate.Limit(paceRate), 1)
					}
					r = watch.round(b, client, pods, func(i int) *v1.Pod { return mk(i, side.schedulerName) })
				}
				cpu := cpuSeconds(b, side.pid) - cpu0
				deleteAllPods(b, client)
				record(workload, "pods/s", side.name, r.throughput)
				if workload != "preemption" {
					record(workload, "creation to binding p50 (s)", side.name, r.p50)
					record(workload, "creation to binding p99 (s)", side.name, r.p99)
				}
				record(workload, "scheduler CPU (s)", side.name, cpu)
				fmt.Fprintf(os.Stderr, "trial %d %s %s: %d pods bound, %.0f pods/s, p50 %.2fs, p99 %.2fs, %.1f CPU-s; creation took %.1fs, %d bound by then; load average %s\n",
					trial+1, workload, side.name, r.placed, r.throughput, r.p50, r.p99, cpu, r.createDur, r.boundAtCreated, loadAverage())
			}
		}
	}
	fmt.Fprintf(os.Stderr, "nodeshepherd metrics: %.0f binding errors, %.0f preemption attempts, %.0f preemptions\n",
		oursMetrics.Metric(b, "scheduler_schedule_attempts_total", map[string]string{"result": "error"}),
		oursMetrics.Metric(b, "scheduler_preemption_attempts_total", nil), oursMetrics.Metric(b, "scheduler_preemption_victims", nil))
	mode := "pods created while the scheduler runs"
	if saturate {
		mode = "saturated: every pod created while the scheduler was frozen, timed from its release"
	}
	fmt.Fprintf(os.Stderr, "\n%d nodes in 3 zones, %d pods, %d preemptors, client QPS and burst %d for both schedulers, GOGC %q for both; %s; median [range] of %d trials\n",
		nodes, pods, preemptors, qps, os.Getenv("GOGC"), mode, trials)
	fmt.Fprintf(os.Stderr, "%-45s %-22s %-22s %s\n", "", "kube-scheduler", "nodeshepherd", "ratio")
	for _, workload := range workloads {
		for _, measure := range []string{"pods/s", "creation to binding p50 (s)", "creation to binding p99 (s)", "victims per preemptor", "scheduler CPU (s)"} {
			f := figures[workload][measure]
			if f == nil {
				continue
			}
			k, n := f["kube-scheduler"], f["nodeshepherd"]
			ratios := make([]float64, len(k))
			for i := range k {
				ratios[i] = n[i] / k[i]
			}
			fmt.Fprintf(os.Stderr, "%-45s %-22s %-22s %s\n", workload+" "+measure, spreadOf(k, "%.2f"), spreadOf(n, "%.2f"), spreadOf(ratios, "%.2fx"))
		}
	}
}

// loadAverage is the machine's 1, 5 and 15 minute load averages, so that a
// reader can tell a quiet run from a shared one.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown (" + err.Error() + ")"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

// spreadOf formats the median and range of vs.
func spreadOf(vs []float64, format string) string {
	s := slices.Sorted(slices.Values(vs))
	if len(s) == 0 {
		return "-"
	}
	med := s[len(s)/2]
	if len(s)%2 == 0 {
		med = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return fmt.Sprintf(format+" ["+format+"–"+format+"]", med, s[0], s[len(s)-1])
}

// workloadPod returns the pod maker of a workload of 100m pods.
func workloadPod(b *testing.B, workload string) func(i int, schedulerName string) *v1.Pod {
	switch workload {
	case "plain", "paced":
		return func(i int, sn string) *v1.Pod { return benchPod(fmt.Sprintf("a-%d", i), sn, "", "", "100m") }
	case "antiaffinity":
		return func(i int, sn string) *v1.Pod {
			p := benchPod(fmt.Sprintf("aa-%d", i), sn, "", "", "100m")
			group := map[string]string{"group": fmt.Sprintf("g-%d", i/10)}
			p.Labels = group
			p.Spec.Affinity = &v1.Affinity{PodAntiAffinity: &v1.PodAntiAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []v1.PodAffinityTerm{{
				LabelSelector: &metav1.LabelSelector{MatchLabels: group}, TopologyKey: v1.LabelHostname}}}}
			return p
		}
	case "spread":
		return func(i int, sn string) *v1.Pod {
			p := benchPod(fmt.Sprintf("ts-%d", i), sn, "", "", "100m")
			p.Labels = map[string]string{"app": "spread"}
			sel := &metav1.LabelSelector{MatchLabels: p.Labels}
			p.Spec.TopologySpreadConstraints = []v1.TopologySpreadConstraint{
				{MaxSkew: 1, TopologyKey: v1.LabelTopologyZone, WhenUnsatisfiable: v1.DoNotSchedule, LabelSelector: sel},
				{MaxSkew: 1, TopologyKey: v1.LabelHostname, WhenUnsatisfiable: v1.ScheduleAnyway, LabelSelector: sel},
			}
			return p
		}
	}
	b.Fatalf("BENCH_WORKLOADS: unknown workload %q (want plain, paced, antiaffinity, spread or preemption)", workload)
	return nil
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

func nodeNames(b *testing.B, client kubernetes.Interface) []string {
	l, err := client.CoreV1().Nodes().List(framework.Context(b), metav1.ListOptions{})
	if err != nil {
		b.Fatal(err)
	}
	var names []string
	for _, n := range l.Items {
		names = append(names, n.Name)
	}
	slices.Sort(names)
	return names
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
	// probe, when set, adds the scheduler's own counts to the timeline.
	probe func() string
	// pace, when set, spaces the creations of a round (all clients
	// together), so that both schedulers face the same arrival rate.
	pace *rate.Limiter
	// hold, when set, is the process of the scheduler under test: frozen
	// while the round's pods are created, let go once all are seen, and
	// the round is timed from then (saturation).
	hold int
	// added are the round's pods the watch has seen created.
	added map[string]bool
	// timeline (BENCH_TIMELINE) prints pods created and bound every 2 s.
	timeline bool
}

func newBindWatch(b *testing.B, client kubernetes.Interface) *bindWatch {
	w := &bindWatch{created: map[string]time.Time{}, bound: map[string]time.Time{}, added: map[string]bool{}}
	f := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithNamespace("default"))
	seen := func(obj any) {
		p, ok := obj.(*v1.Pod)
		if !ok {
			return
		}
		w.mu.Lock()
		if _, ok := w.created[p.Name]; ok {
			w.added[p.Name] = true
		}
		w.mu.Unlock()
		if p.Spec.NodeName == "" {
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

// roundResult is one round's figures.
type roundResult struct {
	placed               int
	throughput, p50, p99 float64
	createDur            float64 // seconds to create every pod
	boundAtCreated       int     // pods bound when the last create returned
}

// round creates n pods at once and waits until all are bound: how many
// were bound, pods per second from the first creation to the last binding,
// and the median and p99 creation-to-binding latency in seconds. With
// BENCH_TIMELINE=1 it prints pods created and bound every 2 s.
func (w *bindWatch) round(b *testing.B, client kubernetes.Interface, n int, mk func(int) *v1.Pod) roundResult {
	w.mu.Lock()
	w.created, w.bound, w.added = map[string]time.Time{}, map[string]time.Time{}, map[string]bool{}
	w.mu.Unlock()
	if w.hold != 0 {
		if err := syscall.Kill(w.hold, syscall.SIGSTOP); err != nil {
			b.Fatalf("freezing the scheduler (pid %d): %v", w.hold, err)
		}
		// Never left frozen, whatever happens to the round.
		defer func() { _ = syscall.Kill(w.hold, syscall.SIGCONT) }()
	}
	start := time.Now()
	var createdN atomic.Int64
	stop := make(chan struct{})
	var sampler sync.WaitGroup
	if w.timeline {
		sampler.Go(func() {
			t := time.NewTicker(2 * time.Second)
			defer t.Stop()
			for {
				select {
				case <-stop:
					return
				case <-t.C:
					w.mu.Lock()
					bound := len(w.bound)
					w.mu.Unlock()
					extra := ""
					if w.probe != nil {
						extra = w.probe()
					}
					fmt.Fprintf(os.Stderr, "  t=%3.0fs created %5d bound %5d%s\n", time.Since(start).Seconds(), createdN.Load(), bound, extra)
				}
			}
		})
	}
	createMany(b, client, n, func(i int) *v1.Pod {
		if w.pace != nil {
			_ = w.pace.Wait(context.Background())
		}
		p := mk(i)
		w.mu.Lock()
		w.created[p.Name] = time.Now()
		w.mu.Unlock()
		createdN.Add(1)
		return p
	})
	var r roundResult
	r.createDur = time.Since(start).Seconds()
	if w.hold != 0 {
		framework.Eventually(b, 10*time.Minute, "every pod of the round seen created", func(context.Context) (bool, string, error) {
			w.mu.Lock()
			defer w.mu.Unlock()
			return len(w.added) >= n, fmt.Sprintf("%d of %d seen", len(w.added), n), nil
		})
		// Timed from the release: the scheduler finds all of them waiting.
		if err := syscall.Kill(w.hold, syscall.SIGCONT); err != nil {
			b.Fatalf("letting the scheduler (pid %d) go: %v", w.hold, err)
		}
		start = time.Now()
		w.mu.Lock()
		for name := range w.created {
			w.created[name] = start
		}
		w.mu.Unlock()
	}
	w.mu.Lock()
	r.boundAtCreated = len(w.bound)
	w.mu.Unlock()
	var lat []float64
	last := start
	framework.Eventually(b, 30*time.Minute, "all pods bound", func(context.Context) (bool, string, error) {
		w.mu.Lock()
		defer w.mu.Unlock()
		return len(w.bound) >= n, fmt.Sprintf("%d of %d bound", len(w.bound), n), nil
	})
	close(stop)
	sampler.Wait()
	w.mu.Lock()
	for name, t := range w.bound {
		lat = append(lat, t.Sub(w.created[name]).Seconds())
		if t.After(last) {
			last = t
		}
	}
	w.mu.Unlock()
	slices.Sort(lat)
	r.placed, r.throughput, r.p50, r.p99 = len(lat), float64(n)/last.Sub(start).Seconds(), lat[len(lat)/2], lat[len(lat)*99/100]
	return r
}
