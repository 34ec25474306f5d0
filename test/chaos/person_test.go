package chaos

// A person's faults (issue 45, point 2): an out-of-service confirmation
// followed by a power cycle and a partition of the live machine, and a
// partition of a live machine under a policy with a Fence step. They are
// drawn from a stream of their own, so that every seed's other faults stay
// what they were.

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/nodeshepherd/nodeshepherd/pkg/chaos"
	"github.com/nodeshepherd/nodeshepherd/pkg/fakenode"
)

const (
	// kindConfirmPowerCycle: a machine is shut down, a person confirms it
	// dead (the out-of-service annotation), the machine starts again (a new
	// boot; half the time 1-2s after the confirmation, before it could be
	// acted on) and, 0.5-3s later, is cut off while it runs. The confirmation
	// was for the old boot: an out-of-service taint or a force deletion on
	// the live machine is running-machine's violation.
	kindConfirmPowerCycle chaos.Kind = "confirm-then-powercycle"
	// kindFencePartition: a node outside the chaos pool joins the fence
	// pool (fencePolicy: Taint, then Fence) with the policy's condition,
	// and is cut off while its machine runs: a Fence that fences it while
	// it runs is running-machine's (and fence-running's) violation. The
	// Fence powers the machine off through the fake cloud (issue 46), and
	// only then may the node be taken out of service; at the fault's end a
	// person starts the machine again (a new boot), so that later faults
	// keep a full fleet.
	kindFencePartition chaos.Kind = "fence-partition"
	// kindConfirmLeaderless: confirm-then-powercycle with no leader from
	// before the confirmation until after the new boot (issue 45 point 4,
	// fifth hole): every replica is killed as the machine shuts down, a
	// person confirms it dead, the machine starts (a new boot), the
	// replicas start again 1.5-3s later, and the live machine is cut off
	// 3-6s after that, until 22-27s after the replicas started. The first controller to read the confirmation reads
	// it beside the new boot: one that binds it to that boot takes the
	// machine out of service while it runs (running-machine).
	kindConfirmLeaderless chaos.Kind = "confirm-leaderless"
	// kindAllZonesLasting: not a person's but drawn on purpose from the
	// same stream (pkg/chaos's schedules are another helper's): the
	// all-zones exit with one zone partially disrupted (issue 45 point 4,
	// second hole). Node X of a zone powers off and is tainted (judged
	// dead) while its zone is Normal; 8-10s later every node is cut off;
	// two more nodes of X's zone power off (or their kubelets stop) within
	// 1.5s of the cut; 15-18s after the cut the zone's fourth node alone
	// is healed, the other zones 6-9s later, and X and the two stay silent
	// 10-14s past the first heal. The controller leaves the all-zones mode
	// on seeing the fourth node: X's zone is then PartialDisruption (rate
	// 0), and restoring X's taint at once is zone-rules' violation
	// (checker.go eitherWayForbidden).
	kindAllZonesLasting chaos.Kind = "all-zones-lasting"
	// kindAllZonesFailover: drawn only when named (personNamedOnly):
	// all-zones-lasting with the leader killed 2-5 s into the mode, so that
	// the leader that stripped the dead node's taint is not the one that
	// gives it back (chaos seed 70019: the next leader tainted it from now,
	// a countdown restarted).
	kindAllZonesFailover chaos.Kind = "all-zones-failover"
	// kindConfirmCutStart: drawn only when named (personNamedOnly): a
	// machine powers off, a person confirms it dead 1.5-4s later, and 1-2s
	// after that, before outofservice acts on the confirmation, the node is
	// cut off and its machine started 0.1s later: it boots behind the
	// partition and never reports its new boot ID, so the API shows the
	// boot the confirmation was given for while the machine runs (chaos
	// seed 70030). Only a controller that takes the provider's "running" as
	// a veto leaves it in service (running-machine).
	kindConfirmCutStart chaos.Kind = "confirm-cut-start"
	// kindConfirmCloudBlind and kindLeaderlessCloudBlind: drawn only when
	// named (personNamedOnly): confirm-then-powercycle and
	// confirm-leaderless with the cloud provider blind from the
	// confirmation to the end (every read of the fake cloud's machine
	// states through the replicas' proxy answers 500). A provider that
	// answers "running" vetoes the person's confirmation of the live
	// machine on its own (chaos seed 70030's fix), so those two kinds no
	// longer reach the rule that binds a confirmation to the boot it was
	// given for; without an answer, only that rule keeps the new boot in
	// service (running-machine).
	kindConfirmCloudBlind    chaos.Kind = "confirm-cloud-blind"
	kindLeaderlessCloudBlind chaos.Kind = "confirm-leaderless-blind"
	// kindTolerationShortened: a person shortens a running pod's NoExecute
	// tolerationSeconds (the API allows lowering it) while its node is
	// tainted, around a leader kill (issue 45 point 4: a toleration
	// shortened across a failover). A bare pod of its own on node X
	// tolerates unreachable and not-ready for 60s; X is cut off; 13-16s
	// later, the taint some 10s old, the person lowers both to 8s, and the
	// leader is killed 0-1s after (started again 2-3s after the change).
	// The pod may go 8s after the change, not before (upstream's taint
	// manager reschedules from the change); one counting the new value
	// from the taint's timeAdded evicts it at once (toleration). X is
	// healed 14-18s after the change and the pod deleted (gracefully: its
	// kubelet confirms) 2s later.
	kindTolerationShortened chaos.Kind = "toleration-shortened"

	opConfirm   chaos.Op = "confirm-out-of-service"
	opUnconfirm chaos.Op = "unconfirm-out-of-service"
	opFenceJoin chaos.Op = "fence-pool-join"
	opFenceExit chaos.Op = "fence-pool-leave"
	// opReplicasKill SIGKILLs every replica and keeps their slots empty
	// (no restart on exit) until opReplicasStart starts one in each.
	opReplicasKill  chaos.Op = "kill-all-replicas"
	opReplicasStart chaos.Op = "start-all-replicas"
	// opTolPodCreate, opTolShorten, opTolPodDelete: toleration-shortened's
	// pod (named after the fault: tolPodName).
	opTolPodCreate chaos.Op = "toleration-pod-create"
	opTolShorten   chaos.Op = "toleration-shorten"
	opTolPodDelete chaos.Op = "toleration-pod-delete"
	// opCloudBlind and opCloudSeeing: the fake cloud provider answers every
	// question about the step's machines with an error, and no longer does
	// (fakenode SetCloudError): blind to those machines, not to the others.
	opCloudBlind  = chaos.OpCloudBlind
	opCloudSeeing = chaos.OpCloudSeeing

	// tolLong and tolShort are toleration-shortened's tolerationSeconds
	// before and after the change.
	tolLong, tolShort = 60, 8

	// annConfirm is outofservice's AnnotationConfirm, spelled out (the
	// runner plays a person, who types it).
	annConfirm = "nodeshepherd.io/out-of-service"
)

