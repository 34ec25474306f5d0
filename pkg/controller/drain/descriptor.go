package drain

import (
	_ "embed"
	"errors"

	"github.com/nodeshepherd/nodeshepherd/pkg/descriptor"
	"github.com/nodeshepherd/nodeshepherd/pkg/manager"
)

// rbacRules are the rules of the controller's ClusterRole; `make generate`
// writes deploy/components/drain and the Helm chart's copy from them.
//
//go:embed rbac.yaml
var rbacRules []byte

// Descriptor tells nodeshepherd how to configure, check and build the controller.
var Descriptor = descriptor.Descriptor[Config]{
	Info: descriptor.Info{
		Name: Name,
		Help: "cordons and drains (Eviction API, PDBs honoured) nodes whose conditions match\n" +
			"--drain-condition or --drain-rules, within budgets (--max-concurrent-drains,\n" +
			"--max-cordoned-nodes, --group-by-label, --drain-buffer) and a circuit breaker\n" +
			"(--max-unhealthy-nodes, zone disruption); uncordons only what it cordoned.\n" +
			"Like Draino (runs under --controllers=* only with --drain-condition or --drain-rules).\n" +
			"Also drains the nodes remediation policies' Drain steps ask it to, rules or not.",
		ClusterRole: "nodeshepherd:drain",
		RBACRules:   rbacRules,
		Companion:   true,
	},
	Sections: []descriptor.Section[Config]{{Name: "drain",
		Help: "The drain controller (Draino's flag names where Draino has the setting).", AddFlags: (*Config).AddFlags}},
	Default: func() Config {
		c := DefaultConfig()
		c.Budget.MaxUnhealthyNodes, c.UnhealthyZoneThreshold = "", 0 // shared settings
		return c
	},
	Enabled: (*Config).Configured,
	// The shared incident guard, and zones classified as the nodelifecycle
	// controller classifies them.
	WithShared: func(c *Config, s *descriptor.Shared) error {
		return errors.Join(descriptor.Take("max-unhealthy-nodes", &c.Budget.MaxUnhealthyNodes, s.MaxUnhealthyNodes),
			descriptor.Take("unhealthy-zone-threshold", &c.UnhealthyZoneThreshold, s.UnhealthyZoneThreshold))
	},
	// Without rules the controller runs only for the remediation controller,
	// acting on its requests; named alone it would do nothing, and is refused.
	Idle: func(c *Config) error {
		if !c.Configured() {
			return errors.New("the drain controller needs --drain-condition (e.g. --drain-condition=KernelDeadlock=True,10m) or --drain-rules FILE, or the remediation controller, whose Drain steps it carries out")
		}
		return nil
	},
	Validate: (*Config).Validate,
	New: func(c *Config, ctx manager.Context) (manager.Controller, error) {
		cfg := *c
		cfg.DryRun = ctx.DryRun
		return New(cfg, Deps{Client: ctx.Client, Nodes: ctx.Informers.Core().V1().Nodes(), Pods: ctx.Informers.Core().V1().Pods(),
			Recorder: ctx.Recorder(EventSource), Registry: ctx.Registry, Clock: ctx.Clock, ProgressTimeout: ctx.ProgressTimeout})
	},
}
