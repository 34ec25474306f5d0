package chaos

// The remediation ladder in the chaos run (issue 33, point 6): the policy
// the runner installs, the faults that make its nodes unhealthy or take
// them out of its pool, and the ground truth of the fake cloud's reboots
// and replacements.

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/yaml"

	"github.com/nodeshepherd/nodeshepherd/pkg/chaos"
	"github.com/nodeshepherd/nodeshepherd/pkg/fakenode"
	"github.com/nodeshepherd/nodeshepherd/pkg/remediation"
	"github.com/nodeshepherd/nodeshepherd/test/framework"
)

// chaosPolicy: 2 nodes of each zone are its pool (poolPerZone); a read-only
// filesystem for 2s makes one unhealthy; taint, reboot, replace. The step
// timeouts are the shortest the CRD takes, except the Reboot's, which must
// outlast rebootDowntime and the hold time, or a reboot that repairs would
// be followed by a replacement. The brakes are small enough for the
// random faults to reach them: 2 of the 6 in repair, 1 per zone, none
// started while more than 3 are unhealthy. The runner installs it and the
// repair checker judges by it: both read this one value, so the checker's
// limits are the policy's.
var chaosPolicy = chaos.RepairPolicy{
	Name: "chaos", PoolLabel: "nodeshepherd.io/chaos-pool", PoolValue: "repair",
	Condition: "ReadonlyFilesystem", Status: v1.ConditionTrue, For: 2 * time.Second, HealthyHold: 4 * time.Second,
	// Fence last (issue 45): with the fake provider a Replace ends the
	// repair, so it is reached only when a replacement does not come;
	// fencePolicy (person_test.go) reaches its Fence on purpose.
	Steps:       []chaos.RepairStep{{Action: "Taint", Timeout: 10 * time.Second}, {Action: "Reboot", Timeout: 15 * time.Second}, {Action: "Replace", Timeout: 10 * time.Second}, {Action: "Fence", Timeout: 10 * time.Second}},
	TaintKey:    "nodeshepherd.io/chaos-unhealthy",
	MaxInRepair: intstr.FromInt32(2), MaxInRepairPerZone: intstr.FromInt32(1), MaxUnhealthy: intstr.FromInt32(3),
	Cooldown: 5 * time.Second,
}

// The fake cloud's repairs, short so that a repaired node is back within a
// step's timeout; the node lifecycle controller notices a reboot only
// when it overlaps other silence (grace 3s), as a real one would.
const (
	poolPerZone     = 2
	rebootDowntime  = 5 * time.Second
	replaceDowntime = 6 * time.Second
)

// drainPolicy is the third RemediationPolicy (issue 46 point 4): a pool
// that no node is in until drain-repair puts one there (nodes outside the
// chaos pool), a condition of its own, and a ladder that drains before it
// reboots: the Reboot starts only once the drain controller has drained
// the node (repair-drain). A fresh boot clears the condition.
var drainPolicy = chaos.RepairPolicy{
	Name: "chaos-drain", PoolLabel: "nodeshepherd.io/chaos-drain", PoolValue: "drain",
	Condition: "ChaosDrain", Status: v1.ConditionTrue, For: 2 * time.Second, HealthyHold: 4 * time.Second,
	Steps:       []chaos.RepairStep{{Action: "Drain", Timeout: 10 * time.Second}, {Action: "Reboot", Timeout: 15 * time.Second}},
	MaxInRepair: intstr.FromInt32(1), MaxInRepairPerZone: intstr.FromInt32(1), MaxUnhealthy: intstr.FromInt32(2),
	Cooldown: 5 * time.Second,
}

// manifest is the policy as a RemediationPolicy object.
func manifest(p chaos.RepairPolicy) string {
	var steps []string
	for _, s := range p.Steps {
		step := fmt.Sprintf("  - {action: %s, timeout: %s", s.Action, s.Timeout)
		if s.Action == string(remediation.ActionTaint) {
			step += fmt.Sprintf(", taint: {key: %s, effect: NoSchedule}", p.TaintKey)
		}
		steps = append(steps, step+"}")
	}
	return fmt.Sprintf(`apiVersion: nodeshepherd.io/v1alpha1
kind: RemediationPolicy
metadata: {name: %s}
spec:
  nodeSelector: {matchLabels: {%s: %s}}
  unhealthy:
  - {type: %s, status: "%s", for: %s}
  healthyHold: %s
  steps:
%s
  brakes: {maxInRepair: %s, maxInRepairPerZone: %s, maxUnhealthy: %s, cooldown: %s}
`, p.Name, p.PoolLabel, p.PoolValue, p.Condition, p.Status, p.For, p.HealthyHold, strings.Join(steps, "\n"),
		yamlIntOrString(p.MaxInRepair), yamlIntOrString(p.MaxInRepairPerZone), yamlIntOrString(p.MaxUnhealthy), p.Cooldown)
}

func yamlIntOrString(v intstr.IntOrString) string {
	if v.Type == intstr.Int {
		return v.String()
	}
	return fmt.Sprintf("%q", v.String())
}

// nodeGroups are the 12 nodes of the run as fakenode groups: per zone, the
// policy's pool first (with its label, which a replacement machine
// registers with again), then the rest. The names and zones are those of
// "zone-a=4,zone-b=4,zone-c=4", so seeds keep their schedules.
func nodeGroups(zones []string, perZone int) []fakenode.NodeGroup {
	var out []fakenode.NodeGroup
	for _, z := range zones {
		out = append(out,
			fakenode.NodeGroup{Name: z + "-pool", Zone: z, Count: poolPerZone, Labels: map[string]string{chaosPolicy.PoolLabel: chaosPolicy.PoolValue}},
			fakenode.NodeGroup{Name: z + "-rest", Zone: z, Count: perZone - poolPerZone})
	}
	return out
}

