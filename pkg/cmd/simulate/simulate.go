// Package simulate implements `nodeshepherd simulate`: rehearse a scenario
// of node failures on a local control plane and report what happened.
package simulate

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/nodeshepherd/nodeshepherd/pkg/cli"
	"github.com/nodeshepherd/nodeshepherd/pkg/simulate"
)

type options struct {
	compare      string
	trials       int
	timeScale    float64
	output       string
	binDir       string
	setupTimeout time.Duration
	validateOnly bool
	chaosSeed    int64
	chaosFaults  string
	nodes        string
	kubeletV     int
}

// ErrExpectations is returned when the run finished but expectations failed.
var ErrExpectations = errors.New("expectations failed")

// NewCommand returns `nodeshepherd simulate`.
func NewCommand() *cobra.Command {
	o := &options{}
	c := &cobra.Command{
		Use:   "simulate SCENARIO.yaml",
		Short: "Rehearse node failures on a local control plane and report what happens, next to upstream",
		Long: `Run a scenario (kind: Scenario) on a real local control plane: etcd, kube-apiserver and
kube-controller-manager without the controllers nodeshepherd replaces, fake nodes, and
nodeshepherd's controllers and scheduler with the scenario's settings. The scenario's
workloads are created and made Ready, then its timeline runs (partitions, network blips,
kubelet restarts, node conditions, cordons, bursts of high-priority pods) and everything is
recorded.

The report is printed (time to detect, taint and evict, pods NotReady and for how long,
pending time, preemptions, cordons and drains, each expectation with PASS or FAIL) and
written to --output as report.json and report.html (self-contained, works offline, with
timeline charts).

--compare upstream runs the scenario a second time with kube-controller-manager's own
nodelifecycle, taint-eviction and nodeipam controllers and kube-scheduler, and reports both
side by side. Settings kube-controller-manager also has (nodeLifecycle.nodeMonitorGracePeriod,
nodeLifecycle.nodeEvictionRate, ...) apply to both runs, and so do the scheduler's backoffs
and unschedulable timeout (kube-scheduler gets them in a configuration file) and the client
QPS / burst; the report lists both runs' settings side by side.

--trials N runs every run N times, each on a fresh control plane (with --compare upstream,
nodeshepherd and upstream take turns), and reports each measure as the median and range
(min–max) over the trials; report.json keeps every trial's figures. An expectation holds
only if it holds in every trial; the summary says in how many trials each one held.

Workloads may include Services: the ready endpoints of their EndpointSlices are counted
(serviceReadyEndpointsMin, serviceReadyEndpointsAtEnd) and charted.

--time-scale N divides every duration by N (controller settings, fake kubelet intervals,
tolerationSeconds including the 300 s defaults, the timeline; the scheduler's backoffs
then rounded to whole seconds, at least 1, in both runs, as kube-scheduler takes them) and
multiplies eviction rates by N; the report is in cluster time and states the scale.
Delays fixed in real time (kube-controller-manager's pod garbage collector, every 20 s)
are not shortened: a scenario whose expectations depend on them states the largest scale
they hold at (maxTimeScale), and simulate refuses a larger --time-scale (exit 2).

--chaos-seed N adds a random fault schedule drawn from seed N (pkg/chaos, the same generator
as 'make chaos') over the scenario's duration (less 5%): node, rack and zone partitions,
kubelet stops, power-offs, reboots, condition and Ready flaps on the run's fake nodes, each in
cluster time. The same seed on the same scenario gives the same faults. The checker of 'make
chaos' watches the API server on its own during every run (zone rules, force-deletes on
running machines, drain and out-of-service budgets, toleration times, taint evictions without
a taint, PDBs, pod CIDRs; not readiness restores, which simulate's kubelets make themselves)
and the report gets a checker section listing the faults and every violation; a violation in
nodeshepherd's run makes the exit status 1 (with --compare upstream, upstream's are reported
only). --chaos-faults KIND,... draws only those kinds.
Process faults (leader-kill, process-restart) and API faults (api-errors, api-throttle,
watch-stall) are refused with an error: simulate runs one in-process set of controllers, with
no replicas to kill and no fault proxy; 'make chaos' applies them. A scenario with a
machine-delete step is refused too (the checker's ground truth cannot follow it). See
docs/chaos.md.

--nodes hollow runs the scenario on kubemark's hollow nodes (the real kubelet code of the
control plane's version, bin/kubemark, one process per node) instead of fake nodes, with
the names, zones and labels the fake nodes would get; the scenario's cluster.nodeKind says
the same. Hollow runs take --time-scale 1 only (kubemark fixes the kubelet's lease and status
timings), at most 20 nodes, and refuse, naming what is missing, what hollow nodes cannot do
yet: node groups, node capacity, images, podStartDelay, Fence steps, emulateStalePodStatus,
volume claims, conditions the kubelet owns, --chaos-seed. machine-* steps, the fake cloud,
the outofservice controller and the other remediation steps run on them. See
docs/hollownodes.md. --nodes fake,hollow runs the scenario on each kind in turn (reports in
OUTPUT/fake and OUTPUT/hollow) and then prints each measure side by side with the difference.

Exit status: 0 when every expectation holds (and, with --chaos-seed, no invariant is
violated in nodeshepherd's run), 1 when one fails or the run could not finish, 2 for a bad
scenario or flag. Ctrl-C stops the run cleanly and still writes the report of what was
recorded. The control-plane binaries come from 'make controlplane'.`,
		Example: `  # seed 002: a 45 s network blip, nodeshepherd next to upstream, ten times faster
  nodeshepherd simulate examples/scenarios/network-blip.yaml --compare upstream --time-scale 10

  # every zone falls silent: Service endpoints under both, over 5 trials each
  nodeshepherd simulate examples/scenarios/control-plane-partition.yaml --compare upstream --time-scale 10 --trials 5

  # the network blip with seed 7's random node faults, checked by the chaos checker
  nodeshepherd simulate examples/scenarios/network-blip.yaml --time-scale 10 --chaos-seed 7

  # a node partition on real kubelet code (kubemark's hollow nodes), then next to fake nodes
  nodeshepherd simulate my-scenario.yaml --nodes hollow
  nodeshepherd simulate my-scenario.yaml --nodes fake,hollow

  # check a scenario file without running it
  nodeshepherd simulate my-scenario.yaml --validate`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) != 1 {
				return cli.Usagef("simulate takes one scenario file, got %d arguments (see 'nodeshepherd simulate --help')", len(args))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			return o.run(cmd, args[0])
		},
	}
	f := c.Flags()
	f.StringVar(&o.compare, "compare", "", "Run the scenario a second time with upstream's controllers and scheduler and compare: upstream.")
	f.IntVar(&o.trials, "trials", 1, "Run the scenario this many times (each run, with --compare each side) and report the median and range of every measure.")
	f.Float64Var(&o.timeScale, "time-scale", 1, "Divide every duration of the scenario by this (1 to 100); the report stays in cluster time.")
	f.StringVarP(&o.output, "output", "o", "", "Directory for report.json, report.html and the runs' logs (default: simulate-reports/NAME-TIMESTAMP).")
	f.StringVar(&o.binDir, "bin-dir", "", "Directory holding the control-plane binaries (default: see 'controlplane up --help').")
	f.DurationVar(&o.setupTimeout, "setup-timeout", 5*time.Minute, "Give up if the nodes and workloads are not Ready by then (real time).")
	f.BoolVar(&o.validateOnly, "validate", false, "Only check the scenario file and exit.")
	f.Int64Var(&o.chaosSeed, "chaos-seed", 0, "Add the random node faults drawn from this seed to the timeline and check the run with the chaos checker (docs/chaos.md); a violation fails the run.")
	f.StringVar(&o.nodes, "nodes", "", "What runs the nodes: fake (pkg/fakenode) or hollow (kubemark's hollow nodes, the real kubelet code; --time-scale 1 only), or fake,hollow to run on both in turn and compare; default: the scenario's cluster.nodeKind, fake when it has none.")
	f.IntVar(&o.kubeletV, "kubelet-v", 0, "With hollow nodes, the log verbosity of their kubelets (-v; 6 logs every API request with its latency); their logs are kept with the run's.")
	f.StringVar(&o.chaosFaults, "chaos-faults", "", "With --chaos-seed, the fault kinds to draw, comma-separated (default: all simulate applies: "+kindsHelp()+").")
	return c
}

