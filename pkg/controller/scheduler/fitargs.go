package scheduler

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation"
)

// NodeResourcesFit's settings, as kube-scheduler's NodeResourcesFitArgs:
// the scoring strategy, the resources it scores with their weights, the
// shape of RequestedToCapacityRatio, and the extended resources the filter
// ignores (a device plugin's resources that another component accounts).

// The scoring strategies (NodeResourcesFitArgs.scoringStrategy.type).
const (
	StrategyLeastAllocated           = "LeastAllocated"
	StrategyMostAllocated            = "MostAllocated"
	StrategyRequestedToCapacityRatio = "RequestedToCapacityRatio"
)

var strategies = []string{StrategyLeastAllocated, StrategyMostAllocated, StrategyRequestedToCapacityRatio}

// Ranges kube-scheduler validates: a resource's weight, a shape point's
// utilization (percent) and score (its own scale, 0-10, which it maps onto
// the node score's 0-100).
const (
	maxResourceWeight = 100
	maxUtilization    = 100
	maxShapeScore     = 10
)

type resourceWeight struct {
	name   v1.ResourceName
	weight int64
}

// shapePoint is one point of RequestedToCapacityRatio's function, its score
// already on the node score's scale (0-100).
type shapePoint struct {
	utilization, score int64
}

// fitArgs is NodeResourcesFit's configuration, parsed.
type fitArgs struct {
	strategy      string
	resources     []resourceWeight
	shape         []shapePoint
	ignored       sets.Set[string]
	ignoredGroups sets.Set[string]
}

// defaultFitArgs is kube-scheduler's default: LeastAllocated on cpu and
// memory, weight 1 each.
var defaultFitArgs = &fitArgs{strategy: StrategyLeastAllocated,
	resources: []resourceWeight{{v1.ResourceCPU, 1}, {v1.ResourceMemory, 1}}}

// parseFitArgs reads the flags' values, refusing what kube-scheduler's
// validation refuses (and settings that would do nothing), naming the flag.
// Each value alone is also checked as it is set (fitFlag), so that a bad
// value in a --config file is refused with its file, line and key; what
// only the values together decide (a shape and the strategy) is checked
// here.
func parseFitArgs(strategy, resources, shape, ignored, ignoredGroups string) (*fitArgs, error) {
	a := &fitArgs{}
	var err error
	if a.strategy, err = parseFitStrategy(strategy); err != nil {
		return nil, fmt.Errorf("--node-resources-fit-strategy: %w", err)
	}
	if a.resources, err = parseFitResources(resources); err != nil {
		return nil, fmt.Errorf("--node-resources-fit-resources: %w", err)
	}
	if a.shape, err = parseFitShape(shape); err != nil {
		return nil, fmt.Errorf("--node-resources-fit-shape: %w", err)
	}
	switch {
	case a.strategy == StrategyRequestedToCapacityRatio && len(a.shape) == 0:
		return nil, fmt.Errorf("--node-resources-fit-shape (nodeResourcesFitShape in the configuration file): %s needs a shape, points <utilization>=<score> (utilization 0-%d %%, score 0-%d), e.g. 0=10,100=0",
			StrategyRequestedToCapacityRatio, maxUtilization, maxShapeScore)
	case a.strategy != StrategyRequestedToCapacityRatio && len(a.shape) > 0:
		return nil, fmt.Errorf("--node-resources-fit-shape (nodeResourcesFitShape in the configuration file) is used only by --node-resources-fit-strategy=%s, not %s: remove it or set the strategy",
			StrategyRequestedToCapacityRatio, a.strategy)
	}
	if a.ignored, err = parseFitIgnored(ignored); err != nil {
		return nil, fmt.Errorf("--node-resources-fit-ignored-resources: %w", err)
	}
	if a.ignoredGroups, err = parseFitIgnoredGroups(ignoredGroups); err != nil {
		return nil, fmt.Errorf("--node-resources-fit-ignored-resource-groups: %w", err)
	}
	return a, nil
}

// parseFitStrategy reads scoringStrategy.type; empty is LeastAllocated.
func parseFitStrategy(s string) (string, error) {
	name := strings.TrimSpace(s)
	if name == "" {
		return StrategyLeastAllocated, nil
	}
	if !slices.Contains(strategies, name) {
		return "", fmt.Errorf("%q is not one of %s", s, strings.Join(strategies, ", "))
	}
	return name, nil
}

