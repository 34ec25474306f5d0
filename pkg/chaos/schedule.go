// Package chaos is the method of issue 30 point 7: seeded random fault
// schedules and an independent checker of what the controllers wrote. It is
// pure (no cluster): test/chaos runs a schedule on the local control plane
// and feeds the checker what it watches; `simulate` can reuse both.
package chaos

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"time"
)

// Kind is a fault of the vocabulary.
type Kind string

// The fault vocabulary. Node faults go through the fake nodes, process
// faults through the `nodeshepherd run` replicas, API faults through the
// fault proxy between the replicas and the API server.
const (
	NodePartition  Kind = "node-partition"  // one node's API traffic cut
	RackPartition  Kind = "rack-partition"  // two neighbouring nodes of a zone cut
	ZonePartition  Kind = "zone-partition"  // every node of a zone cut
	KubeletStop    Kind = "kubelet-stop"    // one kubelet stopped; the machine runs
	PowerOff       Kind = "power-off"       // machine shut down, started again later (new boot ID)
	Reboot         Kind = "reboot"          // a short power-off: a new boot ID
	ConditionFlap  Kind = "condition-flap"  // KernelDeadlock=True (the drain's trigger) for a while
	ReadyFlap      Kind = "ready-flap"      // the kubelet reports Ready=False for a while
	LeaderKill     Kind = "leader-kill"     // SIGKILL the leading replica, start a new one later
	ProcessRestart Kind = "process-restart" // SIGTERM a replica, start a new one later
	APIErrors      Kind = "api-errors"      // 500 on every other write of a resource
	APIThrottle    Kind = "api-throttle"    // 429 Retry-After 1 on every other request of a resource
	WatchStall     Kind = "watch-stall"     // watches of a resource cut and held without events
)

// The targeted kinds (issue 45 point 2): faults that a mix of the kinds
// above reaches only by chance, drawn on purpose from a stream of their
// own, so that every seed's faults of the kinds above stay what they were.
const (
	// ZoneSilenceSpread: 3 of a zone's 4 nodes fall silent one after the
	// other, spread over 0.1-10s (a partially disrupted zone whose silences
	// a new leader may take as one event), half the time with the leader
	// killed in between.
	ZoneSilenceSpread Kind = "zone-silence-spread"
	// AllZonesPartition: every node of every zone cut at once (the
	// all-zones mode: no taint, no eviction).
	AllZonesPartition Kind = "all-zones-partition"
	// LostAnswer: every other write of a resource reaches the API server
	// and takes effect, and its answer is lost (the client sees an error).
	LostAnswer Kind = "lost-answer"
	// WatchGone: the replicas' watches of a resource are cut, and every
	// watch or list that resumes from a resourceVersion is answered 410
	// Gone (Expired), as after an etcd compaction: they re-list.
	WatchGone Kind = "watch-gone"
	// APIServerRestart: kube-apiserver stopped for 1-4s and started again
	// (every client, kubelets and checker included, loses it meanwhile).
	APIServerRestart Kind = "apiserver-restart"
	// BlindCordon: the replicas' node watches lag 1.5-3s behind the API
	// server, every write of a Node's spec or metadata (a cordon, a taint)
	// reaches the API server and has its answer lost, and 1s in the drain's
	// trigger (KernelDeadlock=True) comes on 3 nodes at once, more than
	// maxCordonedNodes (2): a cordon whose answer was lost is seen by no
	// informer while the next nodes are decided on, so only a budget that
	// counts it as landed holds (issue 45 point 4, third hole).
	BlindCordon Kind = "blind-cordon"
	// LateWrite: every write of a Node's spec or metadata (a cordon, an
	// out-of-service taint) is held at the proxy; 0.3s in the drain's
	// trigger comes on 4 nodes, so that the leader's cordon is held; the
	// leader is killed 0.8-2s in, and the new writes pass from then on; the
	// held writes are forwarded 9-12s after the fault's start (within
	// kube.WriteTimeout, 15s, of their sending, the bound every previous
	// leader's write keeps), after the new leader's first LIST: the old
	// leader's cordon lands late, on a node the new leader may not have
	// cordoned (issue 45 point 4, sixth hole).
	LateWrite Kind = "late-write"
	// APIHang: every eviction request is held at the proxy without being
	// forwarded or answered until its client gives up, for 4-10s, while the
	// drain's trigger comes on one node, and 2s later on another, and stays
	// to the end of the seed: a drain's eviction calls hang, and only a
	// drain whose calls are bounded, with a deadline of its own, ends while
	// its condition holds (issue 45 point 4, fourth hole). Requests held
	// when the fault ends stay held until their clients give up, as on a
	// dead connection.
	APIHang Kind = "api-hang"
)

// TargetedKinds are the targeted kinds, in the order their stream draws.
var TargetedKinds = []Kind{ZoneSilenceSpread, AllZonesPartition, LostAnswer, WatchGone, APIServerRestart, BlindCordon, LateWrite, APIHang}

// BlindOutOfService: drawn only when Kinds names it (NamedOnlyKinds): one
// machine in each of 3 zones powers off, 0.3s apart; 4s in, while their
// nodes are NotReady, the replicas' node watches lag 1.5-3s behind the API
// server and every write of a Node's spec or metadata (an out-of-service
// taint) has its answer lost at once and reaches the API server 2-3.5s
// later, for 8s; the
// machines start again at the fault's end. outofservice decides the three
// nodes (grace and --out-of-service-after, 6-7s in) 0.3s apart, more than
// maxOutOfServiceNodes (2): a taint whose answer was lost is seen by no
// informer while the next node is decided on, and lands after the fresh
// list before the next taint, so only a budget that counts it as landed
// holds (budgets).
const BlindOutOfService Kind = "blind-out-of-service"

// LaggedHeal: drawn only when Kinds names it: the replicas' node watches
// lag 4-6s behind the API server; a second later one node is cut off and
// healed 3.5-6s after the cut (from its taint, about the grace period in,
// to 2.5s after), the lag lasting 8s past the heal. A NoExecute taint taken off at
// the heal is still on the node in the informers' view when some of its
// pods' tolerationSeconds end: only a taint eviction that reads the Node
// from the API server before it marks a pod evicts nothing then
// (untainted-eviction).
const LaggedHeal Kind = "lagged-heal"

