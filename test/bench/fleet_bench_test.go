package bench

import (
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"text/tabwriter"
	"time"

	dto "github.com/prometheus/client_model/go"
	"golang.org/x/time/rate"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"sigs.k8s.io/yaml"

	"github.com/nodeshepherd/nodeshepherd/pkg/benchenv"
	"github.com/nodeshepherd/nodeshepherd/pkg/controller/nodelifecycle"
	"github.com/nodeshepherd/nodeshepherd/pkg/controllers"
	"github.com/nodeshepherd/nodeshepherd/pkg/controlplane"
	"github.com/nodeshepherd/nodeshepherd/pkg/fakenode"
	"github.com/nodeshepherd/nodeshepherd/pkg/kube"
	"github.com/nodeshepherd/nodeshepherd/pkg/remediation"
	"github.com/nodeshepherd/nodeshepherd/test/framework"
)

// fleetPolicy is the remediation policy on the whole fleet: a node silent
// for 20 s is tainted, then, 30 s later, rebooted through the fake cloud.
// The brakes let a rack of 1 % of the fleet into repair at once.
const fleetPolicy = `
apiVersion: nodeshepherd.io/v1alpha1
kind: RemediationPolicy
metadata: {name: fleet}
spec:
  nodeSelector: {matchLabels: {pool: fleet}}
  unhealthy:
  - {type: Ready, status: Unknown, for: 20s}
  healthyHold: 20s
  steps:
  - {action: Taint, timeout: 30s, taint: {key: nodeshepherd.io/unhealthy, effect: NoSchedule}}
  - {action: Reboot, timeout: 10m}
  brakes: {maxInRepair: 5%, maxUnhealthy: 20%}
`

// fleetSteps are fleetPolicy's steps, in order.
var fleetSteps = []string{"Taint", "Reboot"}

// fleetRun is one side's figures.
type fleetRun struct {
	nodes, pods, rack int
	setup             time.Duration
	// steady: CPU (cores) and RSS (MB, now and peak) by process, over the window.
	steadyCPU       map[string]float64
	rss, peakRSS    map[string]float64
	unknown, taint  []time.Duration // per rack node, after its own grace expiry
	steps           [][]time.Duration
	failure         time.Duration // from the cut to the last figure taken
	failureCPU      map[string]float64
	requests        float64 // nodeshepherd's requests during the failure
	throttled, wait float64 // requests that waited >= 25 ms on the client's limiter; the waits' sum (s)
}

var fleetResults = map[string]*fleetRun{}

