package bench

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"github.com/nodeshepherd/nodeshepherd/pkg/benchenv"
	"github.com/nodeshepherd/nodeshepherd/pkg/controlplane"
	"github.com/nodeshepherd/nodeshepherd/pkg/fakenode"
	"github.com/nodeshepherd/nodeshepherd/pkg/kube"
	"github.com/nodeshepherd/nodeshepherd/test/framework"
)

// BenchmarkDrain: BENCH_SICK (100) nodes with BENCH_PODS_PER_NODE (20) pods
// each get KernelDeadlock at once; `nodeshepherd run` drains them with
// --max-concurrent-drains=BENCH_CONCURRENT (10) onto BENCH_SPARE (50) spare
// nodes, every Deployment guarded by a PDB (maxUnavailable 10 %) and behind
// a Service. With BENCH_MOVE_BEFORE_EVICT=1 the PDBs allow no disruption
// (maxUnavailable 0) and nodeshepherd runs with --drain-move-before-evict:
// every pod is moved (its replacement made and available first). Each run
// also reports the fewest ready endpoints any Service had during the drains
// (through the benchmark's own EndpointSlice watch). It reports
// nodes drained per minute, evictions per second, and the CPU each process
// spent during the drains, to show where the time goes.
func BenchmarkDrain(b *testing.B) {
	sick, spare := benchenv.Int(b, "BENCH_SICK", 100), benchenv.Int(b, "BENCH_SPARE", 50)
	perNode, concurrent := benchenv.Int(b, "BENCH_PODS_PER_NODE", 20), benchenv.Int(b, "BENCH_CONCURRENT", 10)
	qps := benchenv.Int(b, "BENCH_QPS", 50)
	move := benchenv.Bool(b, "BENCH_MOVE_BEFORE_EVICT")
	budget := intstr.FromString("10%")
	if move {
		budget = intstr.FromInt32(0)
	}
	cp := framework.StartControlPlane(b, controlplane.Config{ControllerManager: true, Scheduler: true})
	client := framework.Client(b, cp)
	ctx := framework.Context(b)
	for i := 0; i < b.N; i++ {
		spareNodes := framework.StartFakeNodes(b, fakenode.Config{Client: client, Nodes: spare, NamePrefix: fmt.Sprintf("spare-%d-", i), PodStartDelay: 100 * time.Millisecond})
		sickNodes := framework.StartFakeNodes(b, fakenode.Config{Client: client, Nodes: sick, NamePrefix: fmt.Sprintf("sick-%d-", i), PodStartDelay: 100 * time.Millisecond})
		addr := freeAddr(b)
		args := []string{"run", "--kubeconfig", cp.KubeconfigPath(), "--controllers=nodelifecycle,tainteviction,drain",
			"--leader-elect=false", "--metrics-bind-address=" + addr, "--drain-condition=KernelDeadlock=True",
			fmt.Sprintf("--max-concurrent-drains=%d", concurrent), "--max-cordoned-nodes=100%", "--drain-buffer=0",
			fmt.Sprintf("--kube-api-qps=%d", qps), fmt.Sprintf("--kube-api-burst=%d", 2*qps)}
		if move {
			args = append(args, "--drain-move-before-evict")
		}
		ns := framework.StartBinary(b, args...)
		metrics := &framework.NodeShepherd{Addr: addr}

		// Place every pod on the sick nodes: the spares are cordoned meanwhile.
		framework.WaitAllNodesReady(b, client, spare+sick, 5*time.Minute)
		for _, n := range spareNodes.NodeNames() {
			framework.SetUnschedulable(b, client, n, true)
		}
		deployments := 10
		replicas := int32(sick * perNode / deployments)
		for d := 0; d < deployments; d++ {
			name := fmt.Sprintf("app-%d-%d", i, d)
			createBenchDeployment(b, client, name, replicas, budget)
		}
		framework.Eventually(b, 10*time.Minute, "every pod Ready", func(ctx context.Context) (bool, string, error) {
			ready := int32(0)
			for d := 0; d < deployments; d++ {
				dep, err := client.AppsV1().Deployments("default").Get(ctx, fmt.Sprintf("app-%d-%d", i, d), metav1.GetOptions{})
				if err != nil {
					return false, "", err
				}
				ready += dep.Status.ReadyReplicas
			}
			return ready == int32(deployments)*replicas, fmt.Sprintf("%d ready", ready), nil
		})
		for _, n := range spareNodes.NodeNames() {
			framework.SetUnschedulable(b, client, n, false)
		}

		pids := map[string]int{"nodeshepherd": ns.Process.Pid, "kube-apiserver": cp.PID(controlplane.APIServer),
			"kube-controller-manager": cp.PID(controlplane.ControllerManager), "kube-scheduler": cp.PID(controlplane.Scheduler)}
		before := map[string]float64{}
		for k, pid := range pids {
			before[k] = cpuSeconds(b, pid)
		}
		eps := newEndpointWatcher(b, client)
		start := time.Now()
		if _, err := sickNodes.Apply(ctx, fakenode.Fault{Action: fakenode.SetCondition, Target: fakenode.Target{All: true},
			Condition: &fakenode.Condition{Type: "KernelDeadlock", Status: v1.ConditionTrue}}); err != nil {
			b.Fatal(err)
		}
		maxInFlight := 0.0
		framework.Eventually(b, 30*time.Minute, "every sick node drained", func(ctx context.Context) (bool, string, error) {
			maxInFlight = max(maxInFlight, metrics.Metric(b, "nodeshepherd_drain_in_flight", nil))
			done := metrics.Metric(b, "draino_drained_nodes_total", map[string]string{"result": "succeeded"})
			return int(done) == sick, fmt.Sprintf("%v drained", done), nil
		})
		elapsed := time.Since(start)
		evicted := metrics.Metric(b, "nodeshepherd_drain_evictions_total", map[string]string{"result": "evicted"})
		blocked := metrics.Metric(b, "nodeshepherd_drain_evictions_blocked_by_pdb_total", nil)
		failed := metrics.Metric(b, "draino_drained_nodes_total", map[string]string{"result": "failed"})
		fewest, empty := eps.fewest()
		moved := metrics.Metric(b, "nodeshepherd_drain_moves_total", map[string]string{"result": "moved"})
		b.ReportMetric(float64(sick)/elapsed.Minutes(), "nodes-drained/min")
		b.ReportMetric(float64(sick*perNode)/elapsed.Seconds(), "pods/s")
		b.ReportMetric(float64(fewest), "fewest-ready-endpoints")
		b.ReportMetric(evicted/elapsed.Seconds(), "evictions/s")
		b.ReportMetric(maxInFlight, "max-in-flight")
		var cpu []string
		for _, k := range []string{"nodeshepherd", "kube-apiserver", "kube-controller-manager", "kube-scheduler"} {
			cores := (cpuSeconds(b, pids[k]) - before[k]) / elapsed.Seconds()
			b.ReportMetric(cores, k+"-cores")
			cpu = append(cpu, fmt.Sprintf("%s %.2f", k, cores))
		}
		mode := "evict"
		if move {
			mode = "move-before-evict"
		}
		fmt.Printf("    %d nodes x %d pods, %d concurrent, client QPS %d, %s: drained in %s (%.1f nodes/min, %.1f pods/s), %v evictions (%.1f/s), %v moves, %v refused by PDBs, %v failed drains, max %v in flight; fewest ready endpoints of a Service %d of %d, Services left with none at some moment: %d; CPU cores: %s\n",
			sick, perNode, concurrent, qps, mode, elapsed.Round(time.Second), float64(sick)/elapsed.Minutes(), float64(sick*perNode)/elapsed.Seconds(),
			evicted, evicted/elapsed.Seconds(), moved, blocked, failed, maxInFlight, fewest, replicas, empty, strings.Join(cpu, ", "))
	}
}

