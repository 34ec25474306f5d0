package tainteviction

import (
	_ "embed"
	"github.com/nodeshepherd/nodeshepherd/pkg/companion"
	"github.com/nodeshepherd/nodeshepherd/pkg/descriptor"
	"github.com/nodeshepherd/nodeshepherd/pkg/manager"
)

// rbacRules are the rules of the controller's ClusterRole; `make generate`
// writes deploy/components/tainteviction and the Helm chart's copy from them.
//
//go:embed rbac.yaml
var rbacRules []byte

// Descriptor tells nodeshepherd how to build the controller; it has no settings.
var Descriptor = descriptor.Descriptor[Config]{
	Info: descriptor.Info{
		Name: Name,
		Help: "deletes pods that do not tolerate NoExecute taints after their\n" +
			"tolerationSeconds. Replaces taint-eviction-controller.",
		ClusterRole: "nodeshepherd:tainteviction",
		RBACRules:   rbacRules,
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
