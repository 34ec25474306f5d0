package integration

import (
	"context"
	"fmt"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/nodeshepherd/nodeshepherd/pkg/controlplane"
	"github.com/nodeshepherd/nodeshepherd/test/framework"
)

// ipamFailoverConfig: node IPAM alone, leader-elected on a 4s lease, a /20
// in /26 blocks (64 blocks) next to the Service range.
const ipamFailoverConfig = `apiVersion: nodeshepherd.io/v1alpha1
kind: NodeShepherdConfiguration
manager:
  controllers: [nodeipam]
` + fastElection + `nodeIPAM:
  allocateNodeCidrs: true
  clusterCidr: 10.244.0.0/18
  nodeCidrMaskSize: 26
  serviceClusterIpRange: ` + controlplane.ServiceClusterIPRange + `
`

// ipamReplica is a `nodeshepherd run` process that reaches the API server
// through its own TCP proxy, so that it alone can be cut off.
type ipamReplica struct {
	pid   int
	proxy *framework.Proxy
}

// ipamLeader returns the replica holding the Lease (its identity is
// host_pid_suffix), or nil.
func ipamLeader(ctx context.Context, client kubernetes.Interface, replicas []*ipamReplica) (*ipamReplica, string) {
	l, err := client.CoordinationV1().Leases("kube-system").Get(ctx, "nodeshepherd", metav1.GetOptions{})
	if err != nil {
		return nil, err.Error()
	}
	holder := ptr.Deref(l.Spec.HolderIdentity, "")
	if l.Spec.RenewTime == nil || time.Since(l.Spec.RenewTime.Time) > 4*time.Second {
		return nil, "lease expired, last holder " + holder
	}
	for _, r := range replicas {
		if strings.Contains(holder, fmt.Sprintf("_%d_", r.pid)) {
			return r, holder
		}
	}
	return nil, "holder " + holder
}

// duplicateCIDRs lists every CIDR held by two nodes in one consistent list.
func duplicateCIDRs(nodes []v1.Node) []string {
	owner := map[string]string{}
	var dups []string
	for _, n := range nodes {
		for _, c := range n.Spec.PodCIDRs {
			if o, taken := owner[c]; taken {
				dups = append(dups, fmt.Sprintf("%s on %s and %s", c, o, n.Name))
			}
			owner[c] = n.Name
		}
	}
	return dups
}

