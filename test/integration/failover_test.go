package integration

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/nodeshepherd/nodeshepherd/pkg/controller/drain"
	"github.com/nodeshepherd/nodeshepherd/pkg/controlplane"
	"github.com/nodeshepherd/nodeshepherd/pkg/fakenode"
	"github.com/nodeshepherd/nodeshepherd/pkg/kube"
	"github.com/nodeshepherd/nodeshepherd/test/framework"
)

// The leader election of the tests that run two `nodeshepherd run`
// processes: a 4 s Lease, so that a standby leads within seconds of the
// leader's end. fastElection is its section of a configuration file,
// fastElectionFlags the same as flags.
const (
	fastLeaseDuration = "4s"
	fastRenewDeadline = "3s"
	fastRetryPeriod   = "500ms"
	fastElection      = `leaderElection:
  leaderElect: true
  leaderElectLeaseDuration: ` + fastLeaseDuration + `
  leaderElectRenewDeadline: ` + fastRenewDeadline + `
  leaderElectRetryPeriod: ` + fastRetryPeriod + `
`
)

var fastElectionFlags = []string{"--leader-elect-lease-duration=" + fastLeaseDuration,
	"--leader-elect-renew-deadline=" + fastRenewDeadline, "--leader-elect-retry-period=" + fastRetryPeriod}

const failoverLease = 4 * time.Second

// takeoverDeadline bounds the wait for a standby to lead after the leader's
// end: a lease and a retry on an idle machine, but the wait ends as soon as
// it leads, so a generous deadline costs nothing and a busy machine does not
// fail it. How fast a standby takes over is a benchmark's question.
const takeoverDeadline = time.Minute

// failoverConfig is what both replicas read: compressed lifecycle timings,
// a KernelDeadlock drain, and leader election with a 4s lease.
const failoverConfig = `apiVersion: nodeshepherd.io/v1alpha1
kind: NodeShepherdConfiguration
manager:
  controllers: [nodelifecycle, tainteviction, drain]
` + fastElection + `shared:
  nodeMonitorPeriod: 1s
nodeLifecycle:
  nodeMonitorGracePeriod: 3s
  nodeStartupGracePeriod: 5s
  nodeEvictionRate: 100
drain:
  drainCondition: [KernelDeadlock=True]
  maxConcurrentDrains: 0
  maxCordonedNodes: "100%"
  drainTimeout: 5m
  maxGracePeriod: 5s
  drainRetryBackoff: 2s
`

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
		cmd, port := startListening(t, func(port int) []string {
			return []string{"run", "--kubeconfig", cp.KubeconfigPath(), "--config", confPath, "--metrics-bind-address", fmt.Sprintf("127.0.0.1:%d", port)}
		})
		rs.list = append(rs.list, &replica{name: string(rune('a' + i)), ns: &framework.NodeShepherd{Addr: fmt.Sprintf("127.0.0.1:%d", port)}, pid: cmd.Process.Pid})
	}
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

// kill SIGKILLs a replica (no lease release, no cleanup) and returns when.
func (rs *replicas) kill(victim *replica) time.Time {
	at := time.Now()
	if err := syscall.Kill(victim.pid, syscall.SIGKILL); err != nil {
		rs.t.Fatal(err)
	}
	var rest []*replica
	for _, r := range rs.list {
		if r != victim {
			rest = append(rest, r)
		}
	}
	rs.list = rest
	return at
}

// killLeader kills the leader and waits for another.
func (rs *replicas) killLeader(timeout time.Duration) (killed, next *replica) {
	killed = rs.waitLeader(time.Minute)
	rs.kill(killed)
	return killed, rs.waitLeader(timeout)
}

