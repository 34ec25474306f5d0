package nodelifecycle

import (
	_ "embed"
	"errors"

	"github.com/nodeshepherd/nodeshepherd/pkg/companion"
	"github.com/nodeshepherd/nodeshepherd/pkg/descriptor"
	"github.com/nodeshepherd/nodeshepherd/pkg/manager"
)

// rbacRules are the rules of the controller's ClusterRole; `make generate`
// writes deploy/components/nodelifecycle and the Helm chart's copy from them.
//
//go:embed rbac.yaml
var rbacRules []byte

// Descriptor tells nodeshepherd how to configure, check and build the controller.
var Descriptor = descriptor.Descriptor[Config]{
	Info: descriptor.Info{
		Name: Name,
		Help: "node heartbeats, Unknown conditions, NoSchedule and NoExecute taints with\n" +
			"per-zone rate limits and disruption modes, pods marked NotReady, readiness\n" +
			"restored after a flap. Replaces kube-controller-manager's nodelifecycle.",
		ClusterRole: "nodeshepherd:nodelifecycle",
		RBACRules:   rbacRules,
		Replaces:    "nodelifecycle",
		Conflicts:   companion.NodeLifecycle,
	},
	Sections: []descriptor.Section[Config]{{Name: "nodeLifecycle",
		Help: "The nodelifecycle controller (kube-controller-manager's flag names and defaults).", AddFlags: (*Config).AddFlags}},
	Default: func() Config {
		c := DefaultConfig()
		c.NodeMonitorPeriod, c.UnhealthyZoneThreshold = 0, 0 // shared settings
		return c
	},
	WithShared: func(c *Config, s *descriptor.Shared) error {
		return errors.Join(descriptor.Take("node-monitor-period", &c.NodeMonitorPeriod, s.NodeMonitorPeriod),
			descriptor.Take("unhealthy-zone-threshold", &c.UnhealthyZoneThreshold, s.UnhealthyZoneThreshold))
	},
	Validate: (*Config).Validate,
	New: func(c *Config, ctx manager.Context) (manager.Controller, error) {
		cfg := *c
		cfg.DryRun = ctx.DryRun
		return New(cfg, Deps{
			Client: ctx.Client, Nodes: ctx.Informers.Core().V1().Nodes(), Pods: ctx.Informers.Core().V1().Pods(),
			Leases: ctx.LeaseInformers.Coordination().V1().Leases(), Recorder: ctx.Recorder(EventSource),
			Registry: ctx.Registry, Clock: ctx.Clock, ProgressTimeout: ctx.ProgressTimeout,
		})
	},
}