// installRepairPolicy installs the RemediationPolicy CRD, waits until its
// resource is served, and creates the policies.
func installRepairPolicy(t *testing.T, dyn dynamic.Interface, policies ...chaos.RepairPolicy) {
	t.Helper()
	if err := remediation.InstallCRD(framework.Context(t), dyn, "", time.Minute); err != nil {
		t.Fatal(err)
	}
	for _, p := range policies {
		var pol unstructured.Unstructured
		if err := yaml.Unmarshal([]byte(manifest(p)), &pol.Object); err != nil {
			t.Fatal(err)
		}
		// Established comes before discovery serves the resource: the
		// create itself is the test that it is served.
		// A create whose answer was lost is there: AlreadyExists is done.
		// An Invalid one will not come: said at once.
		framework.Eventually(t, 60*time.Second, "the "+p.Name+" RemediationPolicy created", func(ctx context.Context) (bool, string, error) {
			_, err := dyn.Resource(remediation.GroupVersionResource).Create(ctx, &pol, metav1.CreateOptions{})
			if apierrors.IsInvalid(err) {
				return false, "", err
			}
			return err == nil || apierrors.IsAlreadyExists(err), fmt.Sprint(err), nil
		})
	}
}

// The remediation faults: kinds and ops of their own, drawn from a stream
// of their own, so that pkg/chaos's schedule of a seed stays what it was.
const (
	// kindRepairCondition: the policy's condition on one node, which a
	// reboot clears (node-problem-detector reports afresh).
	kindRepairCondition chaos.Kind = "repair-condition"
	// kindRepairLasting: the same, surviving reboots (a bad disk): only a
	// replacement clears it.
	kindRepairLasting chaos.Kind = "repair-condition-lasting"
	// kindPoolLeave: a person takes one pool node out of the pool (its
	// label), and puts it back.
	kindPoolLeave chaos.Kind = "pool-leave"
	// kindRepairBlind: drawn only when named (-kinds, a mutant's Kinds):
	// the replicas' node watches lag 1.5-3s behind the API server, and the
	// policy's condition comes on both pool nodes of one zone 0.3-0.8s
	// apart, lasting: the second node is decided on before its informer
	// shows the first one's repair, so only a decision made again on a
	// fresh list keeps maxInRepairPerZone (1) (repair-brakes).
	kindRepairBlind chaos.Kind = "repair-blind"
	// kindRepairLeave: drawn only when named: the policy's condition on a
	// pool node, lasting, and 4-6s later (its repair started at the
	// condition's For, 2s) a person takes the node out of the pool for
	// 20-25s, past the Taint step's timeout: the repair must end, and no
	// Reboot or Replace may follow on a node the policy no longer selects
	// (repair-selection).
	kindRepairLeave chaos.Kind = "repair-leave"
	// kindRepairLeaveLagged: drawn only when named: repair-leave with the
	// replicas' node watch lagging 9s from 2s before the relabel, so that
	// the climb at the Taint step's timeout is decided while their cache
	// still shows the node in the pool: only a fresh list that decides the
	// selection too keeps the Reboot off it (repair-selection; chaos seed
	// 340016).
	kindRepairLeaveLagged chaos.Kind = "repair-leave-lagged"

	// kindRepairClearUnsent: drawn only when named: the policy's condition
	// on a pool node, so that it climbs to Reboot some 12s later; from 9s
	// to 19.5s every request of the fake cloud's requests ConfigMap is
	// answered 500, so the Reboot's request is not sent when the step
	// starts; from 13s the replicas' node watch lags 16s, and at 14s the
	// condition clears. The controller retries the request after 19.5s
	// while its cache still shows the condition: only a fresh read of the
	// node before sending it keeps the Reboot off a recovered node
	// (repair-unhealthy; chaos seed 370007, where a new leader sent a
	// Replace 10 s after the condition had cleared).
	kindRepairClearUnsent chaos.Kind = "repair-clear-unsent"

	// kindRepairCrowded: drawn only when named: the policy's condition on
	// a pool node, lasting, so that it climbs to Replace some 27s later;
	// from 22s to 36s two nodes outside the pool are cut off, so that their
	// web pods go not Ready and budget web allows no disruption when the
	// Replace deletes the node's pods: only pods evicted through the
	// Eviction API before a step that disrupts them (at the Reboot, while
	// the budget still allowed it) keep budget web (pdb).
	kindRepairCrowded chaos.Kind = "repair-crowded"

	// kindRepairRefill: drawn only when named: the policy's condition on a
	// pool node, lasting (it survives the reboot), until 18s in: past the
	// Taint step into the Reboot; healthy for the hold, the repair ends at
	// step 2; 26s in the condition is back, within the recurrence window,
	// and the repair resumes at step 3 (Replace) on a node without the
	// Taint step's taint yet. From 8s to 42s every other node carries a
	// person's NoSchedule taint (opCrowdOn: the cluster is full), and a
	// node outside the pool in another zone is cut off from 21s (its web
	// pod not Ready: budget web has one disruption left). The node's web pod
	// is evicted first, which spends it, and the scheduler can bind the
	// replacement only to the same node, where it runs and gives the
	// disruption back. From 26s to 33s the controllers' writes of the node
	// (taints, records) are held, as in a loaded API server, so that the
	// Taint step's taint, written just after the eviction, cannot beat the
	// scheduler (chaos seed 40004 lost that race by 0.1 s); from 28s to
	// 46s two more nodes outside the pool are cut off, so that budget web
	// allows none by the time the machine goes (a fake cloud slower than
	// the pods: Config repair-delay in the mutant). Only a step that keeps
	// new pods off and starts on a look that finds none left keeps budget
	// web (pdb).
	kindRepairRefill chaos.Kind = "repair-refill"

	// kindRepairCutoff: drawn only when named: the policy's condition on a
	// pool node, surviving reboots, so that it climbs to Reboot some 12s
	// later and to Replace some 27s later; from 4s to 36s that node and two
	// others of its zone are cut off, their machines running: the zone is
	// 3 of 4 down (PartialDisruption, rate 0: no NoExecute taint evicts
	// their pods), their web pods are not Ready and budget web is short.
	// Those pods may come back with the heal, so only a step that leaves a
	// not-Ready node's not-Ready pods to the taints when the provider
	// answers the machine off, and has the budgets judge them otherwise (the
	// Eviction API refuses them here: the node waits), keeps budget web
	// (pdb; chaos seed 70016).
	kindRepairCutoff chaos.Kind = "repair-cutoff"

	// kindRepairRestart: drawn only when named: the policy's condition on a
	// pool node, surviving reboots, so that it climbs to Reboot some 12s
	// later; from 4s two others of its zone are cut off (their web pods
	// not Ready: budget web allows nothing), from 8s the node too (the zone
	// 3 of 4 down: PartialDisruption, no NoExecute taint evicts); its
	// machine is off from 11.9s to 13.6s, around the Reboot step's start
	// (12.4s at rest), so the step starts on the provider's answer that it
	// is off and leaves the node's not-Ready web pod to the taints; from 9s
	// to 17s every read and write of the fake cloud's requests ConfigMap
	// fails, so the Reboot request goes out only after the machine has
	// started again behind its partition (out of service it is not: the
	// machine runs again before its node has been not Ready for
	// outOfServiceAfter, 3s). Only a request that carries its premise,
	// refused by a provider whose machine runs, keeps budget web (pdb;
	// chaos seed 170030, where the machine started 0.1 s after the answer).
	kindRepairRestart chaos.Kind = "repair-restart"

	// kindRepairLateStep: drawn only when named: the policy's condition on
	// a pool node, surviving reboots, so that it climbs to Reboot some 12s
	// later; from 9s to 33s every write of a Node's spec or metadata is
	// forwarded 2.5s late, its answer lost at once, and every quorum list
	// of the Nodes is answered 3.5s late (the list as it was when served).
	// The Reboot step's write thus lands after the list the next decision
	// is made on, and before that decision's write reads the node. Only a
	// write bound to the record its decision read keeps the step from
	// starting again, its clock restarted (repair-ladder; chaos seed
	// 200048, where a late-landing write was written over).
	kindRepairLateStep chaos.Kind = "repair-late-step"

	// kindDrainRepair: drawn only when named, not in the first 15s (the
	// drain's start hold): two nodes outside the chaos pool get the drain's
	// trigger (KernelDeadlock) and are cordoned, which fills
	// maxCordonedNodes (2); a second later a third joins drainPolicy's pool
	// with its condition, so that its repair starts at the Drain step some
	// 2s later while the drain controller may not cordon it. The Drain step
	// times out with the drain not started, and the node waits there: the
	// trigger goes at 16s, but the two cordons stay (--uncordon-after, 5m),
	// so its Reboot may never start (repair-drain: the ladder keeps the
	// drain's promises, issue 46 point 2). A person clears its condition
	// at 26s and takes it out of the pool at 30s.
	kindDrainRepair chaos.Kind = "drain-repair"

	opPoolLeave chaos.Op = "pool-leave"
	opPoolJoin  chaos.Op = "pool-join"
	// opCrowdOn and opCrowdOff: a person's NoSchedule taint crowdTaint on
	// Nodes, and its removal.
	opCrowdOn  chaos.Op = "crowd-taint"
	opCrowdOff chaos.Op = "crowd-untaint"
	// opHoldNodeWrites and opReleaseNodeWrites: the controllers' writes of
	// the Nodes' spec or metadata (taints, annotations) are held in the
	// API server's queue, then land (repair-refill: the writes that follow
	// an eviction land late, so that its replacement can be bound first).
	opHoldNodeWrites    chaos.Op = "hold-node-writes"
	opReleaseNodeWrites chaos.Op = "release-node-writes"
	// opRequestsRefused and opRequestsServed: every request of the fake
	// cloud's repair-requests ConfigMap answered 500, then served again (a
	// provider that does not answer: the controller retries).
	opRequestsRefused chaos.Op = "requests-refused"
	opRequestsServed  chaos.Op = "requests-served"
	// opListLagStart and opListLagEnd: every quorum list of Resource is
	// answered Lag late, as it was when served.
	opListLagStart chaos.Op = "list-lag-start"
	opListLagEnd   chaos.Op = "list-lag-end"
	// opDrainJoin and opDrainExit: a node joins drainPolicy's pool, and
	// leaves it.
	opDrainJoin chaos.Op = "drain-pool-join"
	opDrainExit chaos.Op = "drain-pool-leave"
)

