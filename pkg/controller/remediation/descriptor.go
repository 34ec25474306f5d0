package remediation

import (
	_ "embed"
	"slices"

	"k8s.io/client-go/dynamic"
	cloudprovider "k8s.io/cloud-provider"

	nscloud "github.com/nodeshepherd/nodeshepherd/pkg/cloudprovider"
	"github.com/nodeshepherd/nodeshepherd/pkg/descriptor"
	"github.com/nodeshepherd/nodeshepherd/pkg/manager"
	rem "github.com/nodeshepherd/nodeshepherd/pkg/remediation"
)

// rbacRules are the rules of the controller's ClusterRole; `make generate`
// writes deploy/components/remediation and the Helm chart's copy from them.
//
//go:embed rbac.yaml
var rbacRules []byte

// OutOfServiceName is the outofservice controller's name (controllers
// import no other controller; TestOutOfServiceNameMatches checks it): a
// Fence step's confirmation is its to act on.
const OutOfServiceName = "outofservice"

// DefaultConfig has no settings of its own: the policies are the
// configuration.
func DefaultConfig() Config { return Config{} }

// Validate checks the settings.
func (c *Config) Validate() error {
	if c.Cloud.Name != "" {
		_, err := c.Cloud.Build(nil)
		return err
	}
	return nil
}

// Descriptor tells nodeshepherd how to configure, check and build the
// controller. It runs only when named: repairing nodes is a decision an
// operator opts into, and its policies need the CRD installed.
var Descriptor = descriptor.Descriptor[Config]{
	Info: descriptor.Info{
		Name: Name,
		Help: "repairs nodes by the RemediationPolicy resources (nodeshepherd.io/v1alpha1, docs/remediation.md):\n" +
			"a ladder of steps (Taint, Drain, Reboot, Replace, Fence) per pool, with brakes; Drain steps are\n" +
			"the drain controller's drains (it runs too), Reboot and Replace the --cloud-provider's, Fence a\n" +
			"power-off by the --cloud-provider, confirmed off for the same boot before outofservice may take the\n" +
			"node out of service (a policy with a Fence and no such provider, or without outofservice running, is\n" +
			"refused) (runs only when named: --controllers=*,remediation; with Fence steps\n" +
			"--controllers=*,remediation,outofservice).",
		ClusterRole: "nodeshepherd:remediation",
		RBACRules:   rbacRules,
		Companion:   true,
		Needs:       []string{"drain"}, // controllers import no other controller
		CRD:         rem.CRD,
	},
	// No section: the policies are the configuration, the provider is
	// cloudnodelifecycle's.
	Default:  DefaultConfig,
	Enabled:  func(*Config) bool { return false },
	Validate: (*Config).Validate,
	New: func(c *Config, ctx manager.Context) (manager.Controller, error) {
		cfg := *c
		cfg.DryRun = ctx.DryRun
		dyn, err := dynamic.NewForConfig(ctx.RESTConfig)
		if err != nil {
			return nil, err
		}
		var repairer nscloud.Repairer
		var fencer nscloud.Fencer
		var instances cloudprovider.InstancesV2
		if c.Cloud.Name != "" {
			var cloud cloudprovider.Interface
			if cloud, err = c.Cloud.Build(ctx.RESTConfig); err != nil {
				return nil, err
			}
			repairer, _ = nscloud.RepairerOf(cloud)
			fencer, instances, _ = nscloud.FencerOf(cloud)
		}
		return New(cfg, Deps{Client: ctx.Client, Dynamic: dyn, Nodes: ctx.Informers.Core().V1().Nodes(), Repairer: repairer,
			Fencer: fencer, Instances: instances, CloudName: c.Cloud.Name, OutOfServiceMissing: !slices.Contains(ctx.Controllers, OutOfServiceName),
			Recorder: ctx.Recorder(EventSource), Registry: ctx.Registry, Clock: ctx.Clock, ProgressTimeout: ctx.ProgressTimeout})
	},
}
