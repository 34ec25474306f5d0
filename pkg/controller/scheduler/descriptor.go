package scheduler

import (
	_ "embed"

	"github.com/nodeshepherd/nodeshepherd/pkg/companion"
	"github.com/nodeshepherd/nodeshepherd/pkg/descriptor"
	"github.com/nodeshepherd/nodeshepherd/pkg/manager"
)

// rbacRules are the rules of the controller's ClusterRole; `make generate`
// writes deploy/components/scheduler and the Helm chart's copy from them.
//
//go:embed rbac.yaml
var rbacRules []byte

// Descriptor tells nodeshepherd how to configure, check and build the
// scheduler. It replaces no kube-controller-manager controller: it runs next
// to kube-scheduler under its own name, or in its place as default-scheduler;
// another scheduler seen serving its name (kube-scheduler's leader Lease for
// default-scheduler, or their writes on its pods) refuses or stops it
// (companion.Scheduler).
var Descriptor = descriptor.Descriptor[Config]{
	Info: descriptor.Info{
		Name: Name,
		Help: "schedules the pods whose spec.schedulerName is --scheduler-name (default\n" +
			"nodeshepherd-scheduler; default-scheduler replaces kube-scheduler, and is refused\n" +
			"while a kube-scheduler is seen serving it): priority queue, kube-scheduler 1.37's\n" +
			"default filters and scores, binding, preemption with PodDisruptionBudgets;\n" +
			"topology spread, inter-pod (anti-)affinity, volumes (PVC binding, volume zones,\n" +
			"ReadWriteOncePod, CSI limits, storage capacity), node declared features, image\n" +
			"locality, in-place resizes and Dynamic Resource Allocation (resource claims\n" +
			"allocated with the upstream structured allocator) included. Pods using in-tree\n" +
			"disks, scheduling groups or DRA features it does not implement (prioritized\n" +
			"lists, consumable capacity, extended resources backed by DRA) are\n" +
			"refused (left Pending, reason SchedulerError).",
		ClusterRole: "nodeshepherd:scheduler",
		RBACRules:   rbacRules,
		// A second scheduler next to kube-scheduler under its own --scheduler-name.
		Companion: true,
	},
	Sections: []descriptor.Section[Config]{{Name: "scheduler",
		Help: "The scheduler (kube-scheduler's names for its settings).", AddFlags: (*Config).AddFlags}},
	Default:      DefaultConfig,
	Validate:     (*Config).Validate,
	ConflictsFor: func(c *Config) []companion.Claim { return companion.Scheduler(c.SchedulerName) },
	New: func(c *Config, ctx manager.Context) (manager.Controller, error) {
		return New(*c, Deps{Client: ctx.Client, Nodes: ctx.Informers.Core().V1().Nodes(),
			Pods: ctx.Informers.Core().V1().Pods(), Namespaces: ctx.Informers.Core().V1().Namespaces(), PDBs: ctx.Informers.Policy().V1().PodDisruptionBudgets(),
			Services: ctx.Informers.Core().V1().Services(), ReplicationControllers: ctx.Informers.Core().V1().ReplicationControllers(),
			ReplicaSets: ctx.Informers.Apps().V1().ReplicaSets(), StatefulSets: ctx.Informers.Apps().V1().StatefulSets(),
			PersistentVolumeClaims: ctx.Informers.Core().V1().PersistentVolumeClaims(), PersistentVolumes: ctx.Informers.Core().V1().PersistentVolumes(),
			StorageClasses: ctx.Informers.Storage().V1().StorageClasses(), CSINodes: ctx.Informers.Storage().V1().CSINodes(),
			CSIDrivers: ctx.Informers.Storage().V1().CSIDrivers(), CSIStorageCapacities: ctx.Informers.Storage().V1().CSIStorageCapacities(),
			VolumeAttachments: ctx.Informers.Storage().V1().VolumeAttachments(),
			ResourceClaims:    ctx.Informers.Resource().V1().ResourceClaims(), ResourceSlices: ctx.Informers.Resource().V1().ResourceSlices(),
			DeviceClasses: ctx.Informers.Resource().V1().DeviceClasses(), DeviceTaintRules: ctx.Informers.Resource().V1().DeviceTaintRules(),
			Recorder: ctx.Recorder(c.SchedulerName), Registry: ctx.Registry, Clock: ctx.Clock, DryRun: ctx.DryRun,
			ProgressTimeout: ctx.ProgressTimeout})
	},
}