// personKinds are a person's kinds, for -kinds.
var personKinds = []chaos.Kind{kindConfirmPowerCycle, kindFencePartition, kindConfirmLeaderless, kindAllZonesLasting, kindTolerationShortened}

// personNamedOnly are a person's kinds drawn only when -kinds names them
// (kept out of personKinds, so that every seed's schedule stays the same).
var personNamedOnly = []chaos.Kind{kindAllZonesFailover, kindConfirmCutStart, kindConfirmCloudBlind, kindLeaderlessCloudBlind}

// personMeanGap is the mean time between two of a person's faults.
const personMeanGap = 20 * time.Second

// fencePolicy is the second RemediationPolicy: a pool that no node is in
// until fence-partition puts one there (nodes outside the chaos pool), a
// condition of its own, and a ladder that reaches Fence within 12s.
var fencePolicy = chaos.RepairPolicy{
	Name: "chaos-fence", PoolLabel: "nodeshepherd.io/chaos-fence", PoolValue: "fence", // not "on": YAML 1.1 reads it as a boolean
	Condition: "ChaosFence", Status: v1.ConditionTrue, For: 2 * time.Second, HealthyHold: 4 * time.Second,
	Steps:       []chaos.RepairStep{{Action: "Taint", Timeout: 10 * time.Second}, {Action: "Fence", Timeout: 10 * time.Second}},
	TaintKey:    "nodeshepherd.io/chaos-fence",
	MaxInRepair: intstr.FromInt32(1), MaxInRepairPerZone: intstr.FromInt32(1), MaxUnhealthy: intstr.FromInt32(2),
	Cooldown: 5 * time.Second,
}

