package integration

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeshepherd/nodeshepherd/pkg/controller/nodelifecycle"
	"github.com/nodeshepherd/nodeshepherd/pkg/controlplane"
	"github.com/nodeshepherd/nodeshepherd/pkg/fakenode"
	"github.com/nodeshepherd/nodeshepherd/pkg/kube"
	"github.com/nodeshepherd/nodeshepherd/test/framework"
)

// replicas are `nodeshepherd run` processes sharing one configuration file
// and one leader-election Lease.
type replicas struct {
	t    *testing.T
	list []*replica
}

type replica struct {
	name string
	ns   *framework.NodeShepherd
	pid  int
}

// startReplicas starts n replicas from config and waits for one leader.
func startReplicas(t *testing.T, cp *controlplane.ControlPlane, config string, n int) *replicas {
	t.Helper()
	confPath := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(confPath, []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	rs := &replicas{t: t}
	for i := 0; i < n; i++ {
		addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
		cmd := framework.StartBinary(t, "run", "--kubeconfig", cp.KubeconfigPath(), "--config", confPath, "--metrics-bind-address", addr)
		rs.list = append(rs.list, &replica{name: string(rune('a' + i)), ns: &framework.NodeShepherd{Addr: addr}, pid: cmd.Process.Pid})
	}
	framework.Eventually(t, 60*time.Second, "replicas serving metrics", func(context.Context) (bool, string, error) {
		for _, r := range rs.list {
			c, err := net.DialTimeout("tcp", r.ns.Addr, time.Second)
			if err != nil {
				return false, err.Error(), nil
			}
			c.Close()
		}
		return true, "", nil
	})
	rs.waitLeader(30 * time.Second)
	return rs
}

// leader returns the one replica that leads, or nil and every replica's state.
func (rs *replicas) leader() (*replica, string) {
	var lead []*replica
	var states []string
	for _, r := range rs.list {
		v := r.ns.Metric(rs.t, "nodeshepherd_leader", nil)
		states = append(states, fmt.Sprintf("%s=%v", r.name, v))
		if v == 1 {
			lead = append(lead, r)
		}
	}
	if len(lead) != 1 {
		return nil, strings.Join(states, " ")
	}
	return lead[0], strings.Join(states, " ")
}

func (rs *replicas) waitLeader(timeout time.Duration) *replica {
	var l *replica
	framework.Eventually(rs.t, timeout, "exactly one leader", func(context.Context) (bool, string, error) {
		r, states := rs.leader()
		l = r
		return r != nil, states, nil
	})
	return l
}

// killLeader SIGKILLs the leader (no lease release) and waits for another.
func (rs *replicas) killLeader(timeout time.Duration) (killed, next *replica) {
	killed = rs.waitLeader(10 * time.Second)
	if err := syscall.Kill(killed.pid, syscall.SIGKILL); err != nil {
		rs.t.Fatal(err)
	}
	var rest []*replica
	for _, r := range rs.list {
		if r != killed {
			rest = append(rest, r)
		}
	}
	rs.list = rest
	return killed, rs.waitLeader(timeout)
}

// restoreConfig: compressed lifecycle timings and a restore delay long
// enough to kill the leader between the mark and the restore.
const restoreConfig = `apiVersion: nodeshepherd.io/v1alpha1
kind: NodeShepherdConfiguration
manager:
  controllers: [nodelifecycle]
leaderElection:
  leaderElect: true
  leaderElectLeaseDuration: 4s
  leaderElectRenewDeadline: 3s
  leaderElectRetryPeriod: 500ms
nodeLifecycle:
  nodeMonitorPeriod: 1s
  nodeMonitorGracePeriod: 3s
  nodeStartupGracePeriod: 5s
  nodeEvictionRate: 100
  podReadinessRestoreDelay: 2s
`

// TestReadinessRestoredAfterFailover is seed 002 across a leader change: the
// leader marks a pod NotReady during a network blip and is killed; the
// standby, which never saw the mark happen, reads it from the pod and
// restores readiness once the node is back.
func TestReadinessRestoredAfterFailover(t *testing.T) {
	cp := framework.StartControlPlane(t, controlplane.Config{ControllerManager: true, Scheduler: true})
	client := framework.Client(t, cp)
	m := framework.StartFakeNodes(t, fastNodes(client, 2, true)) // the 1.15 kubelet that never re-posts
	node := m.NodeNames()[0]
	rs := startReplicas(t, cp, restoreConfig, 2)
	waitNodesReady(t, client, m.NodeNames()...)
	createPod(t, client, "app", node, tolerations(nil))
	framework.Eventually(t, 20*time.Second, "pod Ready", podReadyIs(client, "app", v1.ConditionTrue))

	partition(t, m, fakenode.Partition, fakenode.Target{Nodes: []string{node}})
	framework.Eventually(t, 20*time.Second, "pod marked NotReady, with the mark on the pod", func(ctx context.Context) (bool, string, error) {
		p, err := client.CoreV1().Pods("default").Get(ctx, "app", metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		mark := kube.PodCondition(p, nodelifecycle.MarkedCondition)
		return !kube.PodReady(p) && mark != nil && mark.Status == v1.ConditionTrue, fmt.Sprintf("mark %+v", mark), nil
	})
	killed, standby := rs.killLeader(3 * failoverLease)
	t.Logf("killed %s after the mark; %s leads", killed.name, standby.name)
	partition(t, m, fakenode.Heal, fakenode.Target{Nodes: []string{node}})
	framework.Eventually(t, 20*time.Second, "node Ready again", nodeCondition(client, node, v1.NodeReady, v1.ConditionTrue))
	framework.Eventually(t, 30*time.Second, "readiness restored by the standby", podReadyIs(client, "app", v1.ConditionTrue))
	p, err := client.CoreV1().Pods("default").Get(framework.Context(t), "app", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if mark := kube.PodCondition(p, nodelifecycle.MarkedCondition); mark == nil || mark.Status != v1.ConditionFalse || mark.Reason != "ReadinessRestored" {
		t.Errorf("the mark is not settled after the restore: %+v", mark)
	}
	if v := standby.ns.Metric(t, "nodeshepherd_nodelifecycle_pod_readiness_restored_total", nil); v != 1 {
		t.Errorf("the standby's pod_readiness_restored_total = %v, want 1", v)
	}
	framework.WaitEvents(t, client, "reason="+nodelifecycle.EventReadinessRestored, 1)
}