// repairKinds are the remediation faults' kinds, for -kinds.
var repairKinds = []chaos.Kind{kindRepairCondition, kindRepairLasting, kindPoolLeave, kindRepairBlind, kindRepairLeave, kindRepairLeaveLagged, kindRepairClearUnsent, kindRepairCrowded, kindRepairRefill, kindRepairCutoff, kindRepairRestart, kindRepairLateStep, kindDrainRepair}

// repairMeanGap is the mean time between two remediation faults.
const repairMeanGap = 5 * time.Second

// labelTimeout bounds a pool-leave's label write.
const labelTimeout = 5 * time.Second

// poolNodeAndPeers draws a zone, one of its pool nodes and k other nodes
// of that zone (in the drawn order: a seed's schedule stays what it was).
func poolNodeAndPeers(r *rand.Rand, zones []chaos.Zone, k int) (string, []string) {
	z := zones[r.IntN(len(zones))].Nodes
	perm := r.Perm(len(z))
	node := z[r.IntN(poolPerZone)]
	var peers []string
	for _, i := range perm {
		if len(peers) < k && z[i] != node {
			peers = append(peers, z[i])
		}
	}
	return node, peers
}

// repairSchedule draws the remediation faults of a seed: conditions on a
// pool node 4 times in 5 (on another node, they must start nothing),
// half of them lasting, and pool departures (3 in 20). Fault indexes follow first
// (the pkg/chaos faults' count). Like chaos.Generate, every fault ends
// inside the window, and the same seed gives the same faults. With -kinds
// naming some of them (allowed), each draw's kind is one of those instead.
func repairSchedule(seed int64, window time.Duration, zones []chaos.Zone, first int, allowed []chaos.Kind) ([]chaos.Fault, []chaos.Step) {
	r := rand.New(rand.NewPCG(uint64(seed)^0x7265706169722121, uint64(seed)+0x6c6164646572))
	var pool, rest []string
	for _, z := range zones {
		pool = append(pool, z.Nodes[:poolPerZone]...)
		rest = append(rest, z.Nodes[poolPerZone:]...)
	}
	draw := func(lo, hi time.Duration) time.Duration {
		return lo + time.Duration(r.Int64N(int64(hi-lo)/int64(time.Millisecond)+1))*time.Millisecond
	}
	cond := chaosPolicy.Condition
	var faults []chaos.Fault
	var steps []chaos.Step
	at := time.Duration(0)
	// blindUntil: a repair-blind's or repair-leave's lag and repairs hold
	// the pool until then; another one drawn before it is spent.
	var blindUntil time.Duration
	for {
		at = (at + time.Duration(r.ExpFloat64()*float64(repairMeanGap))).Round(time.Millisecond)
		if at >= window {
			break
		}
		f := chaos.Fault{At: at}
		idx := first + len(faults)
		add := func(off time.Duration, s chaos.Step) {
			s.At, s.Fault = at+off, idx
			steps = append(steps, s)
		}
		var kind chaos.Kind
		if allowed == nil {
			switch x := r.IntN(20); {
			case x < 17:
				kind = kindRepairCondition
			default:
				kind = kindPoolLeave
			}
		} else {
			kind = allowed[r.IntN(len(allowed))]
		}
		switch kind {
		case kindRepairCondition, kindRepairLasting:
			// A lasting one long enough, from early on, climbs to Replace
			// (For, the Taint's and the Reboot's timeouts: 27s).
			f.Kind, f.Duration = kindRepairCondition, draw(4*time.Second, 25*time.Second)
			if (allowed == nil && r.IntN(2) == 0) || kind == kindRepairLasting {
				f.Kind, f.Duration = kindRepairLasting, draw(15*time.Second, 45*time.Second)
			}
			if r.IntN(5) < 4 {
				f.Nodes = []string{pool[r.IntN(len(pool))]}
			} else {
				f.Nodes = []string{rest[r.IntN(len(rest))]}
			}
		case kindRepairBlind:
			z := zones[r.IntN(len(zones))].Nodes[:poolPerZone]
			apart, lag := draw(300*time.Millisecond, 800*time.Millisecond), draw(1500*time.Millisecond, 3*time.Second)
			f.Kind, f.Nodes, f.Duration, f.Resource = kindRepairBlind, slices.Clone(z), draw(15*time.Second, 25*time.Second), "nodes"
			if at < blindUntil || at+f.Duration > window {
				continue
			}
			blindUntil = at + f.Duration + 10*time.Second
			add(0, chaos.Step{Op: chaos.OpWatchLagStart, Resource: "nodes", Lag: lag})
			// A second for the cut watches to come back lagged.
			add(time.Second, chaos.Step{Op: chaos.OpCondition, Nodes: z[:1], Condition: fmt.Sprintf("%s=%s", cond, chaosPolicy.Status)})
			add(time.Second+apart, chaos.Step{Op: chaos.OpCondition, Nodes: z[1:], Condition: fmt.Sprintf("%s=%s", cond, chaosPolicy.Status)})
			add(8*time.Second, chaos.Step{Op: chaos.OpWatchLagEnd, Resource: "nodes"})
			add(f.Duration, chaos.Step{Op: chaos.OpClearCondition, Nodes: z, Condition: string(cond)})
			faults = append(faults, f)
			continue
		case kindRepairCrowded:
			z := r.IntN(len(zones))
			others := slices.Clone(rest)
			others = slices.DeleteFunc(others, func(n string) bool { return slices.Contains(zones[z].Nodes, n) })
			perm := r.Perm(len(others))
			cut := []string{others[perm[0]], others[perm[1]]}
			node := zones[z].Nodes[r.IntN(poolPerZone)]
			f.Kind, f.Nodes, f.Duration = kindRepairCrowded, append([]string{node}, cut...), 40*time.Second
			if at < blindUntil || at+f.Duration > window {
				continue
			}
			blindUntil = at + f.Duration + 5*time.Second
			add(0, chaos.Step{Op: chaos.OpCondition, Nodes: []string{node}, Condition: fmt.Sprintf("%s=%s", cond, chaosPolicy.Status)})
			add(22*time.Second, chaos.Step{Op: chaos.OpPartition, Nodes: cut})
			add(36*time.Second, chaos.Step{Op: chaos.OpHeal, Nodes: cut})
			add(f.Duration, chaos.Step{Op: chaos.OpClearCondition, Nodes: []string{node}, Condition: string(cond)})
			faults = append(faults, f)
			continue
		case kindRepairCutoff:
			node, peers := poolNodeAndPeers(r, zones, 2)
			cut := append([]string{node}, peers...)
			f.Kind, f.Nodes, f.Duration = kindRepairCutoff, cut, 40*time.Second
			if at < blindUntil || at+f.Duration > window {
				continue
			}
			blindUntil = at + f.Duration + 5*time.Second
			add(0, chaos.Step{Op: chaos.OpCondition, Nodes: []string{node}, Condition: fmt.Sprintf("%s=%s", cond, chaosPolicy.Status)})
			add(4*time.Second, chaos.Step{Op: chaos.OpPartition, Nodes: cut})
			add(36*time.Second, chaos.Step{Op: chaos.OpHeal, Nodes: cut})
			add(f.Duration, chaos.Step{Op: chaos.OpClearCondition, Nodes: []string{node}, Condition: string(cond)})
			faults = append(faults, f)
			continue
		case kindRepairRestart:
			node, cut := poolNodeAndPeers(r, zones, 2)
			f.Kind, f.Nodes, f.Duration = kindRepairRestart, append([]string{node}, cut...), 40*time.Second
			if at < blindUntil || at+f.Duration > window {
				continue
			}
			blindUntil = at + f.Duration + 5*time.Second
			add(0, chaos.Step{Op: chaos.OpCondition, Nodes: []string{node}, Condition: fmt.Sprintf("%s=%s", cond, chaosPolicy.Status)})
			add(4*time.Second, chaos.Step{Op: chaos.OpPartition, Nodes: cut})
			add(8*time.Second, chaos.Step{Op: chaos.OpPartition, Nodes: []string{node}})
			add(9*time.Second, chaos.Step{Op: opRequestsRefused})
			add(11900*time.Millisecond, chaos.Step{Op: chaos.OpMachineShutdown, Nodes: []string{node}})
			add(13600*time.Millisecond, chaos.Step{Op: chaos.OpMachineStart, Nodes: []string{node}})
			add(17*time.Second, chaos.Step{Op: opRequestsServed})
			add(36*time.Second, chaos.Step{Op: chaos.OpHeal, Nodes: f.Nodes})
			add(f.Duration, chaos.Step{Op: chaos.OpClearCondition, Nodes: []string{node}, Condition: string(cond)})
			faults = append(faults, f)
			continue
		case kindDrainRepair:
			perm := r.Perm(len(rest))
			node, triggered := rest[perm[0]], []string{rest[perm[1]], rest[perm[2]]}
			f.Kind, f.Nodes, f.Duration = kindDrainRepair, append([]string{node}, triggered...), 30*time.Second
			// Not in the first 15s: the drain's start hold (15s from the
			// leader's start) would cordon the three nodes together, by name.
			if at < 15*time.Second || at < blindUntil || at+f.Duration > window {
				continue
			}
			blindUntil = at + f.Duration + 5*time.Second
			add(0, chaos.Step{Op: chaos.OpCondition, Nodes: triggered, Condition: "KernelDeadlock=True"})
			add(time.Second, chaos.Step{Op: opDrainJoin, Nodes: []string{node}})
			add(time.Second, chaos.Step{Op: chaos.OpCondition, Nodes: []string{node}, Condition: fmt.Sprintf("%s=%s", drainPolicy.Condition, drainPolicy.Status)})
			add(16*time.Second, chaos.Step{Op: chaos.OpClearCondition, Nodes: triggered, Condition: "KernelDeadlock"})
			add(26*time.Second, chaos.Step{Op: chaos.OpClearCondition, Nodes: []string{node}, Condition: string(drainPolicy.Condition)})
			add(f.Duration, chaos.Step{Op: opDrainExit, Nodes: []string{node}})
			faults = append(faults, f)
			continue
		case kindRepairLateStep:
			node, _ := poolNodeAndPeers(r, zones, 0)
			f.Kind, f.Nodes, f.Duration = kindRepairLateStep, []string{node}, 40*time.Second
			if at < blindUntil || at+f.Duration > window {
				continue
			}
			blindUntil = at + f.Duration + 5*time.Second
			add(0, chaos.Step{Op: chaos.OpCondition, Nodes: []string{node}, Condition: fmt.Sprintf("%s=%s", cond, chaosPolicy.Status)})
			add(9*time.Second, chaos.Step{Op: chaos.OpLostCordonStart, Nodes: []string{node}, Lag: 2500 * time.Millisecond})
			add(9*time.Second, chaos.Step{Op: opListLagStart, Resource: "nodes", Lag: 3500 * time.Millisecond})
			add(33*time.Second, chaos.Step{Op: chaos.OpLostCordonEnd, Nodes: []string{node}})
			add(33*time.Second, chaos.Step{Op: opListLagEnd, Resource: "nodes"})
			add(f.Duration, chaos.Step{Op: chaos.OpClearCondition, Nodes: []string{node}, Condition: string(cond)})
			faults = append(faults, f)
			continue
		case kindRepairRefill:
			node := pool[r.IntN(len(pool))]
			f.Kind, f.Nodes, f.Duration = kindRepairRefill, []string{node}, 46*time.Second
			if at < blindUntil || at+f.Duration > window {
				continue
			}
			blindUntil = at + f.Duration + 5*time.Second
			on := chaos.Step{Op: chaos.OpCondition, Nodes: []string{node}, Condition: fmt.Sprintf("%s=%s", cond, chaosPolicy.Status)}
			off := chaos.Step{Op: chaos.OpClearCondition, Nodes: []string{node}, Condition: string(cond)}
			var others, far []string
			for _, z := range zones {
				for i, n := range z.Nodes {
					if n == node {
						continue
					}
					others = append(others, n)
					if i >= poolPerZone && !slices.Contains(z.Nodes, node) {
						far = append(far, n)
					}
				}
			}
			perm := r.Perm(len(far))
			cut, late := []string{far[perm[0]]}, []string{far[perm[1]], far[perm[2]]}
			f.Nodes = append(append(f.Nodes, cut...), late...)
			add(0, on)
			add(18*time.Second, off)
			add(8*time.Second, chaos.Step{Op: opCrowdOn, Nodes: others})
			add(21*time.Second, chaos.Step{Op: chaos.OpPartition, Nodes: cut})
			add(26*time.Second, chaos.Step{Op: opHoldNodeWrites, Nodes: []string{node}})
			add(26*time.Second, on)
			add(28*time.Second, chaos.Step{Op: chaos.OpPartition, Nodes: late})
			add(33*time.Second, chaos.Step{Op: opReleaseNodeWrites, Nodes: []string{node}})
			add(34*time.Second, chaos.Step{Op: chaos.OpHeal, Nodes: cut})
			add(42*time.Second, chaos.Step{Op: opCrowdOff, Nodes: others})
			add(f.Duration, chaos.Step{Op: chaos.OpHeal, Nodes: late})
			add(f.Duration, off)
			faults = append(faults, f)
			continue
		case kindRepairLeaveLagged:
			leave, out := draw(4*time.Second, 6*time.Second), draw(20*time.Second, 25*time.Second)
			f.Kind, f.Nodes, f.Duration, f.Resource = kindRepairLeaveLagged, []string{pool[r.IntN(len(pool))]}, leave+out+2*time.Second, "nodes"
			if at < blindUntil || at+f.Duration > window {
				continue
			}
			blindUntil = at + f.Duration + 5*time.Second
			add(0, chaos.Step{Op: chaos.OpCondition, Nodes: f.Nodes, Condition: fmt.Sprintf("%s=%s", cond, chaosPolicy.Status)})
			add(leave-2*time.Second, chaos.Step{Op: chaos.OpWatchLagStart, Resource: "nodes", Lag: 9 * time.Second})
			add(leave, chaos.Step{Op: opPoolLeave, Nodes: f.Nodes})
			add(leave+14*time.Second, chaos.Step{Op: chaos.OpWatchLagEnd, Resource: "nodes"})
			add(leave+out, chaos.Step{Op: chaos.OpClearCondition, Nodes: f.Nodes, Condition: string(cond)})
			add(f.Duration, chaos.Step{Op: opPoolJoin, Nodes: f.Nodes})
			faults = append(faults, f)
			continue
		case kindRepairClearUnsent:
			node, _ := poolNodeAndPeers(r, zones, 0)
			f.Kind, f.Nodes, f.Duration, f.Resource = kindRepairClearUnsent, []string{node}, 36*time.Second, "nodes"
			if at < blindUntil || at+f.Duration > window {
				continue
			}
			blindUntil = at + f.Duration + 5*time.Second
			add(0, chaos.Step{Op: chaos.OpCondition, Nodes: f.Nodes, Condition: fmt.Sprintf("%s=%s", cond, chaosPolicy.Status)})
			add(9*time.Second, chaos.Step{Op: opRequestsRefused})
			add(13*time.Second, chaos.Step{Op: chaos.OpWatchLagStart, Resource: "nodes", Lag: 16 * time.Second})
			add(14*time.Second, chaos.Step{Op: chaos.OpClearCondition, Nodes: f.Nodes, Condition: string(cond)})
			add(19500*time.Millisecond, chaos.Step{Op: opRequestsServed})
			add(f.Duration, chaos.Step{Op: chaos.OpWatchLagEnd, Resource: "nodes"})
			faults = append(faults, f)
			continue
		case kindRepairLeave:
			leave, out := draw(4*time.Second, 6*time.Second), draw(20*time.Second, 25*time.Second)
			f.Kind, f.Nodes, f.Duration = kindRepairLeave, []string{pool[r.IntN(len(pool))]}, leave+out+2*time.Second
			if at < blindUntil || at+f.Duration > window {
				continue
			}
			blindUntil = at + f.Duration + 5*time.Second
			add(0, chaos.Step{Op: chaos.OpCondition, Nodes: f.Nodes, Condition: fmt.Sprintf("%s=%s", cond, chaosPolicy.Status)})
			add(leave, chaos.Step{Op: opPoolLeave, Nodes: f.Nodes})
			add(leave+out, chaos.Step{Op: chaos.OpClearCondition, Nodes: f.Nodes, Condition: string(cond)})
			add(f.Duration, chaos.Step{Op: opPoolJoin, Nodes: f.Nodes})
			faults = append(faults, f)
			continue
		default:
			f.Kind, f.Duration = kindPoolLeave, draw(5*time.Second, 20*time.Second)
			f.Nodes = []string{pool[r.IntN(len(pool))]}
		}
		f.Duration = min(f.Duration, window-at)
		if f.Kind == kindPoolLeave {
			add(0, chaos.Step{Op: opPoolLeave, Nodes: f.Nodes})
			add(f.Duration, chaos.Step{Op: opPoolJoin, Nodes: f.Nodes})
		} else {
			add(0, chaos.Step{Op: chaos.OpCondition, Nodes: f.Nodes, Condition: fmt.Sprintf("%s=%s", cond, chaosPolicy.Status)})
			add(f.Duration, chaos.Step{Op: chaos.OpClearCondition, Nodes: f.Nodes, Condition: string(cond)})
		}
		faults = append(faults, f)
	}
	return faults, steps
}