// BenchmarkFleet (issue 49 point 3) runs BENCH_NODES (5000) fake nodes with
// the kubelet's timings in three zones, BENCH_PODS_PER_NODE (30) pods on
// each, once under kube-controller-manager with all its controllers
// (upstream) and once under kube-controller-manager without the ones
// nodeshepherd replaces plus `nodeshepherd run
// --controllers='*,outofservice,remediation' --cloud-provider=fake` in a
// process of its own, with fleetPolicy on the pool. On each side: the
// controllers' CPU and RSS over BENCH_WINDOW (1m) in steady state, then a
// rack of BENCH_RACK (50) nodes of zone-a cut off at once: each rack node's
// delay from its own grace expiry (last Lease renewal + BENCH_GRACE, 50s on
// both sides) to Ready=Unknown and to the unreachable NoExecute taint
// (p50/p95/p99 over the rack); on nodeshepherd's side also the time from the
// cut to each of the policy's steps on each rack node, the API requests per
// second it sent meanwhile and how many waited on its client's rate limiter
// (rest_client_*). With BENCH_PROFILE_DIR, nodeshepherd's CPU profile over
// the window and its heap after it are written there.
//
// The pods are created at BENCH_CREATE_RATE (100) per second: at 250 per
// second the 2-core machine's kube-apiserver closed its pod watchers as too
// slow, every client listed 150,000 pods again, and the API server grew
// past the machine's 24 GiB. kube-apiserver runs with GOMEMLIMIT
// BENCH_APISERVER_GOMEMLIMIT (10GiB; "off" for none), a bound on the
// harness, not on the controllers measured. BENCH_APISERVER_ARGS adds
// kube-apiserver flags (-v=1 names each watcher it closes).
func BenchmarkFleet(b *testing.B) {
	nodes := benchenv.Int(b, "BENCH_NODES", 5000)
	perNode := benchenv.Int(b, "BENCH_PODS_PER_NODE", 30)
	rack := benchenv.Int(b, "BENCH_RACK", 50)
	grace := benchenv.Duration(b, "BENCH_GRACE", controllers.Default().NodeLifecycle.NodeMonitorGracePeriod)
	if err := wholeSeconds("BENCH_GRACE", grace); err != nil {
		b.Fatal(err)
	}
	window := benchenv.Duration(b, "BENCH_WINDOW", time.Minute)
	profileDir := os.Getenv("BENCH_PROFILE_DIR")
	createRate := benchenv.Int(b, "BENCH_CREATE_RATE", 100)
	apiEnv, err := apiServerMemLimit(os.Getenv("BENCH_APISERVER_GOMEMLIMIT"))
	if err != nil {
		b.Fatal(err)
	}
	if rack > nodes/3 {
		b.Fatalf("BENCH_RACK=%d: a rack is part of one zone of three, at most %d of BENCH_NODES=%d", rack, nodes/3, nodes)
	}
	for _, side := range []string{"upstream", "nodeshepherd"} {
		b.Run(side, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				r := runFleet(b, side, fleetSettings{nodes: nodes, perNode: perNode, rack: rack, grace: grace, window: window,
					profileDir: profileDir, createRate: createRate, apiEnv: apiEnv})
				fleetResults[side] = r
				b.ReportMetric(percentileOf(r.taint, 95), "taint-p95-s")
				b.ReportMetric(r.steadyCPU[fleetController(side)], "controllers-cores")
				b.ReportMetric(r.peakRSS[fleetController(side)], "controllers-peak-rss-MB")
			}
		})
	}
	if len(fleetResults) == 2 {
		printFleetTable(os.Stdout, grace, window)
	}
}

// fleetController is the process that runs the node controllers on side.
func fleetController(side string) string {
	if side == "upstream" {
		return "kube-controller-manager"
	}
	return "nodeshepherd"
}

// fleetSettings are BenchmarkFleet's settings.
type fleetSettings struct {
	nodes, perNode, rack, createRate int
	grace, window                    time.Duration
	profileDir                       string
	apiEnv                           []string
}

// apiServerMemLimit is kube-apiserver's environment for
// BENCH_APISERVER_GOMEMLIMIT: GOMEMLIMIT=10GiB when unset, none for "off".
func apiServerMemLimit(v string) ([]string, error) {
	switch {
	case v == "":
		v = "10GiB"
	case v == "off":
		return nil, nil
	}
	if !regexp.MustCompile(`^[0-9]+(B|KiB|MiB|GiB|TiB)?$`).MatchString(v) {
		return nil, fmt.Errorf("BENCH_APISERVER_GOMEMLIMIT=%q: want a size as GOMEMLIMIT takes it (10GiB, 8192MiB) or off", v)
	}
	return []string{"GOMEMLIMIT=" + v}, nil
}

