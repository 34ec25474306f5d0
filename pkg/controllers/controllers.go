// Package controllers is the registry of nodeshepherd's controllers: their
// names, start order, and how each is built from the manager's shared parts.
package controllers

import (
	"github.com/nodeshepherd/nodeshepherd/pkg/controller/nodelifecycle"
	"github.com/nodeshepherd/nodeshepherd/pkg/controller/tainteviction"
	"github.com/nodeshepherd/nodeshepherd/pkg/manager"
)

// Names lists the controllers in start order.
var Names = []string{nodelifecycle.Name, tainteviction.Name}

// Config holds every controller's settings.
type Config struct {
	NodeLifecycle nodelifecycle.Config
}

// Default returns every controller's defaults.
func Default() Config {
	return Config{NodeLifecycle: nodelifecycle.DefaultConfig()}
}

// Validate checks every controller's settings.
func (c *Config) Validate() error {
	return c.NodeLifecycle.Validate()
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
		tainteviction.Name: func(c manager.Context) (manager.Controller, error) {
			return tainteviction.New(tainteviction.Config{DryRun: c.DryRun}, tainteviction.Deps{
				Client: c.Client, Nodes: c.Informers.Core().V1().Nodes(), Pods: c.Informers.Core().V1().Pods(),
				Recorder: c.Recorder(tainteviction.EventSource), Registry: c.Registry, Clock: c.Clock,
			})
		},
	}
}
