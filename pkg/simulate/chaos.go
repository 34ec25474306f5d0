package simulate

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/nodeshepherd/nodeshepherd/pkg/chaos"
	"github.com/nodeshepherd/nodeshepherd/pkg/fakenode"
)

// ChaosOptions add a random fault schedule (pkg/chaos) to a scenario and
// run pkg/chaos's checker on the run, as `make chaos` does.
type ChaosOptions struct {
	Seed int64
	// Kinds are the fault kinds drawn (default: SimulateKinds).
	Kinds []chaos.Kind
}

// SimulateKinds are the fault kinds simulate can apply: the fake nodes'.
// Process faults (leader-kill, process-restart) need `nodeshepherd run`
// replicas under leader election and API faults (api-errors, api-throttle,
// watch-stall) a fault proxy in front of the API server; simulate runs one
// in-process set of controllers without either (`make chaos` has both).
var SimulateKinds = []chaos.Kind{chaos.NodePartition, chaos.RackPartition, chaos.ZonePartition, chaos.KubeletStop,
	chaos.PowerOff, chaos.Reboot, chaos.ConditionFlap, chaos.ReadyFlap}

// chaosSlack is the checker's allowance for watch delays (real time), as
// in `make chaos`; the fake kubelets' reporting interval is added to it.
const chaosSlack = 5 * time.Second