func runFleet(b *testing.B, side string, s fleetSettings) *fleetRun {
	nodes, perNode, rack, grace, window, profileDir := s.nodes, s.perNode, s.rack, s.grace, s.window, s.profileDir
	ctx := framework.Context(b)
	r := &fleetRun{nodes: nodes, pods: nodes * perNode, rack: rack}
	start := time.Now()
	cfg := controlplane.Config{ControllerManager: true, APIServerArgs: strings.Fields(os.Getenv("BENCH_APISERVER_ARGS")), APIServerEnv: s.apiEnv}
	if side == "upstream" {
		cfg.Controllers = "*"
		cfg.ControllerManagerArgs = []string{"--node-monitor-grace-period=" + grace.String()}
	}
	cp := framework.StartControlPlane(b, cfg)
	client := framework.Client(b, cp)
	// The benchmark's own writes (150,000 pods) must not wait on a client
	// limiter: they are not what is measured.
	rc := cp.RESTConfig()
	rc.QPS, rc.Burst = 5000, 10000
	rc.ContentType = "application/vnd.kubernetes.protobuf"
	fast := kubernetes.NewForConfigOrDie(rc)
	pids := map[string]int{"kube-apiserver": cp.PID(controlplane.APIServer), "kube-controller-manager": cp.PID(controlplane.ControllerManager)}
	var ns *framework.NodeShepherd
	if side == "nodeshepherd" {
		dyn := dynamic.NewForConfigOrDie(cp.RESTConfig())
		if err := remediation.InstallCRD(ctx, dyn, "", time.Minute); err != nil {
			b.Fatal(err)
		}
		var pol unstructured.Unstructured
		if err := yaml.Unmarshal([]byte(fleetPolicy), &pol.Object); err != nil {
			b.Fatal(err)
		}
		// The discovery of a new resource may lag its Established condition;
		// any other error is final.
		framework.Eventually(b, time.Minute, "the fleet policy created", func(ctx context.Context) (bool, string, error) {
			_, err := dyn.Resource(remediation.GroupVersionResource).Create(ctx, &pol, metav1.CreateOptions{})
			if err != nil && !apierrors.IsNotFound(err) {
				return false, "", err
			}
			return err == nil, fmt.Sprint(err), nil
		})
	}
	var zones []fakenode.Zone
	for z := range 3 {
		zones = append(zones, fakenode.Zone{Name: fmt.Sprintf("zone-%c", 'a'+z), Count: (nodes + 2 - z) / 3})
	}
	m := framework.StartFakeNodes(b, fakenode.Config{Client: fast, Nodes: nodes, Zones: zones, Labels: map[string]string{"pool": "fleet"}})
	if side == "nodeshepherd" {
		addr := freeAddr(b)
		cmd := framework.StartBinary(b, "run", "--kubeconfig", cp.KubeconfigPath(), "--controllers=*,outofservice,remediation",
			"--cloud-provider=fake", "--leader-elect=false", "--metrics-bind-address="+addr, "--node-monitor-grace-period="+grace.String())
		pids["nodeshepherd"] = cmd.Process.Pid
		ns = &framework.NodeShepherd{Addr: addr}
	}
	framework.WaitAllNodesReady(b, client, nodes, 30*time.Minute)
	fmt.Printf("    %s: %d nodes Ready after %s; creating %d pods at %d/s\n", side, nodes, time.Since(start).Round(time.Second), nodes*perNode, s.createRate)
	createFleetPods(b, fast, m.NodeNames(), perNode, s.createRate)
	fmt.Printf("    %s: pods created after %s\n", side, time.Since(start).Round(time.Second))
	// Read from the API server's watch cache (resourceVersion 0) every 5 s:
	// the first 5,000-node run polled a consistent list of 150,000 pods from
	// etcd every 100 ms and ran the 24 GiB machine out of memory
	// (kube-apiserver at 14.9 GB) before the figures.
	waitFleetRunning(b, client, 30*time.Minute)
	r.setup = time.Since(start)
	fmt.Printf("    %s: %d nodes, %d pods Running after %s; steady window %s\n", side, nodes, r.pods, r.setup.Round(time.Second), window)

	// Steady state.
	var profiles sync.WaitGroup
	if ns != nil && profileDir != "" {
		profiles.Go(func() {
			saveProfile(b, ns, fmt.Sprintf("/debug/pprof/profile?seconds=%d", int(window.Seconds())), filepath.Join(profileDir, "fleet-steady-cpu.pprof"))
		})
	}
	r.steadyCPU = cpuOver(b, pids, window)
	profiles.Wait()
	if ns != nil && profileDir != "" {
		saveProfile(b, ns, "/debug/pprof/heap", filepath.Join(profileDir, "fleet-steady-heap.pprof"))
	}
	r.rss, r.peakRSS = map[string]float64{}, map[string]float64{}
	for k, pid := range pids {
		r.rss[k], r.peakRSS[k] = rssMB(b, pid), peakRSSMB(b, pid)
	}

	// A rack fails: rack nodes of zone-a, cut off at once.
	var rackNodes []string
	for _, n := range m.NodeNames() {
		if m.Zone(n) == "zone-a" && len(rackNodes) < rack {
			rackNodes = append(rackNodes, n)
		}
	}
	w := newFleetWatcher(b, client, rackNodes)
	var before map[string]*dto.MetricFamily
	if ns != nil {
		before = ns.Families(b)
	}
	cpuBefore := cpuNow(b, pids)
	cut := time.Now()
	if _, err := m.Apply(ctx, fakenode.Fault{Action: fakenode.Partition, Target: fakenode.Target{Nodes: rackNodes}}); err != nil {
		b.Fatal(err)
	}
	// A renewal in flight may still land: each node's last one is final once
	// it is older than 1.5 renew intervals (the kubelet's 10 s).
	expiry := map[string]time.Time{}
	framework.Eventually(b, time.Minute, "the rack's last Lease renewals", func(ctx context.Context) (bool, string, error) {
		for _, n := range rackNodes {
			renew, err := framework.LeaseRenewTime(ctx, client, n)
			if err != nil {
				return false, "", err
			}
			if time.Since(renew) < 15*time.Second {
				return false, n + " renewed " + time.Since(renew).Round(time.Second).String() + " ago", nil
			}
			expiry[n] = renew.Add(grace)
		}
		return true, "", nil
	})
	// Both sides taint the nodes of a Normal zone at --node-eviction-rate
	// (0.1 nodes/s by default): a rack of 50 takes about 500 s.
	framework.Eventually(b, 3*grace+time.Duration(rack)*20*time.Second+5*time.Minute, "every rack node Unknown and tainted", func(context.Context) (bool, string, error) {
		done, msg := w.done(-1)
		return done, msg, nil
	})
	if ns != nil {
		// The policy's brakes may hold some rack nodes back for good (a
		// partitioned node's reboot does not end its repair): every rack
		// node at the last step, or two minutes after the first got there.
		last := len(fleetSteps) - 1
		deadline := time.Now().Add(10 * time.Minute)
		for {
			done, msg := w.done(last)
			first := w.firstAt(last)
			if done || time.Now().After(deadline) || (!first.IsZero() && time.Since(first) > 2*time.Minute) {
				fmt.Printf("    %s: %s\n", side, msg)
				break
			}
			time.Sleep(time.Second)
		}
	}
	r.failure = time.Since(cut)
	r.failureCPU = cpuSince(b, pids, cpuBefore, r.failure)
	r.unknown, r.taint, r.steps = w.delays(expiry, cut, len(fleetSteps))
	if ns != nil {
		after := ns.Families(b)
		r.requests = familySum(after["rest_client_requests_total"]) - familySum(before["rest_client_requests_total"])
		r.throttled = waitsOver(after, 0.025) - waitsOver(before, 0.025)
		r.wait = histogramSum(after["rest_client_rate_limiter_duration_seconds"]) - histogramSum(before["rest_client_rate_limiter_duration_seconds"])
	}
	fmt.Printf("    %s: rack of %d cut; Unknown p50/p95/p99 %s, taint %s after grace expiry; figures taken %s after the cut\n", side, rack,
		pcts(r.unknown), pcts(r.taint), r.failure.Round(time.Second))
	if _, err := m.Apply(ctx, fakenode.Fault{Action: fakenode.Heal, Target: fakenode.Target{Nodes: rackNodes}}); err != nil {
		b.Fatal(err)
	}
	return r
}

