// Package controllers is the registry of nodeshepherd's controllers: their
// names, start order, and how each is built from the manager's shared parts.
package controllers

import (
	"errors"
	"slices"

	"github.com/spf13/pflag"

	"github.com/nodeshepherd/nodeshepherd/pkg/cloudprovider/providers"
	"github.com/nodeshepherd/nodeshepherd/pkg/controller/cloudnodelifecycle"
	"github.com/nodeshepherd/nodeshepherd/pkg/controller/drain"
	"github.com/nodeshepherd/nodeshepherd/pkg/controller/nodeipam"
	"github.com/nodeshepherd/nodeshepherd/pkg/controller/nodelifecycle"
	"github.com/nodeshepherd/nodeshepherd/pkg/controller/scheduler"
	"github.com/nodeshepherd/nodeshepherd/pkg/controller/tainteviction"
	"github.com/nodeshepherd/nodeshepherd/pkg/manager"
)

// Names lists the controllers in start order.
var Names = []string{nodelifecycle.Name, tainteviction.Name, nodeipam.Name, cloudnodelifecycle.Name, drain.Name, scheduler.Name}

// Config holds every controller's settings.
type Config struct {
	NodeLifecycle      nodelifecycle.Config
	NodeIPAM           nodeipam.Config
	CloudNodeLifecycle cloudnodelifecycle.Config
	Cloud              providers.Options
	Drain              drain.Config
	Scheduler          scheduler.Config
}

// Default returns every controller's defaults.
func Default() Config {
	return Config{NodeLifecycle: nodelifecycle.DefaultConfig(), CloudNodeLifecycle: cloudnodelifecycle.DefaultConfig(), Drain: drain.DefaultConfig(),
		Scheduler: scheduler.DefaultConfig()}
}

// AddFlags registers every controller's settings under kube-controller-manager's
// (or Draino's, or kube-scheduler's) flag names. `run` and `simulate` share it.
func (c *Config) AddFlags(fs *pflag.FlagSet) {
	c.NodeLifecycle.AddFlags(fs)
	c.NodeIPAM.AddFlags(fs)
	c.CloudNodeLifecycle.AddFlags(fs)
	c.Cloud.AddFlags(fs)
	c.Drain.AddFlags(fs)
	c.Scheduler.AddFlags(fs)
}

// Validate checks the settings of the selected controllers.
func (c *Config) Validate(selected []string) error {
	errs := []error{c.NodeLifecycle.Validate()}
	if slices.Contains(selected, nodeipam.Name) {
		_, err := c.NodeIPAM.Parse()
		errs = append(errs, err)
	}
	if slices.Contains(selected, cloudnodelifecycle.Name) {
		cnl := c.cloudConfig()
		errs = append(errs, cnl.Validate())
		if c.Cloud.Name == "" {
			errs = append(errs, errors.New("the cloudnodelifecycle controller needs --cloud-provider"))
		} else if _, err := c.Cloud.Build(nil); err != nil {
			errs = append(errs, err)
		}
	}
	if slices.Contains(selected, drain.Name) {
		if !c.Drain.Configured() {
			errs = append(errs, errors.New("the drain controller needs --drain-condition (e.g. --drain-condition=KernelDeadlock=True,10m) or --drain-rules FILE"))
		} else {
			d := c.drainConfig()
			errs = append(errs, d.Validate())
		}
	}
	if slices.Contains(selected, scheduler.Name) {
		errs = append(errs, c.Scheduler.Validate())
	}
	return errors.Join(errs...)
}

// Select drops controllers that "*" selected but that are off by
// configuration, as kube-controller-manager does: nodeipam runs only with
// --allocate-node-cidrs. explicit are the names given one by one.
func (c *Config) Select(resolved, explicit []string) []string {
	out := slices.Clone(resolved)
	drop := func(name string) {
		if !slices.Contains(explicit, name) {
			out = slices.DeleteFunc(out, func(n string) bool { return n == name })
		}
	}
	if !c.NodeIPAM.AllocateNodeCIDRs {
		drop(nodeipam.Name)
	}
	if c.Cloud.Name == "" {
		drop(cloudnodelifecycle.Name)
	}
	if !c.Drain.Configured() {
		drop(drain.Name)
	}
	return out
}

