package simulate

import (
	"fmt"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/nodeshepherd/nodeshepherd/pkg/fakenode"
)

// DeviceSet is one DRA driver's fake devices (cluster.devices): every
// node, or the nodes of NodeGroups, publishes Count devices of the driver
// in a ResourceSlice of its own (pkg/fakenode devices.go), and the fake
// nodes create a DeviceClass (Class, default the driver's name) selecting
// every device of the driver, so that a workload's ResourceClaimTemplate
// can ask for them.
type DeviceSet struct {
	Driver string   `yaml:"driver"`
	Count  int      `yaml:"count"`
	Model  string   `yaml:"model"`
	Memory Quantity `yaml:"memory"`
	Class  string   `yaml:"class"`
	// NodeGroups are the groups of cluster.nodeGroups whose nodes have the
	// devices; empty: every node.
	NodeGroups []string `yaml:"nodeGroups"`
}

func (d DeviceSet) fake() fakenode.DeviceSet {
	return fakenode.DeviceSet{Driver: d.Driver, Count: d.Count, Model: d.Model, Memory: d.Memory.Quantity, Class: d.Class}
}

// checkDevices checks cluster.devices: each set as the API server would
// take it, its node groups known, and no node given a driver twice.
func (s *Scenario) checkDevices(clusterNode *yaml.Node) []lineError {
	var errs []lineError
	devicesNode := field(clusterNode, "devices")
	var groups []string
	for _, g := range s.Cluster.NodeGroups {
		groups = append(groups, g.Name)
	}
	// driver -> where it goes: "" for every node, else group names.
	seen := map[string][]string{}
	for i, d := range s.Cluster.Devices {
		n := item(devicesNode, i)
		where := fmt.Sprintf("cluster.devices[%d]", i)
		add := func(at *yaml.Node, format string, args ...any) {
			line := n.Line
			if at != nil {
				line = at.Line
			}
			errs = append(errs, lineError{line, where + ": " + fmt.Sprintf(format, args...)})
		}
		if d.Driver == "" || d.Count == 0 {
			add(nil, "give driver and count, e.g. - {driver: gpu.fake.nodeshepherd.io, count: 4, model: a100, memory: 80Gi}")
			continue
		}
		if err := d.fake().Validate(); err != nil {
			add(nil, "%v", strings.ReplaceAll(err.Error(), "\n", "; "))
		}
		targets := d.NodeGroups
		if len(targets) == 0 {
			targets = []string{""}
		}
		for _, g := range d.NodeGroups {
			switch {
			case len(groups) == 0:
				add(field(n, "nodeGroups"), "nodeGroups: the cluster has no nodeGroups; leave nodeGroups out for every node")
			case !slices.Contains(groups, g):
				add(field(n, "nodeGroups"), "unknown node group %q; the cluster's node groups: %s", g, strings.Join(groups, ", "))
			}
		}
		for _, t := range targets {
			for _, o := range seen[d.Driver] {
				if o == "" || t == "" || o == t {
					add(field(n, "driver"), "driver %s is given to some nodes twice (a node has one pool per driver); list each driver once per node", d.Driver)
				}
			}
		}
		seen[d.Driver] = append(seen[d.Driver], targets...)
	}
	return errs
}
