package drain

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"go.yaml.in/yaml/v3"

	"github.com/nodeshepherd/nodeshepherd/pkg/configfile"
	"github.com/nodeshepherd/nodeshepherd/pkg/controller/drain/budget"
	"github.com/nodeshepherd/nodeshepherd/pkg/controller/drain/rules"
	"github.com/nodeshepherd/nodeshepherd/pkg/controller/drain/window"
	"github.com/nodeshepherd/nodeshepherd/pkg/kube"
)

// SafeToEvictAnnotation=false protects a pod from eviction, always, as
// cluster-autoscaler and Draino do.
const SafeToEvictAnnotation = "cluster-autoscaler.kubernetes.io/safe-to-evict"

// Config holds the drain controller's settings. Flag names follow Draino's
// where Draino has the setting.
type Config struct {
	// Conditions in Draino's syntax (any of them), from --drain-condition.
	Conditions []string
	// File is a DrainRules YAML file giving the conditions and node selection
	// instead of the flags.
	File string
	// NodeSelector is a label selector; NodeExpression a CEL expression over
	// `node`. Both must select a node for the rules to apply to it.
	NodeSelector   string
	NodeExpression string

	SkipDrain             bool
	EvictDaemonSetPods    bool
	EvictStatefulSetPods  bool
	EvictLocalStoragePods bool
	EvictUnreplicatedPods bool
	// ProtectedPodAnnotations are KEY or KEY=VALUE; pods carrying one are
	// never evicted (safe-to-evict=false is always among them).
	ProtectedPodAnnotations []string

	MaxGracePeriod time.Duration
	// AllowZeroGracePeriod must be set for a MaxGracePeriod under a second,
	// which gives evicted pods a grace period of 0: no time to stop.
	AllowZeroGracePeriod bool
	DrainTimeout         time.Duration
	// RetryBackoff is the wait before retrying a failed drain, doubled after
	// each further failure up to MaxRetryBackoff.
	RetryBackoff time.Duration
	// UncordonAfter is how long no rule must match before the controller
	// uncordons a node it cordoned (anti-flap).
	UncordonAfter time.Duration
	// ForceAfter, when positive, deletes pods whose eviction a
	// PodDisruptionBudget has refused for this long, for every rule that sets
	// no force-after of its own. Off (0) by default.
	ForceAfter time.Duration
	// MoveBeforeEvict: a pod whose eviction a PodDisruptionBudget refuses
	// and whose Deployment may surge is replaced first (move.go); a
	// Namespace's or Deployment's nodeshepherd.io/move-before-evict wins.
	MoveBeforeEvict bool
	// Windows are weekly maintenance windows ("Mon-Fri 22:00-06:00") in
	// WindowTimeZone: drains start only inside one. Cordons are immediate.
	Windows        []string
	WindowTimeZone string

	Budget budget.Limits
	// UnhealthyZoneThreshold is shared with the node lifecycle controller:
	// zones are classified the same way for the circuit breaker.
	UnhealthyZoneThreshold float32
	// ResyncPeriod re-evaluates every node, as a safety net for timers.
	ResyncPeriod time.Duration
	// StartHold is how long after it starts (a process start, a new
	// leader) the controller waits before its first new cordon or drain,
	// then reads every node afresh: a cordon or drain schedule that a
	// previous leader (or this process before a restart) had in flight
	// lands meanwhile, and is counted by the budgets (docs/drain.md,
	// "Budgets across a leader change").
	StartHold time.Duration
	DryRun    bool
}

// DefaultStartHold covers a previous leader's last writes: they were sent
// before it lost the Lease, so before this process could take it, and each
// was given up by its client at the latest kube.WriteTimeout after it was
// sent (or when its process stopped leading, earlier).
const DefaultStartHold = kube.WriteTimeout

// MaxRetryBackoff caps the doubling of RetryBackoff.
const MaxRetryBackoff = time.Hour

