// Package simulate runs scenarios: a real local control plane with fake
// nodes, nodeshepherd's controllers (or kube-controller-manager's and
// kube-scheduler, to compare), a scripted timeline of failures, and a report
// of what happened, with the scenario's expectations checked.
package simulate

import (
	"fmt"
	"maps"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/nodeshepherd/nodeshepherd/pkg/configfile"
	"github.com/nodeshepherd/nodeshepherd/pkg/controller/outofservice"
	"github.com/nodeshepherd/nodeshepherd/pkg/fakecsi"
	"github.com/nodeshepherd/nodeshepherd/pkg/fakenode"
	rem "github.com/nodeshepherd/nodeshepherd/pkg/remediation"
)

// Kind is the kind of a scenario file.
const Kind = "Scenario"

// Scenario is a rehearsal: the cluster, its workloads, what goes wrong when,
// and what must hold. Durations are cluster time; --time-scale divides them.
type Scenario struct {
	configfile.TypeMeta `yaml:",inline"`
	Name                string `yaml:"name"`
	Description         string `yaml:"description"`
	// Duration is how long the timeline runs, from the moment every workload
	// is ready.
	Duration Duration `yaml:"duration"`
	// Controllers are the configuration file's controller sections, with
	// its keys, e.g. nodeLifecycle: {nodeMonitorGracePeriod: 40s}. Settings
	// kube-controller-manager also has apply to the upstream run as well.
	Controllers Settings      `yaml:"controllers"`
	Cluster     Cluster       `yaml:"cluster"`
	Workloads   []Workload    `yaml:"workloads"`
	Timeline    []Step        `yaml:"timeline"`
	Expect      []Expectation `yaml:"expect"`
	// Companion runs nodeshepherd as on a managed cluster: next to
	// kube-controller-manager's own node lifecycle, taint eviction and node
	// IPAM, and kube-scheduler, with only the controllers that can run there
	// (readinessrestore, and drain with drain conditions); docs/companion.md.
	Companion bool `yaml:"companion"`
	// MaxTimeScale is the largest --time-scale at which the expectations
	// hold (0: any up to simulate's limit). Some delays are fixed in real
	// time and --time-scale cannot shrink them (kube-controller-manager's
	// pod garbage collector looks every 20 s, its attach-detach controller
	// reconciles on its own period): at a large scale they stretch the
	// cluster-time figures past the bounds a scenario states.
	MaxTimeScale float64 `yaml:"maxTimeScale"`
	// MaxTimeScaleWhy says which such delay sets MaxTimeScale; simulate
	// prints it when it refuses a larger --time-scale.
	MaxTimeScaleWhy string `yaml:"maxTimeScaleWhy"`
	// RemediationPolicies are RemediationPolicy objects (docs/remediation.md),
	// inline or {file: PATH}: nodeshepherd's run installs their CRD, creates
	// them (durations divided by the time scale) and runs the remediation
	// controller, and with it drain, with the fake cloud provider, which
	// the fake nodes' machines answer (reboots, replacements).
	RemediationPolicies []PolicyEntry `yaml:"remediationPolicies"`

	path string
}

// CheckTimeScale refuses a time scale above the scenario's maxTimeScale,
// naming the file's line and why the scenario states it, and one at which
// a remediation policy's divided timeouts are no longer valid.
func (s *Scenario) CheckTimeScale(scale float64) error {
	if s.MaxTimeScale == 0 || scale <= s.MaxTimeScale {
		return s.checkPolicyScale(scale)
	}
	line := 1
	if root, err := s.rootNode(); err == nil {
		if n := field(root, "maxTimeScale"); n != nil {
			line = n.Line
		}
	}
	why := ""
	if s.MaxTimeScaleWhy != "" {
		why = " (" + strings.TrimSpace(s.MaxTimeScaleWhy) + ")"
	}
	return fmt.Errorf("%s:%d: --time-scale %g is above the scenario's maxTimeScale %g: its expectations hold only up to that scale%s; run it with --time-scale %g or less",
		s.path, line, scale, s.MaxTimeScale, why, s.MaxTimeScale)
}