const fleetNamespace = "fleet"

// waitFleetRunning waits until no pod of the fleet is other than Running.
func waitFleetRunning(b *testing.B, client kubernetes.Interface, timeout time.Duration) {
	var last string
	err := wait.PollUntilContextTimeout(framework.Context(b), 5*time.Second, timeout, true, func(ctx context.Context) (bool, error) {
		l, err := client.CoreV1().Pods(fleetNamespace).List(ctx, metav1.ListOptions{FieldSelector: "status.phase!=Running", ResourceVersion: "0"})
		if err != nil {
			last = err.Error()
			return false, nil
		}
		last = fmt.Sprintf("%d not Running", len(l.Items))
		return len(l.Items) == 0, nil
	})
	if err != nil {
		b.Fatalf("every pod Running: not reached within %s (%v); last seen: %s", timeout, err, last)
	}
}

// createFleetPods binds perNode pods to every node (spec.nodeName: no
// scheduler involved), 32 creators at once, perSecond pods a second in all.
func createFleetPods(b *testing.B, client kubernetes.Interface, nodes []string, perNode, perSecond int) {
	ctx := framework.Context(b)
	limit := rate.NewLimiter(rate.Limit(perSecond), 1)
	if _, err := client.CoreV1().Namespaces().Create(ctx, &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: fleetNamespace}}, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	work := make(chan *v1.Pod)
	var wg sync.WaitGroup
	errs := make(chan error, 32)
	for range 32 {
		wg.Go(func() {
			for p := range work {
				if err := limit.Wait(ctx); err != nil {
					errs <- err
					return
				}
				if err := createRetrying(ctx, client, p); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	go func() {
		defer close(work)
		for _, n := range nodes {
			for k := range perNode {
				p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%02d", n, k), Namespace: fleetNamespace, Labels: map[string]string{"app": fmt.Sprintf("app-%d", k)}},
					Spec: v1.PodSpec{NodeName: n, Containers: []v1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}}}}
				select {
				case work <- p:
				case <-ctx.Done():
					return
				}
			}
		}
	}()
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
}