// DefaultConfig returns the defaults: Draino's grace and timeout, one drain at
// a time, at most 10 % of the selected nodes cordoned, the breaker at 45 %.
func DefaultConfig() Config {
	return Config{
		MaxGracePeriod: 8 * time.Minute, DrainTimeout: 8*time.Minute + 30*time.Second,
		RetryBackoff: 2 * time.Minute, UncordonAfter: 5 * time.Minute,
		Budget:                 budget.Limits{MaxConcurrentDrains: 1, MaxCordonedNodes: "10%", MaxUnhealthyNodes: "45%"},
		UnhealthyZoneThreshold: 0.55, ResyncPeriod: 30 * time.Second, WindowTimeZone: "UTC",
		StartHold: DefaultStartHold,
	}
}

// AddFlags registers the drain flags (--max-unhealthy-nodes and
// --unhealthy-zone-threshold are shared settings: descriptor.Shared).
func (c *Config) AddFlags(fs *pflag.FlagSet) {
	fs.StringArrayVar(&c.Conditions, "drain-condition", c.Conditions, "Node condition that makes the drain controller cordon and drain a node, in Draino's syntax: TYPE, TYPE=STATUS or TYPE=STATUS,MIN_DURATION (e.g. KernelDeadlock=True,10m). Repeat for any-of.")
	fs.StringVar(&c.File, "drain-rules", c.File, "YAML file (kind: DrainRules) with the drain conditions and node selection, instead of --drain-condition/--drain-node-selector/--drain-node-expression.")
	fs.StringVar(&c.NodeSelector, "drain-node-selector", c.NodeSelector, "Label selector of the nodes the drain controller may act on (e.g. pool in (batch,web)); empty selects every node.")
	fs.StringVar(&c.NodeExpression, "drain-node-expression", c.NodeExpression, "CEL expression over the Node (the variable node) that must also be true for a node to be acted on (e.g. node.metadata.labels[\"pool\"] == \"batch\").")
	fs.BoolVar(&c.SkipDrain, "skip-drain", c.SkipDrain, "Cordon matching nodes but do not drain them.")
	fs.BoolVar(&c.EvictDaemonSetPods, "evict-daemonset-pods", c.EvictDaemonSetPods, "Evict pods owned by a DaemonSet (skipped by default).")
	fs.BoolVar(&c.EvictStatefulSetPods, "evict-statefulset-pods", c.EvictStatefulSetPods, "Evict pods owned by a StatefulSet (skipped by default).")
	fs.BoolVar(&c.EvictLocalStoragePods, "evict-emptydir-pods", c.EvictLocalStoragePods, "Evict pods with emptyDir or hostPath volumes (skipped by default: their data is lost).")
	fs.BoolVar(&c.EvictUnreplicatedPods, "evict-unreplicated-pods", c.EvictUnreplicatedPods, "Evict pods without a controller (skipped by default: nothing recreates them).")
	fs.StringArrayVar(&c.ProtectedPodAnnotations, "protected-pod-annotation", c.ProtectedPodAnnotations, "KEY or KEY=VALUE: never evict pods carrying this annotation. "+SafeToEvictAnnotation+"=false always protects. Repeatable.")
	fs.DurationVar(&c.MaxGracePeriod, "max-grace-period", c.MaxGracePeriod, "Longest termination grace period given to an evicted pod: min(the pod's, this).")
	fs.BoolVar(&c.MoveBeforeEvict, "drain-move-before-evict", c.MoveBeforeEvict, "When a PodDisruptionBudget allows no disruption of a Deployment's pod, make its replacement first: scale the Deployment up by its pods on the node (at most its maxSurge), wait until the new pods are available, scale back so that its ReplicaSet deletes the pods on the node (pod-deletion-cost). Never for Deployments a HorizontalPodAutoscaler scales (the event says what unblocks the drain) nor for those whose pods share a ReadWriteOnce or ReadWriteOncePod PersistentVolumeClaim. A Namespace's or Deployment's annotation "+AnnotationMoveBeforeEvict+"=true or =false wins.")
	fs.BoolVar(&c.AllowZeroGracePeriod, "allow-zero-grace-period", c.AllowZeroGracePeriod, "Allow a --max-grace-period under a second, which evicts pods with a grace period of 0 (killed at once, as a force delete). Refused without this flag.")
	fs.DurationVar(&c.DrainTimeout, "drain-timeout", c.DrainTimeout, "Time a drain may take, from its start until every pod is gone; then it fails and is retried (Draino: --max-grace-period plus --eviction-headroom).")
	fs.DurationVar(&c.RetryBackoff, "drain-retry-backoff", c.RetryBackoff, "Wait before retrying a failed drain, doubled after each failure up to 1h. The draino/drain-retry=true node annotation retries at once.")
	fs.DurationVar(&c.ForceAfter, "drain-force-after", c.ForceAfter, "Escalation, off by default (0), at least 1m: once every eviction of a pod has been refused by a PodDisruptionBudget for this long without a break (an accepted eviction, another error, a rollout of its workload or a new drain start the count again), delete the pod with its own grace period, bypassing the PodDisruptionBudget, with a Warning event per pod; a drain past --drain-timeout that only this can end goes on until then (DrainBlocked). Applies to rules without their own force-after= option. Never deletes pods protected by annotation; with --dry-run only reported.")
	fs.StringArrayVar(&c.Windows, "drain-window", c.Windows, "Weekly maintenance window in which drains may start, DAYS START-END in --drain-window-time-zone (e.g. \"Mon-Fri 22:00-06:00\", \"Sat,Sun 00:00-24:00\", \"* 01:00-05:00\"). Repeat for any-of; none means any time. Cordons are not delayed.")
	fs.StringVar(&c.WindowTimeZone, "drain-window-time-zone", c.WindowTimeZone, "IANA time zone of --drain-window (e.g. Europe/Paris).")
	fs.DurationVar(&c.UncordonAfter, "uncordon-after", c.UncordonAfter, "Uncordon a node the drain controller cordoned once no condition has matched for this long. Nodes cordoned by anyone else are never uncordoned.")
	fs.IntVar(&c.Budget.MaxConcurrentDrains, "max-concurrent-drains", c.Budget.MaxConcurrentDrains, "Drains in flight at most (per group with --group-by-label); 0 means no limit.")
	fs.StringVar(&c.Budget.MaxCordonedNodes, "max-cordoned-nodes", c.Budget.MaxCordonedNodes, "Nodes the drain controller may have cordoned at once: a count or a percentage of the selected nodes (per group with --group-by-label; a percentage allows at least one); empty means no limit.")
	fs.StringVar(&c.Budget.GroupByLabel, "group-by-label", c.Budget.GroupByLabel, "Apply --max-concurrent-drains and --max-cordoned-nodes within each group of nodes sharing this label's value (e.g. topology.kubernetes.io/zone or a node-pool label).")
	fs.DurationVar(&c.Budget.DrainBuffer, "drain-buffer", c.Budget.DrainBuffer, "Least time between two drain starts, cluster-wide (Draino's default was 10m).")
	fs.DurationVar(&c.StartHold, "drain-start-hold", c.StartHold, "After the drain controller starts (a process start or a new leader), wait this long before the first new cordon or drain, then read every node afresh, so that a cordon or drain a previous leader had in flight is counted by the budgets. Resumed drains and uncordons do not wait; 0 turns the hold off.")
}