// withRepairFaults merges the remediation faults into a pkg/chaos
// schedule: its steps in time order, a step of pkg/chaos first at the
// same instant. kinds (-kinds) may leave some or all of them out.
func withRepairFaults(s chaos.Schedule, zones []chaos.Zone, kinds kindSet) chaos.Schedule {
	allowed := kinds.of(repairKinds)
	if kinds != nil && len(allowed) == 0 {
		return s
	}
	faults, steps := repairSchedule(s.Seed, s.Duration, zones, len(s.Faults), allowed)
	s.Faults = append(append([]chaos.Fault(nil), s.Faults...), faults...)
	s.Steps = append(append([]chaos.Step(nil), s.Steps...), steps...)
	sort.SliceStable(s.Steps, func(i, j int) bool { return s.Steps[i].At < s.Steps[j].At })
	return s
}

// setPoolLabel takes a node out of the pool (in false) or puts it back,
// through the runner's own client; a node being replaced may be gone. A
// stalled API server fails it within labelTimeout rather than holding
// the later steps back (the checker judges the labels it sees, whatever
// the runner meant).
func setPoolLabel(ctx context.Context, client kubernetes.Interface, node string, in bool) string {
	var value any // null: a merge patch removes the label
	if in {
		value = chaosPolicy.PoolValue
	}
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"labels": map[string]any{chaosPolicy.PoolLabel: value}}})
	ctx, cancel := context.WithTimeout(ctx, labelTimeout)
	defer cancel()
	if _, err := client.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return fmt.Sprintf(" (%v)", err)
	}
	return ""
}