// personSchedule draws a person's faults of a seed; allowed (-kinds) may
// restrict them. Every one ends inside the window.
func personSchedule(seed int64, window time.Duration, zones []chaos.Zone, first int, allowed []chaos.Kind) ([]chaos.Fault, []chaos.Step) {
	r := rand.New(rand.NewPCG(uint64(seed)^0x706572736f6e2121, uint64(seed)+0x636f6e6669726d))
	kinds, gap := personKinds, personMeanGap
	if allowed != nil {
		// -kinds named some of them: a targeted run, denser.
		kinds, gap = allowed, personMeanGap/2
	}
	var all, rest []string
	for _, z := range zones {
		all = append(all, z.Nodes...)
		rest = append(rest, z.Nodes[poolPerZone:]...)
	}
	draw := func(lo, hi time.Duration) time.Duration {
		return lo + time.Duration(r.Int64N(int64(hi-lo)/int64(time.Millisecond)+1))*time.Millisecond
	}
	var faults []chaos.Fault
	var steps []chaos.Step
	at := time.Duration(0)
	// alone: when the last fault that needs the cluster to itself ends
	// (confirm-leaderless: another would restart the replicas inside its
	// window; all-zones-lasting: another would heal its nodes early;
	// toleration-shortened: two leader kills in a row leave a slot empty).
	// One drawn before then is spent.
	var alone time.Duration
	exclusive := func(k chaos.Kind) bool {
		return k == kindConfirmLeaderless || k == kindLeaderlessCloudBlind || k == kindAllZonesLasting || k == kindAllZonesFailover || k == kindTolerationShortened
	}
	// blind: when the last fault ends whose provider cannot answer;
	// cutStart: when the last confirm-cut-start ends. A confirmed machine
	// that starts again behind a partition (confirm-cut-start) is told from
	// a dead one only by the provider's answer, for every node at once:
	// inside a blind window nothing the controllers can see tells them
	// (chaos seed 160012; docs/chaos.md, not checked), so the two never
	// overlap.
	var blind, cutStart time.Duration
	blinds := func(k chaos.Kind) bool { return k == kindConfirmCloudBlind || k == kindLeaderlessCloudBlind }
	for {
		at = (at + time.Duration(r.ExpFloat64()*float64(gap))).Round(time.Millisecond)
		if at >= window {
			break
		}
		k := kinds[r.IntN(len(kinds))]
		f := chaos.Fault{Kind: k, At: at}
		var fs []chaos.Step
		add := func(off time.Duration, s chaos.Step) {
			s.At, s.Fault = at+off, first+len(faults)
			fs = append(fs, s)
		}
		switch k {
		case kindConfirmPowerCycle, kindConfirmCloudBlind:
			n := []string{all[r.IntN(len(all))]}
			confirm := draw(1500*time.Millisecond, 4*time.Second)
			// Half the time the machine starts again before outofservice
			// could act on the confirmation (grace plus
			// --out-of-service-after from the shutdown): nothing was taken
			// out of service, and only the confirmation's own boot ends
			// it; a confirmation that outlived its boot takes the live
			// machine out of service once it is cut off.
			on := confirm + draw(4*time.Second, 10*time.Second)
			if r.IntN(2) == 0 {
				on = confirm + draw(time.Second, 2*time.Second)
			}
			cut := on + draw(500*time.Millisecond, 3*time.Second)
			end := cut + draw(6*time.Second, 15*time.Second)
			f.Nodes, f.Duration = n, end
			add(0, chaos.Step{Op: chaos.OpMachineShutdown, Nodes: n})
			add(confirm, chaos.Step{Op: opConfirm, Nodes: n})
			add(on, chaos.Step{Op: chaos.OpMachineStart, Nodes: n})
			add(cut, chaos.Step{Op: chaos.OpPartition, Nodes: n})
			add(end, chaos.Step{Op: chaos.OpHeal, Nodes: n})
			add(end, chaos.Step{Op: opUnconfirm, Nodes: n})
			if k == kindConfirmCloudBlind {
				add(confirm, chaos.Step{Op: opCloudBlind, Nodes: n})
				add(end, chaos.Step{Op: opCloudSeeing, Nodes: n})
			}
		case kindConfirmCutStart:
			n := []string{all[r.IntN(len(all))]}
			confirm := draw(1500*time.Millisecond, 4*time.Second)
			cut := confirm + draw(time.Second, 2*time.Second)
			end := cut + draw(12*time.Second, 18*time.Second)
			f.Nodes, f.Duration = n, end
			add(0, chaos.Step{Op: chaos.OpMachineShutdown, Nodes: n})
			add(confirm, chaos.Step{Op: opConfirm, Nodes: n})
			add(cut, chaos.Step{Op: chaos.OpPartition, Nodes: n})
			add(cut+100*time.Millisecond, chaos.Step{Op: chaos.OpMachineStart, Nodes: n})
			add(end, chaos.Step{Op: chaos.OpHeal, Nodes: n})
			add(end, chaos.Step{Op: opUnconfirm, Nodes: n})
		case kindConfirmLeaderless, kindLeaderlessCloudBlind:
			n := []string{all[r.IntN(len(all))]}
			confirm := draw(1500*time.Millisecond, 4*time.Second)
			on := confirm + draw(2*time.Second, 6*time.Second)
			up := on + draw(1500*time.Millisecond, 3*time.Second)
			cut := up + draw(3*time.Second, 6*time.Second)
			// A new leader's outofservice taints nothing until
			// kube.WriteTimeout (15s) after it started leading (the old
			// leader's writes may land until then): the cut lasts past it.
			end := up + draw(22*time.Second, 27*time.Second)
			f.Nodes, f.Duration = n, end
			add(0, chaos.Step{Op: opReplicasKill})
			add(0, chaos.Step{Op: chaos.OpMachineShutdown, Nodes: n})
			add(confirm, chaos.Step{Op: opConfirm, Nodes: n})
			add(on, chaos.Step{Op: chaos.OpMachineStart, Nodes: n})
			add(up, chaos.Step{Op: opReplicasStart})
			add(cut, chaos.Step{Op: chaos.OpPartition, Nodes: n})
			add(end, chaos.Step{Op: chaos.OpHeal, Nodes: n})
			add(end, chaos.Step{Op: opUnconfirm, Nodes: n})
			if k == kindLeaderlessCloudBlind {
				add(confirm, chaos.Step{Op: opCloudBlind, Nodes: n})
				add(end, chaos.Step{Op: opCloudSeeing, Nodes: n})
			}
		case kindAllZonesLasting, kindAllZonesFailover:
			z := zones[r.IntN(len(zones))].Nodes
			p := r.Perm(len(z))
			x, ys, w := []string{z[p[0]]}, []string{z[p[1]], z[p[2]]}, []string{z[p[3]]}
			var cutAll, others []string
			for _, zz := range zones {
				cutAll = append(cutAll, zz.Nodes...)
				if zz.Nodes[0] != z[0] {
					others = append(others, zz.Nodes...)
				}
			}
			stop, start := chaos.OpMachineShutdown, chaos.OpMachineStart
			if r.IntN(2) == 0 {
				stop, start = chaos.OpKubeletStop, chaos.OpKubeletStart
			}
			cut := draw(8*time.Second, 10*time.Second)
			quiet := cut + draw(200*time.Millisecond, 1500*time.Millisecond)
			healW := cut + draw(15*time.Second, 18*time.Second)
			healOthers := healW + draw(6*time.Second, 9*time.Second)
			end := healW + draw(10*time.Second, 14*time.Second)
			f.Nodes, f.Duration = append(append(append([]string(nil), x...), ys...), w...), end
			add(0, chaos.Step{Op: chaos.OpMachineShutdown, Nodes: x})
			add(cut, chaos.Step{Op: chaos.OpPartition, Nodes: cutAll})
			add(quiet, chaos.Step{Op: stop, Nodes: ys})
			add(healW, chaos.Step{Op: chaos.OpHeal, Nodes: w})
			add(healOthers, chaos.Step{Op: chaos.OpHeal, Nodes: others})
			if k == kindAllZonesFailover {
				// The leader that stripped X's taint dies in the mode; the
				// two come back with the other zones, so X's zone turns
				// Normal while X is still dead: the next leader taints it
				// again, with its old timeAdded (countdown-restart).
				// X stays dead 12-15 s more: its zone Normal, a token of
				// the zone's rate (0.1/s) comes within that.
				end = healOthers + draw(12*time.Second, 15*time.Second)
				f.Duration = end
				add(quiet+draw(2*time.Second, 5*time.Second), chaos.Step{Op: chaos.OpKillLeader})
				add(healOthers, chaos.Step{Op: chaos.OpHeal, Nodes: ys})
				add(healOthers, chaos.Step{Op: start, Nodes: ys})
				add(end, chaos.Step{Op: chaos.OpHeal, Nodes: x})
				add(end, chaos.Step{Op: chaos.OpMachineStart, Nodes: x})
				break
			}
			add(end, chaos.Step{Op: chaos.OpHeal, Nodes: append(append([]string(nil), x...), ys...)})
			add(end, chaos.Step{Op: chaos.OpMachineStart, Nodes: x})
			add(end, chaos.Step{Op: start, Nodes: ys})
		case kindTolerationShortened:
			n := []string{all[r.IntN(len(all))]}
			cut := draw(2*time.Second, 3*time.Second)
			shorten := cut + draw(13*time.Second, 16*time.Second)
			kill := shorten + draw(0, time.Second)
			restart := shorten + draw(2*time.Second, 3*time.Second)
			heal := shorten + draw(14*time.Second, 18*time.Second)
			f.Nodes, f.Duration = n, heal+2*time.Second
			add(0, chaos.Step{Op: opTolPodCreate, Nodes: n})
			add(cut, chaos.Step{Op: chaos.OpPartition, Nodes: n})
			add(shorten, chaos.Step{Op: opTolShorten, Nodes: n})
			add(kill, chaos.Step{Op: chaos.OpKillLeader})
			add(restart, chaos.Step{Op: chaos.OpStartReplica, Replica: -1})
			add(heal, chaos.Step{Op: chaos.OpHeal, Nodes: n})
			add(heal+2*time.Second, chaos.Step{Op: opTolPodDelete, Nodes: n})
		case kindFencePartition:
			n := []string{rest[r.IntN(len(rest))]}
			cut := draw(1500*time.Millisecond, 3*time.Second)
			end := cut + draw(18*time.Second, 28*time.Second)
			leave := end + 6*time.Second // after the hold: the repair ends on its own
			f.Nodes, f.Duration = n, leave
			add(0, chaos.Step{Op: opFenceJoin, Nodes: n})
			add(0, chaos.Step{Op: chaos.OpCondition, Nodes: n, Condition: string(fencePolicy.Condition) + "=" + string(fencePolicy.Status)})
			add(cut, chaos.Step{Op: chaos.OpPartition, Nodes: n})
			add(end, chaos.Step{Op: chaos.OpClearCondition, Nodes: n, Condition: string(fencePolicy.Condition)})
			add(end, chaos.Step{Op: chaos.OpHeal, Nodes: n})
			// Repaired by a person: a machine the Fence powered off starts
			// again (a no-op for one that still runs).
			add(end, chaos.Step{Op: chaos.OpMachineStart, Nodes: n})
			add(leave, chaos.Step{Op: opFenceExit, Nodes: n})
		}
		if at+f.Duration > window || (exclusive(k) && at < alone) || (k == kindConfirmCutStart && at < blind) || (blinds(k) && at < cutStart) {
			continue // the draw is spent: the same seed keeps its faults
		}
		if exclusive(k) {
			alone = at + f.Duration
		}
		if blinds(k) {
			blind = max(blind, at+f.Duration)
		}
		if k == kindConfirmCutStart {
			cutStart = max(cutStart, at+f.Duration)
		}
		faults = append(faults, f)
		steps = append(steps, fs...)
	}
	return faults, steps
}