// Validate checks the settings; Compile also parses the rules.
func (c *Config) Validate() error {
	_, err := c.Compile()
	return err
}

// Compile parses the conditions and selection (from the flags or the file)
// and checks every other setting, naming the flag at fault.
func (c *Config) Compile() (*rules.Rules, error) {
	var errs []error
	r, err := c.rules()
	if err != nil {
		errs = append(errs, err)
	}
	for _, a := range c.ProtectedPodAnnotations {
		if k, _, _ := strings.Cut(a, "="); k == "" {
			errs = append(errs, fmt.Errorf("--protected-pod-annotation %q: the annotation key is missing; write KEY or KEY=VALUE", a))
		}
	}
	for name, d := range map[string]time.Duration{"--max-grace-period": c.MaxGracePeriod, "--drain-timeout": c.DrainTimeout,
		"--drain-retry-backoff": c.RetryBackoff, "--uncordon-after": c.UncordonAfter, "--drain-force-after": c.ForceAfter,
		"--drain-start-hold": c.StartHold} {
		if d < 0 {
			errs = append(errs, fmt.Errorf("%s must not be negative, got %v", name, d))
		}
	}
	if c.MaxGracePeriod >= 0 && c.MaxGracePeriod < time.Second && !c.AllowZeroGracePeriod {
		errs = append(errs, fmt.Errorf("--max-grace-period %v is under a second: evicted pods would get a grace period of 0 and be killed at once, as by a force delete; give at least 1s, or add --allow-zero-grace-period if that is what you want", c.MaxGracePeriod))
	}
	if err := rules.CheckForceAfter("--drain-force-after", c.ForceAfter); err != nil {
		errs = append(errs, err)
	}
	if c.DrainTimeout == 0 {
		errs = append(errs, errors.New("--drain-timeout must be positive (a drain blocked by a PodDisruptionBudget would otherwise never end)"))
	}
	errs = append(errs, c.Budget.Validate())
	return r, errors.Join(errs...)
}

