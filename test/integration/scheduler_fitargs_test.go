package integration

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/nodeshepherd/nodeshepherd/pkg/controller/scheduler"
	"github.com/nodeshepherd/nodeshepherd/pkg/controlplane"
	"github.com/nodeshepherd/nodeshepherd/pkg/manager"
	"github.com/nodeshepherd/nodeshepherd/test/framework"
)

// fitProfile is one NodeResourcesFit configuration under a scheduler name
// of its own: kube-scheduler's args, and the same as nodeshepherd's flags,
// or (fromFile) the args themselves in a KubeSchedulerConfiguration file.
type fitProfile struct {
	name                     string
	args                     map[string]any
	strategy, shape, ignored string
	fromFile                 bool
}

var fitProfiles = []fitProfile{
	{name: "fit-most", strategy: scheduler.StrategyMostAllocated,
		args: map[string]any{"scoringStrategy": map[string]any{"type": "MostAllocated",
			"resources": []any{map[string]any{"name": "cpu", "weight": 1}, map[string]any{"name": "memory", "weight": 1}}}}},
	{name: "fit-ratio", strategy: scheduler.StrategyRequestedToCapacityRatio, shape: "0=0,100=10", fromFile: true,
		args: map[string]any{"scoringStrategy": map[string]any{"type": "RequestedToCapacityRatio",
			"resources":                []any{map[string]any{"name": "cpu", "weight": 1}, map[string]any{"name": "memory", "weight": 1}},
			"requestedToCapacityRatio": map[string]any{"shape": []any{map[string]any{"utilization": 0, "score": 0}, map[string]any{"utilization": 100, "score": 10}}}}}},
	{name: "fit-ignore", ignored: "example.com/dongle", fromFile: true,
		args: map[string]any{"ignoredResources": []any{"example.com/dongle"}}},
}

// fitNode creates a Ready node of 4 CPUs and 8Gi without a kubelet, and
// loads it with a bound pod of cpu millicores and twice as many MiB of
// memory per millicore (the node's own ratio, so that BalancedAllocation
// scores every node alike and NodeResourcesFit decides).
func fitNode(t *testing.T, client kubernetes.Interface, name string, cpu int64) {
	t.Helper()
	createParityNode(t, client, parityNode{name: name, group: "fit",
		alloc: v1.ResourceList{v1.ResourceCPU: resource.MustParse("4"), v1.ResourceMemory: resource.MustParse("8Gi"), v1.ResourcePods: resource.MustParse("110")}})
	if cpu > 0 {
		load := fitPod("load-"+name, v1.DefaultSchedulerName, cpu)
		load.Spec.NodeName = name
		// Retried until kube-controller-manager made the ServiceAccount.
		(&preemptionCluster{client: client}).create(t, load)
	}
}

func fitPod(name, schedulerName string, milliCPU int64) *v1.Pod {
	return &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: parityNamespace},
		Spec: v1.PodSpec{SchedulerName: schedulerName, TerminationGracePeriodSeconds: ptr.To[int64](0),
			Containers: []v1.Container{{Name: "c", Image: parityPauseImage, Resources: v1.ResourceRequirements{Requests: v1.ResourceList{
				v1.ResourceCPU:    *resource.NewMilliQuantity(milliCPU, resource.DecimalSI),
				v1.ResourceMemory: *resource.NewQuantity(milliCPU*2<<20, resource.BinarySI)}}}}}}
}