// createRetrying creates p, again after a transient error, for a minute.
func createRetrying(ctx context.Context, client kubernetes.Interface, p *v1.Pod) error {
	deadline := time.Now().Add(time.Minute)
	for {
		_, err := client.CoreV1().Pods(p.Namespace).Create(ctx, p, metav1.CreateOptions{})
		if err == nil || apierrors.IsAlreadyExists(err) {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("creating pod %s: %w", p.Name, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// fleetWatcher notes through an informer when each rack node is first seen
// Unknown, tainted unreachable:NoExecute, and at each step of fleetPolicy.
type fleetWatcher struct {
	mu             sync.Mutex
	rack           map[string]bool
	unknown, taint map[string]time.Time
	steps          map[string][]time.Time
}

func newFleetWatcher(b *testing.B, client kubernetes.Interface, rack []string) *fleetWatcher {
	w := &fleetWatcher{rack: map[string]bool{}, unknown: map[string]time.Time{}, taint: map[string]time.Time{}, steps: map[string][]time.Time{}}
	for _, n := range rack {
		w.rack[n] = true
		w.steps[n] = make([]time.Time, len(fleetSteps))
	}
	f := informers.NewSharedInformerFactory(client, 0)
	_, _ = f.Core().V1().Nodes().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		UpdateFunc: func(_, obj any) { w.onNode(obj.(*v1.Node)) },
	})
	ctx, cancel := context.WithCancel(framework.Context(b))
	f.Start(ctx.Done())
	f.WaitForCacheSync(ctx.Done())
	b.Cleanup(func() { cancel(); f.Shutdown() })
	return w
}

func (w *fleetWatcher) onNode(n *v1.Node) {
	now := time.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.rack[n.Name] {
		return
	}
	if c := kube.NodeCondition(n, v1.NodeReady); c != nil && c.Status == v1.ConditionUnknown {
		if _, seen := w.unknown[n.Name]; !seen {
			w.unknown[n.Name] = now
		}
	}
	for _, t := range n.Spec.Taints {
		if t.Key == nodelifecycle.UnreachableTaint.Key && t.Effect == v1.TaintEffectNoExecute {
			if _, seen := w.taint[n.Name]; !seen {
				w.taint[n.Name] = now
			}
		}
	}
	if st, err := remediation.ReadRecord(n, "fleet"); err == nil && st.Step >= 0 && st.Step < len(fleetSteps) && w.steps[n.Name][st.Step].IsZero() {
		w.steps[n.Name][st.Step] = now
	}
}

// done: every rack node seen Unknown and tainted, and at step last (-1: no
// step awaited).
func (w *fleetWatcher) done(last int) (bool, string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	atLast := 0
	for n := range w.rack {
		if last >= 0 && !w.steps[n][last].IsZero() {
			atLast++
		}
	}
	msg := fmt.Sprintf("of %d: %d Unknown, %d tainted", len(w.rack), len(w.unknown), len(w.taint))
	if last >= 0 {
		msg += fmt.Sprintf(", %d at step %s", atLast, fleetSteps[last])
	}
	return len(w.unknown) == len(w.rack) && len(w.taint) == len(w.rack) && (last < 0 || atLast == len(w.rack)), msg
}

// firstAt is when the first rack node reached step s (zero: none yet).
func (w *fleetWatcher) firstAt(s int) time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	var first time.Time
	for _, steps := range w.steps {
		if at := steps[s]; !at.IsZero() && (first.IsZero() || at.Before(first)) {
			first = at
		}
	}
	return first
}

// delays: per rack node, Unknown and taint after its grace expiry, and each
// step reached after the cut (nodes that never reached a step left out).
func (w *fleetWatcher) delays(expiry map[string]time.Time, cut time.Time, steps int) (unknown, taint []time.Duration, byStep [][]time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	byStep = make([][]time.Duration, steps)
	for n := range w.rack {
		unknown = append(unknown, w.unknown[n].Sub(expiry[n]))
		taint = append(taint, w.taint[n].Sub(expiry[n]))
		for s, at := range w.steps[n] {
			if !at.IsZero() {
				byStep[s] = append(byStep[s], at.Sub(cut))
			}
		}
	}
	return unknown, taint, byStep
}

// percentileOf is percentile over durations, in seconds (NaN when empty).
func percentileOf(d []time.Duration, p float64) float64 {
	if len(d) == 0 {
		return math.NaN()
	}
	s := make([]float64, len(d))
	for i := range d {
		s[i] = d[i].Seconds()
	}
	return percentile(s, p)
}

func pcts(d []time.Duration) string {
	return fmt.Sprintf("%.2f/%.2f/%.2f s", percentileOf(d, 50), percentileOf(d, 95), percentileOf(d, 99))
}

func cpuNow(b *testing.B, pids map[string]int) map[string]float64 {
	out := map[string]float64{}
	for k, pid := range pids {
		out[k] = cpuSeconds(b, pid)
	}
	return out
}

func cpuSince(b *testing.B, pids map[string]int, before map[string]float64, elapsed time.Duration) map[string]float64 {
	out := map[string]float64{}
	for k, pid := range pids {
		out[k] = (cpuSeconds(b, pid) - before[k]) / elapsed.Seconds()
	}
	return out
}

// cpuOver is each process's CPU (cores) over window.
func cpuOver(b *testing.B, pids map[string]int, window time.Duration) map[string]float64 {
	before := cpuNow(b, pids)
	start := time.Now()
	time.Sleep(window)
	return cpuSince(b, pids, before, time.Since(start))
}

// rssMB reads VmRSS, the resident set now, of a process.
func rssMB(b *testing.B, pid int) float64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		b.Fatal(err)
	}
	for line := range strings.SplitSeq(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			var kb float64
			_, _ = fmt.Sscanf(strings.TrimSpace(rest), "%g", &kb)
			return kb / 1024
		}
	}
	return math.NaN()
}

