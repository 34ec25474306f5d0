package remediation

import (
	_ "embed"
	"errors"
	"slices"

	"k8s.io/client-go/dynamic"
	cloudprovider "k8s.io/cloud-provider"

	nscloud "github.com/nodeshepherd/nodeshepherd/pkg/cloudprovider"
	"github.com/nodeshepherd/nodeshepherd/pkg/cloudprovider/webhook"
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

// fencingFlags is the prefix of outofservice's fencing endpoint flags, whose
// settings the registry copies into Config.Fencing, for messages.
const fencingFlags = "--out-of-service-fencing-webhook"

// DefaultConfig has no settings of its own: the policies are the
// configuration.
func DefaultConfig() Config { return Config{} }

// Validate checks the settings: the provider and the fencing endpoint are
// built as New builds them (outofservice checks the endpoint's flags too,
// but it may not run in this process).
func (c *Config) Validate() error {
	var errs []error
	if c.Cloud.Name != "" {
		_, err := c.Cloud.Build(nil)
		errs = append(errs, err)
	}
	if c.Fencing.URL != "" {
		_, err := webhook.NewNamed(c.Fencing, fencingFlags)
		errs = append(errs, err)
	}
	return errors.Join(errs...)
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
			"power-off by the --cloud-provider, confirmed off for the same boot (by the provider or the fencing\n" +
			"endpoint --out-of-service-fencing-webhook-url, neither answering that it runs) before outofservice\n" +
			"may take the node out of service (a policy with a Fence and no provider that powers off, nothing to\n" +
			"confirm it, or without outofservice running, is refused) (runs only when named:\n" +
			"--controllers=*,remediation; with Fence steps --controllers=*,remediation,outofservice).",
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
			// Taken apart, not by FencerOf: a provider that powers off but
			// cannot say the machine is off fences with the fencing
			// endpoint's answer.
			fencer, _ = cloud.(nscloud.Fencer)
			if inst, ok := cloud.InstancesV2(); ok && inst != nil {
				instances = inst
			}
		}
		var endpoint FencingEndpoint
		if c.Fencing.URL != "" {
			f, err := webhook.NewNamed(c.Fencing, fencingFlags)
			if err != nil {
				return nil, err
			}
			endpoint = f
		}
		return New(cfg, Deps{Client: ctx.Client, Dynamic: dyn, Nodes: ctx.Informers.Core().V1().Nodes(), Repairer: repairer,
			Fencer: fencer, Instances: instances, Fencing: endpoint, FencingName: c.Fencing.URL, CloudName: c.Cloud.Name,
			OutOfServiceMissing: !slices.Contains(ctx.Controllers, OutOfServiceName), Recorder: ctx.Recorder(EventSource),
			Registry: ctx.Registry, Clock: ctx.Clock, ProgressTimeout: ctx.ProgressTimeout})
	},
}