// powerOffFault is the fault fakenodes applies for a Fence's power-off
// request (a machine shut down for good): its String is how its "Fault
// injected" line names it, which the repair truth reads (repair_test.go).
func powerOffFault(node string) string {
	return fakenode.Fault{Action: fakenode.MachineShutdown, Target: fakenode.Target{Nodes: []string{node}}}.String()
}

// withPersonFaults merges a person's faults into the schedule, like
// withRepairFaults.
func withPersonFaults(s chaos.Schedule, zones []chaos.Zone, kinds kindSet) chaos.Schedule {
	allowed := kinds.of(append(slices.Clone(personKinds), personNamedOnly...))
	if kinds != nil && len(allowed) == 0 {
		return s
	}
	faults, steps := personSchedule(s.Seed, s.Duration, zones, len(s.Faults), allowed)
	s.Faults = append(append([]chaos.Fault(nil), s.Faults...), faults...)
	s.Steps = append(append([]chaos.Step(nil), s.Steps...), steps...)
	sort.SliceStable(s.Steps, func(i, j int) bool { return s.Steps[i].At < s.Steps[j].At })
	return s
}

// applyPerson performs a person's step that apply does not know; ok is
// false for an unknown op.
func (c *cluster) applyPerson(ctx context.Context, s chaos.Step) (what string, ok bool) {
	switch s.Op {
	case opReplicasKill:
		c.mu.Lock()
		defer c.mu.Unlock()
		var pids []string
		for i, r := range c.slots {
			if r == nil {
				continue
			}
			r.ended.Store(true) // no restart on its exit
			_ = syscall.Kill(r.cmd.Process.Pid, syscall.SIGKILL)
			c.slots[i] = nil
			pids = append(pids, fmt.Sprintf("slot %d pid %d", i, r.cmd.Process.Pid))
		}
		return fmt.Sprintf(" (SIGKILL %v)", pids), true
	case opCloudBlind, opCloudSeeing:
		// The provider is blind to this fault's machine only: another
		// fault's machine that starts again behind a partition is still
		// seen running (chaos seeds 160012, 160036).
		if err := c.nodes.SetCloudError(ctx, s.Nodes, s.Op == opCloudBlind); err != nil {
			return fmt.Sprintf(" (%v)", err), true
		}
		return "", true
	case opTolPodCreate:
		return c.tolerationPod(ctx, s, func(ctx context.Context, name string) error {
			p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", Labels: map[string]string{"app": "chaos-toleration"}},
				Spec: v1.PodSpec{NodeName: s.Nodes[0], Tolerations: tolerations(tolLong), TerminationGracePeriodSeconds: ptr.To(int64(2)),
					Containers: []v1.Container{{Name: "app", Image: "registry.k8s.io/pause:3.10"}}}}
			_, err := c.client.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{})
			return err
		}), true
	case opTolShorten:
		// A merge patch replaces the list: the same tolerations, shorter.
		return c.tolerationPod(ctx, s, func(ctx context.Context, name string) error {
			patch, _ := json.Marshal(map[string]any{"spec": map[string]any{"tolerations": tolerations(tolShort)}})
			_, err := c.client.CoreV1().Pods("default").Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: "chaos-person"})
			return err
		}), true
	case opTolPodDelete:
		return c.tolerationPod(ctx, s, func(ctx context.Context, name string) error {
			err := c.client.CoreV1().Pods("default").Delete(ctx, name, metav1.DeleteOptions{})
			if apierrors.IsNotFound(err) {
				return nil // evicted and gone
			}
			return err
		}), true
	case opReplicasStart:
		c.mu.Lock()
		defer c.mu.Unlock()
		var pids []string
		for i, r := range c.slots {
			if r != nil {
				continue
			}
			c.slots[i] = c.startReplica(i)
			pids = append(pids, fmt.Sprintf("slot %d pid %d", i, c.slots[i].cmd.Process.Pid))
		}
		return fmt.Sprintf(" (started %v)", pids), true
	}
	return "", false
}

