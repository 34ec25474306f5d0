package bench

import (
	"context"
	"fmt"
	"math"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"text/tabwriter"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"github.com/nodeshepherd/nodeshepherd/pkg/benchenv"
	"github.com/nodeshepherd/nodeshepherd/pkg/controller/nodelifecycle"
	"github.com/nodeshepherd/nodeshepherd/pkg/controllers"
	"github.com/nodeshepherd/nodeshepherd/pkg/controlplane"
	"github.com/nodeshepherd/nodeshepherd/pkg/fakenode"
	"github.com/nodeshepherd/nodeshepherd/pkg/kube"
	"github.com/nodeshepherd/nodeshepherd/test/framework"
)

// detection is one trial: delays after the grace period ran out, measured
// from the partitioned node's last Lease renewal plus the grace period.
type detection struct {
	unknown, taint time.Duration
	// evict is the last of the node's pods deleted, after grace expiry plus
	// the pods' tolerationSeconds.
	evict                 time.Duration
	nodeWrites, podWrites float64 // API writes to the node and to its pods
}

// Shape of the bench cluster: one node fails at a time, so its zone (one
// of three NotReady) stays Normal and neither side's rate limits for
// disrupted zones apply.
const (
	benchZones     = 3
	nodesPerZone   = 3
	podsPerVictim  = 5
	monitorPeriod  = 5 * time.Second // kube-controller-manager's default
	clientQPS      = 50              // both sides' API client
	clientBurst    = 100
	detectionLabel = "bench.nodeshepherd.io/trial"
)

// detectionResults keeps each side's trials for the table printed at the end.
var detectionResults = map[string][]detection{}

// BenchmarkDetection partitions BENCH_TRIALS (20) nodes one after another on
// a cluster of 3 zones x 3 nodes, once under kube-controller-manager's
// nodelifecycle and taint eviction and once under nodeshepherd, with the
// same settings: grace period BENCH_GRACE (10s), monitor period 5s
// (kube-controller-manager's default), client QPS 50 / burst 100, real time.
// It reports p50, p95 and max after grace expiry of the Unknown condition,
// the NoExecute taint and the eviction of the node's last pod (pods
// tolerate it for BENCH_TOLERATION, 2s, counted from grace expiry too), and
// the API writes one failed node costs; then prints a table of both sides
// with ratios, ready to paste into docs/benchmarks.md. Then, nodeshepherd
// only, the cases of detection_cases_bench_test.go: the first failure after
// a process starts, and a failure while another node's fresh read is in
// flight (Unknown and taint; -bench 'BenchmarkDetection/nodeshepherd-' runs
// only those).
func BenchmarkDetection(b *testing.B) {
	grace := benchenv.Duration(b, "BENCH_GRACE", 10*time.Second)
	tol := benchenv.Duration(b, "BENCH_TOLERATION", 2*time.Second)
	if err := wholeSeconds("BENCH_TOLERATION", tol); err != nil {
		b.Fatal(err)
	}
	trials := benchenv.Int(b, "BENCH_TRIALS", 20)
	for _, side := range []string{"upstream", "nodeshepherd"} {
		b.Run(side, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				results := runDetection(b, side, grace, tol, trials)
				detectionResults[side] = results
				reportDetection(b, results)
			}
		})
	}
	if len(detectionResults) == 2 {
		printDetectionTable(os.Stdout, grace, tol, trials)
	}
	for _, name := range detectionCases {
		b.Run("nodeshepherd-"+name, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				reportDetectionCase(b, name, runDetectionCase(b, name, grace, trials))
			}
		})
	}
}