// parseFitResources reads scoringStrategy.resources as
// <resource>=<weight>,...; empty is cpu and memory, weight 1 each.
func parseFitResources(s string) ([]resourceWeight, error) {
	items := splitList(s)
	if len(items) == 0 {
		return defaultFitArgs.resources, nil
	}
	var out []resourceWeight
	for _, item := range items {
		name, w, ok := strings.Cut(item, "=")
		name = strings.TrimSpace(name)
		weight, err := strconv.ParseInt(strings.TrimSpace(w), 10, 64)
		if !ok || err != nil || weight < 1 || weight > maxResourceWeight {
			return nil, fmt.Errorf("%q: want <resource>=<weight>, a weight from 1 to %d (e.g. cpu=1,memory=1)", item, maxResourceWeight)
		}
		if err := checkFitResourceName(out, name); err != nil {
			return nil, err
		}
		out = append(out, resourceWeight{v1.ResourceName(name), weight})
	}
	return out, nil
}

// checkFitResourceName refuses a scored resource that is not a resource
// name or is already in out (it would count twice in the weighted mean).
func checkFitResourceName(out []resourceWeight, name string) error {
	if errs := validation.IsQualifiedName(name); len(errs) > 0 {
		return fmt.Errorf("%q is not a resource name: %s", name, strings.Join(errs, "; "))
	}
	for _, r := range out {
		if string(r.name) == name {
			return fmt.Errorf("%s is listed twice", name)
		}
	}
	return nil
}

// parseFitShape reads scoringStrategy.requestedToCapacityRatio.shape as
// <utilization>=<score>,...; empty is no shape.
func parseFitShape(s string) ([]shapePoint, error) {
	var out []shapePoint
	for _, item := range splitList(s) {
		u, sc, ok := strings.Cut(item, "=")
		util, err1 := strconv.ParseInt(strings.TrimSpace(u), 10, 64)
		score, err2 := strconv.ParseInt(strings.TrimSpace(sc), 10, 64)
		if !ok || err1 != nil || err2 != nil || !inShapeRange(util, score) {
			return nil, fmt.Errorf("%q: want <utilization>=<score>, utilization 0-%d %%, score 0-%d", item, maxUtilization, maxShapeScore)
		}
		if n := len(out); n > 0 && util <= out[n-1].utilization {
			return nil, fmt.Errorf("utilizations must increase: %d after %d", util, out[n-1].utilization)
		}
		out = append(out, shapePoint{util, score * maxNodeScore / maxShapeScore})
	}
	return out, nil
}

func inShapeRange(util, score int64) bool {
	return util >= 0 && util <= maxUtilization && score >= 0 && score <= maxShapeScore
}

// parseFitIgnored reads ignoredResources: extended resources only, the
// only ones the filter can ignore.
func parseFitIgnored(s string) (sets.Set[string], error) {
	out := sets.New[string]()
	for _, name := range splitList(s) {
		if err := checkFitIgnored(name); err != nil {
			return nil, err
		}
		out.Insert(name)
	}
	return out, nil
}

func checkFitIgnored(name string) error {
	if !isExtendedResource(v1.ResourceName(name)) {
		return fmt.Errorf("%q is not an extended resource (a qualified name outside kubernetes.io/, such as example.com/gpu); only those can be ignored", name)
	}
	return nil
}

// parseFitIgnoredGroups reads ignoredResourceGroups: the part before the /
// of extended resources.
func parseFitIgnoredGroups(s string) (sets.Set[string], error) {
	out := sets.New[string]()
	for _, g := range splitList(s) {
		if err := checkFitIgnoredGroup(g); err != nil {
			return nil, err
		}
		out.Insert(g)
	}
	return out, nil
}

func checkFitIgnoredGroup(g string) error {
	if strings.Contains(g, "/") || len(validation.IsDNS1123Subdomain(g)) > 0 {
		return fmt.Errorf("%q is not a resource group (the part before the / of an extended resource, such as example.com)", g)
	}
	return nil
}

// fitFlag is a NodeResourcesFit flag whose value is checked as it is set,
// on the command line or from the configuration file (whose reader then
// names the file, the line and the key).
type fitFlag struct {
	p     *string
	check func(string) error
}

func (f fitFlag) String() string {
	if f.p == nil {
		return ""
	}
	return *f.p
}

func (f fitFlag) Set(s string) error {
	if err := f.check(s); err != nil {
		return err
	}
	*f.p = s
	return nil
}

func (f fitFlag) Type() string { return "string" }

func checked[T any](parse func(string) (T, error)) func(string) error {
	return func(s string) error {
		_, err := parse(s)
		return err
	}
}

