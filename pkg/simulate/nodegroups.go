package simulate

import (
	"fmt"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/nodeshepherd/nodeshepherd/pkg/fakenode"
)

// lineError is a problem and the line it is on.
type lineError struct {
	line int
	msg  string
}

// checkNodeGroups validates cluster.nodeGroups and adds their zones to
// zones, for the timeline's zone targets.
func (s *Scenario) checkNodeGroups(groupsNode *yaml.Node, zones map[string]bool) []lineError {
	var errs []lineError
	at := func(n *yaml.Node, format string, args ...any) {
		line := 1
		if n != nil {
			line = n.Line
		}
		errs = append(errs, lineError{line, fmt.Sprintf(format, args...)})
	}
	names := map[string]bool{}
	for i, g := range s.Cluster.NodeGroups {
		n := item(groupsNode, i)
		where := fmt.Sprintf("cluster.nodeGroups[%d]", i)
		switch {
		case g.Name == "":
			at(n, "%s: name is missing, e.g. name: zone-a-general", where)
		case names[g.Name]:
			at(field(n, "name"), "%s: node group %q is listed twice", where, g.Name)
		case len(validation.IsDNS1123Label(g.Name)) > 0:
			at(field(n, "name"), "%s: name %q must be lowercase letters, digits and '-' (a DNS label)", where, g.Name)
		}
		names[g.Name] = true
		if g.Zone == "" {
			at(n, "%s: zone is missing, e.g. zone: zone-a", where)
		} else if msgs := validation.IsValidLabelValue(g.Zone); len(msgs) > 0 {
			at(field(n, "zone"), "%s: zone %q is not a valid label value: %s", where, g.Zone, strings.Join(msgs, "; "))
		} else {
			zones[g.Zone] = true
		}
		if g.Nodes < 1 {
			at(n, "%s: nodes must be at least 1, got %d", where, g.Nodes)
		}
		shape := field(n, "shape")
		if g.Shape.CPU.Sign() < 0 || g.Shape.Memory.Sign() < 0 || g.Shape.MaxPods < 0 {
			at(shape, "%s.shape: cpu, memory and maxPods must not be negative", where)
		}
		for _, e := range fakenode.ValidateLabels(g.Labels, where+".labels") {
			at(field(n, "labels"), "%v", e)
		}
		taints := field(n, "taints")
		for j, t := range g.Taints {
			if err := fakenode.ValidateTaint(v1.Taint{Key: t.Key, Value: t.Value, Effect: t.Effect}); err != nil {
				at(item(taints, j), "%s.taints[%d]: %v", where, j, err)
			}
		}
	}
	return errs
}

// ZoneNames returns the cluster's zones in the order written: cluster.zones,
// or the node groups' zones.
func (s *Scenario) ZoneNames() []string {
	var out []string
	for _, z := range s.Cluster.Zones {
		out = append(out, z.Name)
	}
	for _, g := range s.Cluster.NodeGroups {
		if !slices.Contains(out, g.Zone) {
			out = append(out, g.Zone)
		}
	}
	return out
}