// UnsettledZone: drawn only when Kinds names it: in one zone of 4 nodes,
// node a is cut off (tainted at the grace period, taking the zone's
// token), b half a second later (judged Unknown, its taint waiting some
// 10s for the next token at --node-eviction-rate 0.1), c 6s in; from 6.5s
// every quorum LIST of the Leases and every quorum GET of c's (the fresh
// reads that confirm a silence; the watches answer) fails with 500 for the
// fault's length. c is then overdue and never confirmed: a suspect. Counted
// Ready, the zone would be Normal (2 of 4) and b's taint would go out at its
// token; but c is silent, the zone is 3 of 4 down (PartialDisruption, rate 0
// for a small zone): only a zone whose suspects are unsettled tainting
// nothing keeps the zone rules. b's own GET answers: the read of a node's
// Lease right before its taint would otherwise fail too and hold the taint
// back by itself, and the zone rule would go unexercised (its mutant was
// caught by seed 2 of 6 on cbe1c47, by none on bff02d7 before this).
const UnsettledZone Kind = "unsettled-zone"

// SilentNewcomer: drawn only when Kinds names it: two nodes of a zone of 4
// are cut off; 1-3s later a new node registers in that zone (a fresh
// kubelet of a second fakenodes process) and is cut off right after its
// Node and first Lease renewal are written, so that no controller ever
// measures its heartbeat interval; all three are healed at the fault's
// end. With a grace period long enough (the mutant's Config grace=15s),
// the two expire while the newcomer, silent for less than the grace period
// but for longer than the interval assumed for a node not measured yet, is
// overdue: the zone is 3 of 5 not Ready (PartialDisruption, rate 0), and
// only a controller that gives a node first seen an assumed interval holds
// the first expiry's taint (zone-rules). With the default 3s grace the
// newcomer is judged with the others: nothing to hold.
const SilentNewcomer Kind = "silent-newcomer"

// FullRange: drawn only when Kinds names it, for a cluster range of 16
// node blocks (TestChaos -cluster-cidr=10.244.0.0/22 with /26 blocks, 12
// nodes): 3 new nodes register in one zone (the range then has one block
// free); 3s in, every write of a Node's spec or metadata has its answer
// lost at once and lands 2-3.5s later, for 8s; 0.5s into that, 2 more nodes
// register: the last block's podCIDR write is lost and lands late, and only
// a node IPAM that keeps an unanswered block reserved for its node never
// hands it to the other newcomer (pod-cidr). In a larger range nothing is
// full: the newcomers simply get blocks.
const FullRange Kind = "full-range"

// FullRangeFill is how many nodes full-range registers before its lost
// answers: 12 nodes and these leave one block of 16.
const FullRangeFill = 3

// DrainOrphaned: drawn only when Kinds names it: every eviction is held at
// the proxy (api-hang); 0.5s in the drain's trigger comes on one node, so
// its drain starts and hangs in flight; the leader is killed 2.5s in, the
// trigger cleared at 3.5s, the hold lifted at 4s, a new replica started
// 2-5s after the kill. The next leader finds a drain in flight whose
// condition cleared: it does not resume it, and must say it stopped, or the
// drain stays in flight with no word for --uncordon-after (progress).
const DrainOrphaned Kind = "drain-orphaned"

// RefusedMark: drawn only when Kinds names it: in one zone of 4 nodes, a,
// b and c are cut off 0.3s apart, and every write of c's status through the
// controllers' proxy is refused (500) until the heal, so that the node
// lifecycle controller cannot mark c Unknown however often it retries. Left
// out of its zone's count, c would make the zone look 2 of 3 not Ready
// (Normal: upstream's PartialDisruption needs more than 2), and a's and b's
// taints would go out at the zone's rate while the zone is 3 of 4 down;
// only a node whose health update failed unsettling its zone keeps the
// zone rules.
const RefusedMark Kind = "refused-mark"

// HeardAllZones: drawn only when Kinds names it: node x of a zone of 4 is
// cut off (tainted at the grace period), and 5s in every other node too:
// every zone FullDisruption, the all-zones mode strips x's taint and
// remembers it. From 10s to 31s the replicas' node watches lag 4-5s behind
// the API server (the Leases' do not); the others are healed at 12s, and
// the mode ends when their Ready reaches the informers: x, still silent,
// is queued for its old taint at its zone's rate, whose first token comes
// some 10s later (the limiter swapped from rate 0 starts empty, as
// upstream's). x is healed at 24s, before that token, and its Ready
// reaches the informers 4-5s later, after it: a controller that restores
// the taint then, on x's Unknown in the informers' view though its Lease
// renews again, puts the old timeAdded back on a live node (its pods'
// tolerations long run out). Only one that leaves a node heard within its
// grace period untainted on its Unknown mark keeps the countdowns (chaos
// seed 170020, where a stalled node watch did the same).
const HeardAllZones Kind = "heard-all-zones"

// HeardUnseen: drawn only when Kinds names it: heard-all-zones with the
// Lease watches lagging as the node watches do, so that when the restore's
// token comes no informer has delivered x's renewals either: only a
// controller that reads x's Lease from the API server before it taints on
// an Unknown mark sees that x is back (chaos seed 210003, where a new
// leader restored the taint 0.6 s after the heal, before its Lease
// informer delivered a renewal).
const HeardUnseen Kind = "heard-unseen"

// NamedOnlyKinds are targeted kinds drawn only when Options.Kinds names
// them, so that the default schedules of every seed stay what they were.
var NamedOnlyKinds = []Kind{BlindOutOfService, LaggedHeal, UnsettledZone, SilentNewcomer, FullRange, DrainOrphaned, RefusedMark, HeardAllZones, HeardUnseen}

// AllKinds is the whole vocabulary: Kinds, then TargetedKinds, then
// NamedOnlyKinds.
func AllKinds() []Kind {
	return append(append(slices.Clone(Kinds), TargetedKinds...), NamedOnlyKinds...)
}

// Kinds is the whole vocabulary, in the order Generate draws from.
var Kinds = []Kind{NodePartition, RackPartition, ZonePartition, KubeletStop, PowerOff, Reboot,
	ConditionFlap, ReadyFlap, LeaderKill, ProcessRestart, APIErrors, APIThrottle, WatchStall}

// Op is one atomic action of a schedule; a fault is one or two steps.
type Op string

