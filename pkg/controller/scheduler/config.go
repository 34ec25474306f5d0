package scheduler

import (
	"errors"
	"fmt"
	"time"

	"github.com/spf13/pflag"
)

// Config holds the scheduler's settings; defaults are kube-scheduler's.
type Config struct {
	// SchedulerName selects the pods to schedule (spec.schedulerName).
	SchedulerName string
	// PercentageOfNodesToScore: 0 is kube-scheduler's adaptive default
	// (50 - nodes/125 %, at least 5 %, at least 100 nodes).
	PercentageOfNodesToScore int32
	Parallelism              int
	PodInitialBackoff        time.Duration
	PodMaxBackoff            time.Duration
	// PodMaxInUnschedulablePods is how long a pod may sleep in the
	// unschedulable pool before it is retried without an event.
	PodMaxInUnschedulablePods   time.Duration
	MinCandidateNodesPercentage int32
	MinCandidateNodesAbsolute   int32
	// DefaultPodTopologySpread: the spread constraints of pods without
	// any (see parseSpreadDefaults).
	DefaultPodTopologySpread string
	// NodeResourcesFit's arguments (see parseFitArgs): the scoring
	// strategy, its resources and weights, RequestedToCapacityRatio's
	// shape, and the extended resources the filter ignores. Each value
	// alone is checked as its flag is set (fitFlag), the values together
	// by Validate.
	FitStrategy              string
	FitResources             string
	FitShape                 string
	FitIgnoredResources      string
	FitIgnoredResourceGroups string
	// KubeSchedulerConfig is a KubeSchedulerConfiguration file whose
	// profile for SchedulerName gives NodeResourcesFit's args in place of
	// the Fit* flags (see loadKubeSchedulerConfig).
	KubeSchedulerConfig string
}

func (c *Config) fitArgs() (*fitArgs, error) {
	if c.KubeSchedulerConfig == "" {
		return parseFitArgs(c.FitStrategy, c.FitResources, c.FitShape, c.FitIgnoredResources, c.FitIgnoredResourceGroups)
	}
	// One place for the settings: a flag next to the file would be
	// overridden by it, or override it, silently either way.
	def := DefaultConfig()
	if c.FitStrategy != def.FitStrategy || c.FitResources != def.FitResources || c.FitShape != "" ||
		c.FitIgnoredResources != "" || c.FitIgnoredResourceGroups != "" {
		return nil, errors.New("--kube-scheduler-config gives NodeResourcesFit's args: leave out the --node-resources-fit-* flags (and their keys in the configuration file)")
	}
	a, err := loadKubeSchedulerConfig(c.KubeSchedulerConfig, c.SchedulerName)
	if err != nil {
		return nil, fmt.Errorf("--kube-scheduler-config: %w", err)
	}
	return a, nil
}

// DefaultSchedulerName is the name pods ask for to be scheduled by
// nodeshepherd next to kube-scheduler.
const DefaultSchedulerName = "nodeshepherd-scheduler"

// DefaultConfig returns kube-scheduler's defaults under nodeshepherd's name.
func DefaultConfig() Config {
	return Config{SchedulerName: DefaultSchedulerName, Parallelism: 16, PodInitialBackoff: time.Second, PodMaxBackoff: 10 * time.Second,
		PodMaxInUnschedulablePods: 5 * time.Minute, MinCandidateNodesPercentage: 10, MinCandidateNodesAbsolute: 100,
		DefaultPodTopologySpread: SpreadDefaultsSystem, FitStrategy: StrategyLeastAllocated, FitResources: "cpu=1,memory=1"}
}