func freeAddr(b *testing.B) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// createBenchDeployment makes a Deployment, its PDB (maxUnavailable budget)
// and a Service in front of it.
func createBenchDeployment(b *testing.B, client kubernetes.Interface, name string, replicas int32, budget intstr.IntOrString) {
	labels := map[string]string{"app": name}
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"}, Spec: appsv1.DeploymentSpec{
		Replicas: ptr.To(replicas), Selector: &metav1.LabelSelector{MatchLabels: labels},
		Template: v1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
			Spec: v1.PodSpec{Containers: []v1.Container{{Name: "app", Image: "registry.k8s.io/pause:3.10",
				Resources: v1.ResourceRequirements{Requests: v1.ResourceList{v1.ResourceCPU: resource.MustParse("10m")}}}}}}}}
	if _, err := client.AppsV1().Deployments("default").Create(context.Background(), d, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	pdb := &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: policyv1.PodDisruptionBudgetSpec{MaxUnavailable: ptr.To(budget),
			Selector: &metav1.LabelSelector{MatchLabels: labels}}}
	if _, err := client.PolicyV1().PodDisruptionBudgets("default").Create(context.Background(), pdb, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	svc := &v1.Service{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"}, Spec: v1.ServiceSpec{Selector: labels,
		Ports: []v1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}}}}
	if _, err := client.CoreV1().Services("default").Create(context.Background(), svc, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
}