// TestLeaderKilledMidEvictionsAndDrains runs two `nodeshepherd run`
// processes from one configuration file, kills the leader with SIGKILL while
// taint evictions are due one after another and a drain is blocked by a
// PodDisruptionBudget, and checks that the standby takes over with the
// configured lease duration, evicts every remaining pod on time and once, and finishes
// the drain without evicting any pod twice.
func TestLeaderKilledMidEvictionsAndDrains(t *testing.T) {
	cp := framework.StartControlPlane(t, controlplane.Config{ControllerManager: true, Scheduler: true})
	client := framework.Client(t, cp)
	ctx := framework.Context(t)
	m := framework.StartFakeNodes(t, fastNodes(client, 4, false))
	names := m.NodeNames()
	rs := startReplicas(t, cp, failoverConfig, 2)
	first := rs.waitLeader(time.Minute)
	waitNodesReady(t, client, names...)

	// The drain: web pods on sick, a PDB that allows no disruption yet. dead
	// is cordoned first so that no web pod lands there: its NotReady pods
	// would use up the budget for good.
	sick, dead := names[1], names[0]
	if _, err := client.CoreV1().Nodes().Patch(ctx, dead, types.StrategicMergePatchType, []byte(`{"spec":{"unschedulable":true}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	createDeployment(t, client, deployment("web", 8))
	framework.Eventually(t, 60*time.Second, "web ready", deploymentReady(client, "web", 8))
	createPDB(t, client, "web", nil, ptr.To(intstr.FromInt32(0)))
	onSick, _ := podsOn(ctx, client, sick, "web")
	if len(onSick) == 0 {
		t.Fatalf("no web pod on %s to drain", sick)
	}
	// The evictions: pods on dead that tolerate the taints 2s, 4s, ... 16s.
	const tolPods = 8
	for i := 1; i <= tolPods; i++ {
		createPod(t, client, fmt.Sprintf("tol-%d", i), dead, tolerations(ptr.To(int64(2*i))))
	}
	framework.Eventually(t, 30*time.Second, "tol pods Ready", podReadyIs(client, fmt.Sprintf("tol-%d", tolPods), v1.ConditionTrue))

	setCondition(t, m, fakenode.SetCondition, v1.ConditionTrue, sick)
	partition(t, m, fakenode.Partition, fakenode.Target{Nodes: []string{dead}})
	framework.Eventually(t, 30*time.Second, "drain in flight, blocked by the PDB", drainCondition(client, sick, v1.ConditionTrue, "scheduled"))
	framework.Eventually(t, 30*time.Second, "first taint eviction", podEvicted(client, "tol-1"))
	taint := kube.FindTaint(getNode(t, client, dead), v1.Taint{Key: v1.TaintNodeUnreachable, Effect: v1.TaintEffectNoExecute})
	if taint == nil || taint.TimeAdded == nil {
		t.Fatalf("%s has no unreachable taint with a time", dead)
	}

	// Kill the leader the hard way: no lease release, no cleanup.
	killed := rs.kill(first)
	t.Logf("killed leader %s %v after the taint", first.name, killed.Sub(taint.TimeAdded.Time).Round(time.Millisecond))
	standby := rs.list[0]
	framework.Eventually(t, takeoverDeadline, "standby leads", func(context.Context) (bool, string, error) {
		return standby.ns.Metric(t, "nodeshepherd_leader", nil) == 1, "", nil
	})
	t.Logf("standby %s took over %v after the kill (lease duration %v)", standby.name, time.Since(killed).Round(time.Millisecond), failoverLease)
	// Within the lease duration means with the configured one: the Lease
	// says so, where the test's clock on a busy machine could not.
	lease, err := client.CoordinationV1().Leases("kube-system").Get(ctx, "nodeshepherd", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if d := lease.Spec.LeaseDurationSeconds; d == nil || time.Duration(*d)*time.Second != failoverLease {
		t.Errorf("the standby's Lease lasts %v seconds, want the configured %v", ptr.Deref(d, 0), failoverLease)
	}

	// No lost schedule: every pod is evicted, none before its tolerationSeconds.
	for i := 1; i <= tolPods; i++ {
		name := fmt.Sprintf("tol-%d", i)
		framework.Eventually(t, 60*time.Second, name+" evicted", podEvicted(client, name))
		p, err := client.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			continue // gone: fine
		}
		c := kube.PodCondition(p, v1.DisruptionTarget)
		due := taint.TimeAdded.Add(time.Duration(2*i) * time.Second)
		// Condition times have one-second resolution.
		if c.LastTransitionTime.Time.Before(due.Add(-time.Second)) {
			t.Errorf("%s evicted at %v, before its toleration ended at %v", name, c.LastTransitionTime.Time, due)
		}
	}
	// No duplicate eviction: one "Marking for deletion" per pod, over both replicas.
	events, err := client.CoreV1().Events("default").List(ctx, metav1.ListOptions{FieldSelector: "reason=TaintManagerEviction"})
	if err != nil {
		t.Fatal(err)
	}
	marks := map[string]int32{}
	for _, e := range events.Items {
		if strings.HasPrefix(e.Message, "Marking for deletion") {
			marks[e.InvolvedObject.Name] += max(e.Count, 1)
		}
	}
	for i := 1; i <= tolPods; i++ {
		if n := marks[fmt.Sprintf("tol-%d", i)]; n != 1 {
			t.Errorf("tol-%d marked for deletion %d times, want once", i, n)
		}
	}

	// The drain resumes on the standby once the budget allows it, and every
	// web pod on sick is evicted exactly once.
	if err := client.PolicyV1().PodDisruptionBudgets("default").Delete(ctx, "web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	createPDB(t, client, "web", nil, ptr.To(intstr.FromInt32(1)))
	framework.Eventually(t, 90*time.Second, "drain completed by the standby", drainCondition(client, sick, v1.ConditionFalse, "| Completed: "))
	if got := standby.ns.Metric(t, "nodeshepherd_drain_evictions_total", map[string]string{"result": "evicted"}); int(got) != len(onSick) {
		t.Errorf("the standby's drain accepted %v evictions for %d pods: a pod was evicted twice or not at all", got, len(onSick))
	}
	if n := getNode(t, client, sick); !n.Spec.Unschedulable || n.Annotations[drain.AnnotationConditions] == "" {
		t.Errorf("%s should stay cordoned and owned by the drain controller", sick)
	}
}
