package readinessrestore

import (
	_ "embed"
	"github.com/nodeshepherd/nodeshepherd/pkg/descriptor"
	"github.com/nodeshepherd/nodeshepherd/pkg/manager"
)

// rbacRules are the rules of the controller's ClusterRole; `make generate`
// writes deploy/components/readinessrestore and the Helm chart's copy from them.
//
//go:embed rbac.yaml
var rbacRules []byte

// Descriptor tells nodeshepherd how to configure, check and build the controller.
// It replaces nothing and is a companion: it writes only the Ready condition
// of pods kube-controller-manager marked NotReady, after their node came
// back, which kube-controller-manager never writes again.
var Descriptor = descriptor.Descriptor[Config]{
	Info: descriptor.Info{
		Name: Name,
		Help: "readiness restored (seed 002) next to kube-controller-manager's node lifecycle:\n" +
			"pods it marked NotReady get Ready=True back once their node is Ready again for\n" +
			"--readiness-restore-delay and their kubelet did not re-post them (runs only when\n" +
			"named: --controllers=readinessrestore; nodelifecycle restores its own marks).",
		ClusterRole: "nodeshepherd:readinessrestore",
		RBACRules:   rbacRules,
		Companion:   true,
	},
	Sections: []descriptor.Section[Config]{{Name: "readinessRestore",
		Help: "The readinessrestore controller, for pods kube-controller-manager marked NotReady.", AddFlags: (*Config).AddFlags}},
	Default: DefaultConfig,
	// With nodeshepherd's nodelifecycle (the default) it has nothing to do.
	Enabled:  func(*Config) bool { return false },
	Validate: (*Config).Validate,
	New: func(c *Config, ctx manager.Context) (manager.Controller, error) {
		cfg := *c
		cfg.DryRun = ctx.DryRun
		return New(cfg, Deps{Client: ctx.Client, Nodes: ctx.Informers.Core().V1().Nodes(), Pods: ctx.Informers.Core().V1().Pods(),
			Recorder: ctx.Recorder(EventSource), Registry: ctx.Registry, Clock: ctx.Clock, ProgressTimeout: ctx.ProgressTimeout})
	},
}