// Step operations. Node ops are the fake nodes' actions of the same name.
const (
	OpPartition          Op = "partition"
	OpHeal               Op = "heal"
	OpKubeletStop        Op = "kubelet-stop"
	OpKubeletStart       Op = "kubelet-start"
	OpMachineShutdown    Op = "machine-shutdown"
	OpMachineStart       Op = "machine-start"
	OpCondition          Op = "condition"
	OpClearCondition     Op = "clear-condition"
	OpKillLeader         Op = "kill-leader"     // SIGKILL the replica holding the lease
	OpStopReplica        Op = "stop-replica"    // SIGTERM replica slot Replica
	OpStartReplica       Op = "start-replica"   // start a replica in slot Replica again
	OpAPIFaultStart      Op = "api-fault-start" // fault proxy rule on Resource
	OpAPIFaultEnd        Op = "api-fault-end"
	OpWatchStallStart    Op = "watch-stall-start"
	OpWatchStallEnd      Op = "watch-stall-end"
	OpLostAnswerStart    Op = "lost-answer-start" // fault proxy: forward every other write of Resource, drop its answer
	OpLostAnswerEnd      Op = "lost-answer-end"
	OpWatchGoneStart     Op = "watch-gone-start" // fault proxy: 410 Gone to resumed watches and lists of Resource
	OpWatchGoneEnd       Op = "watch-gone-end"
	OpAPIServerStop      Op = "apiserver-restart" // kube-apiserver stopped for Down, then started again
	OpAPIServerReady     Op = "apiserver-ready"   // waits until the restart's kube-apiserver answers
	OpWatchLagStart      Op = "watch-lag-start"   // fault proxy: the watches of Resource relayed Lag late
	OpWatchLagEnd        Op = "watch-lag-end"
	OpLostCordonStart    Op = "lost-cordon-start" // fault proxy: every write of a Node's spec or metadata forwarded, its answer dropped
	OpLostCordonEnd      Op = "lost-cordon-end"
	OpHoldStart          Op = "hold-start"     // fault proxy: every write of a Node's spec or metadata held
	OpHoldStop           Op = "hold-stop"      // new writes pass; the held ones stay held
	OpHoldRelease        Op = "hold-release"   // the held writes forwarded now: they land late
	OpAPIHangStart       Op = "api-hang-start" // fault proxy: every request of Resource held unsent until its client gives up
	OpAPIHangEnd         Op = "api-hang-end"
	OpQuorumErrorsStart  Op = "quorum-errors-start" // fault proxy: 500 to every quorum read (resourceVersion "") of Resource in kube-node-lease; with Nodes, to every quorum LIST and those objects' quorum GETs
	OpQuorumErrorsEnd    Op = "quorum-errors-end"
	OpStatusRefusedStart Op = "status-refused-start" // fault proxy: 500 to every write of the status of Nodes
	OpStatusRefusedEnd   Op = "status-refused-end"
	// OpCloudBlind and OpCloudSeeing: the fake cloud provider answers every
	// question about the step's machines with an error, and no longer
	// does (fakenode SetCloudError; a person's kinds in test/chaos).
	OpCloudBlind  Op = "cloud-blind"
	OpCloudSeeing Op = "cloud-seeing"
	// OpRegister: Nodes (named by NewcomerNames) register in Zone, run by
	// fresh kubelets; Silent: each is cut off right after its Node and its
	// first Lease renewal are written.
	OpRegister Op = "register"
)

// NewcomerNames are the names of the n nodes an OpRegister step of fault
// index fault registers, the k-th such step of the fault: the names the
// fake nodes' NamePrefix "late-FAULT-K-" and their index give.
func NewcomerNames(fault, k, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s%04d", NewcomerPrefix(fault, k), i)
	}
	return out
}

// NewcomerPrefix is the fake nodes' NamePrefix of NewcomerNames.
func NewcomerPrefix(fault, k int) string { return fmt.Sprintf("late-%d-%c-", fault, 'a'+k) }

// Step is an action at an offset from the schedule's start.
type Step struct {
	At        time.Duration `json:"at"`
	Fault     int           `json:"fault"` // index in Schedule.Faults
	Op        Op            `json:"op"`
	Nodes     []string      `json:"nodes,omitempty"`
	Condition string        `json:"condition,omitempty"` // TYPE=STATUS for OpCondition, TYPE for OpClearCondition
	Replica   int           `json:"replica,omitempty"`   // slot for OpStopReplica/OpStartReplica; -1: the slot the leader was in
	Resource  string        `json:"resource,omitempty"`  // nodes, pods, leases, evictions (pods/eviction)
	Status    int           `json:"status,omitempty"`    // 500 or 429
	Down      time.Duration `json:"down,omitempty"`      // OpAPIServerStop: how long it stays down
	Lag       time.Duration `json:"lag,omitempty"`       // OpWatchLagStart: how late events are relayed; OpLostCordonStart: how late the writes land (0: before the answer is dropped)
	Zone      string        `json:"zone,omitempty"`      // OpRegister: the newcomers' zone
	Silent    bool          `json:"silent,omitempty"`    // OpRegister: cut off right after registering
}

func (s Step) String() string {
	var b strings.Builder
	b.WriteString(string(s.Op))
	if s.Condition != "" {
		b.WriteString(" " + s.Condition)
	}
	if len(s.Nodes) > 0 {
		b.WriteString(" " + strings.Join(s.Nodes, ","))
	}
	switch s.Op {
	case OpStopReplica, OpStartReplica:
		fmt.Fprintf(&b, " replica %d", s.Replica)
	case OpAPIFaultStart, OpAPIFaultEnd, OpWatchStallStart, OpWatchStallEnd, OpLostAnswerStart, OpLostAnswerEnd, OpWatchGoneStart, OpWatchGoneEnd,
		OpWatchLagStart, OpWatchLagEnd, OpLostCordonStart, OpLostCordonEnd, OpHoldStart, OpHoldStop, OpHoldRelease, OpAPIHangStart, OpAPIHangEnd, OpQuorumErrorsStart, OpQuorumErrorsEnd:
		b.WriteString(" " + s.Resource)
		if s.Status != 0 {
			fmt.Fprintf(&b, " %d", s.Status)
		}
	case OpAPIServerStop:
		fmt.Fprintf(&b, " down %v", s.Down)
	case OpRegister:
		b.WriteString(" in " + s.Zone)
		if s.Silent {
			b.WriteString(", cut off once registered")
		}
	}
	if s.Lag > 0 {
		fmt.Fprintf(&b, " lag %v", s.Lag)
	}
	return b.String()
}