// Cluster is the fake nodes: zones with node counts, or node groups (zones
// are then the groups' zones), node capacity and the fake kubelet's timing.
type Cluster struct {
	// NodeKind is what runs the nodes: fake (pkg/fakenode, the default) or
	// hollow (kubemark's hollow nodes, the real kubelet code: hollow.go).
	NodeKind string `yaml:"nodeKind"`
	Zones    []Zone `yaml:"zones"`
	// NodeGroups are node pools, each in one zone with a shape, labels and
	// taints of its own, as `nodeshepherd scenario snapshot` writes a live
	// cluster's nodes; Node then holds what every group's nodes share.
	NodeGroups []NodeGroup `yaml:"nodeGroups"`
	Node       NodeShape   `yaml:"node"`
	Kubelet    KubeletSpec `yaml:"kubelet"`
	// Machines is how long the fake cloud provider's repairs take.
	Machines MachineSpec `yaml:"machines"`
	// Images is the table of the container images nodes report in
	// node.status.images, each once with its size; node.images and a
	// group's images name them (images.go).
	Images []Image `yaml:"images"`
	// Devices are fake DRA devices the nodes publish (devices.go).
	Devices []DeviceSet `yaml:"devices"`
}

// MachineSpec is the fake cloud's repair timing (fakenode defaults when
// omitted), cluster time: a rebooted machine is off for RebootDowntime; a
// replaced machine's Node is gone for ReplaceDowntime before the new one
// registers.
type MachineSpec struct {
	RebootDowntime  Duration `yaml:"rebootDowntime"`
	ReplaceDowntime Duration `yaml:"replaceDowntime"`
	// IgnorePowerOff: the fake cloud accepts a Fence step's power-off
	// request but the machines run on (a BMC that fails silently), and it
	// goes on answering that they run: the Fence is vetoed.
	IgnorePowerOff bool `yaml:"ignorePowerOff"`
}

// NodeGroup is Nodes identical nodes of one zone.
type NodeGroup struct {
	Name   string            `yaml:"name"`
	Zone   string            `yaml:"zone"`
	Nodes  int               `yaml:"nodes"`
	Shape  GroupShape        `yaml:"shape"`
	Labels map[string]string `yaml:"labels"`
	Taints []Taint           `yaml:"taints"`
	// Images name images of cluster.images the group's nodes report,
	// besides node.images.
	Images []string `yaml:"images"`

	// devices are the DRA devices a snapshot found on the group's nodes
	// (written as cluster.devices).
	devices []fakenode.DeviceSet
}

// GroupShape is a group's node capacity; omitted fields take cluster.node's.
type GroupShape struct {
	CPU     Quantity `yaml:"cpu"`
	Memory  Quantity `yaml:"memory"`
	MaxPods int      `yaml:"maxPods"`
}

// Taint is a node taint, as in a Node's spec.taints.
type Taint struct {
	Key    string         `yaml:"key"`
	Value  string         `yaml:"value"`
	Effect v1.TaintEffect `yaml:"effect"`
}

// Zone is a topology zone with its number of nodes.
type Zone struct {
	Name  string `yaml:"name"`
	Nodes int    `yaml:"nodes"`
}

// NodeShape is every node's capacity and extra labels.
type NodeShape struct {
	CPU     Quantity          `yaml:"cpu"`
	Memory  Quantity          `yaml:"memory"`
	MaxPods int               `yaml:"maxPods"`
	Labels  map[string]string `yaml:"labels"`
	// Images name images of cluster.images every node reports.
	Images []string `yaml:"images"`
}

// KubeletSpec is the fake kubelet's timing (kubelet defaults when omitted).
type KubeletSpec struct {
	LeaseDuration             Duration `yaml:"leaseDuration"`
	LeaseRenewInterval        Duration `yaml:"leaseRenewInterval"`
	NodeStatusUpdateFrequency Duration `yaml:"nodeStatusUpdateFrequency"`
	NodeStatusReportFrequency Duration `yaml:"nodeStatusReportFrequency"`
	PodStartDelay             Duration `yaml:"podStartDelay"`
	// EmulateStalePodStatus reproduces the kubelet 1.15 behaviour of seed
	// 002: pod statuses changed while the node was away are not re-posted.
	EmulateStalePodStatus bool `yaml:"emulateStalePodStatus"`
	// NodeStatusMaxImages is the kubelet's --node-status-max-images: a
	// node reports its largest images first, at most this many (0: the
	// kubelet's 50; -1: all).
	NodeStatusMaxImages int `yaml:"nodeStatusMaxImages"`
}

// Duration is a time.Duration written as "45s" or "10m" in YAML.
type Duration struct{ time.Duration }