func runDetection(b *testing.B, side string, grace, tol time.Duration, trials int) []detection {
	cfg := controlplane.Config{ControllerManager: true}
	if side == "upstream" {
		cfg.Controllers = "*"
		cfg.ControllerManagerArgs = []string{"--node-monitor-grace-period=" + grace.String(), "--node-monitor-period=" + monitorPeriod.String(),
			fmt.Sprintf("--kube-api-qps=%d", clientQPS), fmt.Sprintf("--kube-api-burst=%d", clientBurst)}
	}
	cp := framework.StartControlPlane(b, cfg)
	client := framework.Client(b, cp)
	var zones []fakenode.Zone
	for z := 0; z < benchZones; z++ {
		zones = append(zones, fakenode.Zone{Name: fmt.Sprintf("zone-%c", 'a'+z), Count: nodesPerZone})
	}
	m := framework.StartFakeNodes(b, fakenode.Config{Client: client, Nodes: benchZones * nodesPerZone, Zones: zones,
		LeaseRenewInterval: time.Second, LeaseDuration: 4 * time.Second, PodStartDelay: 100 * time.Millisecond})
	if side == "nodeshepherd" {
		c := controllers.Default()
		c.NodeLifecycle.NodeMonitorGracePeriod = grace
		c.Shared.NodeMonitorPeriod = monitorPeriod
		// StartNodeShepherd's client runs at clientQPS/clientBurst too.
		framework.StartNodeShepherd(b, cp.RESTConfig(), c, nil)
	}
	names := m.NodeNames()
	framework.WaitAllNodesReady(b, client, len(names), 2*time.Minute)
	byZone := map[string][]string{}
	var zoneNames []string
	for _, n := range names {
		z := m.Zone(n)
		if byZone[z] == nil {
			zoneNames = append(zoneNames, z)
		}
		byZone[z] = append(byZone[z], n)
	}
	w := newDetectionWatcher(b, client)
	var out []detection
	for i := 0; i < trials; i++ {
		// Zones take turns, so a zone's last failed node has healed long
		// before the zone is used again.
		z := zoneNames[i%len(zoneNames)]
		node := byZone[z][(i/len(zoneNames))%len(byZone[z])]
		d := trial(b, client, m, w, i, node, byZone[z], grace, tol)
		fmt.Printf("    %s trial %2d/%d %s (%s): Unknown +%v, taint +%v, last eviction +%v; writes: node %g, pods %g\n", side, i+1, trials, node, z,
			d.unknown.Round(10*time.Millisecond), d.taint.Round(10*time.Millisecond), d.evict.Round(10*time.Millisecond), d.nodeWrites, d.podWrites)
		out = append(out, d)
	}
	return out
}

// detectionWatcher notes, through informers, the moment each change of the
// trial's node and pods is seen: finer than polling, and costs no requests.
type detectionWatcher struct {
	mu             sync.Mutex
	node           string
	trial          string
	unknown, taint time.Time
	evicted        map[string]time.Time
	lastEvict      time.Time
}

func newDetectionWatcher(b *testing.B, client kubernetes.Interface) *detectionWatcher {
	w := &detectionWatcher{evicted: map[string]time.Time{}}
	f := informers.NewSharedInformerFactory(client, 0)
	_, _ = f.Core().V1().Nodes().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		UpdateFunc: func(_, obj any) { w.onNode(obj.(*v1.Node)) },
	})
	_, _ = f.Core().V1().Pods().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		UpdateFunc: func(_, obj any) { w.onPod(obj.(*v1.Pod)) },
		DeleteFunc: func(obj any) {
			if p, ok := kube.Untombstone(obj).(*v1.Pod); ok {
				w.onPod(p)
			}
		},
	})
	// Shutdown waits for the informers, so their context must end first.
	ctx, cancel := context.WithCancel(framework.Context(b))
	f.Start(ctx.Done())
	f.WaitForCacheSync(ctx.Done())
	b.Cleanup(func() { cancel(); f.Shutdown() })
	return w
}

func (w *detectionWatcher) reset(node, trial string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.node, w.trial = node, trial
	w.unknown, w.taint, w.lastEvict = time.Time{}, time.Time{}, time.Time{}
	clear(w.evicted)
}

func (w *detectionWatcher) onNode(n *v1.Node) {
	now := time.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	if n.Name != w.node {
		return
	}
	if c := kube.NodeCondition(n, v1.NodeReady); w.unknown.IsZero() && c != nil && c.Status == v1.ConditionUnknown {
		w.unknown = now
	}
	for _, t := range n.Spec.Taints {
		if w.taint.IsZero() && t.Key == nodelifecycle.UnreachableTaint.Key && t.Effect == v1.TaintEffectNoExecute {
			w.taint = now
		}
	}
}

func (w *detectionWatcher) onPod(p *v1.Pod) {
	now := time.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	if p.Labels[detectionLabel] != w.trial || p.DeletionTimestamp == nil {
		return
	}
	if _, seen := w.evicted[p.Name]; !seen {
		w.evicted[p.Name] = now
		w.lastEvict = now
	}
}

// seen returns the moments observed so far and how many pods were evicted.
func (w *detectionWatcher) seen() (unknown, taint, lastEvict time.Time, evicted int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.unknown, w.taint, w.lastEvict, len(w.evicted)
}

