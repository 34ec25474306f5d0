package bench

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

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
	unknown, taint, evict time.Duration
	nodeWrites, podWrites float64 // API writes to the node and to its pods
}

// podsPerVictim pods run on each partitioned node.
const podsPerVictim = 5

// BenchmarkDetection partitions BENCH_TRIALS (6) nodes one after another,
// once under kube-controller-manager's nodelifecycle and taint eviction and
// once under nodeshepherd, with the same grace period (BENCH_GRACE, 10s) and
// kube-controller-manager's default 5s monitor period, and reports how long
// after the grace period each controller marks the node Unknown, taints it,
// and evicts its pods (tolerationSeconds 0), and how many API writes one
// failed node costs (the node, and each of its pods).
func BenchmarkDetection(b *testing.B) {
	grace := envDuration("BENCH_GRACE", 10*time.Second)
	trials := envInt("BENCH_TRIALS", 6)
	for _, side := range []string{"upstream", "nodeshepherd"} {
		b.Run(side, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				results := runDetection(b, side, grace, trials)
				report(b, side, results)
			}
		})
	}
}

func runDetection(b *testing.B, side string, grace time.Duration, trials int) []detection {
	cfg := controlplane.Config{ControllerManager: true}
	if side == "upstream" {
		cfg.Controllers = "*"
		cfg.ControllerManagerArgs = []string{"--node-monitor-grace-period=" + grace.String(), "--node-monitor-period=5s"}
	}
	cp := framework.StartControlPlane(b, cfg)
	client := framework.Client(b, cp)
	zones := make([]string, trials+1)
	for i := range zones {
		zones[i] = fmt.Sprintf("zone-%d", i)
	}
	zs, _ := fakenode.ParseZones(strings.Join(zones, ","))
	m := framework.StartFakeNodes(b, fakenode.Config{Client: client, Nodes: len(zones), Zones: zs,
		LeaseRenewInterval: time.Second, LeaseDuration: 4 * time.Second, PodStartDelay: 100 * time.Millisecond})
	if side == "nodeshepherd" {
		c := controllers.Default()
		c.NodeLifecycle.NodeMonitorGracePeriod = grace
		framework.StartNodeShepherd(b, cp.RESTConfig(), c, nil)
	}
	names := m.NodeNames()
	framework.WaitAllNodesReady(b, client, len(names), 2*time.Minute)
	var out []detection
	for i := 0; i < trials; i++ {
		out = append(out, trial(b, client, m, names[i], grace))
	}
	return out
}

func trial(b *testing.B, client kubernetes.Interface, m *fakenode.Manager, node string, grace time.Duration) detection {
	ctx := framework.Context(b)
	zero := ptr.To[int64](0)
	for k := 0; k < podsPerVictim; k++ {
		p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("victim-%s-%d", node, k), Namespace: "default"}, Spec: v1.PodSpec{NodeName: node,
			Containers: []v1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}},
			Tolerations: []v1.Toleration{
				{Key: v1.TaintNodeUnreachable, Operator: v1.TolerationOpExists, Effect: v1.TaintEffectNoExecute, TolerationSeconds: zero},
				{Key: v1.TaintNodeNotReady, Operator: v1.TolerationOpExists, Effect: v1.TaintEffectNoExecute, TolerationSeconds: zero}}}}
		framework.Eventually(b, time.Minute, "victim pod created", func(ctx context.Context) (bool, string, error) {
			_, err := client.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{})
			return err == nil, fmt.Sprint(err), nil
		})
	}
	pod := fmt.Sprintf("victim-%s-0", node)
	framework.Eventually(b, time.Minute, "victim pods Ready", func(ctx context.Context) (bool, string, error) {
		pods, err := client.CoreV1().Pods("default").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + node})
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
	framework.Eventually(b, 3*grace, "Unknown, taint and eviction", func(ctx context.Context) (bool, string, error) {
		now := time.Since(expiry)
		n, err := client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		if c := kube.NodeCondition(n, v1.NodeReady); d.unknown == 0 && c != nil && c.Status == v1.ConditionUnknown {
			d.unknown = now
		}
		if d.taint == 0 && kube.HasTaint(n, nodelifecycle.UnreachableTaint.Key) {
			for _, t := range n.Spec.Taints {
				if t.Key == nodelifecycle.UnreachableTaint.Key && t.Effect == v1.TaintEffectNoExecute {
					d.taint = now
				}
			}
		}
		got, err := client.CoreV1().Pods("default").Get(ctx, pod, metav1.GetOptions{})
		if d.evict == 0 && (err != nil || got.DeletionTimestamp != nil) {
			d.evict = now
		}
		return d.unknown != 0 && d.taint != 0 && d.evict != 0, fmt.Sprintf("%+v", d), nil
	})
	// Every pod evicted and the writes settled (no change for two seconds).
	var last map[string]float64
	var stable time.Time
	framework.Eventually(b, 30*time.Second, "evictions done, writes settled", func(ctx context.Context) (bool, string, error) {
		pods, err := client.CoreV1().Pods("default").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + node})
		if err != nil {
			return false, "", err
		}
		for i := range pods.Items {
			if pods.Items[i].DeletionTimestamp == nil {
				return false, pods.Items[i].Name + " not evicted", nil
			}
		}
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
	fmt.Printf("    %s: Unknown +%v, taint +%v, first eviction +%v after last heartbeat + grace; writes: %v\n", node,
		d.unknown.Round(10*time.Millisecond), d.taint.Round(10*time.Millisecond), d.evict.Round(10*time.Millisecond), last)
	return d
}

func report(b *testing.B, side string, rs []detection) {
	pick := func(f func(detection) time.Duration) (median, worst float64) {
		var v []float64
		for _, r := range rs {
			v = append(v, f(r).Seconds())
		}
		sort.Float64s(v)
		return v[len(v)/2], v[len(v)-1]
	}
	for _, k := range []struct {
		name string
		f    func(detection) time.Duration
	}{{"unknown", func(d detection) time.Duration { return d.unknown }},
		{"taint", func(d detection) time.Duration { return d.taint }},
		{"evict", func(d detection) time.Duration { return d.evict }}} {
		med, worst := pick(k.f)
		b.ReportMetric(med, k.name+"-median-s")
		b.ReportMetric(worst, k.name+"-max-s")
	}
	nw, pw := 0.0, 0.0
	for _, r := range rs {
		nw += r.nodeWrites
		pw += r.podWrites
	}
	b.ReportMetric(nw/float64(len(rs)), "node-writes/failure")
	b.ReportMetric(pw/float64(len(rs))/podsPerVictim, "pod-writes/pod")
}