// UnmarshalYAML parses Go duration syntax and names the line on error.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	v, err := time.ParseDuration(n.Value)
	if n.Kind != yaml.ScalarNode || err != nil {
		return configfile.LineError(n, "invalid duration %q: write a number with a unit, e.g. 45s, 5m or 1h30m", n.Value)
	}
	if v < 0 {
		return configfile.LineError(n, "duration %q must not be negative", n.Value)
	}
	d.Duration = v
	return nil
}

// MarshalJSON writes the Go duration string.
func (d Duration) MarshalJSON() ([]byte, error) { return []byte(strconv.Quote(d.String())), nil }

// UnmarshalJSON reads what MarshalJSON wrote, for readers of report.json.
func (d *Duration) UnmarshalJSON(b []byte) error {
	s, err := strconv.Unquote(string(b))
	if err != nil {
		return err
	}
	d.Duration, err = time.ParseDuration(s)
	return err
}

// Quantity is a resource quantity ("4", "500m", "16Gi").
type Quantity struct{ resource.Quantity }

// UnmarshalYAML parses a Kubernetes quantity and names the line on error.
func (q *Quantity) UnmarshalYAML(n *yaml.Node) error {
	v, err := resource.ParseQuantity(n.Value)
	if n.Kind != yaml.ScalarNode || err != nil {
		return configfile.LineError(n, "invalid quantity %q: write e.g. 4, 500m or 16Gi", n.Value)
	}
	q.Quantity = v
	return nil
}

// Target selects nodes: by name, by zone, by node group, or all (zone and
// group together: the group's nodes in that zone); Count keeps the first N
// (by name) of the selection, so that part of a zone or pool can fail.
type Target struct {
	Nodes []string `yaml:"nodes"`
	Zone  string   `yaml:"zone"`
	Group string   `yaml:"group"`
	All   bool     `yaml:"all"`
	Count int      `yaml:"count"`
}

// Step actions.
const (
	ActionPartition      = "partition"       // cut the nodes' API traffic, for `for:` or until heal
	ActionNetworkBlip    = "network-blip"    // a partition that must have `for:`
	ActionHeal           = "heal"            // end a partition
	ActionKubeletRestart = "kubelet-restart" // stop the kubelet, start it after `for:` (default at once)
	ActionKubeletStop    = "kubelet-stop"
	ActionKubeletStart   = "kubelet-start"
	ActionSetCondition   = "set-condition"   // condition: KernelDeadlock=True, cleared after `for:`
	ActionClearCondition = "clear-condition" // condition: KernelDeadlock
	ActionCordon         = "cordon"          // by hand, as kubectl cordon
	ActionUncordon       = "uncordon"
	ActionBurst          = "burst" // create a Deployment of high-priority pods
	// ActionMachineShutdown powers the nodes' machines off: heartbeats stop,
	// no pod deletion is ever confirmed (pods stay Terminating), the last
	// volumesInUse stays, and the fake cloud provider reports the machines
	// shut down; with for: they boot again (a new boot ID) when it ends.
	ActionMachineShutdown = "machine-shutdown"
	ActionMachineStart    = "machine-start"  // boot the machines again, with a new boot ID
	ActionMachineDelete   = "machine-delete" // the machines are gone for good: the fake cloud says so
	// ActionApplyPolicy edits one of the scenario's remediation policies:
	// policy: (a RemediationPolicy inline, or {file: PATH}) replaces the
	// spec, labels and annotations of the policy of its name, as kubectl
	// apply would. Only nodeshepherd's run has policies.
	ActionApplyPolicy = "apply-policy"
)

// Actions lists every step action, for errors and help.
var Actions = []string{ActionPartition, ActionNetworkBlip, ActionHeal, ActionKubeletRestart, ActionKubeletStop, ActionKubeletStart,
	ActionSetCondition, ActionClearCondition, ActionCordon, ActionUncordon, ActionBurst, ActionMachineShutdown, ActionMachineStart, ActionMachineDelete, ActionApplyPolicy}

// Step is one timeline event.
type Step struct {
	At        Duration `yaml:"at"`
	Action    string   `yaml:"action"`
	Target    `yaml:",inline"`
	For       Duration `yaml:"for"`
	Condition string   `yaml:"condition"`
	// SurvivesReboot (set-condition) keeps the condition through reboots of
	// the machine; without it a fresh boot reports it healthy. A replaced
	// machine never has it.
	SurvivesReboot bool   `yaml:"survivesReboot"`
	Burst          *Burst `yaml:"burst"`
	// Policy (apply-policy) is the policy's new version.
	Policy *PolicyEntry `yaml:"policy"`

	cond *fakenode.Condition
}