// crowdTaint is a person's NoSchedule taint that keeps new pods off a node
// (repair-refill's full cluster).
var crowdTaint = v1.Taint{Key: "chaos.nodeshepherd.io/crowded", Effect: v1.TaintEffectNoSchedule}

// setCrowdTaint adds (on) or removes crowdTaint on each node, read and
// written again on a conflict.
func setCrowdTaint(ctx context.Context, client kubernetes.Interface, nodes []string, on bool) string {
	ctx, cancel := context.WithTimeout(ctx, labelTimeout)
	defer cancel()
	var errs []string
	for _, name := range nodes {
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			n, err := client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			has := slices.ContainsFunc(n.Spec.Taints, func(t v1.Taint) bool { return t.Key == crowdTaint.Key })
			switch {
			case on && !has:
				n.Spec.Taints = append(n.Spec.Taints, crowdTaint)
			case !on && has:
				n.Spec.Taints = slices.DeleteFunc(n.Spec.Taints, func(t v1.Taint) bool { return t.Key == crowdTaint.Key })
			default:
				return nil
			}
			_, err = client.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{})
			return err
		})
		if err != nil {
			errs = append(errs, fmt.Sprintf("%s: %v", name, err))
		}
	}
	if len(errs) > 0 {
		return " (" + strings.Join(errs, "; ") + ")"
	}
	return ""
}

