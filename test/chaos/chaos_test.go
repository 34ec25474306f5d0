// Package chaos runs seeded random fault schedules (pkg/chaos) on the
// local control plane against 2-3 leader-elected `nodeshepherd run`
// replicas, with pkg/chaos's checker watching the API server on its own,
// and pkg/chaos's repair checkers the remediation ladder.
// `make chaos` runs it; see docs/chaos.md.
package chaos

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"github.com/nodeshepherd/nodeshepherd/pkg/chaos"
	fakecloud "github.com/nodeshepherd/nodeshepherd/pkg/cloudprovider/fake"
	"github.com/nodeshepherd/nodeshepherd/pkg/controlplane"
	"github.com/nodeshepherd/nodeshepherd/pkg/fakenode"
	"github.com/nodeshepherd/nodeshepherd/pkg/localcluster"
	"github.com/nodeshepherd/nodeshepherd/test/framework"
)

var (
	flagSeeds    = flag.Int("seeds", 1, "number of random seeds to run (ignored with -seed)")
	flagSeed     = flag.String("seed", "", "seeds to run, comma-separated (replays their schedules)")
	flagDuration = flag.Duration("duration", 60*time.Second, "fault window of each seed (cluster time)")
	flagOut      = flag.String("out", "", "directory for each seed's full timeline (default: $TMPDIR/nodeshepherd-chaos)")
	flagPlan     = flag.Bool("schedule-only", false, "print each seed's schedule (every stream, with -kinds) and run nothing")
	flagKinds    = flag.String("kinds", "", "fault kinds to draw, comma-separated (pkg/chaos's, the remediation ones and the person ones; default: all)")
	// flagGrace: a mutant's "Config: grace=..." (hack/chaosmutants), for
	// rules whose window the default grace makes shorter than the checker's
	// view lag.
	flagGrace = flag.Duration("grace", grace, "nodeMonitorGracePeriod of the replicas and the checker")
	// flagStalePodStatus: a mutant's "Config: stale-pod-status=true", for
	// the readiness rules: kubelets that never re-post a pod status someone
	// else changed (the seed 002 incident), so that only the controller
	// gives marked pods their readiness back.
	// flagClusterCIDR: a mutant's "Config: cluster-cidr=...", for
	// full-range: a range the newcomers fill.
	flagClusterCIDR    = flag.String("cluster-cidr", clusterCIDR, "node IPAM's cluster range (/26 blocks)")
	flagStalePodStatus = flag.Bool("stale-pod-status", false, "fake kubelets never re-post a pod status changed by someone else while the node was away (the seed 002 incident's kubelet)")
	// flagRepairDelay: a mutant's "Config: repair-delay=...": the fake
	// cloud acts on a repair request that long after seeing it, so that
	// pods the scheduler binds to the node meanwhile run before the
	// machine goes (repair-refill).
	flagRepairDelay = flag.Duration("repair-delay", 0, "how long the fake cloud takes to start carrying out a repair request (0: at once)")
)

// faultKinds is every kind -kinds takes: pkg/chaos's vocabulary, the
// remediation faults (repair_test.go) and a person's (person_test.go).
func faultKinds() []chaos.Kind {
	return append(append(append(chaos.AllKinds(), repairKinds...), personKinds...), personNamedOnly...)
}

// kindSet is -kinds parsed: nil when empty (every kind).
type kindSet map[chaos.Kind]bool

// parseKinds reads -kinds; an unknown kind is an error that lists them all.
func parseKinds(s string) (kindSet, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	all := faultKinds()
	out := kindSet{}
	var bad []string
	for _, k := range strings.Split(s, ",") {
		k = strings.TrimSpace(k)
		if k == "" {
			continue
		}
		if !slices.Contains(all, chaos.Kind(k)) {
			bad = append(bad, k)
			continue
		}
		out[chaos.Kind(k)] = true
	}
	if len(bad) > 0 || len(out) == 0 {
		names := make([]string, len(all))
		for i, k := range all {
			names[i] = string(k)
		}
		return nil, fmt.Errorf("-kinds=%q: unknown fault kind(s) %q; the kinds are: %s", s, bad, strings.Join(names, ","))
	}
	return out, nil
}

// has says whether the set draws k (every kind when nil).
func (ks kindSet) has(k chaos.Kind) bool { return ks == nil || ks[k] }

// of returns the kinds of list the set draws (nil: the set is nil too).
func (ks kindSet) of(list []chaos.Kind) []chaos.Kind {
	if ks == nil {
		return nil
	}
	var out []chaos.Kind
	for _, k := range list {
		if ks[k] {
			out = append(out, k)
		}
	}
	return out
}

// The compressed timings: the controllers' and the fake kubelets'. The
// checker's limits are derived from the same values.
const (
	grace         = 3 * time.Second
	monitorPeriod = time.Second
	maxCordoned   = 2
	maxDrains     = 1
	maxOOS        = 2
	progressBound = 90 * time.Second
	// slack: the checker's allowance for watch delays on a busy 2-core box.
	slack = 5 * time.Second
	// apiServerRelist: after an API server restart answers, the repair
	// checkers count as blind this long more (their informers re-list with
	// a backoff).
	apiServerRelist = 5 * time.Second
	// evictionSlack: how long before its stamp a taint eviction may have
	// been decided (the controller reads the node right before).
	evictionSlack = time.Second
	// evictionRate is nodeEvictionRate (one taint per 10s per zone, as
	// upstream's default; zones of at most 50 nodes get 0 while partially
	// disrupted, unhealthyZoneThreshold and largeClusterSizeThreshold
	// being left at their defaults): the checker's rate-limit rule.
	evictionRate = 0.1
	// overdueSlack is nodelifecycle's --heartbeat-overdue-slack, left at
	// its default (the configuration file has no field for it): the
	// checker's zone-rules counts overdue nodes as the controller does.
	overdueSlack = 2 * time.Second
	// clusterCIDR is node IPAM's range, in /26 blocks (-cluster-cidr).
	clusterCIDR = "10.244.0.0/18"
)