// Burst is a Deployment created by a burst step.
type Burst struct {
	Name              string   `yaml:"name"`
	Replicas          int32    `yaml:"replicas"`
	PriorityClassName string   `yaml:"priorityClassName"`
	CPU               Quantity `yaml:"cpu"`
	Memory            Quantity `yaml:"memory"`
}

// End is when the step's effect ends (its start when it has no duration).
func (s *Step) End() time.Duration { return s.At.Duration + s.For.Duration }

func (s *Step) String() string {
	var b strings.Builder
	b.WriteString(s.Action)
	if s.Condition != "" {
		b.WriteString(" " + s.Condition)
	}
	if s.SurvivesReboot {
		b.WriteString(" (survives reboots)")
	}
	if s.Burst != nil {
		fmt.Fprintf(&b, " %s: %d pods of %s", s.Burst.Name, s.Burst.Replicas, s.Burst.PriorityClassName)
	}
	if s.Policy != nil && len(s.Policy.policies) == 1 {
		p := &s.Policy.policies[0].policy
		var steps []string
		for _, st := range p.Spec.Steps {
			steps = append(steps, string(st.Action))
		}
		fmt.Fprintf(&b, " %s (steps %s)", p.Name, strings.Join(steps, ", "))
	}
	if t := s.Target.String(); t != "" {
		b.WriteString(" on " + t)
	}
	if s.For.Duration > 0 {
		b.WriteString(" for " + s.For.Duration.String())
	}
	return b.String()
}

func (t Target) String() string {
	var s string
	switch {
	case t.All:
		s = "all nodes"
	case t.Group != "" && t.Zone != "":
		s = "group " + t.Group + " in zone " + t.Zone
	case t.Group != "":
		s = "group " + t.Group
	case t.Zone != "":
		s = "zone " + t.Zone
	case len(t.Nodes) > 0:
		s = strings.Join(t.Nodes, ",")
	}
	if t.Count > 0 && s != "" {
		s = fmt.Sprintf("%d nodes of %s", t.Count, s)
	}
	return s
}

func (t Target) empty() bool { return !t.All && t.Zone == "" && t.Group == "" && len(t.Nodes) == 0 }

// Limits on a scenario's size: a scenario runs on this machine, and a typo
// (nodes: 50000) must be an error naming the limit, not an hour of setup.
const (
	MaxNodes    = 5000
	MaxPods     = 50000
	MaxSteps    = 1000
	MaxDuration = 24 * time.Hour
	// MaxTimeScale is the largest --time-scale simulate takes.
	MaxTimeScale = 100
)

// validName is what a scenario's name may be: one path element, safe as the
// report directory's name (no "/", no "..").
var validName = regexp.MustCompile(`^[a-z0-9]([a-z0-9._-]{0,61}[a-z0-9])?$`)

// Load reads and validates a scenario file; every error names file:line.
func Load(path string) (*Scenario, error) {
	var s Scenario
	if err := configfile.Load(path, Kind, &s); err != nil {
		return nil, err
	}
	s.path = path
	if s.Name == "" {
		s.Name = strings.TrimSuffix(filepath.Base(path), filepath.Ext(path))
	}
	if err := s.validate(); err != nil {
		return nil, err
	}
	return &s, nil
}

// Path is the file the scenario came from.
func (s *Scenario) Path() string { return s.path }

