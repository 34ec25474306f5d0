package scheduler

import (
	"fmt"
	"math"
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
func parseFitArgs(strategy, resources, shape, ignored, ignoredGroups string) (*fitArgs, error) {
	a := &fitArgs{strategy: strings.TrimSpace(strategy), ignored: sets.New[string](), ignoredGroups: sets.New[string]()}
	if a.strategy == "" {
		a.strategy = StrategyLeastAllocated
	}
	found := false
	for _, s := range strategies {
		found = found || s == a.strategy
	}
	if !found {
		return nil, fmt.Errorf("--node-resources-fit-strategy: %q is not one of %s", strategy, strings.Join(strategies, ", "))
	}
	if strings.TrimSpace(resources) == "" {
		a.resources = defaultFitArgs.resources
	}
	for _, item := range splitList(resources) {
		name, w, ok := strings.Cut(item, "=")
		name = strings.TrimSpace(name)
		weight, err := strconv.ParseInt(strings.TrimSpace(w), 10, 64)
		if !ok || err != nil || weight < 1 || weight > maxResourceWeight {
			return nil, fmt.Errorf("--node-resources-fit-resources: %q: want <resource>=<weight>, a weight from 1 to %d (e.g. cpu=1,memory=1)", item, maxResourceWeight)
		}
		if errs := validation.IsQualifiedName(name); len(errs) > 0 {
			return nil, fmt.Errorf("--node-resources-fit-resources: %q is not a resource name: %s", name, strings.Join(errs, "; "))
		}
		for _, r := range a.resources {
			if string(r.name) == name {
				return nil, fmt.Errorf("--node-resources-fit-resources: %s is listed twice", name)
			}
		}
		a.resources = append(a.resources, resourceWeight{v1.ResourceName(name), weight})
	}
	points := splitList(shape)
	switch {
	case a.strategy == StrategyRequestedToCapacityRatio && len(points) == 0:
		return nil, fmt.Errorf("--node-resources-fit-shape: %s needs a shape, points <utilization>=<score> (utilization 0-%d %%, score 0-%d), e.g. 0=10,100=0",
			StrategyRequestedToCapacityRatio, maxUtilization, maxShapeScore)
	case a.strategy != StrategyRequestedToCapacityRatio && len(points) > 0:
		return nil, fmt.Errorf("--node-resources-fit-shape is used only by --node-resources-fit-strategy=%s, not %s", StrategyRequestedToCapacityRatio, a.strategy)
	}
	for _, item := range points {
		u, sc, ok := strings.Cut(item, "=")
		util, err1 := strconv.ParseInt(strings.TrimSpace(u), 10, 64)
		score, err2 := strconv.ParseInt(strings.TrimSpace(sc), 10, 64)
		if !ok || err1 != nil || err2 != nil || util < 0 || util > maxUtilization || score < 0 || score > maxShapeScore {
			return nil, fmt.Errorf("--node-resources-fit-shape: %q: want <utilization>=<score>, utilization 0-%d %%, score 0-%d", item, maxUtilization, maxShapeScore)
		}
		if n := len(a.shape); n > 0 && util <= a.shape[n-1].utilization {
			return nil, fmt.Errorf("--node-resources-fit-shape: utilizations must increase: %d after %d", util, a.shape[n-1].utilization)
		}
		a.shape = append(a.shape, shapePoint{util, score * maxNodeScore / maxShapeScore})
	}
	for _, name := range splitList(ignored) {
		if !isExtendedResource(v1.ResourceName(name)) {
			return nil, fmt.Errorf("--node-resources-fit-ignored-resources: %q is not an extended resource (a qualified name outside kubernetes.io/, such as example.com/gpu); only those can be ignored", name)
		}
		a.ignored.Insert(name)
	}
	for _, g := range splitList(ignoredGroups) {
		if strings.Contains(g, "/") || len(validation.IsDNS1123Subdomain(g)) > 0 {
			return nil, fmt.Errorf("--node-resources-fit-ignored-resource-groups: %q is not a resource group (the part before the / of an extended resource, such as example.com)", g)
		}
		a.ignoredGroups.Insert(g)
	}
	return a, nil
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

// isExtendedResource: a qualified name outside the kubernetes.io domain
// and not requests.*, as the API's definition of extended resources.
func isExtendedResource(name v1.ResourceName) bool {
	s := string(name)
	if strings.HasPrefix(s, "requests.") || !strings.Contains(s, "/") {
		return false
	}
	domain, _, _ := strings.Cut(s, "/")
	if domain == "kubernetes.io" || strings.HasSuffix(domain, ".kubernetes.io") {
		return false
	}
	return len(validation.IsQualifiedName(s)) == 0
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
// none; another resource counts only when the pod requests it; a resource
// the node has none of is left out.
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
			if want == 0 {
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