func splitList(s string) []string {
	var out []string
	for _, item := range strings.Split(s, ",") {
		if item = strings.TrimSpace(item); item != "" {
			out = append(out, item)
		}
	}
	return out
}

// isExtendedResource is the API's definition of an extended resource: a
// name with a / that is not in the kubernetes.io/ namespace (anywhere in
// the name, as the API's own test), not requests.*, and that stays a
// qualified name as a quota's requests.<name>.
func isExtendedResource(name v1.ResourceName) bool {
	s := string(name)
	if !strings.Contains(s, "/") || strings.Contains(s, v1.ResourceDefaultNamespacePrefix) || strings.HasPrefix(s, v1.DefaultResourceRequestsPrefix) {
		return false
	}
	return len(validation.IsQualifiedName(v1.DefaultResourceRequestsPrefix+s)) == 0
}

// scoredOnlyWhenRequested: the resources NodeResourcesFit's score leaves
// out for a pod that does not request them, kube-scheduler's scalar
// resources (extended resources, hugepages, kubernetes.io/-prefixed and
// attachable-volumes-*). ephemeral-storage is not one: the node's
// requests count even for a pod without any.
func scoredOnlyWhenRequested(name v1.ResourceName) bool {
	s := string(name)
	return isExtendedResource(name) || strings.HasPrefix(s, v1.ResourceHugePagesPrefix) ||
		strings.Contains(s, v1.ResourceDefaultNamespacePrefix) || strings.HasPrefix(s, v1.ResourceAttachableVolumesPrefix)
}

// ignores says whether the filter leaves a requested resource out: an
// extended resource named in ignoredResources or in an ignored group.
func (a *fitArgs) ignores(name v1.ResourceName) bool {
	if a == nil || len(a.ignored) == 0 && len(a.ignoredGroups) == 0 || !isExtendedResource(name) {
		return false
	}
	group, _, _ := strings.Cut(string(name), "/")
	return a.ignored.Has(string(name)) || a.ignoredGroups.Has(group)
}

// score is the node's NodeResourcesFit score for a pod: each scored
// resource's score by the strategy, weighted. cpu and memory count the
// pod's and the node's requests with the defaults of containers that set
// none; ephemeral-storage the requests alone, the pod's or not; an
// extended resource (and hugepages) only when the pod requests it; a
// resource the node has none of is left out.
func (a *fitArgs) score(s *scorer, n *nodeInfo) int64 {
	var sum, weights int64
	for _, r := range a.resources {
		var requested, allocatable int64
		switch r.name {
		case v1.ResourceCPU:
			requested, allocatable = n.nonZero.milliCPU+s.nonZero.milliCPU, n.allocatable.milliCPU
		case v1.ResourceMemory:
			requested, allocatable = n.nonZero.memory+s.nonZero.memory, n.allocatable.memory
		default:
			want := s.pod.request.scalar[r.name]
			if want == 0 && scoredOnlyWhenRequested(r.name) {
				continue
			}
			requested, allocatable = n.requested.scalar[r.name]+want, n.allocatable.scalar[r.name]
		}
		if allocatable == 0 {
			continue
		}
		rs := a.resourceScore(requested, allocatable)
		if a.strategy == StrategyRequestedToCapacityRatio && rs <= 0 {
			// kube-scheduler leaves a resource scored 0 out of the
			// weighted mean under this strategy.
			continue
		}
		sum += rs * r.weight
		weights += r.weight
	}
	if weights == 0 {
		return 0
	}
	if a.strategy == StrategyRequestedToCapacityRatio {
		return int64(math.Round(float64(sum) / float64(weights)))
	}
	return sum / weights
}

func (a *fitArgs) resourceScore(requested, allocatable int64) int64 {
	switch a.strategy {
	case StrategyMostAllocated:
		return min(requested, allocatable) * maxNodeScore / allocatable
	case StrategyRequestedToCapacityRatio:
		util := int64(maxUtilization)
		if requested <= allocatable {
			util = requested * maxUtilization / allocatable
		}
		return a.shapeAt(util)
	}
	return leastRequested(requested, allocatable)
}

// shapeAt is the shape's piecewise linear function at utilization u: flat
// before the first point and after the last.
func (a *fitArgs) shapeAt(u int64) int64 {
	for i, p := range a.shape {
		if u <= p.utilization {
			if i == 0 {
				return p.score
			}
			q := a.shape[i-1]
			return q.score + (p.score-q.score)*(u-q.utilization)/(p.utilization-q.utilization)
		}
	}
	return a.shape[len(a.shape)-1].score
}