// validate checks what the YAML types cannot: references to nodes and
// zones, settings, manifests and expectations.
func (s *Scenario) validate() error {
	root, err := s.rootNode()
	if err != nil {
		return err
	}
	var errs []string
	at := func(n *yaml.Node, format string, args ...any) {
		line := 1
		if n != nil {
			line = n.Line
		}
		errs = append(errs, fmt.Sprintf("%s:%d: %s", s.path, line, fmt.Sprintf(format, args...)))
	}
	if !validName.MatchString(s.Name) {
		at(field(root, "name"), "name %q: the report directory is named after it, so it must be lowercase letters, digits, '-', '.' or '_', starting and ending with a letter or digit, at most 63 characters (e.g. name: rack-failure)", s.Name)
	}
	if s.Duration.Duration <= 0 {
		at(field(root, "duration"), "duration: give how long the timeline runs, e.g. duration: 10m")
	} else if s.Duration.Duration > MaxDuration {
		at(field(root, "duration"), "duration %v is longer than the limit of %v", s.Duration.Duration, MaxDuration)
	}
	if s.MaxTimeScale != 0 && !(s.MaxTimeScale >= 1 && s.MaxTimeScale <= MaxTimeScale) {
		at(field(root, "maxTimeScale"), "maxTimeScale %g: give the largest --time-scale the expectations hold at, between 1 and %d (or leave it out for any)", s.MaxTimeScale, MaxTimeScale)
	}
	clusterNode := field(root, "cluster")
	if k := s.Cluster.NodeKind; k != "" && !slices.Contains(NodeKinds, k) {
		at(field(clusterNode, "nodeKind"), "cluster.nodeKind %q: the kinds are %s (fake, the default: pkg/fakenode; hollow: kubemark's hollow nodes, the real kubelet code)", k, strings.Join(NodeKinds, ", "))
	}
	zonesNode := field(clusterNode, "zones")
	groupsNode := field(clusterNode, "nodeGroups")
	switch {
	case len(s.Cluster.Zones) > 0 && len(s.Cluster.NodeGroups) > 0:
		at(groupsNode, "cluster: give zones or nodeGroups, not both (node groups name their zones)")
	case len(s.Cluster.Zones) == 0 && len(s.Cluster.NodeGroups) == 0:
		at(clusterNode, "cluster.zones: list at least one zone, e.g. - {name: zone-a, nodes: 3}, or cluster.nodeGroups")
	}
	zones := map[string]bool{}
	for i, z := range s.Cluster.Zones {
		n := item(zonesNode, i)
		switch {
		case z.Name == "":
			at(n, "cluster.zones[%d]: name is missing", i)
		case zones[z.Name]:
			at(n, "cluster.zones[%d]: zone %q is listed twice", i, z.Name)
		}
		if z.Nodes < 1 {
			at(n, "cluster.zones[%d]: nodes must be at least 1, got %d", i, z.Nodes)
		}
		zones[z.Name] = true
	}
	for _, e := range s.checkNodeGroups(groupsNode, zones) {
		errs = append(errs, fmt.Sprintf("%s:%d: %s", s.path, e.line, e.msg))
	}
	for _, e := range s.checkDevices(clusterNode) {
		errs = append(errs, fmt.Sprintf("%s:%d: %s", s.path, e.line, e.msg))
	}
	for _, e := range s.checkImages(clusterNode) {
		errs = append(errs, fmt.Sprintf("%s:%d: %s", s.path, e.line, e.msg))
	}
	total, totalNode := 0, zonesNode
	for _, z := range s.Cluster.Zones {
		total += max(z.Nodes, 0)
	}
	if len(s.Cluster.NodeGroups) > 0 {
		totalNode = groupsNode
		for _, g := range s.Cluster.NodeGroups {
			total += max(g.Nodes, 0)
		}
	}
	if total > MaxNodes {
		at(totalNode, "cluster: %d nodes in all, more than the limit of %d (what the fake nodes are measured at; docs/benchmarks.md)", total, MaxNodes)
	}
	if len(s.Timeline) > MaxSteps {
		at(field(root, "timeline"), "timeline: %d steps, more than the limit of %d", len(s.Timeline), MaxSteps)
	}
	fcfg := s.fakeNodeConfig(1)
	// New only validates and names the nodes; the client is never called.
	fcfg.Client, _ = kubernetes.NewForConfig(&rest.Config{Host: "http://validation.invalid"})
	var nodeNames []string
	if len(errs) == 0 {
		m, err := fakenode.New(fcfg)
		if err != nil {
			at(clusterNode, "cluster: %v", err)
		} else {
			nodeNames = m.NodeNames()
		}
	}
	if err := s.Controllers.check(s.path); err != nil {
		errs = append(errs, err.Error())
	} else if s.runsOutOfService() {
		if cfg, _, err := s.Controllers.parse(s.path); err == nil {
			if err := cfg.Validate([]string{outofservice.Name}); err != nil {
				at(field(field(root, "controllers"), "outOfService"), "controllers.outOfService: %v", err)
			}
		}
	}
	if err := s.loadWorkloads(); err != nil {
		errs = append(errs, err.Error())
	}
	policyErrs := s.loadPolicies()
	policyErrs = append(policyErrs, s.loadStepPolicies(field(root, "timeline"))...)
	errs = append(errs, policyErrs...)
	if s.MaxTimeScale > 0 {
		for _, d := range s.allPolicies() {
			if limit := maxPolicyScale(&d.policy.Spec); s.MaxTimeScale > limit {
				at(field(root, "maxTimeScale"), "maxTimeScale %g: RemediationPolicy %s (%s) allows --time-scale %s at most (every step's timeout divided by it must stay at least %v and at least healthyHold plus a second); lower maxTimeScale or lengthen the timeouts",
					s.MaxTimeScale, d.policy.Name, d.src(), formatScale(limit), rem.MinStepTimeout)
			}
		}
	}
	for _, name := range []string{"rebootDowntime", "replaceDowntime"} {
		// Only when every policy was read: a policy refused for one field
		// says that field's error and nothing else (its Reboot steps are
		// not "missing").
		if n := field(field(clusterNode, "machines"), name); n != nil && len(policyErrs) == 0 && !s.hasRepairSteps() {
			at(n, "cluster.machines.%s: only the fake cloud provider's repairs take it, and no remediationPolicies step reboots or replaces machines", name)
		}
	}
	if n := field(field(clusterNode, "machines"), "ignorePowerOff"); n != nil && len(policyErrs) == 0 && !s.hasFenceSteps() {
		at(n, "cluster.machines.ignorePowerOff: only a Fence step's power-off request takes it, and no remediationPolicies step fences machines")
	}
	if len(policyErrs) == 0 && !s.runsOutOfService() {
		for _, d := range s.allPolicies() {
			for i, st := range d.policy.Spec.Steps {
				if st.Action == rem.ActionFence {
					errs = append(errs, fmt.Sprintf("%s:%d: RemediationPolicy %s: spec.steps[%d] is a Fence step: it needs the outofservice controller, which takes the fenced node out of service (without it the controller refuses the policy, NeedsOutOfService); add an outOfService section to controllers:, e.g. controllers: {outOfService: {outOfServiceAfter: 1m}}",
						d.path, locate(d.node, fmt.Sprintf("spec.steps[%d]", i)).Line, d.policy.Name, i))
				}
			}
		}
	}
	if s.Cluster.NodeKind == NodeKindHollow {
		// After the workloads are read: their volume claims are checked.
		errs = append(errs, s.checkHollow(root)...)
	}
	timelineNode := field(root, "timeline")
	for i := range s.Timeline {
		st := &s.Timeline[i]
		where := item(timelineNode, i)
		for _, e := range s.checkStep(st, zones, nodeNames) {
			at(where, "timeline[%d] (%s): %s", i, st.Action, e)
		}
		if s.Duration.Duration > 0 && st.At.Duration > s.Duration.Duration {
			at(where, "timeline[%d]: at %v is after the scenario's duration %v", i, st.At.Duration, s.Duration.Duration)
		}
	}
	expectNode := field(root, "expect")
	hasServices := len(s.services()) > 0
	for i := range s.Expect {
		if e := s.Expect[i].check(); e != "" {
			at(item(expectNode, i), "expect[%d]: %s", i, e)
		} else if serviceMeasures[s.Expect[i].Metric] && !hasServices {
			at(item(expectNode, i), "expect[%d]: %s counts the endpoints of the scenario's Services, but its workloads have no Service", i, s.Expect[i].Metric)
		} else if repairMeasures[s.Expect[i].Metric] && !s.hasPolicies() {
			at(item(expectNode, i), "expect[%d]: %s counts the repairs of remediation policies, but the scenario has no remediationPolicies", i, s.Expect[i].Metric)
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("%s", strings.Join(errs, "\n"))
	}
	return nil
}

func (s *Scenario) checkStep(st *Step, zones map[string]bool, nodes []string) []string {
	var errs []string
	if !slices.Contains(Actions, st.Action) {
		return []string{fmt.Sprintf("unknown action %q; actions: %s", st.Action, strings.Join(Actions, ", "))}
	}
	if st.Action == ActionApplyPolicy {
		if !st.Target.empty() || st.For.Duration > 0 || st.Condition != "" || st.Burst != nil {
			errs = append(errs, "apply-policy takes policy: only (no nodes, zone, group, for, condition or burst)")
		}
		return errs // policy: is checked by loadStepPolicies
	}
	if st.Policy != nil {
		errs = append(errs, "policy: only the apply-policy action takes it")
	}
	if st.Action == ActionBurst {
		b := st.Burst
		switch {
		case b == nil:
			errs = append(errs, "burst: give name, replicas, priorityClassName and cpu, e.g. burst: {name: urgent, replicas: 10, priorityClassName: high, cpu: \"1\"}")
		case b.Name == "" || b.Replicas < 1:
			errs = append(errs, "burst: name and replicas (at least 1) are required")
		case b.Replicas > MaxPods:
			errs = append(errs, fmt.Sprintf("burst: %d replicas, more than the limit of %d pods", b.Replicas, MaxPods))
		}
		if !st.Target.empty() || st.For.Duration > 0 || st.Condition != "" {
			errs = append(errs, "burst takes no nodes, zone, group, for or condition")
		}
		return errs
	}
	if st.Burst != nil {
		errs = append(errs, "burst: only the burst action takes it")
	}
	if st.Target.empty() {
		errs = append(errs, "no target: give nodes: [NAME...], zone: NAME, group: NAME (a node group) or all: true")
	}
	if st.Group != "" {
		var names []string
		for _, g := range s.Cluster.NodeGroups {
			names = append(names, g.Name)
		}
		switch {
		case len(names) == 0:
			errs = append(errs, fmt.Sprintf("group %q: the cluster has no nodeGroups (group: targets a node group of cluster.nodeGroups)", st.Group))
		case !slices.Contains(names, st.Group):
			errs = append(errs, fmt.Sprintf("unknown node group %q; the cluster's node groups: %s", st.Group, strings.Join(names, ", ")))
		case st.Zone != "" && !slices.ContainsFunc(s.Cluster.NodeGroups, func(g NodeGroup) bool { return g.Name == st.Group && g.Zone == st.Zone }):
			errs = append(errs, fmt.Sprintf("node group %q is not in zone %q", st.Group, st.Zone))
		}
	}
	if st.Zone != "" && !zones[st.Zone] {
		errs = append(errs, fmt.Sprintf("unknown zone %q; the cluster's zones: %s", st.Zone, strings.Join(sortedKeys(zones), ", ")))
	}
	for _, n := range st.Nodes {
		if nodes != nil && !slices.Contains(nodes, n) {
			errs = append(errs, fmt.Sprintf("unknown node %q; nodes are named %s to %s", n, nodes[0], nodes[len(nodes)-1]))
		}
	}
	if st.Count < 0 {
		errs = append(errs, "count must not be negative")
	}
	switch st.Action {
	case ActionNetworkBlip:
		if st.For.Duration <= 0 {
			errs = append(errs, "network-blip needs for: (how long the network is down), e.g. for: 45s")
		}
	case ActionSetCondition:
		c, err := fakenode.ParseCondition(st.Condition, true)
		if err != nil {
			errs = append(errs, "condition: "+err.Error())
		}
		st.cond = c
	case ActionClearCondition:
		c, err := fakenode.ParseCondition(st.Condition, false)
		if err != nil {
			errs = append(errs, "condition: "+err.Error())
		}
		st.cond = c
	case ActionHeal, ActionKubeletStart, ActionUncordon, ActionMachineStart, ActionMachineDelete:
		if st.For.Duration > 0 {
			errs = append(errs, fmt.Sprintf("%s takes no for:", st.Action))
		}
	}
	if st.Condition != "" && st.Action != ActionSetCondition && st.Action != ActionClearCondition {
		errs = append(errs, fmt.Sprintf("%s takes no condition", st.Action))
	}
	switch {
	case st.SurvivesReboot && st.Action != ActionSetCondition:
		errs = append(errs, fmt.Sprintf("%s takes no survivesReboot: it says whether a condition being set (set-condition) stays through reboots", st.Action))
	case st.cond != nil && st.Action == ActionSetCondition:
		st.cond.SurvivesReboot = st.SurvivesReboot
	}
	return errs
}

func sortedKeys(m map[string]bool) []string {
	return slices.Sorted(maps.Keys(m))
}

// rootNode parses the file again as a node tree, to point errors found after
// decoding at their lines.
func (s *Scenario) rootNode() (*yaml.Node, error) {
	data, err := os.ReadFile(s.path)
	if err != nil {
		return nil, err
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, err
	}
	if len(doc.Content) == 0 {
		return &doc, nil
	}
	return doc.Content[0], nil
}

// field returns the value node of key in a mapping node, or nil.
func field(n *yaml.Node, key string) *yaml.Node {
	if n == nil || n.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return n.Content[i+1]
		}
	}
	return nil
}