// endpointWatcher keeps, per Service, the fewest ready endpoints its
// EndpointSlices listed at any moment since it started.
type endpointWatcher struct {
	mu     sync.Mutex
	slices map[string]map[string]int // service -> slice -> ready endpoints
	least  map[string]int
}

func newEndpointWatcher(b *testing.B, client kubernetes.Interface) *endpointWatcher {
	w := &endpointWatcher{slices: map[string]map[string]int{}, least: map[string]int{}}
	f := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithNamespace("default"))
	inf := f.Discovery().V1().EndpointSlices().Informer()
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { w.on(obj.(*discoveryv1.EndpointSlice), false) },
		UpdateFunc: func(_, obj any) { w.on(obj.(*discoveryv1.EndpointSlice), false) },
		DeleteFunc: func(obj any) {
			if es, ok := kube.Untombstone(obj).(*discoveryv1.EndpointSlice); ok {
				w.on(es, true)
			}
		},
	})
	ctx, cancel := context.WithCancel(framework.Context(b))
	f.Start(ctx.Done())
	f.WaitForCacheSync(ctx.Done())
	b.Cleanup(func() { cancel(); f.Shutdown() })
	return w
}

func (w *endpointWatcher) on(es *discoveryv1.EndpointSlice, deleted bool) {
	svc := es.Labels[discoveryv1.LabelServiceName]
	if svc == "" || svc == "kubernetes" {
		return
	}
	ready := 0
	for _, e := range es.Endpoints {
		if e.Conditions.Ready == nil || *e.Conditions.Ready {
			ready++
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.slices[svc] == nil {
		w.slices[svc] = map[string]int{}
	}
	if deleted {
		delete(w.slices[svc], es.Name)
	} else {
		w.slices[svc][es.Name] = ready
	}
	total := 0
	for _, n := range w.slices[svc] {
		total += n
	}
	if least, seen := w.least[svc]; !seen || total < least {
		w.least[svc] = total
	}
}

// fewest is the fewest ready endpoints of any Service, and how many
// Services had none at some moment.
func (w *endpointWatcher) fewest() (fewest, empty int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	fewest = -1
	for _, n := range w.least {
		if fewest < 0 || n < fewest {
			fewest = n
		}
		if n == 0 {
			empty++
		}
	}
	return fewest, empty
}