// withGrace is the replicas' configuration with nodeMonitorGracePeriod g
// (-grace).
func withGrace(yaml string, g time.Duration) string {
	return strings.Replace(yaml, "nodeMonitorGracePeriod: "+grace.String(), "nodeMonitorGracePeriod: "+g.String(), 1)
}

// tolPodName is toleration-shortened's pod of a fault.
func tolPodName(fault int) string { return fmt.Sprintf("chaos-toleration-%d", fault) }

// tolerations tolerate unreachable and not-ready NoExecute taints for secs.
func tolerations(secs int64) []v1.Toleration {
	var out []v1.Toleration
	for _, key := range []string{v1.TaintNodeUnreachable, v1.TaintNodeNotReady} {
		out = append(out, v1.Toleration{Key: key, Operator: v1.TolerationOpExists, Effect: v1.TaintEffectNoExecute, TolerationSeconds: ptr.To(secs)})
	}
	return out
}

// tolerationPod does a write to toleration-shortened's pod as a person
// would, within labelTimeout; it says what failed.
func (c *cluster) tolerationPod(ctx context.Context, s chaos.Step, write func(ctx context.Context, name string) error) string {
	ctx, cancel := context.WithTimeout(ctx, labelTimeout)
	defer cancel()
	name := tolPodName(s.Fault)
	if err := write(ctx, name); err != nil {
		return fmt.Sprintf(" (pod %s: %v)", name, err)
	}
	return " (pod default/" + name + ")"
}