func saveProfile(b *testing.B, ns *framework.NodeShepherd, path, file string) {
	resp, err := ns.Get(context.Background(), path)
	if err != nil {
		b.Errorf("profile %s: %v", path, err)
		return
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b.Errorf("profile %s: %s", path, resp.Status)
		return
	}
	f, err := os.Create(file)
	if err != nil {
		b.Error(err)
		return
	}
	defer f.Close()
	if _, err := io.Copy(f, resp.Body); err != nil {
		b.Error(err)
		return
	}
	fmt.Printf("    profile %s written to %s\n", path, file)
}

func familySum(f *dto.MetricFamily) float64 {
	if f == nil {
		return 0
	}
	sum := 0.0
	for _, m := range f.Metric {
		sum += m.GetCounter().GetValue()
	}
	return sum
}

func histogramSum(f *dto.MetricFamily) float64 {
	if f == nil {
		return 0
	}
	sum := 0.0
	for _, m := range f.Metric {
		sum += m.GetHistogram().GetSampleSum()
	}
	return sum
}

// waitsOver counts the requests whose wait on the client's rate limiter was
// longer than le seconds (a bucket bound of the histogram).
func waitsOver(families map[string]*dto.MetricFamily, le float64) float64 {
	f := families["rest_client_rate_limiter_duration_seconds"]
	if f == nil {
		return 0
	}
	n := 0.0
	for _, m := range f.Metric {
		h := m.GetHistogram()
		within := 0.0
		for _, bk := range h.GetBucket() {
			if bk.GetUpperBound() == le {
				within = float64(bk.GetCumulativeCount())
			}
		}
		n += float64(h.GetSampleCount()) - within
	}
	return n
}