// repairTruth adds the fake cloud's reboots and replacements to the
// ground truth (chaos.Truth), which otherwise knows only the schedule's
// machine faults: without them, an out-of-service taint or a pod deleted
// on a machine fakenodes rebooted or replaced would look like one on a
// running machine. fakenodes carries the requests out in this process and
// says so in its log, before and after each machine change; a log sink
// wrapped around its logger turns those lines into steps with the moments
// around them, as the runner does for its own steps. (A hook in
// fakenode.Config would be sturdier; pkg/fakenode is not this package's.)
// Every request marked done in the fake cloud's ConfigMap must have been
// seen here (missed), or the truth is incomplete and the run says so.
type repairTruth struct {
	truth *chaos.Truth
	note  func(at time.Time, what string)

	mu sync.Mutex
	// requested: the node's request being carried out, from the moment
	// fakenodes said it had it (before it touched the machine).
	requested map[string]repairCarried
	carried   map[string]bool // request IDs carried out
	problems  []string
	// checker learns of every machine a request takes down (its pdb rule);
	// set once the checker exists, before any controller runs.
	checker *chaos.Checker
}

// judgedBy has c judge the pods each request's takedown disrupts.
func (h *repairTruth) judgedBy(c *chaos.Checker) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.checker = c
}

type repairCarried struct {
	id, action string
	at         time.Time
	// off: the reboot's shutdown was recorded at off (its start comes at
	// least rebootDowntime later).
	off time.Time
}