func trial(b *testing.B, client kubernetes.Interface, m *fakenode.Manager, w *detectionWatcher, i int, node string, zone []string, grace, tol time.Duration) detection {
	ctx := framework.Context(b)
	// The zone must be whole, or the failure would not be one node of a
	// Normal zone.
	framework.Eventually(b, time.Minute, "zone healthy before the trial", func(ctx context.Context) (bool, string, error) {
		for _, name := range zone {
			n, err := client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, "", err
			}
			if !kube.NodeReady(n) || kube.HasTaint(n, v1.TaintNodeUnreachable) || kube.HasTaint(n, v1.TaintNodeNotReady) {
				return false, name + " not Ready or tainted", nil
			}
		}
		return true, "", nil
	})
	trialID := fmt.Sprint(i)
	secs := ptr.To(int64(tol / time.Second))
	for k := 0; k < podsPerVictim; k++ {
		p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("victim-%02d-%d", i, k), Namespace: "default", Labels: map[string]string{detectionLabel: trialID}},
			Spec: v1.PodSpec{NodeName: node,
				Containers: []v1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}},
				Tolerations: []v1.Toleration{
					{Key: v1.TaintNodeUnreachable, Operator: v1.TolerationOpExists, Effect: v1.TaintEffectNoExecute, TolerationSeconds: secs},
					{Key: v1.TaintNodeNotReady, Operator: v1.TolerationOpExists, Effect: v1.TaintEffectNoExecute, TolerationSeconds: secs}}}}
		framework.Eventually(b, time.Minute, "victim pod created", func(ctx context.Context) (bool, string, error) {
			_, err := client.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{})
			return err == nil, fmt.Sprint(err), nil
		})
	}
	framework.Eventually(b, time.Minute, "victim pods Ready", func(ctx context.Context) (bool, string, error) {
		pods, err := client.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: detectionLabel + "=" + trialID})
		if err != nil {
			return false, "", err
		}
		ready := 0
		for i := range pods.Items {
			if kube.PodReady(&pods.Items[i]) {
				ready++
			}
		}
		return ready == podsPerVictim, fmt.Sprintf("%d ready", ready), nil
	})
	w.reset(node, trialID)
	before := framework.APIWrites(b, client)
	if _, err := m.Apply(ctx, fakenode.Fault{Action: fakenode.Partition, Target: fakenode.Target{Nodes: []string{node}}}); err != nil {
		b.Fatal(err)
	}
	// A renewal in flight may still land: the last one is final once it is
	// older than 1.5 renew intervals.
	var renew time.Time
	framework.Eventually(b, 10*time.Second, "last lease renewal", func(ctx context.Context) (bool, string, error) {
		var err error
		renew, err = framework.LeaseRenewTime(ctx, client, node)
		return err == nil && time.Since(renew) > 1500*time.Millisecond, fmt.Sprint(renew, err), nil
	})
	expiry := renew.Add(grace)
	var d detection
	framework.Eventually(b, 3*grace+tol+10*time.Second, "Unknown, taint and every eviction", func(context.Context) (bool, string, error) {
		unknown, taint, last, evicted := w.seen()
		done := !unknown.IsZero() && !taint.IsZero() && evicted == podsPerVictim
		if done {
			d.unknown, d.taint, d.evict = unknown.Sub(expiry), taint.Sub(expiry), last.Sub(expiry.Add(tol))
		}
		return done, fmt.Sprintf("unknown %v, taint %v, %d evicted", !unknown.IsZero(), !taint.IsZero(), evicted), nil
	})
	// The writes settled (no change for two seconds).
	var last map[string]float64
	var stable time.Time
	framework.Eventually(b, 30*time.Second, "writes settled", func(ctx context.Context) (bool, string, error) {
		w := framework.Diff(before, framework.APIWrites(b, client))
		for k := range w {
			if !strings.HasPrefix(k, "nodes") && !strings.HasPrefix(k, "pods") {
				delete(w, k) // leases and events are not the controllers' writes we count
			}
		}
		if fmt.Sprint(w) != fmt.Sprint(last) {
			last, stable = w, time.Now()
		}
		return time.Since(stable) > 2*time.Second, fmt.Sprint(w), nil
	})
	for k, v := range last {
		switch {
		case strings.HasPrefix(k, "nodes"):
			d.nodeWrites += v
		case strings.HasPrefix(k, "pods"):
			d.podWrites += v
		}
	}
	if _, err := m.Apply(ctx, fakenode.Fault{Action: fakenode.Heal, Target: fakenode.Target{Nodes: []string{node}}}); err != nil {
		b.Fatal(err)
	}
	return d
}