func printFleetTable(out io.Writer, grace, window time.Duration) {
	up, ns := fleetResults["upstream"], fleetResults["nodeshepherd"]
	fmt.Fprintf(out, "\n%d nodes, %d pods, a rack of %d cut; grace %s, steady window %s\n\n", ns.nodes, ns.pods, ns.rack, grace, window)
	tw := tabwriter.NewWriter(out, 0, 0, 1, ' ', tabwriter.Debug)
	fmt.Fprintln(tw, "| measure\t kube-controller-manager\t nodeshepherd\t")
	fmt.Fprintln(tw, "|---\t---\t---\t")
	fmt.Fprintf(tw, "| Ready=Unknown − grace expiry, p50/p95/p99\t %s\t %s\t\n", pcts(up.unknown), pcts(ns.unknown))
	fmt.Fprintf(tw, "| unreachable:NoExecute − grace expiry, p50/p95/p99\t %s\t %s\t\n", pcts(up.taint), pcts(ns.taint))
	fmt.Fprintf(tw, "| steady CPU, the node controllers' process (cores)\t %.3f\t %.3f\t\n", up.steadyCPU["kube-controller-manager"], ns.steadyCPU["nodeshepherd"])
	fmt.Fprintf(tw, "| steady CPU, kube-controller-manager beside it (cores)\t \t %.3f\t\n", ns.steadyCPU["kube-controller-manager"])
	fmt.Fprintf(tw, "| steady CPU, kube-apiserver (cores)\t %.3f\t %.3f\t\n", up.steadyCPU["kube-apiserver"], ns.steadyCPU["kube-apiserver"])
	fmt.Fprintf(tw, "| RSS now / peak, the node controllers' process (MB)\t %.0f / %.0f\t %.0f / %.0f\t\n",
		up.rss["kube-controller-manager"], up.peakRSS["kube-controller-manager"], ns.rss["nodeshepherd"], ns.peakRSS["nodeshepherd"])
	fmt.Fprintf(tw, "| CPU during the rack failure, the node controllers' process (cores)\t %.3f\t %.3f\t\n", up.failureCPU["kube-controller-manager"], ns.failureCPU["nodeshepherd"])
	for s, name := range fleetSteps {
		fmt.Fprintf(tw, "| cut to step %d (%s), rack nodes reached; p50/max\t \t %d; %.1f/%.1f s\t\n", s+1, name, len(ns.steps[s]), percentileOf(ns.steps[s], 50), percentileOf(ns.steps[s], 100))
	}
	fmt.Fprintf(tw, "| nodeshepherd's API requests during the failure (%s)\t \t %.0f (%.1f/s)\t\n", ns.failure.Round(time.Second), ns.requests, ns.requests/ns.failure.Seconds())
	fmt.Fprintf(tw, "| requests that waited > 25 ms on its client limiter; all waits\t \t %.0f; %.2f s\t\n", ns.throttled, ns.wait)
	_ = tw.Flush()
}