// TestNodeIPAMFailoverNeverGivesACIDRTwice: three replicas allocate pod CIDRs
// while nodes are created steadily (and some deleted, so freed blocks are
// handed out again); the leader is killed with SIGKILL, and later the next
// leader is cut off from the API server. Every snapshot taken along the way
// and the final state show no CIDR on two nodes, and every node gets one.
func TestNodeIPAMFailoverNeverGivesACIDRTwice(t *testing.T) {
	cp := framework.StartControlPlane(t, controlplane.Config{})
	client := framework.Client(t, cp)
	ctx := framework.Context(t)
	confPath := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(confPath, []byte(ipamFailoverConfig), 0o644); err != nil {
		t.Fatal(err)
	}
	server, err := url.Parse(cp.Server())
	if err != nil {
		t.Fatal(err)
	}
	var replicas []*ipamReplica
	for range 3 {
		p := framework.StartProxy(t, server.Host)
		path := framework.WriteKubeconfig(t, "https://"+p.Addr(), cp.CAData(), cp.RESTConfig().BearerToken)
		cmd, _ := startListening(t, func(port int) []string {
			return []string{"run", "--kubeconfig", path, "--config", confPath, "--metrics-bind-address", fmt.Sprintf("127.0.0.1:%d", port)}
		})
		replicas = append(replicas, &ipamReplica{pid: cmd.Process.Pid, proxy: p})
	}
	waitLeader := func(not *ipamReplica) *ipamReplica {
		var l *ipamReplica
		framework.Eventually(t, 30*time.Second, "a leader", func(ctx context.Context) (bool, string, error) {
			r, state := ipamLeader(ctx, client, replicas)
			l = r
			return r != nil && r != not, state, nil
		})
		return l
	}
	first := waitLeader(nil)

	// Along the way: every 150ms, one consistent list of the nodes.
	var mu sync.Mutex
	var seenDups []string
	snapshots := 0
	checkCtx, stopChecking := context.WithCancel(ctx)
	var checker sync.WaitGroup
	checker.Go(func() {
		for checkCtx.Err() == nil {
			if l, err := client.CoreV1().Nodes().List(checkCtx, metav1.ListOptions{}); err == nil {
				mu.Lock()
				snapshots++
				seenDups = append(seenDups, duplicateCIDRs(l.Items)...)
				mu.Unlock()
			}
			select {
			case <-checkCtx.Done():
			case <-time.After(150 * time.Millisecond):
			}
		}
	})

	// Steadily: a node every 80ms; every sixth step also deletes the node
	// created 20 steps earlier, so that freed blocks are handed out again.
	const total = 150
	var created atomic.Int32
	deleted := map[string]bool{}
	var creator sync.WaitGroup
	creator.Go(func() {
		for i := range total {
			name := fmt.Sprintf("ipam-%03d", i)
			if _, err := client.CoreV1().Nodes().Create(ctx, &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
				t.Errorf("creating %s: %v", name, err)
				return
			}
			if i%6 == 5 && i >= 20 {
				old := fmt.Sprintf("ipam-%03d", i-20)
				if err := client.CoreV1().Nodes().Delete(ctx, old, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
					t.Errorf("deleting %s: %v", old, err)
					return
				}
				mu.Lock()
				deleted[old] = true
				mu.Unlock()
			}
			created.Add(1)
			time.Sleep(80 * time.Millisecond) // arch:allow the pace of node creation, not a wait for an outcome
		}
	})
	reached := func(n int32) {
		framework.Eventually(t, 60*time.Second, fmt.Sprintf("%d nodes created", n), func(context.Context) (bool, string, error) {
			return created.Load() >= n, fmt.Sprint(created.Load()), nil
		})
	}

	reached(40)
	if err := syscall.Kill(first.pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killedAt := time.Now()
	second := waitLeader(first)
	t.Logf("leader (pid %d) killed at %d nodes; pid %d leads %v later", first.pid, 40, second.pid, time.Since(killedAt).Round(time.Millisecond))

	reached(90)
	second.proxy.Cut()
	cutAt := time.Now()
	var third *ipamReplica
	framework.Eventually(t, 30*time.Second, "another leader", func(ctx context.Context) (bool, string, error) {
		r, state := ipamLeader(ctx, client, replicas)
		third = r
		return r != nil && r != first && r != second, state, nil
	})
	t.Logf("leader (pid %d) cut off at %d nodes; pid %d leads %v later", second.pid, 90, third.pid, time.Since(cutAt).Round(time.Millisecond))

	creator.Wait()
	mu.Lock()
	live := total - len(deleted)
	mu.Unlock()
	cidrs := podCIDRs(t, client, live)
	stopChecking()
	checker.Wait()
	assertDistinct(t, cidrs)
	cluster := netip.MustParsePrefix("10.244.0.0/18")
	for node, cs := range cidrs {
		if len(cs) != 1 {
			t.Errorf("%s: %v, want one CIDR", node, cs)
			continue
		}
		if p := netip.MustParsePrefix(cs[0]); !cluster.Contains(p.Addr()) || p.Bits() != 26 {
			t.Errorf("%s: %v is not a /26 of %s", node, cs, cluster)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seenDups) > 0 {
		t.Errorf("a CIDR was on two nodes at once in %d snapshot findings, first: %v", len(seenDups), seenDups[:min(5, len(seenDups))])
	}
	t.Logf("%d nodes created, %d deleted, %d with distinct CIDRs; %d snapshots checked along the way", total, len(deleted), len(cidrs), snapshots)
}