// runFitParity runs the pods through kube-scheduler's profiles (upstream)
// or nodeshepherd's schedulers, one per profile, and returns where they went.
func runFitParity(t *testing.T, upstream bool) parityOutcome {
	cfg := controlplane.Config{ControllerManager: true, Scheduler: upstream}
	if upstream {
		sc := &controlplane.SchedulerConfig{QPS: 50, Burst: 100, PodInitialBackoffSeconds: 1, PodMaxBackoffSeconds: 1}
		for _, p := range fitProfiles {
			sc.Profiles = append(sc.Profiles, controlplane.SchedulerProfile{SchedulerName: p.name, NodeResourcesFit: p.args})
		}
		cfg.SchedulerConfig = sc
	}
	cp := startControlPlaneAlone(t, cfg)
	client := framework.Client(t, cp)
	if !upstream {
		file := writeFitProfiles(t)
		names := []string{v1.DefaultSchedulerName}
		mods := []func(*scheduler.Config){func(*scheduler.Config) {}}
		for _, p := range fitProfiles {
			names = append(names, p.name)
			mods = append(mods, func(c *scheduler.Config) {
				if p.fromFile {
					c.KubeSchedulerConfig = file
					return
				}
				if p.strategy != "" {
					c.FitStrategy = p.strategy
				}
				c.FitShape, c.FitIgnoredResources = p.shape, p.ignored
			})
		}
		for i, name := range names {
			ctrl := fastLifecycle(100)
			ctrl.Scheduler.SchedulerName = name
			ctrl.Scheduler.PodInitialBackoff = 100 * time.Millisecond
			ctrl.Scheduler.PodMaxBackoff = time.Second
			mods[i](&ctrl.Scheduler)
			framework.StartNodeShepherd(t, cp.RESTConfig(), ctrl, func(o *manager.Options) { o.Controllers = []string{scheduler.Name} })
		}
	}
	// 2, 1 and 0 CPUs (with 4, 2 and 0 GiB) of 4 taken.
	for i, cpu := range []int64{2000, 1000, 0} {
		fitNode(t, client, fmt.Sprintf("fit-%d", i+1), cpu)
	}
	out := parityOutcome{}
	decide := func(p *v1.Pod) {
		(&preemptionCluster{client: client}).create(t, p)
		out[p.Name] = framework.WaitPodDecision(t, client, parityNamespace, p.Name, 60*time.Second)
	}
	decide(fitPod("most", "fit-most", 500))
	decide(fitPod("ratio", "fit-ratio", 500))
	decide(fitPod("least", v1.DefaultSchedulerName, 500))
	dongle := func(name, schedulerName string) *v1.Pod {
		p := fitPod(name, schedulerName, 500)
		p.Spec.Containers[0].Resources.Requests["example.com/dongle"] = resource.MustParse("1")
		p.Spec.Containers[0].Resources.Limits = v1.ResourceList{"example.com/dongle": resource.MustParse("1")}
		return p
	}
	decide(dongle("dongle-ignored", "fit-ignore"))
	decide(dongle("dongle", v1.DefaultSchedulerName))
	return out
}

// writeFitProfiles writes the profiles kube-scheduler is given as a
// KubeSchedulerConfiguration file for nodeshepherd's --kube-scheduler-config.
func writeFitProfiles(t *testing.T) string {
	var profiles []any
	for _, p := range fitProfiles {
		profiles = append(profiles, map[string]any{"schedulerName": p.name,
			"pluginConfig": []any{map[string]any{"name": "NodeResourcesFit", "args": p.args}}})
	}
	data, err := yaml.Marshal(map[string]any{"apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "KubeSchedulerConfiguration", "profiles": profiles})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "kube-scheduler.yaml")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestSchedulerFitStrategiesParity (issue 48 point 4): NodeResourcesFit's
// scoring strategies and ignored resources, set as kube-scheduler's
// NodeResourcesFitArgs in profiles of its own and as nodeshepherd's
// --node-resources-fit-* flags (MostAllocated) or --kube-scheduler-config
// file (the others, the args kube-scheduler is given), place the same pods
// on the same nodes of the real API server: MostAllocated and a packing
// RequestedToCapacityRatio on the fullest node, LeastAllocated on the
// emptiest, and a pod asking for an extended resource no node has fits once
// the resource is ignored.
func TestSchedulerFitStrategiesParity(t *testing.T) {
	want := parityOutcome{
		"most":           {Node: "fit-1"},
		"ratio":          {Node: "fit-1"},
		"least":          {Node: "fit-3"},
		"dongle-ignored": {Node: "fit-3"},
		"dongle": {Reason: v1.PodReasonUnschedulable, Message: "0/3 nodes are available: 3 Insufficient example.com/dongle." +
			" preemption: 0/3 nodes are available: 3 Preemption is not helpful for scheduling."},
	}
	bothSchedulersDecide(t, want, runFitParity)
}
