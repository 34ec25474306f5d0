package nodeipam

import (
	_ "embed"
	"github.com/nodeshepherd/nodeshepherd/pkg/companion"
	"github.com/nodeshepherd/nodeshepherd/pkg/descriptor"
	"github.com/nodeshepherd/nodeshepherd/pkg/manager"
)

// rbacRules are the rules of the controller's ClusterRole; `make generate`
// writes deploy/components/nodeipam and the Helm chart's copy from them.
//
//go:embed rbac.yaml
var rbacRules []byte

// Descriptor tells nodeshepherd how to configure, check and build the controller.
var Descriptor = descriptor.Descriptor[Config]{
	Info: descriptor.Info{
		Name: Name,
		Help: "allocates spec.podCIDRs per IP family from --cluster-cidr (runs only with\n" +
			"--allocate-node-cidrs). Replaces nodeipam.",
		ClusterRole: "nodeshepherd:nodeipam",
		RBACRules:   rbacRules,
		Replaces:    "nodeipam",
		Conflicts:   companion.NodeIPAM,
	},
	Sections: []descriptor.Section[Config]{{Name: "nodeIPAM", Help: "The nodeipam controller: pod CIDRs for nodes.", AddFlags: (*Config).AddFlags}},
	Default:  func() Config { return Config{} },
	// As kube-controller-manager: only with --allocate-node-cidrs.
	Enabled:  func(c *Config) bool { return c.AllocateNodeCIDRs },
	Validate: func(c *Config) error { _, err := c.Parse(); return err },
	New: func(c *Config, ctx manager.Context) (manager.Controller, error) {
		cfg := *c
		cfg.DryRun = ctx.DryRun
		return New(cfg, Deps{Client: ctx.Client, Nodes: ctx.Informers.Core().V1().Nodes(),
			Recorder: ctx.Recorder(EventSource), Registry: ctx.Registry, ProgressTimeout: ctx.ProgressTimeout})
	},
}
