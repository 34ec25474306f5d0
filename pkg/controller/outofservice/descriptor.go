package outofservice

import (
	_ "embed"
	"errors"

	cloudprovider "k8s.io/cloud-provider"

	"github.com/nodeshepherd/nodeshepherd/pkg/descriptor"
	"github.com/nodeshepherd/nodeshepherd/pkg/manager"
)

// rbacRules are the rules of the controller's ClusterRole; `make generate`
// writes deploy/components/outofservice and the Helm chart's copy from them.
//
//go:embed rbac.yaml
var rbacRules []byte

// Descriptor tells nodeshepherd how to configure, check and build the controller.
// It replaces no kube-controller-manager controller (Replaces is empty): it
// writes only its own taint and annotations, so it runs next to
// kube-controller-manager's node lifecycle controller, whose pod GC and
// attach-detach controller act on the taint.
var Descriptor = descriptor.Descriptor[Config]{
	Info: descriptor.Info{
		Name: Name,
		Help: "taints node.kubernetes.io/out-of-service:NoExecute a node confirmed dead (the\n" +
			"--cloud-provider reports its machine shut down or gone, the annotation\n" +
			"nodeshepherd.io/out-of-service=REASON, a fencing endpoint, or a remediation\n" +
			"policy's Fence step that powered off its current boot, while the provider or the\n" +
			"fencing endpoint answers it off) and NotReady for\n" +
			"--out-of-service-after, within --max-out-of-service-nodes/-percent; removes it\n" +
			"after a reboot or when the confirmation is withdrawn (runs only when named:\n" +
			"--controllers=*,outofservice).",
		ClusterRole: "nodeshepherd:outofservice",
		RBACRules:   rbacRules,
		Companion:   true,
	},
	Sections: []descriptor.Section[Config]{{Name: "outOfService",
		Help: "The outofservice controller (it asks the cloudProvider section's provider, if any).", AddFlags: (*Config).AddFlags}},
	Default: func() Config {
		c := DefaultConfig()
		c.NodeMonitorPeriod, c.UnhealthyZoneThreshold = 0, 0 // shared settings
		return c
	},
	// Force-deleting pods is a decision an operator opts into by naming it.
	Enabled: func(*Config) bool { return false },
	WithShared: func(c *Config, s *descriptor.Shared) error {
		return errors.Join(descriptor.Take("node-monitor-period", &c.NodeMonitorPeriod, s.NodeMonitorPeriod),
			descriptor.Take("unhealthy-zone-threshold", &c.UnhealthyZoneThreshold, s.UnhealthyZoneThreshold))
	},
	Validate: func(c *Config) error {
		errs := []error{c.Validate()}
		if c.Cloud.Name != "" {
			if _, err := c.Cloud.Build(nil); err != nil {
				errs = append(errs, err)
			}
		}
		return errors.Join(errs...)
	},
	New: func(c *Config, ctx manager.Context) (manager.Controller, error) {
		var cloud cloudprovider.Interface
		if c.Cloud.Name != "" {
			var err error
			if cloud, err = c.Cloud.Build(ctx.RESTConfig); err != nil {
				return nil, err
			}
		}
		cfg := *c
		cfg.DryRun = ctx.DryRun
		return New(cfg, Deps{Client: ctx.Client, Nodes: ctx.Informers.Core().V1().Nodes(), Cloud: cloud,
			Recorder: ctx.Recorder(EventSource), Registry: ctx.Registry, Clock: ctx.Clock, ProgressTimeout: ctx.ProgressTimeout})
	},
}