// Configured says whether any rule source was given: the drain controller
// runs under --controllers=* only then (or when it is named, or run for the
// remediation controller). Without rules it drains only the nodes
// remediation requests ask it to.
func (c *Config) Configured() bool { return len(c.Conditions) > 0 || c.File != "" }

func (c *Config) rules() (*rules.Rules, error) {
	if c.File != "" {
		if len(c.Conditions) > 0 || c.NodeSelector != "" || c.NodeExpression != "" {
			return nil, errors.New("--drain-rules replaces --drain-condition, --drain-node-selector and --drain-node-expression; give one or the other")
		}
		r, err := LoadRules(c.File)
		if err != nil {
			return nil, err
		}
		if r.Windows != nil && len(c.Windows) > 0 {
			return nil, fmt.Errorf("--drain-rules %s has windows, and so has --drain-window; give them in one place", c.File)
		}
		if r.Windows == nil {
			if r.Windows, err = window.Parse(c.Windows, c.WindowTimeZone); err != nil {
				return nil, fmt.Errorf("--drain-window/--drain-window-time-zone: %w", err)
			}
		}
		return r, nil
	}
	var conds []rules.Condition
	if len(c.Conditions) > 0 {
		// None is no rule: the controller then acts on remediation requests only.
		var err error
		if conds, err = rules.ParseConditions(c.Conditions); err != nil {
			return nil, fmt.Errorf("--drain-condition: %w", err)
		}
	}
	sel, err := rules.NewSelector(c.NodeSelector, c.NodeExpression)
	if err != nil {
		return nil, fmt.Errorf("--drain-node-selector/--drain-node-expression: %w", err)
	}
	win, err := window.Parse(c.Windows, c.WindowTimeZone)
	if err != nil {
		return nil, fmt.Errorf("--drain-window/--drain-window-time-zone: %w", err)
	}
	return &rules.Rules{Conditions: conds, Selector: sel, Windows: win}, nil
}

// RulesKind is the kind of a drain rules file.
const RulesKind = "DrainRules"

// rulesFile is the YAML form of the rules:
//
//	apiVersion: nodeshepherd.io/v1alpha1
//	kind: DrainRules
//	conditions:
//	- KernelDeadlock=True,10m          # Draino's syntax, or:
//	- {type: Ready, status: Unknown, minDuration: 30m}
//	nodeSelector: pool in (batch,web)
//	nodeExpression: 'node.metadata.labels["tier"] != "critical"'
//	windows: ["Mon-Fri 22:00-06:00"]   # optional; drains start only inside
//	timeZone: Europe/Paris
type rulesFile struct {
	configfile.TypeMeta `yaml:",inline"`
	Conditions          []fileCondition `yaml:"conditions"`
	NodeSelector        string          `yaml:"nodeSelector"`
	NodeExpression      string          `yaml:"nodeExpression"`
	Windows             []fileWindow    `yaml:"windows"`
	TimeZone            fileTimeZone    `yaml:"timeZone"`
}