const configYAML = `apiVersion: nodeshepherd.io/v1alpha1
kind: NodeShepherdConfiguration
manager:
  controllers: [nodelifecycle, tainteviction, drain, outofservice, nodeipam, remediation]
leaderElection:
  leaderElect: true
  leaderElectLeaseDuration: 4s
  leaderElectRenewDeadline: 3s
  leaderElectRetryPeriod: 500ms
shared:
  nodeMonitorPeriod: 1s
nodeLifecycle:
  nodeMonitorGracePeriod: 3s
  nodeStartupGracePeriod: 5s
  nodeEvictionRate: 0.1
  secondaryNodeEvictionRate: 0.01
  podReadinessRestoreDelay: 1s
cloudProvider:
  cloudProvider: fake
outOfService:
  outOfServiceAfter: 3s
  maxOutOfServiceNodes: 2
  maxOutOfServicePercent: 100
drain:
  drainCondition: [KernelDeadlock=True]
  maxConcurrentDrains: 1
  maxCordonedNodes: "2"
  drainTimeout: 1m
  maxGracePeriod: 2s
  drainRetryBackoff: 2s
nodeIPAM:
  allocateNodeCidrs: true
  clusterCidr: ` + clusterCIDR + `
  nodeCidrMaskSize: 26
  serviceClusterIpRange: ` + controlplane.ServiceClusterIPRange + `
`

func seeds(t *testing.T) []int64 {
	if *flagSeed != "" {
		var out []int64
		for _, s := range strings.Split(*flagSeed, ",") {
			n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
			if err != nil {
				t.Fatalf("-seed %q: %q is not a whole number; give seeds like -seed=1234 or -seed=1,2,3", *flagSeed, s)
			}
			out = append(out, n)
		}
		return out
	}
	if *flagSeeds < 1 {
		t.Fatalf("-seeds=%d: give at least 1", *flagSeeds)
	}
	base := time.Now().UnixNano() % 1_000_000
	var out []int64
	for i := 0; i < *flagSeeds; i++ {
		out = append(out, base+int64(i))
	}
	return out
}

// TestChaos runs one random schedule per seed, each on a fresh cluster.
func TestChaos(t *testing.T) {
	if *flagDuration <= 0 {
		t.Fatalf("-duration=%v: give a positive duration, e.g. 60s", *flagDuration)
	}
	if *flagGrace < time.Second {
		t.Fatalf("-grace=%v: give at least 1s", *flagGrace)
	}
	kinds, err := parseKinds(*flagKinds)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("not checked yet:\n  - %s", strings.Join(append(append([]string(nil), chaos.NotChecked...), chaos.RepairNotChecked...), "\n  - "))
	// The repair policies and faults first: a run on a policy the
	// controller refuses, or faults a seed does not replay, proves nothing.
	if !t.Run("repair-policies", testRepairPolicies) {
		t.FailNow()
	}
	for _, seed := range seeds(t) {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) { runSeed(t, seed, *flagDuration, kinds) })
	}
}

// replica is one `nodeshepherd run` process in a slot.
type replica struct {
	cmd *exec.Cmd
	// ended: the runner ended it (a fault), so that its exit is no news.
	ended atomic.Bool
}

// restartDelay is how long a replica that exited on its own stays down
// before the runner starts it again, as its Pod's kubelet would (a
// replica that loses the Lease exits to come back as a standby).
const restartDelay = time.Second

type cluster struct {
	t      *testing.T
	cp     *controlplane.ControlPlane
	client kubernetes.Interface
	nodes  *fakenode.Manager
	// late are the newcomers' fake nodes (OpRegister), by node name;
	// nodeCfg is the configuration they share with nodes; repairs the
	// sink of their logs.
	late    map[string]*fakenode.Manager
	nodeCfg fakenode.Config
	repairs *repairTruth
	// rc are the repair checkers, told of the API server's restarts.
	rc       chaos.RepairCheckers
	proxy    *framework.FaultProxy
	kc, conf string
	// mu guards slots and killed: a replica that exits on its own is
	// restarted from its own goroutine.
	mu    sync.Mutex
	slots []*replica
	// killed is the slot whose leader was killed last, for its restart.
	killed int
	// stopping: the seed is over; exits are the cleanup's. exits counts
	// the replicas that exited on their own.
	stopping bool
	exits    int
	// started is every replica process of the seed, for their logs.
	started []*replica
	rules   map[int]*framework.FaultRule
	// lags are the watch-lag rules, by fault (a blind-cordon's second rule;
	// one per resource of a watch-lag of several, "nodes,leases").
	lags map[int][]*framework.FaultRule
	// restarted is the running kube-apiserver restart's result.
	restarted chan error
	// faults are the schedule's, pkg/chaos's and the remediation ones.
	faults []chaos.Fault
	// notes are the fault steps and the fake cloud's repairs (noted from
	// fakenodes' goroutines: hence the lock).
	notesMu sync.Mutex
	notes   []chaos.Entry
}

func (c *cluster) note(at time.Time, what string) {
	c.notesMu.Lock()
	defer c.notesMu.Unlock()
	c.notes = append(c.notes, chaos.Entry{At: at, What: what})
}