// setAnnotation sets (value non-nil) or removes a node's annotation, as a
// person would with kubectl, within labelTimeout.
func setAnnotation(ctx context.Context, client kubernetes.Interface, node, key string, value any) string {
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{key: value}}})
	ctx, cancel := context.WithTimeout(ctx, labelTimeout)
	defer cancel()
	if _, err := client.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return fmt.Sprintf(" (%v)", err)
	}
	return ""
}

// setLabel sets (value non-nil) or removes a node's label.
func setLabel(ctx context.Context, client kubernetes.Interface, node, key string, value any) string {
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"labels": map[string]any{key: value}}})
	ctx, cancel := context.WithTimeout(ctx, labelTimeout)
	defer cancel()
	if _, err := client.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return fmt.Sprintf(" (%v)", err)
	}
	return ""
}

// A confirm-cut-start never overlaps a window in which the provider
// cannot answer (chaos seed 160012): its machine, started again behind a
// partition, is told from a dead one only by the provider.
func TestConfirmCutStartOutsideBlindWindows(t *testing.T) {
	zones := []chaos.Zone{{Name: "zone-a", Nodes: []string{"n0", "n1", "n2", "n3"}}, {Name: "zone-b", Nodes: []string{"n4", "n5", "n6", "n7"}}, {Name: "zone-c", Nodes: []string{"n8", "n9", "n10", "n11"}}}
	kinds := []chaos.Kind{kindConfirmCutStart, kindConfirmCloudBlind, kindLeaderlessCloudBlind}
	both := 0
	for seed := int64(1); seed <= 300; seed++ {
		faults, _ := personSchedule(seed, 60*time.Second, zones, 0, kinds)
		var cuts, blinds []chaos.Fault
		for _, f := range faults {
			switch f.Kind {
			case kindConfirmCutStart:
				cuts = append(cuts, f)
			case kindConfirmCloudBlind, kindLeaderlessCloudBlind:
				blinds = append(blinds, f)
			}
		}
		if len(cuts) > 0 && len(blinds) > 0 {
			both++
		}
		for _, c := range cuts {
			for _, b := range blinds {
				if c.At < b.At+b.Duration && b.At < c.At+c.Duration {
					t.Errorf("seed %d: %s overlaps %s", seed, c, b)
				}
			}
		}
	}
	if both == 0 {
		t.Error("no seed draws both kinds: the test shows nothing")
	}
}