// detectionMeasures are the three delays, in the table's order.
var detectionMeasures = []struct {
	name, title string
	f           func(detection) time.Duration
}{
	{"unknown", "Ready=Unknown − grace expiry", func(d detection) time.Duration { return d.unknown }},
	{"taint", "unreachable:NoExecute − grace expiry", func(d detection) time.Duration { return d.taint }},
	{"evict", "last pod evicted − (grace expiry + toleration)", func(d detection) time.Duration { return d.evict }},
}

// percentile is the nearest-rank percentile (p in (0,100]) of v, in seconds.
func percentile(v []float64, p float64) float64 {
	s := slices.Sorted(slices.Values(v))
	k := int(math.Ceil(p/100*float64(len(s)))) - 1
	return s[min(max(k, 0), len(s)-1)]
}

func seconds(rs []detection, f func(detection) time.Duration) []float64 {
	var v []float64
	for _, r := range rs {
		v = append(v, f(r).Seconds())
	}
	return v
}

func reportDetection(b *testing.B, rs []detection) {
	for _, k := range detectionMeasures {
		v := seconds(rs, k.f)
		b.ReportMetric(percentile(v, 50), k.name+"-p50-s")
		b.ReportMetric(percentile(v, 95), k.name+"-p95-s")
		b.ReportMetric(percentile(v, 100), k.name+"-max-s")
	}
	nw, pw := 0.0, 0.0
	for _, r := range rs {
		nw += r.nodeWrites
		pw += r.podWrites
	}
	b.ReportMetric(nw/float64(len(rs)), "node-writes/failure")
	b.ReportMetric(pw/float64(len(rs))/podsPerVictim, "pod-writes/pod")
}

// printDetectionTable prints both sides and the ratios upstream/nodeshepherd
// as a Markdown table.
func printDetectionTable(out *os.File, grace, tol time.Duration, trials int) {
	up, ns := detectionResults["upstream"], detectionResults["nodeshepherd"]
	fmt.Fprintf(out, "\nDetection, %d trials per side, %d zones x %d nodes, one node partitioned at a time; grace %v, monitor period %v, toleration %v, client QPS %d/%d:\n\n",
		trials, benchZones, nodesPerZone, grace, monitorPeriod, tol, clientQPS, clientBurst)
	tw := tabwriter.NewWriter(out, 0, 0, 1, ' ', tabwriter.Debug)
	fmt.Fprintln(tw, "| after grace expiry\t kube-controller-manager p50\t p95\t max\t nodeshepherd p50\t p95\t max\t ratio p50\t p95\t max\t")
	fmt.Fprintln(tw, "|---\t---:\t---:\t---:\t---:\t---:\t---:\t---:\t---:\t---:\t")
	sec := func(v float64) string { return fmt.Sprintf("%.2f s", v) }
	ratio := func(a, b float64) string {
		if b < 0.01 {
			return "—"
		}
		if a/b < 10 {
			return fmt.Sprintf("%.1fx", a/b)
		}
		return fmt.Sprintf("%.0fx", a/b)
	}
	for _, k := range detectionMeasures {
		u, n := seconds(up, k.f), seconds(ns, k.f)
		row := "| " + k.title
		for _, v := range [][]float64{u, n} {
			for _, p := range []float64{50, 95, 100} {
				row += "\t " + sec(percentile(v, p))
			}
		}
		for _, p := range []float64{50, 95, 100} {
			row += "\t " + ratio(percentile(u, p), percentile(n, p))
		}
		fmt.Fprintln(tw, row+"\t")
	}
	writes := func(rs []detection) (float64, float64) {
		nw, pw := 0.0, 0.0
		for _, r := range rs {
			nw += r.nodeWrites
			pw += r.podWrites
		}
		return nw / float64(len(rs)), pw / float64(len(rs)) / podsPerVictim
	}
	unw, upw := writes(up)
	nnw, npw := writes(ns)
	fmt.Fprintf(tw, "| API writes per failed node: to the node\t %.1f\t\t\t %.1f\t\t\t\t\t\t\n", unw, nnw)
	fmt.Fprintf(tw, "| API writes per failed node: to each pod\t %.1f\t\t\t %.1f\t\t\t\t\t\t\n", upw, npw)
	tw.Flush()
	fmt.Fprintln(out)
}
