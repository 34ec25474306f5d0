package cloudnodelifecycle

import (
	_ "embed"
	"errors"

	"github.com/spf13/pflag"

	"github.com/nodeshepherd/nodeshepherd/pkg/cloudprovider/providers"
	"github.com/nodeshepherd/nodeshepherd/pkg/companion"
	"github.com/nodeshepherd/nodeshepherd/pkg/descriptor"
	"github.com/nodeshepherd/nodeshepherd/pkg/manager"
)

// Settings are the controller's two sections: its own, and the cloud
// provider it asks (kube-controller-manager's --cloud-provider flags).
type Settings struct {
	Config
	Cloud providers.Options
}

// rbacRules are the rules of the controller's ClusterRole; `make generate`
// writes deploy/components/cloudnodelifecycle and the Helm chart's copy from them.
//
//go:embed rbac.yaml
var rbacRules []byte

// Descriptor tells nodeshepherd how to configure, check and build the controller.
var Descriptor = descriptor.Descriptor[Settings]{
	Info: descriptor.Info{
		Name: Name,
		Help: "asks --cloud-provider about nodes that are not Ready: deletes those whose\n" +
			"machine is gone, taints those whose machine is shut down (runs only with\n" +
			"--cloud-provider). Like the cloud controller manager's.",
		ClusterRole: "nodeshepherd:cloudnodelifecycle",
		RBACRules:   rbacRules,
		// A managed cluster's cloud-controller-manager deletes and taints the same
		// nodes at once, which voids the confirmations and rate limits here.
		Conflicts: companion.CloudNodeLifecycle,
	},
	Sections: []descriptor.Section[Settings]{
		{Name: "cloudNodeLifecycle", Help: "The cloudnodelifecycle controller.", AddFlags: func(s *Settings, fs *pflag.FlagSet) { s.Config.AddFlags(fs) }},
		{Name: "cloudProvider", Help: "The cloud provider the cloudnodelifecycle controller asks.", AddFlags: func(s *Settings, fs *pflag.FlagSet) { s.Cloud.AddFlags(fs) }},
	},
	Default: func() Settings {
		c := DefaultConfig()
		c.NodeMonitorPeriod, c.MaxUnhealthyNodes = 0, "" // shared settings
		return Settings{Config: c}
	},
	Enabled: func(s *Settings) bool { return s.Cloud.Name != "" },
	WithShared: func(s *Settings, shared *descriptor.Shared) error {
		return errors.Join(descriptor.Take("node-monitor-period", &s.Config.NodeMonitorPeriod, shared.NodeMonitorPeriod),
			descriptor.Take("max-unhealthy-nodes", &s.Config.MaxUnhealthyNodes, shared.MaxUnhealthyNodes))
	},
	Validate: func(s *Settings) error {
		errs := []error{s.Config.Validate()}
		if s.Cloud.Name == "" {
			errs = append(errs, errors.New("the cloudnodelifecycle controller needs --cloud-provider"))
		} else if _, err := s.Cloud.Build(nil); err != nil {
			errs = append(errs, err)
		}
		return errors.Join(errs...)
	},
	New: func(s *Settings, ctx manager.Context) (manager.Controller, error) {
		cloud, err := s.Cloud.Build(ctx.RESTConfig)
		if err != nil {
			return nil, err
		}
		cfg := s.Config
		cfg.DryRun = ctx.DryRun
		return New(cfg, Deps{Client: ctx.Client, Nodes: ctx.Informers.Core().V1().Nodes(),
			Cloud: cloud, Recorder: ctx.Recorder(EventSource), Registry: ctx.Registry, Clock: ctx.Clock, ProgressTimeout: ctx.ProgressTimeout})
	},
}