func runSeed(t *testing.T, seed int64, duration time.Duration, kinds kindSet) {
	start := time.Now()
	zoneNames := []string{"zone-a", "zone-b", "zone-c"}
	// The truth is filled as the steps are applied; the zones it needs are
	// known before the nodes start, and fakenodes' repairs go into it.
	var czones []chaos.Zone
	for i, z := range zoneNames {
		cz := chaos.Zone{Name: z}
		for j := 0; j < 4; j++ {
			cz.Nodes = append(cz.Nodes, fmt.Sprintf("%s%04d", fakenode.DefaultNamePrefix, 4*i+j))
		}
		czones = append(czones, cz)
	}
	// 2 or 3 replicas, from the seed.
	replicas := 2 + int(uint64(seed)%2)
	// -kinds: pkg/chaos draws only its kinds of the set; none of them, no
	// pkg/chaos fault at all (its empty Kinds means every kind).
	sched := chaos.Schedule{Seed: seed, Duration: duration}
	if own := kinds.of(chaos.AllKinds()); kinds == nil || len(own) > 0 {
		var err error
		if sched, err = chaos.Generate(chaos.Options{Seed: seed, Duration: duration, Zones: czones, Replicas: replicas, Kinds: own}); err != nil {
			t.Fatal(err)
		}
	}
	sched = withRepairFaults(sched, czones, kinds)
	sched = withPersonFaults(sched, czones, kinds)
	if *flagPlan {
		t.Logf("%d replicas; schedule %s", replicas, sched)
		return
	}
	cp := framework.StartControlPlane(t, controlplane.Config{ControllerManager: true, Scheduler: true})
	client := framework.Client(t, cp)
	ctx := framework.Context(t)
	truth := chaos.NewTruth(czones)
	c := &cluster{t: t, cp: cp, client: client, killed: -1, rules: map[int]*framework.FaultRule{}, lags: map[int][]*framework.FaultRule{}, faults: sched.Faults}
	defer func() { // before the cleanups kill the replicas
		c.mu.Lock()
		c.stopping = true
		c.mu.Unlock()
	}()
	repairs := newRepairTruth(truth, c.note)
	c.nodeCfg = fakenode.Config{Client: client, Groups: nodeGroups(zoneNames, 4), LeaseDuration: 4 * time.Second,
		LeaseRenewInterval: 500 * time.Millisecond, NodeStatusUpdateFrequency: 500 * time.Millisecond, PodStartDelay: 100 * time.Millisecond,
		RebootDowntime: rebootDowntime, ReplaceDowntime: replaceDowntime, EmulateStalePodStatus: *flagStalePodStatus,
		RepairDelay: *flagRepairDelay, ReachedAtHeal: true}
	m := startFakeNodes(t, repairs, c.nodeCfg)
	c.nodes, c.repairs, c.late = m, repairs, map[string]*fakenode.Manager{}
	for _, z := range czones {
		for _, n := range z.Nodes {
			if m.Zone(n) != z.Name {
				t.Fatalf("node %s is in zone %q, the schedule's zones want %s", n, m.Zone(n), z.Name)
			}
		}
	}
	t.Logf("%d replicas; schedule %s", replicas, sched)

	// The checkers watch before anything else writes.
	checker := chaos.NewChecker(chaos.Limits{Grace: *flagGrace, MonitorPeriod: monitorPeriod, Slack: slack, MaxCordoned: maxCordoned,
		MaxConcurrentDrains: maxDrains, MaxOutOfService: maxOOS, EvictionSlack: evictionSlack, EvictionRate: evictionRate, OverdueSlack: overdueSlack}, truth)
	if err := chaos.Watch(ctx, client, checker); err != nil {
		t.Fatal(err)
	}
	repairs.judgedBy(checker)
	rc := chaos.RepairCheckers{chaos.NewRepairChecker(chaosPolicy, slack, true), chaos.NewRepairChecker(fencePolicy, slack, true), chaos.NewRepairChecker(drainPolicy, slack, true)}
	if err := chaos.WatchRepairs(ctx, client, rc...); err != nil {
		t.Fatal(err)
	}
	c.rc = rc
	installRepairPolicy(t, dynamic.NewForConfigOrDie(cp.RESTConfig()), chaosPolicy, fencePolicy, drainPolicy)
	c.proxy = framework.StartFaultProxy(t, cp.RESTConfig())
	pcfg := c.proxy.RESTConfig(cp.RESTConfig())
	c.kc = framework.WriteKubeconfig(t, pcfg.Host, pcfg.CAData, pcfg.BearerToken)
	c.conf = filepath.Join(t.TempDir(), "config.yaml")
	conf := strings.Replace(withGrace(configYAML, *flagGrace), "clusterCidr: "+clusterCIDR, "clusterCidr: "+*flagClusterCIDR, 1)
	if err := os.WriteFile(c.conf, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	c.mu.Lock()
	c.slots = make([]*replica, replicas)
	for i := range c.slots {
		c.slots[i] = c.startReplica(i)
	}
	c.mu.Unlock()
	framework.Eventually(t, 90*time.Second, "a leader", func(ctx context.Context) (bool, string, error) {
		slot, holder := c.leader(ctx)
		return slot >= 0, holder, nil
	})
	framework.WaitAllNodesReady(t, client, len(m.NodeNames()), 90*time.Second)
	createWorkloads(t, client)
	t.Logf("cluster ready in %v", time.Since(start).Round(time.Second))

	// The schedule, step by step at its times.
	t0 := time.Now()
	for _, s := range sched.Steps {
		if d := time.Until(t0.Add(s.At)); d > 0 {
			select {
			case <-time.After(d):
			case <-ctx.Done():
				t.Fatal("ended before the schedule did")
			}
		}
		a := chaos.Applied{Step: s, Start: time.Now()}
		what := c.apply(ctx, s)
		a.Done = time.Now()
		truth.Record(a)
		f := sched.Faults[s.Fault]
		c.note(a.Start, fmt.Sprintf("FAULT #%d %s: %s%s", s.Fault, f.Kind, s, what))
	}
	faultsEnd := time.Now()

	// Progress: within the bound, every workload whole, every drain done
	// or explained, every repair ended.
	var deps []chaos.Deployment
	deadline := time.Now().Add(progressBound)
	for time.Now().Before(deadline) {
		deps = deployments(ctx, t, client)
		if whole(deps) && len(checker.StuckDrains()) == 0 && len(rc.InRepair()) == 0 {
			break
		}
		time.Sleep(time.Second) // polling the cluster, not waiting for luck
	}
	bound := time.Since(faultsEnd).Round(time.Second)
	checker.CheckProgress(time.Now(), deps, bound)
	rc.CheckProgress(time.Now(), bound)
	// The repair checks still waiting for their window get it (the
	// watches and their ticker run on meanwhile).
	for wait := time.Now().Add(slack + 5*time.Second); rc.Pending() > 0 && time.Now().Before(wait); {
		time.Sleep(100 * time.Millisecond) // polling the checker until its deadline
	}
	if n := rc.Pending(); n > 0 {
		t.Errorf("seed %d: %d repair checks not judged: their window did not pass", seed, n)
	}
	for _, p := range repairs.missed(rc.Done()) {
		t.Errorf("seed %d: ground truth: %s", seed, p)
	}

	vs := append(checker.Violations(), rc.Violations()...)
	sort.SliceStable(vs, func(i, j int) bool { return vs[i].At.Before(vs[j].At) })
	path := c.writeTimeline(seed, t0, checker, rc)
	c.mu.Lock()
	exits := c.exits
	c.mu.Unlock()
	t.Logf("seed %d: %d faults over %v, %d violations, %v in all; repairs: %s; %d replicas restarted after exiting on their own; timeline %s",
		seed, len(sched.Faults), duration, len(vs), time.Since(start).Round(time.Second), rc.Summary(), exits, path)
	if len(vs) == 0 {
		return
	}
	var b strings.Builder
	fmt.Fprintf(&b, "seed %d: %d invariant violations (replay: make chaos SEED=%d DURATION=%v)\n", seed, len(vs), seed, duration)
	for _, v := range vs {
		// The time since the schedule's start, then Violation.String():
		// "HH:MM:SS.mmm INVARIANT OBJECT: detail".
		fmt.Fprintf(&b, "  +%v %s\n", v.At.Sub(t0).Round(time.Millisecond), v)
	}
	fmt.Fprintf(&b, "timeline before the first violation (all of it in %s):\n%s", path, excerpt(c.merged(checker, rc), t0, vs[0].At))
	if logs := c.keepLogs(seed, path); logs != "" {
		fmt.Fprintf(&b, "the replicas' logs: %s\n", logs)
	}
	t.Error(b.String())
}

// startReplica starts a process for slot; c.mu is held. One that exits
// without the runner ending it is started again after restartDelay, unless
// a fault has emptied or filled its slot meanwhile.
func (c *cluster) startReplica(slot int) *replica {
	r := &replica{cmd: framework.StartBinary(c.t, "run", "--kubeconfig", c.kc, "--config", c.conf, "--metrics-bind-address", "0")}
	c.started = append(c.started, r)
	go func() {
		st, err := r.cmd.Process.Wait()
		if r.ended.Load() {
			return
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.stopping || c.slots[slot] != r {
			return
		}
		how := fmt.Sprint(err)
		if st != nil {
			how = st.String()
		}
		c.note(time.Now(), fmt.Sprintf("REPLICA slot %d pid %d exited on its own (%s); started again in %v", slot, r.cmd.Process.Pid, how, restartDelay))
		c.exits++
		if st != nil && st.ExitCode() == 2 { // a Go panic, not a lost Lease
			c.t.Errorf("replica slot %d (pid %d) exited with status 2, as a Go panic does; the end of its log:\n%s", slot, r.cmd.Process.Pid, logTail(r.cmd, 4096))
		}
		time.AfterFunc(restartDelay, func() {
			c.mu.Lock()
			defer c.mu.Unlock()
			if !c.stopping && c.slots[slot] == r {
				c.slots[slot] = c.startReplica(slot)
				c.note(time.Now(), fmt.Sprintf("REPLICA slot %d started again: pid %d", slot, c.slots[slot].cmd.Process.Pid))
			}
		})
	}()
	return r
}

// logTail is the last n bytes of a replica's log (its output file, in the
// test's temporary directory, which goes with the test).
func logTail(cmd *exec.Cmd, n int64) string {
	f, ok := cmd.Stdout.(*os.File)
	if !ok {
		return "(no log file)"
	}
	b, err := os.ReadFile(f.Name())
	if err != nil {
		return err.Error()
	}
	return string(b[max(0, int64(len(b))-n):])
}

// leader returns the slot whose process holds the controllers' Lease (the
// identity is host_pid_suffix), or -1.
func (c *cluster) leader(ctx context.Context) (int, string) {
	l, err := c.client.CoordinationV1().Leases("kube-system").Get(ctx, "nodeshepherd", metav1.GetOptions{})
	if err != nil {
		return -1, err.Error()
	}
	holder := ptr.Deref(l.Spec.HolderIdentity, "")
	if l.Spec.RenewTime == nil || time.Since(l.Spec.RenewTime.Time) > 4*time.Second {
		return -1, "lease expired, last holder " + holder
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, r := range c.slots {
		if r != nil && strings.Contains(holder, fmt.Sprintf("_%d_", r.cmd.Process.Pid)) {
			return i, holder
		}
	}
	return -1, "holder " + holder
}

// apply performs one step and says what it did when that is not obvious.
func (c *cluster) apply(ctx context.Context, s chaos.Step) string {
	t := c.t
	var retried string
	node := func(a fakenode.Action, cond *fakenode.Condition) {
		// A machine change takes effect in fakenodes at once, and is then
		// published to the fake cloud's ConfigMap: while kube-apiserver
		// restarts, that write fails, and is tried again (the same change
		// again is no change) until it lands.
		for tries, first := 1, time.Now(); ; tries++ {
			err := c.applyNodes(ctx, s.Nodes, a, cond)
			var fe *fakenode.FaultError
			switch {
			case err == nil:
				if tries > 1 {
					retried = fmt.Sprintf(" (published on try %d)", tries)
				}
				return
			case errors.As(err, &fe) || time.Since(first) > 90*time.Second || ctx.Err() != nil:
				t.Fatalf("step %s: %v", s, err)
			}
			time.Sleep(500 * time.Millisecond) // the API server's restart, not luck: bounded above
		}
	}
	defer func() {
		if retried != "" {
			c.note(time.Now(), fmt.Sprintf("FAULT #%d: step %s%s", s.Fault, s, retried))
		}
	}()
	cond := func(needStatus bool) *fakenode.Condition {
		cd, err := fakenode.ParseCondition(s.Condition, needStatus)
		if err != nil {
			t.Fatalf("step %s: %v", s, err)
		}
		return cd
	}
	switch s.Op {
	case chaos.OpPartition:
		node(fakenode.Partition, nil)
	case chaos.OpHeal:
		node(fakenode.Heal, nil)
	case chaos.OpKubeletStop:
		node(fakenode.KubeletStop, nil)
	case chaos.OpKubeletStart:
		node(fakenode.KubeletStart, nil)
	case chaos.OpMachineShutdown:
		node(fakenode.MachineShutdown, nil)
	case chaos.OpMachineStart:
		node(fakenode.MachineStart, nil)
	case chaos.OpCondition:
		cd := cond(true)
		// A lasting condition survives reboots: only a replacement clears it.
		cd.SurvivesReboot = c.faults[s.Fault].Kind == kindRepairLasting || c.faults[s.Fault].Kind == kindRepairCrowded || c.faults[s.Fault].Kind == kindRepairRefill || c.faults[s.Fault].Kind == kindRepairCutoff ||
			c.faults[s.Fault].Kind == kindRepairRestart || c.faults[s.Fault].Kind == kindRepairLateStep
		node(fakenode.SetCondition, cd)
	case chaos.OpClearCondition:
		node(fakenode.ClearCondition, cond(false))
	case chaos.OpRegister:
		return c.register(ctx, s)
	case chaos.OpKillLeader:
		slot, holder := c.leader(ctx)
		if slot < 0 {
			return " (no leader to kill: " + holder + ")"
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		r := c.slots[slot]
		if r == nil { // emptied since leader() looked
			return " (no leader to kill: slot emptied)"
		}
		r.ended.Store(true)
		_ = syscall.Kill(r.cmd.Process.Pid, syscall.SIGKILL)
		c.slots[slot], c.killed = nil, slot
		return fmt.Sprintf(" (SIGKILL slot %d, %s)", slot, holder)
	case chaos.OpStopReplica:
		c.mu.Lock()
		defer c.mu.Unlock()
		r := c.slots[s.Replica]
		if r == nil {
			return " (slot empty)"
		}
		r.ended.Store(true)
		_ = syscall.Kill(r.cmd.Process.Pid, syscall.SIGTERM)
		c.slots[s.Replica] = nil
		return fmt.Sprintf(" (SIGTERM pid %d)", r.cmd.Process.Pid)
	case chaos.OpStartReplica:
		c.mu.Lock()
		defer c.mu.Unlock()
		slot := s.Replica
		if slot < 0 {
			slot = c.killed
		}
		if slot < 0 || c.slots[slot] != nil {
			return " (nothing to restart: no slot is empty)"
		}
		c.slots[slot] = c.startReplica(slot)
		return fmt.Sprintf(" (slot %d, pid %d)", slot, c.slots[slot].cmd.Process.Pid)
	case opPoolLeave, opPoolJoin:
		return setPoolLabel(ctx, c.client, s.Nodes[0], s.Op == opPoolJoin)
	case opCrowdOn, opCrowdOff:
		return setCrowdTaint(ctx, c.client, s.Nodes, s.Op == opCrowdOn)
	case opHoldNodeWrites:
		c.rules[s.Fault] = c.proxy.Inject(framework.FaultRule{Name: fmt.Sprintf("chaos-%d", s.Fault), Methods: []string{http.MethodPatch, http.MethodPut},
			Resource: "nodes", Subresource: "-", Names: s.Nodes, Kind: framework.FaultHold})
	case opRequestsRefused:
		c.rules[s.Fault] = c.proxy.Inject(framework.FaultRule{Name: fmt.Sprintf("chaos-%d", s.Fault), Resource: "configmaps",
			Namespace: fakecloud.ConfigMapNamespace, Names: []string{fakecloud.RequestsConfigMapName}, Kind: framework.FaultStatus, Status: http.StatusInternalServerError})
	case opListLagStart:
		c.lags[s.Fault] = []*framework.FaultRule{c.proxy.Inject(framework.FaultRule{Name: fmt.Sprintf("chaos-%d-list", s.Fault), Resource: s.Resource, ListOnly: true, QuorumRead: true,
			Kind: framework.FaultLag, After: s.Lag})}
	case opListLagEnd:
		if rs := c.lags[s.Fault]; len(rs) > 0 {
			c.proxy.Stop(rs[0])
			return fmt.Sprintf(" (%d lists answered late)", c.proxy.Injected(rs[0].Name))
		}
	case opRequestsServed:
		if r := c.rules[s.Fault]; r != nil {
			c.proxy.Stop(r)
			return fmt.Sprintf(" (injected %d times)", c.proxy.Injected(r.Name))
		}
	case opReleaseNodeWrites:
		if r := c.rules[s.Fault]; r != nil {
			n := c.proxy.Held(r.Name)
			c.proxy.Release(r)
			return fmt.Sprintf(" (%d writes released)", n)
		}
	case opConfirm:
		// A careful person looks first: two faults of one node overlap
		// (another one's machine start inside this one's shutdown), and a
		// confirmation of a machine that runs would be the person's error,
		// not the controller's.
		for _, st := range c.nodes.States() {
			if st.Name == s.Nodes[0] && st.Machine == "" {
				return " (not confirmed: the machine runs)"
			}
		}
		return setAnnotation(ctx, c.client, s.Nodes[0], annConfirm, "chaos: a person confirmed the machine dead")
	case opUnconfirm:
		return setAnnotation(ctx, c.client, s.Nodes[0], annConfirm, nil)
	case opFenceJoin:
		return setLabel(ctx, c.client, s.Nodes[0], fencePolicy.PoolLabel, fencePolicy.PoolValue)
	case opDrainJoin:
		return setLabel(ctx, c.client, s.Nodes[0], drainPolicy.PoolLabel, drainPolicy.PoolValue)
	case opDrainExit:
		return setLabel(ctx, c.client, s.Nodes[0], drainPolicy.PoolLabel, nil)
	case opFenceExit:
		return setLabel(ctx, c.client, s.Nodes[0], fencePolicy.PoolLabel, nil)
	case chaos.OpLostAnswerStart:
		r := framework.FaultRule{Name: fmt.Sprintf("chaos-%d", s.Fault), Resource: s.Resource, Kind: framework.FaultLostAnswer, Methods: framework.Writes, Every: 2}
		if s.Resource == "evictions" {
			r.Resource, r.Subresource = "pods", "eviction"
		}
		c.rules[s.Fault] = c.proxy.Inject(r)
	case chaos.OpWatchGoneStart:
		// The watches are cut; their resumption, and the re-list from the
		// last resourceVersion, are answered 410 Gone until the end.
		c.rules[s.Fault] = c.proxy.Inject(framework.FaultRule{Name: fmt.Sprintf("chaos-%d", s.Fault), Resource: s.Resource, ResumeOnly: true, Kind: framework.FaultGone})
		return fmt.Sprintf(" (%d watches cut)", c.proxy.DropWatches())
	case chaos.OpLostAnswerEnd, chaos.OpWatchGoneEnd:
		if r := c.rules[s.Fault]; r != nil {
			c.proxy.Stop(r)
			return fmt.Sprintf(" (injected %d times)", c.proxy.Injected(r.Name))
		}
	case chaos.OpWatchLagStart:
		// The watches are cut, so that they come back lagged.
		for i, res := range strings.Split(s.Resource, ",") {
			name := fmt.Sprintf("chaos-%d-lag", s.Fault)
			if i > 0 {
				name += "-" + res
			}
			c.lags[s.Fault] = append(c.lags[s.Fault], c.proxy.Inject(framework.FaultRule{Name: name, Resource: res, Watch: true, Kind: framework.FaultLag, After: s.Lag}))
		}
		return fmt.Sprintf(" (%d watches cut)", c.proxy.DropWatches())
	case chaos.OpWatchLagEnd:
		if rs := c.lags[s.Fault]; len(rs) > 0 {
			n := 0
			for _, r := range rs {
				c.proxy.Stop(r)
				n += c.proxy.Injected(r.Name)
			}
			return fmt.Sprintf(" (%d watches lagged; %d cut)", n, c.proxy.DropWatches())
		}
	case chaos.OpLostCordonStart, chaos.OpHoldStart:
		// Writes of a Node's spec or metadata: cordons, taints, annotations.
		r := framework.FaultRule{Name: fmt.Sprintf("chaos-%d", s.Fault), Methods: []string{http.MethodPatch, http.MethodPut}, Resource: "nodes", Subresource: "-", Kind: framework.FaultLostAnswer}
		switch {
		case s.Op == chaos.OpHoldStart:
			r.Kind = framework.FaultHold
		case s.Lag > 0:
			r.Kind, r.After = framework.FaultLateLanding, s.Lag
		}
		c.rules[s.Fault] = c.proxy.Inject(r)
	case chaos.OpHoldStop:
		if r := c.rules[s.Fault]; r != nil {
			c.proxy.Stop(r)
			return fmt.Sprintf(" (%d writes held)", c.proxy.Held(r.Name))
		}
	case chaos.OpHoldRelease:
		if r := c.rules[s.Fault]; r != nil {
			n := c.proxy.Held(r.Name)
			c.proxy.Release(r)
			return fmt.Sprintf(" (%d writes released)", n)
		}
	case chaos.OpAPIHangStart:
		r := framework.FaultRule{Name: fmt.Sprintf("chaos-%d", s.Fault), Methods: framework.Writes, Resource: s.Resource, Kind: framework.FaultHangUnsent}
		if s.Resource == "evictions" {
			r.Resource, r.Subresource = "pods", "eviction"
		}
		c.rules[s.Fault] = c.proxy.Inject(r)
	case chaos.OpQuorumErrorsStart:
		// With Nodes: every fresh LIST and those nodes' fresh GETs only.
		c.rules[s.Fault] = c.proxy.Inject(framework.FaultRule{Name: fmt.Sprintf("chaos-%d", s.Fault), Resource: s.Resource, Namespace: v1.NamespaceNodeLease, QuorumRead: true,
			Names: s.Nodes, ListsToo: len(s.Nodes) > 0, Kind: framework.FaultStatus, Status: 500})
	case chaos.OpStatusRefusedStart:
		c.rules[s.Fault] = c.proxy.Inject(framework.FaultRule{Name: fmt.Sprintf("chaos-%d", s.Fault), Methods: framework.Writes, Resource: "nodes", Subresource: "status",
			Names: s.Nodes, Kind: framework.FaultStatus, Status: 500})
	case chaos.OpLostCordonEnd, chaos.OpAPIHangEnd, chaos.OpQuorumErrorsEnd, chaos.OpStatusRefusedEnd:
		// Requests an api-hang holds stay held until their clients give up.
		if r := c.rules[s.Fault]; r != nil {
			c.proxy.Stop(r)
			return fmt.Sprintf(" (injected %d times)", c.proxy.Injected(r.Name))
		}
	case chaos.OpAPIServerStop:
		// In the background: the ready step waits for it, the other steps
		// go on meanwhile (fakenodes and the checkers retry on their own).
		// The pid is read before: the restart replaces the process under
		// the control plane's feet, with no lock (the ready step reads it
		// after the restart's answer).
		pid := c.cp.PID(controlplane.APIServer)
		// The repair checkers' watches end with it, and client-go retries a
		// refused connection without calling their error handler: blind
		// from now (chaos seeds 220005, 220013: versions a re-list skipped
		// judged as a view).
		c.rc.WatchBroken(time.Now())
		done := make(chan error, 1)
		c.restarted = done
		go func() { done <- c.cp.RestartAPIServer(ctx, s.Down) }()
		return fmt.Sprintf(" (kube-apiserver pid %d stopped)", pid)
	case chaos.OpAPIServerReady:
		if c.restarted == nil {
			return " (no restart)"
		}
		select {
		case err := <-c.restarted:
			c.restarted = nil
			if err != nil {
				t.Fatalf("step %s: kube-apiserver did not come back: %v", s, err)
			}
			// Blind until the informers have re-listed (their backoff).
			c.rc.WatchBroken(time.Now().Add(apiServerRelist))
			return fmt.Sprintf(" (kube-apiserver pid %d answers)", c.cp.PID(controlplane.APIServer))
		case <-time.After(2 * time.Minute):
			t.Fatalf("step %s: kube-apiserver not ready 2m after its restart", s)
		}
	case chaos.OpAPIFaultStart:
		r := framework.FaultRule{Name: fmt.Sprintf("chaos-%d", s.Fault), Resource: s.Resource, Kind: framework.FaultStatus, Status: s.Status, Every: 2}
		if s.Resource == "evictions" {
			r.Resource, r.Subresource = "pods", "eviction"
		}
		if s.Status == 429 {
			r.RetryAfter = 1
		} else {
			r.Methods = framework.Writes
		}
		c.rules[s.Fault] = c.proxy.Inject(r)
	case chaos.OpWatchStallStart:
		// New watches are held without an answer; the current ones are cut
		// so that they come back into the hold.
		c.rules[s.Fault] = c.proxy.Inject(framework.FaultRule{Name: fmt.Sprintf("chaos-%d", s.Fault), Resource: s.Resource, Watch: true, Kind: framework.FaultHangUnsent})
		return fmt.Sprintf(" (%d watches cut)", c.proxy.DropWatches())
	case chaos.OpAPIFaultEnd, chaos.OpWatchStallEnd:
		if r := c.rules[s.Fault]; r != nil {
			c.proxy.Stop(r)
			n := c.proxy.Injected(r.Name)
			if s.Op == chaos.OpWatchStallEnd {
				c.proxy.DropWatches() // releases the held watches
			}
			return fmt.Sprintf(" (injected %d times)", n)
		}
	default:
		if what, ok := c.applyPerson(ctx, s); ok { // person_test.go's own ops
			return what
		}
		t.Fatalf("unknown step %s", s)
	}
	return ""
}

// applyNodes applies a fake-node action to nodes, each through the fake
// nodes that run it (the first ones or a newcomers').
func (c *cluster) applyNodes(ctx context.Context, nodes []string, a fakenode.Action, cond *fakenode.Condition) error {
	by := map[*fakenode.Manager][]string{}
	var order []*fakenode.Manager
	for _, n := range nodes {
		m := c.late[n]
		if m == nil {
			m = c.nodes
		}
		if by[m] == nil {
			order = append(order, m)
		}
		by[m] = append(by[m], n)
	}
	for _, m := range order {
		if _, err := m.Apply(ctx, fakenode.Fault{Action: a, Target: fakenode.Target{Nodes: by[m]}, Condition: cond}); err != nil {
			return err
		}
	}
	return nil
}

// register starts a newcomers' fake nodes (a second fakenodes process, as a
// scale-up's new machines) in the step's zone and waits until they are
// registered; a silent step's nodes are cut off once registered.
func (c *cluster) register(ctx context.Context, s chaos.Step) string {
	t := c.t
	prefix, ok := strings.CutSuffix(s.Nodes[0], "0000")
	if !ok {
		t.Fatalf("step %s: newcomer %s is not named as chaos.NewcomerNames names them", s, s.Nodes[0])
	}
	cfg := c.nodeCfg
	cfg.NamePrefix, cfg.Nodes, cfg.CutOffOnceRegistered = prefix, 0, s.Silent
	cfg.Groups = []fakenode.NodeGroup{{Name: "newcomers", Zone: s.Zone, Count: len(s.Nodes)}}
	start := time.Now()
	m := startFakeNodes(t, c.repairs, cfg)
	if got := m.NodeNames(); !slices.Equal(got, s.Nodes) {
		t.Fatalf("step %s: the newcomers' fake nodes are %v, the schedule's %v", s, got, s.Nodes)
	}
	for _, n := range s.Nodes {
		c.late[n] = m
	}
	return fmt.Sprintf(" (registered in %v)", time.Since(start).Round(time.Millisecond))
}

func createWorkloads(t *testing.T, client kubernetes.Interface) {
	ctx := framework.Context(t)
	for _, w := range []struct {
		name     string
		replicas int32
		tol      int64
		pdb      bool
	}{{"web", 12, 6, true}, {"batch", 6, 10, false}} {
		labels := map[string]string{"app": w.name}
		var tols []v1.Toleration
		for _, key := range []string{v1.TaintNodeUnreachable, v1.TaintNodeNotReady} {
			tols = append(tols, v1.Toleration{Key: key, Operator: v1.TolerationOpExists, Effect: v1.TaintEffectNoExecute, TolerationSeconds: ptr.To(w.tol)})
		}
		d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: w.name, Namespace: "default"},
			Spec: appsv1.DeploymentSpec{Replicas: ptr.To(w.replicas), Selector: &metav1.LabelSelector{MatchLabels: labels},
				Template: v1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
					Spec: v1.PodSpec{Tolerations: tols, TerminationGracePeriodSeconds: ptr.To(int64(2)),
						Containers: []v1.Container{{Name: "app", Image: "registry.k8s.io/pause:3.10",
							Resources: v1.ResourceRequirements{Requests: v1.ResourceList{v1.ResourceCPU: resource.MustParse("100m")}}}}}}}}
		if _, err := client.AppsV1().Deployments("default").Create(ctx, d, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if w.pdb {
			p := &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Name: w.name, Namespace: "default"},
				Spec: policyv1.PodDisruptionBudgetSpec{MaxUnavailable: ptr.To(intstr.FromInt32(2)), Selector: &metav1.LabelSelector{MatchLabels: labels}}}
			if _, err := client.PolicyV1().PodDisruptionBudgets("default").Create(ctx, p, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	framework.Eventually(t, 120*time.Second, "workloads available", func(ctx context.Context) (bool, string, error) {
		deps := deployments(ctx, t, client)
		return whole(deps), fmt.Sprint(deps), nil
	})
}

func deployments(ctx context.Context, t *testing.T, client kubernetes.Interface) []chaos.Deployment {
	l, err := client.AppsV1().Deployments("default").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Logf("listing deployments: %v", err)
		return nil
	}
	var out []chaos.Deployment
	for _, d := range l.Items {
		out = append(out, chaos.Deployment{Name: d.Name, Replicas: ptr.Deref(d.Spec.Replicas, 1), Available: d.Status.AvailableReplicas})
	}
	return out
}

func whole(deps []chaos.Deployment) bool {
	if len(deps) == 0 {
		return false
	}
	for _, d := range deps {
		if d.Available < d.Replicas {
			return false
		}
	}
	return true
}

// merged is the faults, the fake cloud's repairs and the observed writes,
// in time order.
func (c *cluster) merged(ch *chaos.Checker, rc chaos.RepairCheckers) []chaos.Entry {
	c.notesMu.Lock()
	all := append([]chaos.Entry(nil), c.notes...)
	c.notesMu.Unlock()
	all = append(append(all, ch.Timeline()...), rc.Timeline()...)
	sort.SliceStable(all, func(i, j int) bool { return all[i].At.Before(all[j].At) })
	return all
}

func line(e chaos.Entry, t0 time.Time) string {
	return fmt.Sprintf("%+9.3fs %s", e.At.Sub(t0).Seconds(), e.What)
}

// excerpt is the 40 entries before until (and 10 after), relative to t0.
func excerpt(all []chaos.Entry, t0, until time.Time) string {
	i := sort.Search(len(all), func(i int) bool { return all[i].At.After(until) })
	from, to := max(0, i-40), min(len(all), i+10)
	var b strings.Builder
	for _, e := range all[from:to] {
		b.WriteString("  " + line(e, t0) + "\n")
	}
	return b.String()
}

func (c *cluster) writeTimeline(seed int64, t0 time.Time, ch *chaos.Checker, rc chaos.RepairCheckers) string {
	dir := *flagOut
	if dir == "" {
		dir = filepath.Join(os.TempDir(), "nodeshepherd-chaos")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		c.t.Logf("timeline not written: %v", err)
		return "(not written)"
	}
	var b strings.Builder
	for _, e := range c.merged(ch, rc) {
		b.WriteString(line(e, t0) + "\n")
	}
	path := filepath.Join(dir, fmt.Sprintf("seed-%d.timeline", seed))
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		c.t.Logf("timeline not written: %v", err)
		return "(not written)"
	}
	return path
}

// keepLogs copies every replica's log next to a failing seed's timeline
// (the test's temporary directory goes with the test), as
// seed-N-replica-PID.log; it returns their pattern ("" when none).
func (c *cluster) keepLogs(seed int64, timeline string) string {
	c.mu.Lock()
	started := slices.Clone(c.started)
	c.mu.Unlock()
	dir := filepath.Dir(timeline)
	kept := 0
	for _, r := range started {
		f, ok := r.cmd.Stdout.(*os.File)
		if !ok {
			continue
		}
		data, err := os.ReadFile(f.Name())
		if err != nil {
			continue
		}
		if os.WriteFile(filepath.Join(dir, fmt.Sprintf("seed-%d-replica-%d.log", seed, r.cmd.Process.Pid)), data, 0o644) == nil {
			kept++
		}
	}
	if kept == 0 {
		return ""
	}
	return filepath.Join(dir, fmt.Sprintf("seed-%d-replica-*.log", seed))
}

// startFakeNodes is framework.StartFakeNodes with fakenodes' log passed
// through the repair truth's sink.
func startFakeNodes(t *testing.T, h *repairTruth, cfg fakenode.Config) *fakenode.Manager {
	t.Helper()
	ctx := framework.Context(t)
	ctx = klog.NewContext(ctx, h.logger(klog.FromContext(ctx)))
	n, err := localcluster.StartNodes(ctx, cfg, localcluster.DefaultRegisterTimeout)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Stop)
	return n.Manager()
}