func (o *options) run(cmd *cobra.Command, path string) error {
	out := cmd.OutOrStdout()
	switch {
	case o.compare != "" && o.compare != simulate.RunUpstream:
		return cli.Usagef("--compare: only upstream is supported, got %q", o.compare)
	case o.trials < 1:
		return cli.Usagef("--trials must be at least 1, got %d", o.trials)
	case !(o.timeScale >= 1 && o.timeScale <= simulate.MaxTimeScale): // NaN fails too
		return cli.Usagef("--time-scale must be between 1 and %d, got %g", simulate.MaxTimeScale, o.timeScale)
	case o.setupTimeout <= 0:
		return cli.Usagef("--setup-timeout must be positive, got %v", o.setupTimeout)
	case o.kubeletV < 0:
		return cli.Usagef("--kubelet-v must be 0 or more, got %d", o.kubeletV)
	}
	chaosOpts, err := o.chaosOptions(cmd)
	if err != nil {
		return err
	}
	sc, err := simulate.Load(path)
	if err != nil {
		return &cli.UsageError{Err: err}
	}
	if err := sc.CheckTimeScale(o.timeScale); err != nil {
		return &cli.UsageError{Err: err}
	}
	kinds, err := nodeKinds(o.nodes)
	if err != nil {
		return err
	}
	check := kinds
	if len(check) == 0 {
		check = []string{""} // the scenario's
	}
	for _, k := range check {
		if err := sc.CheckNodes(k, o.timeScale); err != nil {
			return &cli.UsageError{Err: err}
		}
		if chaosOpts != nil && (k == simulate.NodeKindHollow || (k == "" && sc.NodeKind() == simulate.NodeKindHollow)) {
			return cli.Usagef("--chaos-seed on hollow nodes is not implemented: the schedule's ready-flap sets Ready, which the real kubelet writes again, and the checker's ground truth has not been run against hollow nodes")
		}
	}
	if o.kubeletV > 0 && !slices.ContainsFunc(check, func(k string) bool {
		return k == simulate.NodeKindHollow || (k == "" && sc.NodeKind() == simulate.NodeKindHollow)
	}) {
		return cli.Usagef("--kubelet-v=%d: only hollow nodes have a kubelet to log; add --nodes hollow (or fake,hollow)", o.kubeletV)
	}
	if chaosOpts != nil {
		if err := sc.CheckChaos(); err != nil {
			return &cli.UsageError{Err: err}
		}
	}
	if o.validateOnly {
		policies := ""
		if n := sc.PolicyCount(); n > 0 {
			policies = fmt.Sprintf(", %d remediation policies", n)
		}
		fmt.Fprintf(out, "%s: scenario %q is valid: %d zones, %d workload entries%s, %d timeline steps, %d expectations\n",
			path, sc.Name, len(sc.ZoneNames()), len(sc.Workloads), policies, len(sc.Timeline), len(sc.Expect))
		return nil
	}
	dir := o.output
	if dir == "" {
		dir = filepath.Join("simulate-reports", sc.Name+"-"+time.Now().Format("20060102-150405"))
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	_, restore, err := cli.LogsToFile(cmd, filepath.Join(dir, "nodeshepherd.log"))
	if err != nil {
		return err
	}
	defer restore()
	fmt.Fprintf(out, "Scenario %s: %s; report and logs in %s\n", sc.Name, path, dir)
	modes := []string{simulate.ModeNodeShepherd}
	if o.compare != "" {
		modes = append(modes, simulate.ModeUpstream)
	}
	ctx := cmd.Context()
	if len(kinds) > 1 {
		return o.runKinds(ctx, out, sc, dir, modes, kinds, chaosOpts)
	}
	rep, runErr := o.runTrials(ctx, out, sc, dir, o.nodes, modes, chaosOpts)
	if len(rep.Runs) > 0 {
		if err := o.writeReport(out, rep, dir); err != nil {
			return err
		}
	}
	return o.verdict(ctx, rep, runErr, dir)
}

// runTrials runs every trial of every mode on nodes of kind ("": the
// scenario's), stopping at the first run that fails or is interrupted.
func (o *options) runTrials(ctx context.Context, out io.Writer, sc *simulate.Scenario, dir, kind string, modes []string, chaosOpts *simulate.ChaosOptions) (*simulate.Report, error) {
	rep := simulate.NewReport(sc, o.timeScale)
	rep.Trials = o.trials
	var runErr error
runs:
	for trial := 1; trial <= o.trials; trial++ {
		for _, mode := range modes {
			opts := simulate.Options{Mode: mode, TimeScale: o.timeScale, Dir: filepath.Join(dir, mode),
				BinDir: o.binDir, Out: out, SetupTimeout: o.setupTimeout, Chaos: chaosOpts, NodeKind: kind, KubeletVerbosity: o.kubeletV}
			if o.trials > 1 {
				opts.Trial, opts.Dir = trial, filepath.Join(dir, fmt.Sprintf("%s-%d", mode, trial))
				fmt.Fprintf(out, "=== trial %d/%d: %s\n", trial, o.trials, mode)
			}
			res, err := simulate.Execute(ctx, sc, opts)
			if err != nil {
				runErr = fmt.Errorf("%s run: %w", mode, err)
				if o.trials > 1 {
					runErr = fmt.Errorf("trial %d, %s run: %w", trial, mode, err)
				}
				break runs
			}
			rep.Runs = append(rep.Runs, res)
			if o.trials > 1 {
				fmt.Fprintf(out, "=== trial %d/%d: %s done: %d of %d expectations hold\n", trial, o.trials, mode,
					len(res.Expectations)-res.Failed(), len(res.Expectations))
			}
			if res.Interrupted || ctx.Err() != nil {
				break runs
			}
		}
	}
	return rep, runErr
}

// verdict is the command's error for a report: the run's error, an
// interruption, violations or failed expectations.
func (o *options) verdict(ctx context.Context, rep *simulate.Report, runErr error, dir string) error {
	switch {
	case runErr != nil && ctx.Err() != nil:
		return fmt.Errorf("interrupted: %w", context.Cause(ctx))
	case runErr != nil:
		return runErr
	case ctx.Err() != nil:
		return errors.New("interrupted: the report covers the part that ran")
	case rep.Violations() > 0:
		return fmt.Errorf("the chaos checker found %d invariant violation(s) with --chaos-seed %d, and %d expectation(s) failed (see above or %s)",
			rep.Violations(), o.chaosSeed, rep.Failed(), filepath.Join(dir, "report.html"))
	case rep.Failed() > 0:
		return fmt.Errorf("%d %w (see above or %s)", rep.Failed(), ErrExpectations, filepath.Join(dir, "report.html"))
	}
	return nil
}

// runKinds runs the scenario on each kind of node in turn (--nodes
// fake,hollow), each with its report in DIR/KIND, then prints every
// measure side by side with the difference.
func (o *options) runKinds(ctx context.Context, out io.Writer, sc *simulate.Scenario, dir string, modes, kinds []string, chaosOpts *simulate.ChaosOptions) error {
	var reps []*simulate.Report
	var errs []error
	for _, kind := range kinds {
		fmt.Fprintf(out, "=== nodes: %s\n", kind)
		kdir := filepath.Join(dir, kind)
		rep, runErr := o.runTrials(ctx, out, sc, kdir, kind, modes, chaosOpts)
		if len(rep.Runs) > 0 {
			if err := o.writeReport(out, rep, kdir); err != nil {
				return err
			}
		}
		if err := o.verdict(ctx, rep, runErr, kdir); err != nil {
			errs = append(errs, fmt.Errorf("%s nodes: %w", kind, err))
		}
		if runErr != nil || ctx.Err() != nil {
			break
		}
		reps = append(reps, rep)
	}
	if len(reps) == len(kinds) {
		simulate.WriteKindComparison(out, kinds, reps)
	}
	return errors.Join(errs...)
}

// nodeKinds reads --nodes: no kind (the scenario's), one, or several to
// compare.
func nodeKinds(flag string) ([]string, error) {
	if flag == "" {
		return nil, nil
	}
	var kinds []string
	for _, k := range strings.Split(flag, ",") {
		switch {
		case !slices.Contains(simulate.NodeKinds, k):
			return nil, cli.Usagef("--nodes %q: %q is no node kind; give %s, or several separated by commas to compare them", flag, k, strings.Join(simulate.NodeKinds, ", "))
		case slices.Contains(kinds, k):
			return nil, cli.Usagef("--nodes %q: %s is named twice", flag, k)
		}
		kinds = append(kinds, k)
	}
	return kinds, nil
}

// chaosOptions reads --chaos-seed and --chaos-faults: nil without a seed.
func (o *options) chaosOptions(cmd *cobra.Command) (*simulate.ChaosOptions, error) {
	seed, faults := cmd.Flags().Changed("chaos-seed"), cmd.Flags().Changed("chaos-faults")
	switch {
	case faults && !seed:
		return nil, cli.Usagef("--chaos-faults needs --chaos-seed: the seed draws the faults")
	case !seed:
		return nil, nil
	}
	co := &simulate.ChaosOptions{Seed: o.chaosSeed, Kinds: simulate.SimulateKinds}
	if faults {
		kinds, err := simulate.ParseChaosKinds(o.chaosFaults)
		if err != nil {
			return nil, cli.Usagef("--chaos-faults %q: %v", o.chaosFaults, err)
		}
		co.Kinds = kinds
	}
	return co, nil
}

func kindsHelp() string {
	var s []string
	for _, k := range simulate.SimulateKinds {
		s = append(s, string(k))
	}
	return strings.Join(s, ",")
}

func (o *options) writeReport(out io.Writer, rep *simulate.Report, dir string) error {
	rep.WriteSummary(out)
	jsonPath, htmlPath := filepath.Join(dir, "report.json"), filepath.Join(dir, "report.html")
	if err := rep.WriteJSON(jsonPath); err != nil {
		return err
	}
	if err := rep.WriteHTML(htmlPath); err != nil {
		return err
	}
	fmt.Fprintf(out, "\nReport: %s\n        %s\n", htmlPath, jsonPath)
	return nil
}