// ParseChaosKinds reads a comma-separated list of fault kinds, refusing
// unknown ones and the ones simulate cannot apply, naming them.
func ParseChaosKinds(list string) ([]chaos.Kind, error) {
	var kinds []chaos.Kind
	var unknown, cannot []string
	for _, s := range strings.Split(list, ",") {
		k := chaos.Kind(strings.TrimSpace(s))
		switch {
		case k == "":
			continue
		case !slices.Contains(chaos.Kinds, k):
			unknown = append(unknown, string(k))
		case !slices.Contains(SimulateKinds, k):
			cannot = append(cannot, string(k))
		default:
			kinds = append(kinds, k)
		}
	}
	var errs []string
	if len(unknown) > 0 {
		errs = append(errs, fmt.Sprintf("unknown fault kind(s) %s (kinds: %s)", strings.Join(unknown, ", "), kindList(chaos.Kinds)))
	}
	if len(cannot) > 0 {
		errs = append(errs, fmt.Sprintf("simulate cannot apply %s: it runs one in-process set of controllers, without leader-elected replicas to kill or a fault proxy for API faults (`make chaos` applies them); simulate applies %s",
			strings.Join(cannot, ", "), kindList(SimulateKinds)))
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	if len(kinds) == 0 {
		return nil, fmt.Errorf("no fault kind given; simulate applies %s", kindList(SimulateKinds))
	}
	return kinds, nil
}

func kindList(kinds []chaos.Kind) string {
	var s []string
	for _, k := range kinds {
		s = append(s, string(k))
	}
	return strings.Join(s, ", ")
}

// CheckChaos says whether the checker can follow the scenario's own
// timeline: its ground truth knows partitions, kubelets, machines shut down
// and started, and conditions, not machines deleted for good, nor the
// reboots and replacements of remediation policies.
func (sc *Scenario) CheckChaos() error {
	var bad []string
	for _, st := range sc.Timeline {
		if st.Action == ActionMachineDelete {
			bad = append(bad, fmt.Sprintf("%s at %v", st.Action, st.At.Duration))
		}
	}
	if len(bad) > 0 {
		return fmt.Errorf("%s: --chaos-seed: the checker's ground truth cannot follow the scenario's step(s) %s (a machine deleted for good); remove them or run without --chaos-seed",
			sc.path, strings.Join(bad, ", "))
	}
	if sc.hasRepairSteps() || sc.hasFenceSteps() {
		return fmt.Errorf("%s: --chaos-seed: the scenario's remediationPolicies reboot, replace or power off machines through the fake cloud, which the checker's ground truth cannot follow (it knows the timeline's faults only); run it without --chaos-seed",
			sc.path)
	}
	return nil
}

// CheckerResult is what the checker found in one run.
type CheckerResult struct {
	Seed       int64    `json:"seed"`
	Kinds      []string `json:"kinds"`
	Faults     []string `json:"faults"`
	Violations []string `json:"violations"`
	// NotChecked is what the checker does not check (pkg/chaos), and what
	// simulate leaves to the scenario's expectations.
	NotChecked []string `json:"notChecked"`
	SlackSecs  float64  `json:"slackSeconds"` // real time
}

// chaosRun is the checker of one run and its ground truth.
type chaosRun struct {
	truth   *chaos.Truth
	checker *chaos.Checker
	result  *CheckerResult
	slack   time.Duration
}

// startChaos draws the seed's faults on this run's nodes, adds them to the
// timeline (every timed step split into its start and its end, so that
// the ground truth records each when it is applied), and starts the
// checker's watches. Called once the workloads are up.
func (r *runner) startChaos(ctx context.Context, res *RunResult) error {
	co := r.opts.Chaos
	kinds := co.Kinds
	if len(kinds) == 0 {
		kinds = SimulateKinds
	}
	var zones []chaos.Zone
	for _, z := range r.rec.zones() {
		cz := chaos.Zone{Name: z}
		for _, n := range r.nodes.NodeNames() {
			if r.nodes.Zone(n) == z {
				cz.Nodes = append(cz.Nodes, n)
			}
		}
		if len(cz.Nodes) > 0 {
			zones = append(zones, cz)
		}
	}
	sched, err := chaos.Generate(chaos.Options{Seed: co.Seed, Duration: chaosWindow(r.sc.Duration.Duration), Zones: zones, Replicas: 1, Kinds: kinds})
	if err != nil {
		return err
	}
	cfg, _, err := r.sc.Controllers.scaled(r.sc.path, r.opts.TimeScale)
	if err != nil {
		return err
	}
	nl := cfg.NodeLifecycle
	// The slack of `make chaos` (whose fake kubelets report every 500ms)
	// plus the fake kubelets' own reporting interval here. readiness-restore
	// is off: a kubelet back from a fault re-posts its pods' Ready (even
	// right after the node lifecycle controller marked them) long before
	// its node's status says Ready again, and the rule cannot tell that
	// write from a controller's.
	kubelet := r.sc.fakeNodeConfig(r.opts.TimeScale)
	slack := chaosSlack + max(kubelet.NodeStatusUpdateFrequency, kubelet.LeaseRenewInterval)
	limits := chaos.Limits{Grace: nl.NodeMonitorGracePeriod, MonitorPeriod: nl.NodeMonitorPeriod, Slack: slack, SkipReadinessRestore: true,
		UnhealthyZoneThreshold: float64(nl.UnhealthyZoneThreshold), LargeClusterThreshold: nl.LargeClusterSizeThreshold,
		MaxOutOfService: len(r.nodes.NodeNames()), ForceAllowed: true}
	if r.opts.Mode == ModeNodeShepherd {
		// Budgets only where they are plain counts; a percentage is left
		// unchecked. Force deletions are allowed as configured, and counted
		// as allowed when any rule may carry its own force-after.
		limits.MaxConcurrentDrains = cfg.Drain.Budget.MaxConcurrentDrains
		if n, err := strconv.Atoi(cfg.Drain.Budget.MaxCordonedNodes); err == nil {
			limits.MaxCordoned = n
		}
		if r.sc.runsOutOfService() {
			limits.MaxOutOfService = cfg.OutOfService.MaxNodes
		}
	}
	truth := chaos.NewTruth(zones)
	checker := chaos.NewChecker(limits, truth)
	if err := chaos.Watch(ctx, r.client, checker); err != nil {
		return err
	}
	kindNames := make([]string, 0, len(kinds))
	for _, k := range kinds {
		kindNames = append(kindNames, string(k))
	}
	cr := &CheckerResult{Seed: co.Seed, Kinds: kindNames, SlackSecs: slack.Seconds(),
		NotChecked: append(slices.Clone(chaos.NotChecked),
			"progress: left to the scenario's expectations (simulate does not wait for the workloads after the last fault)",
			"readiness-restore: off in simulate (its kubelets re-post their pods' Ready before their node's status, and the checker cannot tell the writer)")}
	for _, f := range sched.Faults {
		cr.Faults = append(cr.Faults, fmt.Sprintf("+%v %s", f.At, f)) // to the millisecond, as drawn
	}
	res.Checker = cr
	r.chaos = &chaosRun{truth: truth, checker: checker, result: cr, slack: slack}

	sc := *r.sc
	sc.Timeline = nil
	for _, st := range r.sc.Timeline {
		sc.Timeline = append(sc.Timeline, splitTimed(st)...)
	}
	for _, s := range sched.Steps {
		st, err := chaosStep(s)
		if err != nil {
			return err
		}
		sc.Timeline = append(sc.Timeline, st)
	}
	sort.SliceStable(sc.Timeline, func(i, j int) bool { return sc.Timeline[i].At.Duration < sc.Timeline[j].At.Duration })
	r.sc = &sc
	r.printf("chaos seed %d: %d faults (%s) added to the timeline; the checker watches", co.Seed, len(sched.Faults), kindList(kinds))
	return nil
}

// chaosWindow is when the faults start and end: the scenario's duration
// less 5% (at least 1s), so that the last fault's end is applied before the
// timeline stops (a step at the very end may not run).
func chaosWindow(d time.Duration) time.Duration {
	return d - max(d/20, time.Second)
}

// splitTimed turns a node step with `for:` into its start and its end.
func splitTimed(st Step) []Step {
	if st.For.Duration <= 0 {
		return []Step{st}
	}
	end := Step{At: Duration{st.At.Duration + st.For.Duration}, Target: st.Target}
	start := st
	start.For = Duration{}
	switch st.Action {
	case ActionPartition, ActionNetworkBlip:
		start.Action, end.Action = ActionPartition, ActionHeal
	case ActionKubeletStop, ActionKubeletRestart:
		start.Action, end.Action = ActionKubeletStop, ActionKubeletStart
	case ActionMachineShutdown:
		end.Action = ActionMachineStart
	case ActionSetCondition:
		typ, _, _ := strings.Cut(st.Condition, "=")
		end.Action, end.Condition = ActionClearCondition, typ
		c, err := fakenode.ParseCondition(typ, false)
		if err != nil {
			return []Step{st}
		}
		end.cond = c
	default:
		return []Step{st} // cordon: no machine fault; it ends itself
	}
	return []Step{start, end}
}

// chaosStep is a schedule's step as a timeline step.
func chaosStep(s chaos.Step) (Step, error) {
	st := Step{At: Duration{s.At}, Target: Target{Nodes: slices.Clone(s.Nodes)}}
	switch s.Op {
	case chaos.OpPartition:
		st.Action = ActionPartition
	case chaos.OpHeal:
		st.Action = ActionHeal
	case chaos.OpKubeletStop:
		st.Action = ActionKubeletStop
	case chaos.OpKubeletStart:
		st.Action = ActionKubeletStart
	case chaos.OpMachineShutdown:
		st.Action = ActionMachineShutdown
	case chaos.OpMachineStart:
		st.Action = ActionMachineStart
	case chaos.OpCondition, chaos.OpClearCondition:
		st.Action, st.Condition = ActionSetCondition, s.Condition
		if s.Op == chaos.OpClearCondition {
			st.Action = ActionClearCondition
		}
		c, err := fakenode.ParseCondition(s.Condition, s.Op == chaos.OpCondition)
		if err != nil {
			return Step{}, fmt.Errorf("chaos step %s: %w", s, err)
		}
		st.cond = c
	default:
		return Step{}, fmt.Errorf("chaos step %s: simulate cannot apply it", s)
	}
	return st, nil
}

// truthOps are what a timeline step did to the machines, for the ground
// truth (none for cordons and bursts).
func truthOps(st *Step, nodes []string) []chaos.Step {
	one := func(op chaos.Op, cond string) chaos.Step {
		return chaos.Step{Op: op, Nodes: nodes, Condition: cond}
	}
	switch st.Action {
	case ActionPartition, ActionNetworkBlip:
		return []chaos.Step{one(chaos.OpPartition, "")}
	case ActionHeal:
		return []chaos.Step{one(chaos.OpHeal, "")}
	case ActionKubeletStop:
		return []chaos.Step{one(chaos.OpKubeletStop, "")}
	case ActionKubeletStart:
		return []chaos.Step{one(chaos.OpKubeletStart, "")}
	case ActionKubeletRestart:
		return []chaos.Step{one(chaos.OpKubeletStop, ""), one(chaos.OpKubeletStart, "")}
	case ActionMachineShutdown:
		return []chaos.Step{one(chaos.OpMachineShutdown, "")}
	case ActionMachineStart:
		return []chaos.Step{one(chaos.OpMachineStart, "")}
	case ActionSetCondition:
		return []chaos.Step{one(chaos.OpCondition, st.Condition)}
	case ActionClearCondition:
		return []chaos.Step{one(chaos.OpClearCondition, st.Condition)}
	}
	return nil
}

// record adds what a step did, applied between start and done.
func (c *chaosRun) record(st *Step, nodes []string, start, done time.Time) {
	for _, s := range truthOps(st, nodes) {
		c.truth.Record(chaos.Applied{Step: s, Start: start, Done: done})
	}
}

// finish lets the pending judgments settle and stores the violations.
func (c *chaosRun) finish() {
	c.checker.Settle(time.Now().Add(c.slack + time.Millisecond))
	for _, v := range c.checker.Violations() {
		c.result.Violations = append(c.result.Violations, v.String())
	}
}