func newRepairTruth(truth *chaos.Truth, note func(time.Time, string)) *repairTruth {
	return &repairTruth{truth: truth, note: note, requested: map[string]repairCarried{}, carried: map[string]bool{}}
}

// rebootFault is the fault fakenodes applies for a reboot: its String is
// how its "Fault injected"/"Fault ended" lines name it.
func rebootFault(node string) string {
	return fakenode.Fault{Action: fakenode.MachineShutdown, Target: fakenode.Target{Nodes: []string{node}}, Duration: rebootDowntime}.String()
}

func (h *repairTruth) record(op chaos.Op, node string, start, done time.Time, what string) {
	h.truth.Record(chaos.Applied{Step: chaos.Step{Op: op, Nodes: []string{node}, Fault: -1, At: -1}, Start: start, Done: done})
	h.note(start, fmt.Sprintf("FAKE CLOUD %s %s (%s, %.3fs)", op, node, what, done.Sub(start).Seconds()))
}

// onLog takes one line of fakenodes' log.
func (h *repairTruth) onLog(msg string, kv []any, err error) {
	now := time.Now()
	val := func(key string) string {
		for i := 0; i+1 < len(kv); i += 2 {
			if k, _ := kv[i].(string); k == key {
				return fmt.Sprint(kv[i+1])
			}
		}
		return ""
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	switch msg {
	case "Repair requested":
		node := val("node")
		r := repairCarried{id: val("request"), action: val("action"), at: now}
		h.requested[node], h.carried[r.id] = r, true
		if h.checker != nil && r.action != "" {
			// Every action takes the machine down (reboot, replace,
			// poweroff), whichever policy asked.
			rv, _ := strconv.ParseUint(val("resourceVersion"), 10, 64)
			h.checker.MachineTakenDown(now, node, rv, fmt.Sprintf("a %s (request %s)", r.action, r.id))
		}
		if r.action == "replace" {
			// The replacement deletes the machine first thing in a goroutine
			// started right after this line, and its pods a few calls later:
			// recorded now, so that the truth has it before the pods go. A
			// second is ample for a goroutine to start; were it later, the
			// truth would only think the machine off a moment early.
			h.record(chaos.OpMachineShutdown, node, now, now.Add(time.Second), "replace: machine deleted, request "+r.id)
		}
	case "Fault injected", "Fault ended":
		for node, r := range h.requested {
			if r.action == "poweroff" && msg == "Fault injected" && val("fault") == powerOffFault(node) {
				// A Fence's power-off (issue 46): off for good, until a
				// person starts it (person_test.go).
				h.record(chaos.OpMachineShutdown, node, r.at, now, "poweroff: machine off, request "+r.id)
				delete(h.requested, node)
				continue
			}
			if r.action != "reboot" || val("fault") != rebootFault(node) {
				continue
			}
			if msg == "Fault injected" {
				h.record(chaos.OpMachineShutdown, node, r.at, now, "reboot: machine off, request "+r.id)
				r.off = now
				h.requested[node] = r
			} else {
				// The timer that starts it was set after the line that
				// said it off, for rebootDowntime.
				h.record(chaos.OpMachineStart, node, r.off.Add(rebootDowntime), now, "reboot: machine on, a new boot")
				delete(h.requested, node)
			}
		}
	case "Replacement machine started":
		// The new machine runs from here; it registers its Node only once
		// it reaches the API server (a partition of its node outlives the
		// replacement: chaos seeds 120124, 120131 counted a replacement
		// silent that had registered through an all-zones cut).
		node := val("node")
		if r, ok := h.requested[node]; ok && r.action == "replace" {
			h.record(chaos.OpMachineStart, node, r.at.Add(replaceDowntime), now, "replace: a new machine starts")
			delete(h.requested, node)
		}
	case "Rebooting":
		// The reboot failed after (publishing the state) or before the
		// shutdown; either way no timer starts the machine again.
		node := val("node")
		if r, ok := h.requested[node]; ok {
			h.record(chaos.OpMachineShutdown, node, r.at, now, fmt.Sprintf("reboot failed: %v; the machine may stay off", err))
			h.problems = append(h.problems, fmt.Sprintf("fakenodes failed to reboot %s (request %s): %v", node, r.id, err))
		}
	}
}

// missed returns the problems of the truth: requests marked done that no
// log line announced, and reboots that failed.
func (h *repairTruth) missed(done []string) []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := append([]string(nil), h.problems...)
	for _, id := range done {
		if !h.carried[id] {
			out = append(out, fmt.Sprintf("fakenodes carried out request %s but its log did not say so here: the ground truth misses that reboot or replacement (did pkg/fakenode's log lines change?)", id))
		}
	}
	return out
}