// Fault is one drawn fault: what, where, when, how long.
type Fault struct {
	Kind     Kind          `json:"kind"`
	At       time.Duration `json:"at"`
	Duration time.Duration `json:"duration"`
	Nodes    []string      `json:"nodes,omitempty"`
	Zone     string        `json:"zone,omitempty"`
	Resource string        `json:"resource,omitempty"`
}

func (f Fault) String() string {
	s := fmt.Sprintf("%s for %v", f.Kind, f.Duration)
	switch {
	case f.Zone != "" && f.Kind == ZonePartition:
		s += " zone " + f.Zone
	case f.Kind == AllZonesPartition:
		s += " every zone"
	case len(f.Nodes) > 0:
		s += " on " + strings.Join(f.Nodes, ",")
	case f.Resource != "":
		s += " on " + f.Resource
	}
	return s
}

// Zone is a zone and its nodes, in a fixed order.
type Zone struct {
	Name  string
	Nodes []string
}

// Options shape a schedule.
type Options struct {
	Seed int64
	// Duration is the fault window: every fault starts and ends inside it.
	Duration time.Duration
	Zones    []Zone
	// Replicas is the number of `nodeshepherd run` processes (slots 0..n-1).
	Replicas int
	// MeanGap is the mean time between two fault starts (default 4s).
	MeanGap time.Duration
	// TargetedMeanGap is the mean time between two targeted faults
	// (default 12s; with Kinds naming targeted kinds only, MeanGap's
	// default applies to them instead, so that a targeted run is dense).
	TargetedMeanGap time.Duration
	// Kinds restricts the vocabulary (default: all of AllKinds).
	Kinds []Kind
}

// Schedule is a seed's faults and the steps that inject and end them,
// sorted by time. The same Options give the same Schedule.
type Schedule struct {
	Seed     int64         `json:"seed"`
	Duration time.Duration `json:"duration"`
	Faults   []Fault       `json:"faults"`
	Steps    []Step        `json:"steps"`
}