// fileWindow and fileTimeZone are checked as they are read, so that their
// errors name file:line.
type fileWindow struct{ spec string }

func (f *fileWindow) UnmarshalYAML(node *yaml.Node) error {
	if node.Kind != yaml.ScalarNode {
		return configfile.LineError(node, "a window is a string DAYS START-END, e.g. \"Mon-Fri 22:00-06:00\"")
	}
	if _, err := window.ParseWindow(node.Value); err != nil {
		return configfile.LineError(node, "%v", err)
	}
	f.spec = node.Value
	return nil
}

type fileTimeZone struct{ name string }

func (f *fileTimeZone) UnmarshalYAML(node *yaml.Node) error {
	if _, err := window.Parse([]string{"* 00:00-24:00"}, node.Value); err != nil {
		return configfile.LineError(node, "%v", err)
	}
	f.name = node.Value
	return nil
}

type fileCondition struct{ rules.Condition }

// UnmarshalYAML accepts Draino's string form or a mapping with the same meaning.
func (f *fileCondition) UnmarshalYAML(node *yaml.Node) error {
	if node.Kind == yaml.ScalarNode {
		c, err := rules.ParseCondition(node.Value)
		if err != nil {
			return configfile.LineError(node, "%v", err)
		}
		f.Condition = c
		return nil
	}
	var m struct {
		Type        string `yaml:"type"`
		Status      string `yaml:"status"`
		MinDuration string `yaml:"minDuration"`
		ForceAfter  string `yaml:"forceAfter"`
	}
	if err := configfile.DecodeStrict(node, &m); err != nil {
		return err
	}
	spec := m.Type
	if m.Status != "" || m.MinDuration != "" {
		spec += "=" + m.Status
		if m.Status == "" {
			spec += "True"
		}
	}
	if m.MinDuration != "" || m.ForceAfter != "" {
		spec += "," + m.MinDuration
		if m.MinDuration == "" {
			spec += "0s"
		}
	}
	if m.ForceAfter != "" {
		spec += ",force-after=" + m.ForceAfter
	}
	c, err := rules.ParseCondition(spec)
	if err != nil {
		return configfile.LineError(node, "%v", err)
	}
	f.Condition = c
	return nil
}

// LoadRules reads a DrainRules file; errors name file:line.
func LoadRules(path string) (*rules.Rules, error) {
	var f rulesFile
	if err := configfile.Load(path, RulesKind, &f); err != nil {
		return nil, fmt.Errorf("--drain-rules: %w", err)
	}
	if len(f.Conditions) == 0 {
		return nil, fmt.Errorf("--drain-rules: %s: conditions: name at least one, e.g. - KernelDeadlock=True,10m", path)
	}
	r := &rules.Rules{}
	for _, c := range f.Conditions {
		r.Conditions = append(r.Conditions, c.Condition)
	}
	sel, err := rules.NewSelector(f.NodeSelector, f.NodeExpression)
	if err != nil {
		return nil, fmt.Errorf("--drain-rules: %s: %w", path, err)
	}
	r.Selector = sel
	if len(f.Windows) > 0 {
		specs := make([]string, len(f.Windows))
		for i, w := range f.Windows {
			specs[i] = w.spec
		}
		if r.Windows, err = window.Parse(specs, f.TimeZone.name); err != nil {
			return nil, fmt.Errorf("--drain-rules: %s: %w", path, err)
		}
	} else if f.TimeZone.name != "" {
		return nil, fmt.Errorf("--drain-rules: %s: timeZone is given without windows", path)
	}
	return r, nil
}