// cloudConfig is the cloud controller's settings with the shared monitor period.
func (c *Config) cloudConfig() cloudnodelifecycle.Config {
	cnl := c.CloudNodeLifecycle
	cnl.NodeMonitorPeriod = c.NodeLifecycle.NodeMonitorPeriod
	return cnl
}

// drainConfig is the drain controller's settings with the shared incident
// guard and the node lifecycle controller's zone threshold.
func (c *Config) drainConfig() drain.Config {
	d := c.Drain
	d.Budget.MaxUnhealthyNodes = c.CloudNodeLifecycle.MaxUnhealthyNodes
	d.UnhealthyZoneThreshold = c.NodeLifecycle.UnhealthyZoneThreshold
	return d
}

// Constructors builds every controller; dry run comes from the manager.
func Constructors(cfg Config) map[string]manager.Constructor {
	return map[string]manager.Constructor{
		nodelifecycle.Name: func(c manager.Context) (manager.Controller, error) {
			nl := cfg.NodeLifecycle
			nl.DryRun = c.DryRun
			return nodelifecycle.New(nl, nodelifecycle.Deps{
				Client: c.Client, Nodes: c.Informers.Core().V1().Nodes(), Pods: c.Informers.Core().V1().Pods(),
				Leases: c.LeaseInformers.Coordination().V1().Leases(), Recorder: c.Recorder(nodelifecycle.EventSource),
				Registry: c.Registry, Clock: c.Clock,
			})
		},
		nodeipam.Name: func(c manager.Context) (manager.Controller, error) {
			ipam := cfg.NodeIPAM
			ipam.DryRun = c.DryRun
			return nodeipam.New(ipam, nodeipam.Deps{Client: c.Client, Nodes: c.Informers.Core().V1().Nodes(),
				Recorder: c.Recorder(nodeipam.EventSource), Registry: c.Registry})
		},
		cloudnodelifecycle.Name: func(c manager.Context) (manager.Controller, error) {
			cloud, err := cfg.Cloud.Build(c.RESTConfig)
			if err != nil {
				return nil, err
			}
			cnl := cfg.cloudConfig()
			cnl.DryRun = c.DryRun
			return cloudnodelifecycle.New(cnl, cloudnodelifecycle.Deps{Client: c.Client, Nodes: c.Informers.Core().V1().Nodes(),
				Cloud: cloud, Recorder: c.Recorder(cloudnodelifecycle.EventSource), Registry: c.Registry, Clock: c.Clock})
		},
		drain.Name: func(c manager.Context) (manager.Controller, error) {
			d := cfg.drainConfig()
			d.DryRun = c.DryRun
			return drain.New(d, drain.Deps{Client: c.Client, Nodes: c.Informers.Core().V1().Nodes(), Pods: c.Informers.Core().V1().Pods(),
				Recorder: c.Recorder(drain.EventSource), Registry: c.Registry, Clock: c.Clock})
		},
		scheduler.Name: func(c manager.Context) (manager.Controller, error) {
			return scheduler.New(cfg.Scheduler, scheduler.Deps{Client: c.Client, Nodes: c.Informers.Core().V1().Nodes(),
				Pods: c.Informers.Core().V1().Pods(), PDBs: c.Informers.Policy().V1().PodDisruptionBudgets(),
				Recorder: c.Recorder(cfg.Scheduler.SchedulerName), Registry: c.Registry, Clock: c.Clock, DryRun: c.DryRun})
		},
		tainteviction.Name: func(c manager.Context) (manager.Controller, error) {
			return tainteviction.New(tainteviction.Config{DryRun: c.DryRun}, tainteviction.Deps{
				Client: c.Client, Nodes: c.Informers.Core().V1().Nodes(), Pods: c.Informers.Core().V1().Pods(),
				Recorder: c.Recorder(tainteviction.EventSource), Registry: c.Registry, Clock: c.Clock,
			})
		},
	}
}