// Validate says what is wrong with options, naming the field.
func (o Options) Validate() error {
	var errs []string
	if o.Duration <= 0 {
		errs = append(errs, fmt.Sprintf("duration must be positive, got %v", o.Duration))
	}
	if len(o.Zones) == 0 {
		errs = append(errs, "no zones: give at least one zone with nodes")
	}
	for _, z := range o.Zones {
		if len(z.Nodes) == 0 {
			errs = append(errs, fmt.Sprintf("zone %q has no nodes", z.Name))
		}
	}
	if o.Replicas < 1 {
		errs = append(errs, fmt.Sprintf("replicas must be at least 1, got %d", o.Replicas))
	}
	for _, k := range o.Kinds {
		if !slices.Contains(AllKinds(), k) {
			errs = append(errs, fmt.Sprintf("unknown fault kind %q; kinds: %v", k, AllKinds()))
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("chaos schedule: %s", strings.Join(errs, "; "))
	}
	return nil
}

// span is a duration range drawn uniformly, in milliseconds.
type span struct{ min, max time.Duration }

// durations are the faults' lengths, scaled to the test's compressed
// timings (node grace 3s, tolerations 5-8s, out-of-service after 3s):
// short ones end before anything reacts, long ones go through taint,
// eviction and replacement.
var durations = map[Kind]span{
	NodePartition:  {2 * time.Second, 15 * time.Second},
	RackPartition:  {3 * time.Second, 15 * time.Second},
	ZonePartition:  {3 * time.Second, 12 * time.Second},
	KubeletStop:    {2 * time.Second, 12 * time.Second},
	PowerOff:       {8 * time.Second, 20 * time.Second},
	Reboot:         {1 * time.Second, 4 * time.Second},
	ConditionFlap:  {3 * time.Second, 15 * time.Second},
	ReadyFlap:      {1 * time.Second, 6 * time.Second},
	LeaderKill:     {2 * time.Second, 8 * time.Second},
	ProcessRestart: {2 * time.Second, 6 * time.Second},
	APIErrors:      {3 * time.Second, 10 * time.Second},
	APIThrottle:    {3 * time.Second, 10 * time.Second},
	WatchStall:     {3 * time.Second, 10 * time.Second},
	// Targeted: the silence lasts this long after the spread.
	ZoneSilenceSpread: {8 * time.Second, 20 * time.Second},
	AllZonesPartition: {8 * time.Second, 20 * time.Second},
	LostAnswer:        {3 * time.Second, 10 * time.Second},
	WatchGone:         {2 * time.Second, 6 * time.Second},
	// The restart's downtime; the fault reserves apiServerStartup after it.
	APIServerRestart: {1 * time.Second, 4 * time.Second},
	// The whole fault: lagged watch, lost answers and the trigger.
	BlindCordon: {5 * time.Second, 10 * time.Second},
	// After the release: how long the trigger stays (the late cordon and
	// the new leader's side by side).
	LateWrite: {3 * time.Second, 8 * time.Second},
	APIHang:   {4 * time.Second, 10 * time.Second},
	// From the first power-off to the machines' start.
	BlindOutOfService: {14 * time.Second, 20 * time.Second},
	// From the cut to the heal: about the taint (grace 3s) to 2.5s after
	// it, so that, the taint taken off a lag after the heal, a batch pod's
	// 10s toleration ends after that and before the informers see it.
	LaggedHeal: {3500 * time.Millisecond, 6 * time.Second},
	// From c's cut: how long the quorum reads fail (the heal is 2s after).
	UnsettledZone: {14 * time.Second, 20 * time.Second},
	// From the first cut to the heal: past a 15s grace period and the
	// taint that a Normal zone would let out.
	SilentNewcomer: {24 * time.Second, 30 * time.Second},
	// From the first registration to the fault's end.
	FullRange: {14 * time.Second, 18 * time.Second},
	// The new replica's start after the kill.
	DrainOrphaned: {2 * time.Second, 5 * time.Second},
	// From the first cut to the heal: two tokens of a 0.1/s zone rate
	// after the grace period.
	RefusedMark: {14 * time.Second, 20 * time.Second},
	// The node watches' lag.
	HeardAllZones: {4 * time.Second, 5 * time.Second},
	HeardUnseen:   {4 * time.Second, 5 * time.Second},
}

// lateWriteFrom is the earliest start of a late-write fault: the drain's
// start hold (kube.WriteTimeout, 15s, from the leader's start, which is
// before the window's) is over by then.
const lateWriteFrom = 15 * time.Second

// drainTrigger is the chaos configuration's drain condition.
const drainTrigger = "KernelDeadlock"

// apiServerStartup is what a targeted fault reserves for kube-apiserver to
// answer again after a restart (its ready wait is bounded by the runner).
const apiServerStartup = 15 * time.Second

// lostAnswerResources are the writes whose answers lost-answer drops: the
// controllers' every kind of write (configmaps: the fake cloud's requests).
var lostAnswerResources = []string{"nodes", "pods", "leases", "evictions", "configmaps"}

var apiResources = []string{"nodes", "pods", "leases", "evictions"}
var watchResources = []string{"nodes", "pods", "leases"}

// Generate draws a schedule from the seed. Process faults never overlap
// (a replica is always left to lead), nor do API faults (one proxy rule at
// a time); node faults may overlap freely, as real ones do. The kinds of
// Kinds come from the seed's first stream, exactly as before the targeted
// kinds existed; the targeted kinds from a second stream, numbered after.
func Generate(o Options) (Schedule, error) {
	if err := o.Validate(); err != nil {
		return Schedule{}, err
	}
	if o.MeanGap <= 0 {
		o.MeanGap = 4 * time.Second
	}
	kinds, targeted := Kinds, TargetedKinds
	if len(o.Kinds) > 0 {
		kinds, targeted = nil, nil
		for _, k := range o.Kinds {
			if slices.Contains(Kinds, k) {
				kinds = append(kinds, k)
			} else {
				targeted = append(targeted, k)
			}
		}
	}
	if o.TargetedMeanGap <= 0 {
		o.TargetedMeanGap = 12 * time.Second
		if len(kinds) == 0 {
			o.TargetedMeanGap = o.MeanGap
		}
	}
	sched := Schedule{Seed: o.Seed, Duration: o.Duration}
	var busy busyTimes
	if len(kinds) > 0 {
		generateBase(o, kinds, &sched, &busy)
	}
	if len(targeted) > 0 {
		generateTargeted(o, targeted, &sched, &busy)
	}
	// Stable: steps at one instant keep their draw order (an end before a
	// start at the same time stays so).
	sort.SliceStable(sched.Steps, func(i, j int) bool { return sched.Steps[i].At < sched.Steps[j].At })
	return sched, nil
}

// interval is a stretch of the window a fault holds.
type interval struct{ from, to time.Duration }

// busyTimes are the stretches the process and the API faults hold, so that
// the targeted ones overlap none of them.
type busyTimes struct{ process, api []interval }

func free(list []interval, from, to time.Duration) bool {
	for _, iv := range list {
		if from < iv.to && iv.from < to {
			return false
		}
	}
	return true
}

// generateBase draws the kinds of Kinds, from the seed's first stream.
func generateBase(o Options, kinds []Kind, sched *Schedule, busy *busyTimes) {
	// PCG seeded from the seed alone: Go's math/rand/v2 promises PCG's
	// output stays the same across releases.
	r := rand.New(rand.NewPCG(uint64(o.Seed), uint64(o.Seed)^0x9e3779b97f4a7c15))
	draw := func(s span) time.Duration {
		return s.min + time.Duration(r.Int64N(int64(s.max-s.min)/int64(time.Millisecond)+1))*time.Millisecond
	}
	var processBusy, apiBusy time.Duration
	at := time.Duration(0)
	for {
		at += time.Duration(r.ExpFloat64() * float64(o.MeanGap))
		at = at.Round(time.Millisecond)
		if at >= o.Duration {
			break
		}
		k := kinds[r.IntN(len(kinds))]
		d := draw(durations[k])
		if at+d > o.Duration {
			d = o.Duration - at
		}
		f := Fault{Kind: k, At: at, Duration: d}
		idx := len(sched.Faults)
		add := func(off time.Duration, s Step) {
			s.At, s.Fault = at+off, idx
			sched.Steps = append(sched.Steps, s)
		}
		z := o.Zones[r.IntN(len(o.Zones))]
		one := []string{z.Nodes[r.IntN(len(z.Nodes))]}
		switch k {
		case NodePartition, RackPartition, ZonePartition:
			f.Nodes = one
			if k == RackPartition {
				i := r.IntN(len(z.Nodes))
				f.Nodes = []string{z.Nodes[i], z.Nodes[(i+1)%len(z.Nodes)]}
				if f.Nodes[0] == f.Nodes[1] {
					f.Nodes = f.Nodes[:1]
				}
			}
			if k == ZonePartition {
				f.Zone, f.Nodes = z.Name, slices.Clone(z.Nodes)
			}
			add(0, Step{Op: OpPartition, Nodes: f.Nodes})
			add(d, Step{Op: OpHeal, Nodes: f.Nodes})
		case KubeletStop:
			f.Nodes = one
			add(0, Step{Op: OpKubeletStop, Nodes: one})
			add(d, Step{Op: OpKubeletStart, Nodes: one})
		case PowerOff, Reboot:
			f.Nodes = one
			add(0, Step{Op: OpMachineShutdown, Nodes: one})
			add(d, Step{Op: OpMachineStart, Nodes: one})
		case ConditionFlap:
			f.Nodes = one
			add(0, Step{Op: OpCondition, Nodes: one, Condition: "KernelDeadlock=True"})
			add(d, Step{Op: OpClearCondition, Nodes: one, Condition: "KernelDeadlock"})
		case ReadyFlap:
			f.Nodes = one
			add(0, Step{Op: OpCondition, Nodes: one, Condition: "Ready=False"})
			add(d, Step{Op: OpClearCondition, Nodes: one, Condition: "Ready"})
		case LeaderKill, ProcessRestart:
			if at < processBusy {
				continue // one process fault at a time; the draw is spent all the same
			}
			processBusy = at + d + 2*time.Second
			busy.process = append(busy.process, interval{at, processBusy})
			if k == LeaderKill {
				add(0, Step{Op: OpKillLeader})
				add(d, Step{Op: OpStartReplica, Replica: -1})
			} else {
				slot := r.IntN(o.Replicas)
				add(0, Step{Op: OpStopReplica, Replica: slot})
				add(d, Step{Op: OpStartReplica, Replica: slot})
			}
		case APIErrors, APIThrottle, WatchStall:
			if at < apiBusy {
				continue
			}
			apiBusy = at + d
			busy.api = append(busy.api, interval{at, apiBusy})
			if k == WatchStall {
				f.Resource = watchResources[r.IntN(len(watchResources))]
				add(0, Step{Op: OpWatchStallStart, Resource: f.Resource})
				add(d, Step{Op: OpWatchStallEnd, Resource: f.Resource})
			} else {
				f.Resource = apiResources[r.IntN(len(apiResources))]
				status := 500
				if k == APIThrottle {
					status = 429
				}
				add(0, Step{Op: OpAPIFaultStart, Resource: f.Resource, Status: status})
				add(d, Step{Op: OpAPIFaultEnd, Resource: f.Resource, Status: status})
			}
		}
		sched.Faults = append(sched.Faults, f)
	}
}

// generateTargeted draws the targeted kinds from a stream of their own
// (seeded from the seed alone), skipping a draw whose process or API part
// would overlap a fault that holds them.
func generateTargeted(o Options, kinds []Kind, sched *Schedule, busy *busyTimes) {
	r := rand.New(rand.NewPCG(uint64(o.Seed)^0x7461726765746564, uint64(o.Seed)+0x6f6e707572706f73))
	draw := func(s span) time.Duration {
		return s.min + time.Duration(r.Int64N(int64(s.max-s.min)/int64(time.Millisecond)+1))*time.Millisecond
	}
	at := time.Duration(0)
	for {
		at = (at + time.Duration(r.ExpFloat64()*float64(o.TargetedMeanGap))).Round(time.Millisecond)
		if at >= o.Duration {
			break
		}
		k := kinds[r.IntN(len(kinds))]
		d := draw(durations[k])
		z := o.Zones[r.IntN(len(o.Zones))]
		f := Fault{Kind: k, At: at}
		var steps []Step
		add := func(off time.Duration, s Step) {
			s.At = at + off
			steps = append(steps, s)
		}
		switch k {
		case ZoneSilenceSpread:
			// 3 of the zone's nodes (all of a smaller zone but one), in a
			// random order, the last one spread (0.1-10s) after the first.
			nodes := slices.Clone(z.Nodes)
			r.Shuffle(len(nodes), func(i, j int) { nodes[i], nodes[j] = nodes[j], nodes[i] })
			if len(nodes) > 3 {
				nodes = nodes[:3]
			}
			spread := draw(span{100 * time.Millisecond, 10 * time.Second})
			offs := []time.Duration{0, time.Duration(r.Int64N(int64(spread)/int64(time.Millisecond)+1)) * time.Millisecond, spread}
			kill := r.IntN(2) == 0
			killAt := time.Duration(r.Int64N(int64(spread)/int64(time.Millisecond)+1)) * time.Millisecond
			down := draw(span{2 * time.Second, 5 * time.Second})
			d += spread
			if at+d > o.Duration {
				continue
			}
			f.Zone, f.Nodes, f.Duration = z.Name, nodes, d
			for i, n := range nodes {
				add(offs[min(i, len(offs)-1)], Step{Op: OpPartition, Nodes: []string{n}})
			}
			if kill && at+killAt+down < o.Duration && free(busy.process, at+killAt, at+killAt+down+2*time.Second) {
				busy.process = append(busy.process, interval{at + killAt, at + killAt + down + 2*time.Second})
				add(killAt, Step{Op: OpKillLeader})
				add(killAt+down, Step{Op: OpStartReplica, Replica: -1})
			}
			add(d, Step{Op: OpHeal, Nodes: nodes})
		case AllZonesPartition:
			if at+d > o.Duration {
				continue
			}
			f.Duration = d
			for _, zz := range o.Zones {
				f.Nodes = append(f.Nodes, zz.Nodes...)
			}
			add(0, Step{Op: OpPartition, Nodes: f.Nodes})
			add(d, Step{Op: OpHeal, Nodes: f.Nodes})
		case LostAnswer, WatchGone:
			d = min(d, o.Duration-at)
			if !free(busy.api, at, at+d) {
				continue
			}
			busy.api = append(busy.api, interval{at, at + d})
			f.Duration = d
			if k == LostAnswer {
				f.Resource = lostAnswerResources[r.IntN(len(lostAnswerResources))]
				add(0, Step{Op: OpLostAnswerStart, Resource: f.Resource})
				add(d, Step{Op: OpLostAnswerEnd, Resource: f.Resource})
			} else {
				f.Resource = watchResources[r.IntN(len(watchResources))]
				add(0, Step{Op: OpWatchGoneStart, Resource: f.Resource})
				add(d, Step{Op: OpWatchGoneEnd, Resource: f.Resource})
			}
		case BlindCordon:
			if at+d > o.Duration || !free(busy.api, at, at+d) {
				continue
			}
			busy.api = append(busy.api, interval{at, at + d})
			lag := draw(span{1500 * time.Millisecond, 3 * time.Second})
			f.Duration, f.Resource, f.Nodes = d, "nodes", pickNodes(r, o.Zones, 3)
			add(0, Step{Op: OpWatchLagStart, Resource: "nodes", Lag: lag})
			add(0, Step{Op: OpLostCordonStart, Resource: "nodes"})
			// A second for the cut watches to come back lagged.
			add(time.Second, Step{Op: OpCondition, Nodes: f.Nodes, Condition: drainTrigger + "=True"})
			add(d, Step{Op: OpLostCordonEnd, Resource: "nodes"})
			add(d, Step{Op: OpWatchLagEnd, Resource: "nodes"})
			add(d, Step{Op: OpClearCondition, Nodes: f.Nodes, Condition: drainTrigger})
		case LateWrite:
			kill := draw(span{800 * time.Millisecond, 2 * time.Second})
			release := draw(span{max(9*time.Second, kill+7*time.Second), 12 * time.Second})
			down := draw(span{2 * time.Second, 5 * time.Second})
			d += release
			// Not in the first 15s: a leader still in its drain start hold
			// (15s from its start, before the window's) cordons nothing
			// before it is killed, and nothing would land late.
			if at < lateWriteFrom || at+d > o.Duration || !free(busy.api, at, at+d) || !free(busy.process, at+kill, at+kill+down+2*time.Second) {
				continue
			}
			// The whole fault holds the API: a second one would find the
			// cordon budget taken by the first's cordons.
			busy.api = append(busy.api, interval{at, at + d})
			busy.process = append(busy.process, interval{at + kill, at + kill + down + 2*time.Second})
			f.Duration, f.Resource, f.Nodes = d, "nodes", pickNodes(r, o.Zones, 4)
			// The old leader's held cordon is of the node last by name,
			// triggered first: a new leader takes the nodes of its LIST in
			// their order (by name) and reaches that one last, so that the
			// late cordon lands on a node the new leader did not cordon.
			sort.Strings(f.Nodes)
			add(0, Step{Op: OpHoldStart, Resource: "nodes"})
			add(300*time.Millisecond, Step{Op: OpCondition, Nodes: f.Nodes[len(f.Nodes)-1:], Condition: drainTrigger + "=True"})
			add(500*time.Millisecond, Step{Op: OpCondition, Nodes: f.Nodes[:len(f.Nodes)-1], Condition: drainTrigger + "=True"})
			add(kill, Step{Op: OpKillLeader})
			add(kill, Step{Op: OpHoldStop, Resource: "nodes"})
			add(kill+down, Step{Op: OpStartReplica, Replica: -1})
			add(release, Step{Op: OpHoldRelease, Resource: "nodes"})
			add(d, Step{Op: OpClearCondition, Nodes: f.Nodes, Condition: drainTrigger})
		case BlindOutOfService:
			const blindFrom, blindFor = 4 * time.Second, 8 * time.Second
			if at+d > o.Duration || len(o.Zones) < 3 || !free(busy.api, at+blindFrom, at+blindFrom+blindFor) {
				continue
			}
			busy.api = append(busy.api, interval{at + blindFrom, at + blindFrom + blindFor})
			lag := draw(span{1500 * time.Millisecond, 3 * time.Second})
			f.Duration, f.Resource = d, "nodes"
			for _, i := range r.Perm(len(o.Zones))[:3] {
				zn := o.Zones[i].Nodes
				f.Nodes = append(f.Nodes, zn[r.IntN(len(zn))])
			}
			for i, n := range f.Nodes {
				add(time.Duration(i)*300*time.Millisecond, Step{Op: OpMachineShutdown, Nodes: []string{n}})
			}
			add(blindFrom, Step{Op: OpWatchLagStart, Resource: "nodes", Lag: lag})
			add(blindFrom, Step{Op: OpLostCordonStart, Resource: "nodes", Lag: draw(span{2 * time.Second, 3500 * time.Millisecond})})
			add(blindFrom+blindFor, Step{Op: OpLostCordonEnd, Resource: "nodes"})
			add(blindFrom+blindFor, Step{Op: OpWatchLagEnd, Resource: "nodes"})
			add(d, Step{Op: OpMachineStart, Nodes: f.Nodes})
		case LaggedHeal:
			lag := draw(span{4 * time.Second, 6 * time.Second})
			heal := time.Second + d
			d = heal + 8*time.Second
			if at+d > o.Duration || !free(busy.api, at, at+d) {
				continue
			}
			busy.api = append(busy.api, interval{at, at + d})
			f.Duration, f.Resource, f.Nodes = d, "nodes", []string{z.Nodes[r.IntN(len(z.Nodes))]}
			add(0, Step{Op: OpWatchLagStart, Resource: "nodes", Lag: lag})
			add(time.Second, Step{Op: OpPartition, Nodes: f.Nodes})
			add(heal, Step{Op: OpHeal, Nodes: f.Nodes})
			add(d, Step{Op: OpWatchLagEnd, Resource: "nodes"})
		case UnsettledZone:
			const cFrom, readsFrom = 6 * time.Second, 6500 * time.Millisecond
			heal := cFrom + d + 2*time.Second
			if at+heal > o.Duration || len(z.Nodes) < 4 || !free(busy.api, at+readsFrom, at+cFrom+d) {
				continue
			}
			busy.api = append(busy.api, interval{at + readsFrom, at + cFrom + d})
			perm := r.Perm(len(z.Nodes))
			f.Zone, f.Resource, f.Duration = z.Name, "leases", heal
			for _, i := range perm[:3] {
				f.Nodes = append(f.Nodes, z.Nodes[i])
			}
			add(0, Step{Op: OpPartition, Nodes: f.Nodes[:1]})
			add(500*time.Millisecond, Step{Op: OpPartition, Nodes: f.Nodes[1:2]})
			add(cFrom, Step{Op: OpPartition, Nodes: f.Nodes[2:]})
			add(readsFrom, Step{Op: OpQuorumErrorsStart, Resource: "leases", Nodes: f.Nodes[2:]})
			add(cFrom+d, Step{Op: OpQuorumErrorsEnd, Resource: "leases"})
			add(heal, Step{Op: OpHeal, Nodes: f.Nodes})
		case RefusedMark:
			if at+d > o.Duration || len(z.Nodes) != 4 || !free(busy.api, at, at+d) {
				continue
			}
			busy.api = append(busy.api, interval{at, at + d})
			perm := r.Perm(len(z.Nodes))
			f.Zone, f.Resource, f.Duration = z.Name, "nodes", d
			for _, i := range perm[:3] {
				f.Nodes = append(f.Nodes, z.Nodes[i])
			}
			add(0, Step{Op: OpStatusRefusedStart, Resource: "nodes", Nodes: f.Nodes[2:]})
			for i := range f.Nodes {
				add(time.Duration(i)*300*time.Millisecond, Step{Op: OpPartition, Nodes: f.Nodes[i : i+1]})
			}
			add(d, Step{Op: OpHeal, Nodes: slices.Clone(f.Nodes)})
			add(d, Step{Op: OpStatusRefusedEnd, Resource: "nodes", Nodes: f.Nodes[2:]})
		case HeardAllZones, HeardUnseen:
			const lagFrom, othersBack, xBack, lagTo = 10 * time.Second, 12 * time.Second, 24 * time.Second, 31 * time.Second
			if at+lagTo > o.Duration || len(z.Nodes) != 4 || len(o.Zones) < 2 || !free(busy.api, at, at+lagTo) {
				continue
			}
			busy.api = append(busy.api, interval{at, at + lagTo})
			x := z.Nodes[r.IntN(len(z.Nodes))]
			var others []string
			for _, zz := range o.Zones {
				for _, n := range zz.Nodes {
					if n != x {
						others = append(others, n)
					}
				}
			}
			f.Zone, f.Resource, f.Duration, f.Nodes = z.Name, "nodes", lagTo, append([]string{x}, others...)
			if k == HeardUnseen {
				f.Resource = "nodes,leases"
			}
			add(0, Step{Op: OpPartition, Nodes: []string{x}})
			add(5*time.Second, Step{Op: OpPartition, Nodes: others})
			lagged := "nodes"
			if k == HeardUnseen {
				lagged = "nodes,leases"
			}
			add(lagFrom, Step{Op: OpWatchLagStart, Resource: lagged, Lag: d})
			add(othersBack, Step{Op: OpHeal, Nodes: others})
			add(xBack, Step{Op: OpHeal, Nodes: []string{x}})
			add(lagTo, Step{Op: OpWatchLagEnd, Resource: lagged})
		case SilentNewcomer:
			if at+d > o.Duration || len(z.Nodes) != 4 {
				continue
			}
			idx := len(sched.Faults)
			perm := r.Perm(len(z.Nodes))
			f.Zone, f.Duration = z.Name, d
			for _, i := range perm[:2] {
				f.Nodes = append(f.Nodes, z.Nodes[i])
			}
			newcomer := NewcomerNames(idx, 0, 1)
			add(0, Step{Op: OpPartition, Nodes: slices.Clone(f.Nodes)})
			add(draw(span{time.Second, 3 * time.Second}), Step{Op: OpRegister, Nodes: newcomer, Zone: z.Name, Silent: true})
			f.Nodes = append(f.Nodes, newcomer...)
			add(d, Step{Op: OpHeal, Nodes: slices.Clone(f.Nodes)})
		case FullRange:
			const lostFrom, lostFor = 3 * time.Second, 8 * time.Second
			if at+d > o.Duration || !free(busy.api, at+lostFrom, at+lostFrom+lostFor) {
				continue
			}
			busy.api = append(busy.api, interval{at + lostFrom, at + lostFrom + lostFor})
			idx := len(sched.Faults)
			f.Zone, f.Duration, f.Resource = z.Name, d, "nodes"
			fill, last := NewcomerNames(idx, 0, FullRangeFill), NewcomerNames(idx, 1, 2)
			f.Nodes = append(slices.Clone(fill), last...)
			add(0, Step{Op: OpRegister, Nodes: fill, Zone: z.Name})
			add(lostFrom, Step{Op: OpLostCordonStart, Resource: "nodes", Lag: draw(span{2 * time.Second, 3500 * time.Millisecond})})
			add(lostFrom+500*time.Millisecond, Step{Op: OpRegister, Nodes: last, Zone: z.Name})
			add(lostFrom+lostFor, Step{Op: OpLostCordonEnd, Resource: "nodes"})
		case DrainOrphaned:
			const kill, clear, lift = 2500 * time.Millisecond, 3500 * time.Millisecond, 4 * time.Second
			end := kill + d
			if at+end+2*time.Second > o.Duration || !free(busy.api, at, at+lift) || !free(busy.process, at+kill, at+end+2*time.Second) {
				continue
			}
			busy.api = append(busy.api, interval{at, at + lift})
			busy.process = append(busy.process, interval{at + kill, at + end + 2*time.Second})
			f.Duration, f.Resource, f.Nodes = end, "evictions", []string{z.Nodes[r.IntN(len(z.Nodes))]}
			add(0, Step{Op: OpAPIHangStart, Resource: "evictions"})
			add(500*time.Millisecond, Step{Op: OpCondition, Nodes: f.Nodes, Condition: drainTrigger + "=True"})
			add(kill, Step{Op: OpKillLeader})
			add(clear, Step{Op: OpClearCondition, Nodes: f.Nodes, Condition: drainTrigger})
			add(lift, Step{Op: OpAPIHangEnd, Resource: "evictions"})
			add(end, Step{Op: OpStartReplica, Replica: -1})
		case APIHang:
			if at+d > o.Duration || !free(busy.api, at, at+d) {
				continue
			}
			busy.api = append(busy.api, interval{at, at + d})
			f.Duration, f.Resource, f.Nodes = d, "evictions", pickNodes(r, o.Zones, 2)
			add(0, Step{Op: OpAPIHangStart, Resource: "evictions"})
			// One node, then (its drain started, and over when it had no
			// pod) the other: a drain that hangs is then one that no
			// DrainWaiting explains, as a drain waiting on the first would be.
			add(500*time.Millisecond, Step{Op: OpCondition, Nodes: f.Nodes[:1], Condition: drainTrigger + "=True"})
			add(2500*time.Millisecond, Step{Op: OpCondition, Nodes: f.Nodes[1:], Condition: drainTrigger + "=True"})
			add(d, Step{Op: OpAPIHangEnd, Resource: "evictions"})
			// The trigger stays: a drain must end by itself while its
			// condition holds (clearing it would abort the drain, and so
			// end a hung one), and the checker's progress rule looks at the
			// drains still in flight after the last fault.
		case APIServerRestart:
			// Down d, then the restart's start-up: the whole fault must fit.
			hold := d + apiServerStartup
			if at+hold > o.Duration || !free(busy.api, at, at+hold) {
				continue
			}
			busy.api = append(busy.api, interval{at, at + hold})
			f.Duration = hold
			add(0, Step{Op: OpAPIServerStop, Down: d})
			add(hold, Step{Op: OpAPIServerReady})
		}
		idx := len(sched.Faults)
		for i := range steps {
			steps[i].Fault = idx
		}
		sched.Faults = append(sched.Faults, f)
		sched.Steps = append(sched.Steps, steps...)
	}
}

// pickNodes draws n distinct nodes of any zones (all of them when fewer).
func pickNodes(r *rand.Rand, zones []Zone, n int) []string {
	var all []string
	for _, z := range zones {
		all = append(all, z.Nodes...)
	}
	r.Shuffle(len(all), func(i, j int) { all[i], all[j] = all[j], all[i] })
	return all[:min(n, len(all))]
}

// String lists the faults, one a line, for failure output and docs.
func (s Schedule) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "seed %d, %v, %d faults:\n", s.Seed, s.Duration, len(s.Faults))
	for i, f := range s.Faults {
		fmt.Fprintf(&b, "  #%d +%v %s\n", i, f.At, f)
	}
	return b.String()
}
