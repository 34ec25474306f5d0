package bench

import (
	"context"
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/nodeshepherd/nodeshepherd/pkg/controllers"
	"github.com/nodeshepherd/nodeshepherd/pkg/controlplane"
	"github.com/nodeshepherd/nodeshepherd/pkg/fakenode"
	"github.com/nodeshepherd/nodeshepherd/pkg/kube"
	"github.com/nodeshepherd/nodeshepherd/test/framework"
)

// The detection cases beyond one failure at a time in a process that has
// run for a while, nodeshepherd only (kube-controller-manager judges every
// monitor period whatever happens, so these cases change nothing there):
//
//   - first-failure-after-start: each trial starts a new nodeshepherd
//     process (in-process manager, fresh informers, no memory), waits until
//     the trial's zone is healthy on it, and partitions a node 1.5 s later
//     (more than one renewal interval, so the node has renewed since the
//     process first saw it: its grace runs from that renewal);
//   - failure-during-fresh-read: two nodes of different zones are
//     partitioned at once; their last renewals are up to one renewal
//     interval (1 s) apart, so the first one's fresh read at its grace
//     period's end is sent (or still in flight) shortly before the second
//     one's expiry and cannot confirm it. The delays are the second node's.
var detectionCases = []string{"first-failure-after-start", "failure-during-fresh-read"}

// benchLeaseRenew is the fake nodes' renewal interval in the detection bench.
const benchLeaseRenew = time.Second

func runDetectionCase(b *testing.B, name string, grace time.Duration, trials int) []detection {
	cp := framework.StartControlPlane(b, controlplane.Config{})
	client := framework.Client(b, cp)
	var zones []fakenode.Zone
	for z := 0; z < benchZones; z++ {
		zones = append(zones, fakenode.Zone{Name: fmt.Sprintf("zone-%c", 'a'+z), Count: nodesPerZone})
	}
	m := framework.StartFakeNodes(b, fakenode.Config{Client: client, Nodes: benchZones * nodesPerZone, Zones: zones,
		LeaseRenewInterval: benchLeaseRenew, LeaseDuration: 4 * time.Second, PodStartDelay: 100 * time.Millisecond})
	c := controllers.Default()
	c.NodeLifecycle.NodeMonitorGracePeriod = grace
	c.Shared.NodeMonitorPeriod = monitorPeriod
	names := m.NodeNames()
	// Ready; their not-ready NoSchedule taints go once a controller runs.
	framework.Eventually(b, 2*time.Minute, "fake nodes Ready", func(ctx context.Context) (bool, string, error) {
		for _, n := range names {
			node, err := client.CoreV1().Nodes().Get(ctx, n, metav1.GetOptions{})
			if err != nil || !kube.NodeReady(node) {
				return false, n + " not Ready", err
			}
		}
		return true, "", nil
	})
	byZone := map[string][]string{}
	var zoneNames []string
	for _, n := range names {
		z := m.Zone(n)
		if byZone[z] == nil {
			zoneNames = append(zoneNames, z)
		}
		byZone[z] = append(byZone[z], n)
	}
	var ns *framework.NodeShepherd
	if name == "failure-during-fresh-read" {
		ns = framework.StartNodeShepherd(b, cp.RESTConfig(), c, nil)
	}
	ctx := framework.Context(b)
	var out []detection
	for i := 0; i < trials; i++ {
		z := zoneNames[i%len(zoneNames)]
		node := byZone[z][(i/len(zoneNames))%len(byZone[z])]
		victims := []string{node}
		if name == "failure-during-fresh-read" {
			z2 := zoneNames[(i+1)%len(zoneNames)]
			victims = append(victims, byZone[z2][(i/len(zoneNames))%len(byZone[z2])])
		} else {
			ns = framework.StartNodeShepherd(b, cp.RESTConfig(), c, nil)
		}
		for _, v := range victims {
			waitZoneHealthy(b, client, byZone[m.Zone(v)])
		}
		if name == "first-failure-after-start" {
			time.Sleep(1500 * time.Millisecond)
		}
		watchers := make([]*detectionWatcher, len(victims))
		for k, v := range victims {
			watchers[k] = newDetectionWatcher(b, client)
			watchers[k].reset(v, fmt.Sprintf("%s-%d", name, i))
		}
		if _, err := m.Apply(ctx, fakenode.Fault{Action: fakenode.Partition, Target: fakenode.Target{Nodes: victims}}); err != nil {
			b.Fatal(err)
		}
		renews := make([]time.Time, len(victims))
		for k, v := range victims {
			framework.Eventually(b, 10*time.Second, "last lease renewal", func(ctx context.Context) (bool, string, error) {
				var err error
				renews[k], err = framework.LeaseRenewTime(ctx, client, v)
				return err == nil && time.Since(renews[k]) > 1500*time.Millisecond, fmt.Sprint(renews[k], err), nil
			})
		}
		// The measured node: the one that expires last.
		k := 0
		if len(victims) == 2 && renews[1].After(renews[0]) {
			k = 1
		}
		expiry := renews[k].Add(grace)
		var d detection
		framework.Eventually(b, 3*grace+10*time.Second, "Unknown and taint", func(context.Context) (bool, string, error) {
			unknown, taint, _, _ := watchers[k].seen()
			if unknown.IsZero() || taint.IsZero() {
				return false, fmt.Sprintf("unknown %v, taint %v", !unknown.IsZero(), !taint.IsZero()), nil
			}
			d.unknown, d.taint = unknown.Sub(expiry), taint.Sub(expiry)
			return true, "", nil
		})
		gap := ""
		if len(victims) == 2 {
			gap = fmt.Sprintf(", last renewals %v apart", renews[k].Sub(renews[1-k]).Round(time.Millisecond))
		}
		fmt.Printf("    %s trial %2d/%d %s: Unknown +%v, taint +%v%s\n", name, i+1, trials, victims[k],
			d.unknown.Round(10*time.Millisecond), d.taint.Round(10*time.Millisecond), gap)
		out = append(out, d)
		if _, err := m.Apply(ctx, fakenode.Fault{Action: fakenode.Heal, Target: fakenode.Target{Nodes: victims}}); err != nil {
			b.Fatal(err)
		}
		if name == "first-failure-after-start" {
			ns.Stop()
		}
	}
	if ns != nil {
		ns.Stop()
	}
	return out
}

// waitZoneHealthy waits until every node of the zone is Ready and free of
// the NoExecute failure taints.
func waitZoneHealthy(b *testing.B, client kubernetes.Interface, zone []string) {
	framework.Eventually(b, time.Minute, "zone healthy before the trial", func(ctx context.Context) (bool, string, error) {
		for _, name := range zone {
			n, err := client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, "", err
			}
			if !kube.NodeReady(n) || kube.HasTaint(n, "node.kubernetes.io/unreachable") || kube.HasTaint(n, "node.kubernetes.io/not-ready") {
				return false, name + " not Ready or tainted", nil
			}
		}
		return true, "", nil
	})
}

// reportDetectionCase reports the Unknown and taint delays of a case.
func reportDetectionCase(b *testing.B, name string, rs []detection) {
	for _, k := range detectionMeasures[:2] {
		v := seconds(rs, k.f)
		b.ReportMetric(percentile(v, 50), k.name+"-p50-s")
		b.ReportMetric(percentile(v, 95), k.name+"-p95-s")
		b.ReportMetric(percentile(v, 100), k.name+"-max-s")
		fmt.Printf("%s, %d trials: %s p50 %.2f s, p95 %.2f s, max %.2f s\n", name, len(rs), k.title,
			percentile(v, 50), percentile(v, 95), percentile(v, 100))
	}
}
