package tainteviction

import (
	"github.com/nodeshepherd/nodeshepherd/pkg/companion"
	"github.com/nodeshepherd/nodeshepherd/pkg/descriptor"
	"github.com/nodeshepherd/nodeshepherd/pkg/manager"
)

// Descriptor tells nodeshepherd how to build the controller; it has no settings.
var Descriptor = descriptor.Descriptor[Config]{
	Info: descriptor.Info{
		Name: Name,
		Help: "deletes pods that do not tolerate NoExecute taints after their\n" +
			"tolerationSeconds. Replaces taint-eviction-controller.",
		ClusterRole: "nodeshepherd:tainteviction",
		Replaces:    "taint-eviction-controller",
		Conflicts:   companion.TaintEviction,
	},
	Default: func() Config { return Config{} },
	New: func(_ *Config, ctx manager.Context) (manager.Controller, error) {
		return New(Config{DryRun: ctx.DryRun}, Deps{
			Client: ctx.Client, Nodes: ctx.Informers.Core().V1().Nodes(), Pods: ctx.Informers.Core().V1().Pods(),
			Recorder: ctx.Recorder(EventSource), Registry: ctx.Registry, Clock: ctx.Clock, ProgressTimeout: ctx.ProgressTimeout,
		})
	},
}