// item returns the i-th element of a sequence node, or its parent.
func item(n *yaml.Node, i int) *yaml.Node {
	if n == nil || n.Kind != yaml.SequenceNode || i >= len(n.Content) {
		return n
	}
	return n.Content[i]
}

// runsOutOfService says whether the scenario's controllers: block has an
// outOfService section: the outofservice controller, off unless named, then
// runs in nodeshepherd's run, asking the fake cloud provider, which answers
// from the machine-* steps.
func (s *Scenario) runsOutOfService() bool {
	return field(s.Controllers.node, "outOfService") != nil
}

// fakeNodeConfig is the cluster for the fake node manager, durations divided
// by scale.
func (s *Scenario) fakeNodeConfig(scale float64) fakenode.Config {
	c := fakenode.Config{
		CPU: s.Cluster.Node.CPU.Quantity, Memory: s.Cluster.Node.Memory.Quantity, MaxPods: s.Cluster.Node.MaxPods,
		Labels:                    s.Cluster.Node.Labels,
		LeaseDuration:             scaleDuration(s.Cluster.Kubelet.LeaseDuration.Duration, fakenode.DefaultLeaseDuration, scale),
		LeaseRenewInterval:        scaleDuration(s.Cluster.Kubelet.LeaseRenewInterval.Duration, fakenode.DefaultLeaseRenewInterval, scale),
		NodeStatusUpdateFrequency: scaleDuration(s.Cluster.Kubelet.NodeStatusUpdateFrequency.Duration, fakenode.DefaultNodeStatusUpdateFrequency, scale),
		NodeStatusReportFrequency: scaleDuration(s.Cluster.Kubelet.NodeStatusReportFrequency.Duration, fakenode.DefaultNodeStatusReportFrequency, scale),
		PodStartDelay:             scaleDuration(s.Cluster.Kubelet.PodStartDelay.Duration, fakenode.DefaultPodStartDelay, scale),
		RebootDowntime:            scaleDuration(s.Cluster.Machines.RebootDowntime.Duration, fakenode.DefaultRebootDowntime, scale),
		ReplaceDowntime:           scaleDuration(s.Cluster.Machines.ReplaceDowntime.Duration, fakenode.DefaultReplaceDowntime, scale),
		IgnorePowerOff:            s.Cluster.Machines.IgnorePowerOff,
		EmulateStalePodStatus:     s.Cluster.Kubelet.EmulateStalePodStatus,
		NodeStatusMaxImages:       s.Cluster.Kubelet.NodeStatusMaxImages,
		// Every scenario's nodes have the fake CSI driver: claims of its
		// StorageClass (fake-csi) are provisioned and attached for real.
		CSIDriver: fakecsi.DefaultDriverName,
	}
	for _, z := range s.Cluster.Zones {
		c.Zones = append(c.Zones, fakenode.Zone{Name: z.Name, Count: z.Nodes})
	}
	table := s.imageTable()
	c.Images = table.resolve(s.Cluster.Node.Images)
	for _, g := range s.Cluster.NodeGroups {
		fg := fakenode.NodeGroup{Name: g.Name, Zone: g.Zone, Count: g.Nodes, Labels: g.Labels,
			CPU: g.Shape.CPU.Quantity, Memory: g.Shape.Memory.Quantity, MaxPods: g.Shape.MaxPods, Images: table.resolve(g.Images)}
		for _, t := range g.Taints {
			fg.Taints = append(fg.Taints, v1.Taint{Key: t.Key, Value: t.Value, Effect: t.Effect})
		}
		for _, d := range s.Cluster.Devices {
			if slices.Contains(d.NodeGroups, g.Name) {
				fg.Devices = append(fg.Devices, d.fake())
			}
		}
		c.Groups = append(c.Groups, fg)
	}
	for _, d := range s.Cluster.Devices {
		if len(d.NodeGroups) == 0 {
			c.Devices = append(c.Devices, d.fake())
		}
	}
	return c
}

// scaleDuration divides d (or def when d is zero) by scale, keeping at
// least a millisecond.
func scaleDuration(d, def time.Duration, scale float64) time.Duration {
	if d == 0 {
		d = def
	}
	return max(time.Duration(float64(d)/scale), time.Millisecond)
}

// scaleSeconds divides whole seconds by scale, rounding up so that a
// positive toleration stays positive.
func scaleSeconds(s int64, scale float64) int64 {
	if s <= 0 {
		return s
	}
	return int64(math.Ceil(float64(s) / scale))
}