// logger wraps base so that h sees fakenodes' lines.
func (h *repairTruth) logger(base logr.Logger) logr.Logger {
	return logr.New(truthSink{inner: base.GetSink(), h: h})
}

// truthSink passes every line on to the inner sink and shows h the
// fakenodes lines it needs (Info at V(0), and errors).
type truthSink struct {
	inner logr.LogSink
	h     *repairTruth
}

// Init does nothing: the inner sink was initialized by its own logger.
func (s truthSink) Init(logr.RuntimeInfo) {}

func (s truthSink) Enabled(level int) bool { return level == 0 || s.inner.Enabled(level) }

// GetCallStackHelper and helper keep the lines attributed to fakenodes'
// code, not to this wrapper, where the inner sink (ktesting) can.
func (s truthSink) GetCallStackHelper() func() {
	if h, ok := s.inner.(logr.CallStackHelperLogSink); ok {
		return h.GetCallStackHelper()
	}
	return func() {}
}

func (s truthSink) Info(level int, msg string, kv ...any) {
	s.GetCallStackHelper()()
	if level == 0 {
		s.h.onLog(msg, kv, nil)
	}
	if s.inner.Enabled(level) {
		s.inner.Info(level, msg, kv...)
	}
}

func (s truthSink) Error(err error, msg string, kv ...any) {
	s.GetCallStackHelper()()
	s.h.onLog(msg, kv, err)
	s.inner.Error(err, msg, kv...)
}

func (s truthSink) WithValues(kv ...any) logr.LogSink {
	return truthSink{inner: s.inner.WithValues(kv...), h: s.h}
}

func (s truthSink) WithName(name string) logr.LogSink {
	return truthSink{inner: s.inner.WithName(name), h: s.h}
}

// testRepairPolicies: the policies installed are ones the controller acts
// on, and say what the repair checker judges by (its own cases are
// pkg/chaos's TestRepairChecker); the remediation faults are the seed's.
// TestChaos runs it first (make chaos and make test run only TestChaos
// here).
func testRepairPolicies(t *testing.T) {
	for _, p := range []chaos.RepairPolicy{fencePolicy, chaosPolicy, drainPolicy} {
		var pol remediation.RemediationPolicy
		if err := yaml.UnmarshalStrict([]byte(manifest(p)), &pol); err != nil {
			t.Fatalf("the %s policy's manifest: %v\n%s", p.Name, err, manifest(p))
		}
		if errs := pol.Spec.Validate(field.NewPath("spec")); len(errs) > 0 {
			t.Errorf("the %s policy is refused: %v", p.Name, errs.ToAggregate())
		}
	}
	var pol remediation.RemediationPolicy
	if err := yaml.UnmarshalStrict([]byte(manifest(chaosPolicy)), &pol); err != nil {
		t.Fatal(err)
	}
	pool := map[string]string{chaosPolicy.PoolLabel: chaosPolicy.PoolValue}
	if !pol.Spec.Selects(&v1.Node{ObjectMeta: metav1.ObjectMeta{Labels: pool}}) || !chaosPolicy.Selects(pool) ||
		pol.Spec.Selects(&v1.Node{}) || len(pol.Spec.Steps) != len(chaosPolicy.Steps) || pol.Spec.Brakes.MaxInRepair.String() != chaosPolicy.MaxInRepair.String() {
		t.Errorf("the chaos policy reads back as %+v", pol.Spec)
	}
	for i, st := range pol.Spec.Steps {
		if string(st.Action) != chaosPolicy.Steps[i].Action || st.Timeout.Duration != chaosPolicy.Steps[i].Timeout {
			t.Errorf("the chaos policy's step %d reads back as %+v", i+1, st)
		}
	}

	// The remediation faults are the seed's: the same seed, the same
	// faults; every one ends inside the window.
	zones := []chaos.Zone{{Name: "zone-a", Nodes: []string{"n0", "n1", "n2", "n3"}}, {Name: "zone-b", Nodes: []string{"n4", "n5", "n6", "n7"}}}
	f1, s1 := repairSchedule(7, 60*time.Second, zones, 3, nil)
	f2, s2 := repairSchedule(7, 60*time.Second, zones, 3, nil)
	if !reflect.DeepEqual(f1, f2) || !reflect.DeepEqual(s1, s2) || len(f1) < 3 {
		t.Errorf("seed 7: remediation faults differ between two draws, or too few (%d):\n%v\n%v", len(f1), f1, f2)
	}
	for _, f := range f1 {
		if f.At+f.Duration > 60*time.Second || (f.Kind == kindPoolLeave && f.Nodes[0] != "n0" && f.Nodes[0] != "n1" && f.Nodes[0] != "n4" && f.Nodes[0] != "n5") {
			t.Errorf("seed 7: %s: outside the window or the pool", f)
		}
	}
}