// AddFlags registers the scheduler's flags.
func (c *Config) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&c.SchedulerName, "scheduler-name", c.SchedulerName, "Schedule the pods whose spec.schedulerName is this; default-scheduler makes nodeshepherd replace kube-scheduler.")
	fs.Int32Var(&c.PercentageOfNodesToScore, "percentage-of-nodes-to-score", c.PercentageOfNodesToScore, "Stop looking for feasible nodes after this share of the cluster (at least 100 nodes); 0 is kube-scheduler's adaptive default (50% minus 1% per 125 nodes, at least 5%).")
	fs.IntVar(&c.Parallelism, "scheduler-parallelism", c.Parallelism, "Goroutines that filter nodes and evaluate preemption candidates in parallel.")
	fs.DurationVar(&c.PodInitialBackoff, "pod-initial-backoff", c.PodInitialBackoff, "Backoff after a pod's first failed scheduling attempt, doubled per attempt.")
	fs.DurationVar(&c.PodMaxBackoff, "pod-max-backoff", c.PodMaxBackoff, "Longest backoff between a pod's scheduling attempts.")
	fs.DurationVar(&c.PodMaxInUnschedulablePods, "pod-max-in-unschedulable-pods-duration", c.PodMaxInUnschedulablePods, "Retry an unschedulable pod after this long even when no cluster event woke it.")
	fs.Int32Var(&c.MinCandidateNodesPercentage, "min-candidate-nodes-percentage", c.MinCandidateNodesPercentage, "Preemption dry-runs at least this percentage of the nodes where preemption may help (DefaultPreemptionArgs).")
	fs.Int32Var(&c.MinCandidateNodesAbsolute, "min-candidate-nodes-absolute", c.MinCandidateNodesAbsolute, "Preemption dry-runs at least this many nodes (DefaultPreemptionArgs).")
	fs.Var(fitFlag{&c.FitStrategy, checked(parseFitStrategy)}, "node-resources-fit-strategy", "How NodeResourcesFit scores a node by the requests it would hold (NodeResourcesFitArgs scoringStrategy.type): LeastAllocated (spread), MostAllocated (pack), or RequestedToCapacityRatio (by --node-resources-fit-shape).")
	fs.Var(fitFlag{&c.FitResources, checked(parseFitResources)}, "node-resources-fit-resources", "The resources NodeResourcesFit scores and their weights (scoringStrategy.resources): <resource>=<weight>,... with weights 1-100; an extended resource (or hugepages) counts only for pods that request it, ephemeral-storage for every pod.")
	fs.Var(fitFlag{&c.FitShape, checked(parseFitShape)}, "node-resources-fit-shape", "RequestedToCapacityRatio's function (scoringStrategy.requestedToCapacityRatio.shape): <utilization>=<score>,... with utilization 0-100 increasing and score 0-10, e.g. 0=10,100=0 to spread or 0=0,100=10 to pack.")
	fs.Var(fitFlag{&c.FitIgnoredResources, checked(parseFitIgnored)}, "node-resources-fit-ignored-resources", "Extended resources the NodeResourcesFit filter ignores (ignoredResources), comma-separated: their requests never keep a pod off a node.")
	fs.Var(fitFlag{&c.FitIgnoredResourceGroups, checked(parseFitIgnoredGroups)}, "node-resources-fit-ignored-resource-groups", "Groups of extended resources the NodeResourcesFit filter ignores (ignoredResourceGroups), the part before the /, comma-separated (example.com ignores example.com/gpu).")
	fs.StringVar(&c.KubeSchedulerConfig, "kube-scheduler-config", c.KubeSchedulerConfig, "A KubeSchedulerConfiguration file (kubescheduler.config.k8s.io/v1) whose profile for --scheduler-name gives NodeResourcesFit's args (pluginConfig, NodeResourcesFitArgs), defaulted and validated as kube-scheduler does, in place of the --node-resources-fit-* flags; any other setting in the file is refused, naming the flag to use instead.")
	fs.StringVar(&c.DefaultPodTopologySpread, "default-pod-topology-spread", c.DefaultPodTopologySpread, "Topology spread constraints of pods that set none, selecting the pods of their Services, ReplicaSets, StatefulSets and ReplicationControllers (PodTopologySpreadArgs): system (kube-scheduler's: kubernetes.io/hostname:3 and topology.kubernetes.io/zone:5, ScheduleAnyway), none, or a list of <topologyKey>:<maxSkew>[:ScheduleAnyway|DoNotSchedule].")
}

// explainFlags are the flags that change whether a node fits a pod or what
// preemption would do: `explain pod` takes them to judge as the scheduler
// does.
var explainFlags = []string{"node-resources-fit-ignored-resources", "node-resources-fit-ignored-resource-groups",
	"kube-scheduler-config", "default-pod-topology-spread", "min-candidate-nodes-percentage", "min-candidate-nodes-absolute"}

// AddExplainFlags registers explainFlags, as AddFlags does.
func (c *Config) AddExplainFlags(fs *pflag.FlagSet) {
	all := pflag.NewFlagSet("scheduler", pflag.ContinueOnError)
	c.AddFlags(all)
	for _, name := range explainFlags {
		fs.AddFlag(all.Lookup(name))
	}
}

// Validate checks the settings as kube-scheduler validates its configuration.
func (c *Config) Validate() error {
	var errs []error
	if c.SchedulerName == "" {
		errs = append(errs, errors.New("--scheduler-name must not be empty"))
	}
	if c.PercentageOfNodesToScore < 0 || c.PercentageOfNodesToScore > 100 {
		errs = append(errs, fmt.Errorf("--percentage-of-nodes-to-score must be in [0, 100], got %d", c.PercentageOfNodesToScore))
	}
	if c.Parallelism < 1 {
		errs = append(errs, fmt.Errorf("--scheduler-parallelism must be at least 1, got %d", c.Parallelism))
	}
	if c.PodInitialBackoff <= 0 || c.PodMaxBackoff < c.PodInitialBackoff {
		errs = append(errs, fmt.Errorf("--pod-initial-backoff (%v) must be positive and not above --pod-max-backoff (%v)", c.PodInitialBackoff, c.PodMaxBackoff))
	}
	if c.PodMaxInUnschedulablePods <= 0 {
		errs = append(errs, fmt.Errorf("--pod-max-in-unschedulable-pods-duration must be positive, got %v", c.PodMaxInUnschedulablePods))
	}
	if c.MinCandidateNodesPercentage < 0 || c.MinCandidateNodesPercentage > 100 {
		errs = append(errs, fmt.Errorf("--min-candidate-nodes-percentage must be in [0, 100], got %d", c.MinCandidateNodesPercentage))
	}
	if c.MinCandidateNodesAbsolute < 0 {
		errs = append(errs, fmt.Errorf("--min-candidate-nodes-absolute must be at least 0, got %d", c.MinCandidateNodesAbsolute))
	}
	if c.MinCandidateNodesPercentage == 0 && c.MinCandidateNodesAbsolute == 0 {
		errs = append(errs, errors.New("--min-candidate-nodes-percentage and --min-candidate-nodes-absolute cannot both be zero"))
	}
	if _, err := parseSpreadDefaults(c.DefaultPodTopologySpread); err != nil {
		errs = append(errs, err)
	}
	if _, err := c.fitArgs(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// numFeasibleNodesToFind is how many feasible nodes to find before scoring.
func (c *Config) numFeasibleNodesToFind(n int) int {
	const minFeasible = 100
	if n < minFeasible {
		return n
	}
	pct := int(c.PercentageOfNodesToScore)
	if pct == 0 {
		pct = max(50-n/125, 5)
	}
	return max(n*pct/100, minFeasible)
}
