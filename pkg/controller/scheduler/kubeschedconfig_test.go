package scheduler

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/sets"
)

const ksHead = "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n"

// fitProfileYAML is a file with one profile for name whose
// NodeResourcesFit args are args (indented under args:).
func fitProfileYAML(name, args string) string {
	return ksHead + "profiles:\n- schedulerName: " + name + "\n  pluginConfig:\n  - name: NodeResourcesFit\n    args:\n" + args
}

// NodeResourcesFitArgs in a KubeSchedulerConfiguration file read as
// kube-scheduler 1.37 reads them: its defaults (no scoringStrategy, no
// resources, a weight of 0), its profiles' rules, and the same result as
// the --node-resources-fit-* flags for the same settings.
func TestKubeSchedulerConfigFitArgs(t *testing.T) {
	for _, tc := range []struct {
		name, file string
		// The same settings as flags: strategy, resources, shape, ignored, groups.
		flags [5]string
	}{
		{"no profiles: default-scheduler with the defaults", ksHead, [5]string{}},
		{"a lone profile without a name is default-scheduler", ksHead + "profiles:\n- pluginConfig: []\n", [5]string{}},
		{"no args", fitProfileYAML("default-scheduler", "      {}\n"), [5]string{}},
		{"no scoringStrategy: LeastAllocated on cpu and memory", fitProfileYAML("default-scheduler", "      ignoredResources: [example.com/dongle]\n"),
			[5]string{"", "", "", "example.com/dongle", ""}},
		{"MostAllocated, weights as given, 0 is 1", fitProfileYAML("default-scheduler", `      scoringStrategy:
        type: MostAllocated
        resources:
        - {name: cpu, weight: 3}
        - {name: memory, weight: 0}
        - name: example.com/gpu
`), [5]string{"MostAllocated", "cpu=3,memory=1,example.com/gpu=1", "", "", ""}},
		{"MostAllocated without resources: cpu and memory", fitProfileYAML("default-scheduler", "      scoringStrategy: {type: MostAllocated}\n"),
			[5]string{"MostAllocated", "", "", "", ""}},
		{"RequestedToCapacityRatio with its shape, typed args", fitProfileYAML("default-scheduler", `      apiVersion: kubescheduler.config.k8s.io/v1
      kind: NodeResourcesFitArgs
      scoringStrategy:
        type: RequestedToCapacityRatio
        requestedToCapacityRatio:
          shape:
          - {utilization: 0, score: 0}
          - {utilization: 40, score: 2}
          - {utilization: 100, score: 10}
      ignoredResourceGroups: [vendor.io, example.com]
`), [5]string{"RequestedToCapacityRatio", "", "0=0,40=2,100=10", "", "vendor.io,example.com"}},
		{"the profile for the name among several", ksHead + `profiles:
- schedulerName: default-scheduler
- schedulerName: packer
  pluginConfig:
  - name: NodeResourcesFit
    args:
      scoringStrategy: {type: MostAllocated}
`, [5]string{"MostAllocated", "", "", "", ""}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			schedulerName := "default-scheduler"
			if strings.Contains(tc.file, "packer") {
				schedulerName = "packer"
			}
			got, err := parseKubeSchedulerConfig([]byte(tc.file), schedulerName)
			if err != nil {
				t.Fatal(err)
			}
			f := tc.flags
			if f[0] == "" {
				f[0] = DefaultConfig().FitStrategy
			}
			want, err := parseFitArgs(f[0], f[1], f[2], f[3], f[4])
			if err != nil {
				t.Fatal(err)
			}
			if !sameFitArgs(got, want) {
				t.Errorf("got %+v, want %+v (as the flags %q)", got, want, f)
			}
		})
	}
}

func sameFitArgs(a, b *fitArgs) bool {
	eq := func(x, y sets.Set[string]) bool { return x.Len() == y.Len() && x.IsSuperset(y) }
	return a.strategy == b.strategy && slices.Equal(a.resources, b.resources) && slices.Equal(a.shape, b.shape) &&
		eq(a.ignored, b.ignored) && eq(a.ignoredGroups, b.ignoredGroups)
}

// What kube-scheduler's decoding and validation refuse is refused with the
// line and the field path, and so is every setting of the format that
// nodeshepherd does not take from it, naming what to use instead.
func TestKubeSchedulerConfigRefused(t *testing.T) {
	fit := func(args string) string { return fitProfileYAML("default-scheduler", args) }
	for _, tc := range []struct{ file, wantErr string }{
		{"", "the file is empty"},
		{"apiVersion: kubescheduler.config.k8s.io/v1beta3\nkind: KubeSchedulerConfiguration\n",
			`line 1: apiVersion: want kubescheduler.config.k8s.io/v1, got "kubescheduler.config.k8s.io/v1beta3"`},
		{"kind: KubeSchedulerConfiguration\n", "want apiVersion: kubescheduler.config.k8s.io/v1 and kind: KubeSchedulerConfiguration"},
		{ksHead + "profile: []\n", "line 3: profile: unknown field"},
		{ksHead + "clientConnection:\n  kubeconfig: /etc/k\n", "line 3: clientConnection: not read by nodeshepherd's scheduler, which takes only the profiles' NodeResourcesFit args from this file: nodeshepherd run's --kubeconfig"},
		{ksHead + "percentageOfNodesToScore: 50\n", "set --percentage-of-nodes-to-score instead"},
		{ksHead + "profiles:\n- schedulerName: other\n", "profiles: none has schedulerName default-scheduler (--scheduler-name), only other"},
		{ksHead + "profiles:\n- schedulerName: a\n- pluginConfig: []\n", "line 5: profiles[1].schedulerName: required"},
		{ksHead + "profiles:\n- schedulerName: default-scheduler\n- schedulerName: default-scheduler\n", `profiles[1].schedulerName: duplicate value "default-scheduler"`},
		{ksHead + "profiles:\n- schedulerName: default-scheduler\n  plugins:\n    score:\n      disabled: [{name: ImageLocality}]\n",
			"line 5: profiles[0].plugins: not read by nodeshepherd's scheduler, which runs kube-scheduler 1.37's default plugins"},
		{ksHead + "profiles:\n- schedulerName: default-scheduler\n  pluginConfig:\n  - name: DefaultPreemption\n    args: {minCandidateNodesPercentage: 5}\n",
			"line 6: profiles[0].pluginConfig[0]: DefaultPreemption's args are not read by nodeshepherd's scheduler: set --min-candidate-nodes-percentage"},
		{ksHead + "profiles:\n- schedulerName: default-scheduler\n  pluginConfig:\n  - name: VolumeBinding\n", "VolumeBinding's args are not read by nodeshepherd's scheduler: nodeshepherd takes no args for it"},
		{ksHead + "profiles:\n- schedulerName: default-scheduler\n  pluginConfig:\n  - name: NodeResourcesFit\n  - name: NodeResourcesFit\n",
			`line 7: profiles[0].pluginConfig[1].name: duplicate value "NodeResourcesFit"`},
		{fit("      scoringStrategy: {type: MostAlocated}\n"),
			`line 8: profiles[0].pluginConfig[0].args.scoringStrategy.type: unsupported value "MostAlocated": want one of LeastAllocated, MostAllocated, RequestedToCapacityRatio`},
		// A scoringStrategy without its type is refused by kube-scheduler
		// too (it is not one of the supported ones).
		{fit("      scoringStrategy:\n        resources: [{name: cpu, weight: 1}]\n"), "args.scoringStrategy.type: required"},
		{fit("      scoringStrategy:\n        type: MostAllocated\n        resources: [{name: cpu, weight: 101}]\n"),
			"line 10: profiles[0].pluginConfig[0].args.scoringStrategy.resources[0].weight: 101: resource weight of cpu not in valid range (0, 100]"},
		{fit("      scoringStrategy:\n        type: MostAllocated\n        resources: [{name: cpu, weight: -1}]\n"), "resource weight of cpu not in valid range"},
		{fit("      scoringStrategy:\n        type: MostAllocated\n        resources: [{name: cpu, weight: 2.5}]\n"), `resources[0].weight: want an integer, got "2.5"`},
		{fit("      scoringStrategy:\n        type: MostAllocated\n        resources: [{name: cpu, weight: \"2\"}]\n"), `want an integer, got "2"`},
		{fit("      scoringStrategy:\n        type: MostAllocated\n        resources: [{name: cpu, wieght: 2}]\n"), "resources[0].wieght: unknown field"},
		{fit("      scoringStrategy:\n        type: MostAllocated\n        resources: [{name: cpu}, {name: cpu}]\n"), "resources[1].name: cpu is listed twice"},
		{fit("      scoringStrategy:\n        type: RequestedToCapacityRatio\n"),
			"args.scoringStrategy.requestedToCapacityRatio.shape: required: RequestedToCapacityRatio needs at least one point"},
		{fit("      scoringStrategy:\n        type: RequestedToCapacityRatio\n        requestedToCapacityRatio: {shape: []}\n"), "shape: required"},
		{fit("      scoringStrategy:\n        type: RequestedToCapacityRatio\n        requestedToCapacityRatio:\n          shape: [{utilization: 50, score: 1}, {utilization: 50, score: 2}]\n"),
			"shape[1].utilization: 50: values must be sorted in increasing order"},
		{fit("      scoringStrategy:\n        type: RequestedToCapacityRatio\n        requestedToCapacityRatio:\n          shape: [{utilization: 0, score: 11}]\n"),
			"shape[0]: utilization 0, score 11: want utilization 0-100 and score 0-10"},
		{fit("      scoringStrategy:\n        type: MostAllocated\n        requestedToCapacityRatio:\n          shape: [{utilization: 0, score: 1}]\n"),
			"args.scoringStrategy.requestedToCapacityRatio: used only by type RequestedToCapacityRatio, not MostAllocated"},
		{fit("      ignoredResources: [cpu]\n"), `line 8: profiles[0].pluginConfig[0].args.ignoredResources[0]: "cpu" is not an extended resource`},
		{fit("      ignoredResourceGroups: [example.com/gpu]\n"), `args.ignoredResourceGroups[0]: "example.com/gpu" is not a resource group`},
		{fit("      ignoredResources: example.com/gpu\n"), "args.ignoredResources: want a list"},
		{fit("      kind: DefaultPreemptionArgs\n"), `args.kind: want NodeResourcesFitArgs, got "DefaultPreemptionArgs"`},
		{fit("      scoringStrategy: {type: MostAllocated}\n      scoringStrategy: {type: LeastAllocated}\n"), "line 9: profiles[0].pluginConfig[0].args.scoringStrategy: duplicate field"},
		{fit("      ScoringStrategy: {type: MostAllocated}\n"), "args.ScoringStrategy: unknown field"},
		// Another profile's NodeResourcesFit args are validated too, as
		// kube-scheduler validates every profile.
		{ksHead + "profiles:\n- schedulerName: default-scheduler\n- schedulerName: x\n  pluginConfig:\n  - name: NodeResourcesFit\n    args: {scoringStrategy: {type: Most}}\n",
			`profiles[1].pluginConfig[0].args.scoringStrategy.type: unsupported value "Most"`},
	} {
		_, err := parseKubeSchedulerConfig([]byte(tc.file), "default-scheduler")
		if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
			t.Errorf("%s\n: %v\nwant error %q", tc.file, err, tc.wantErr)
		}
	}

	// Another profile's settings that nodeshepherd does not take are
	// kube-scheduler's business: only the profile served is refused for them.
	file := ksHead + "profiles:\n- schedulerName: default-scheduler\n- schedulerName: x\n  plugins: {score: {disabled: [{name: ImageLocality}]}}\n"
	if _, err := parseKubeSchedulerConfig([]byte(file), "default-scheduler"); err != nil {
		t.Errorf("another profile's plugins: %v", err)
	}
}

// --kube-scheduler-config through Config: the file's name in errors, the
// --node-resources-fit-* flags refused next to it, and the args it gives.
func TestKubeSchedulerConfigFlag(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "kube-scheduler.yaml")
	if err := os.WriteFile(path, []byte(fitProfileYAML("packer", "      scoringStrategy: {type: MostAllocated}\n")), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.SchedulerName, cfg.KubeSchedulerConfig = "packer", path
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	if a, _ := cfg.fitArgs(); a.strategy != StrategyMostAllocated {
		t.Errorf("read: %+v", a)
	}
	cfg.SchedulerName = DefaultSchedulerName
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "--kube-scheduler-config: "+path+
		":3: profiles: none has schedulerName nodeshepherd-scheduler (--scheduler-name), only packer") {
		t.Errorf("no profile for the name: %v", err)
	}
	cfg.SchedulerName, cfg.FitShape, cfg.FitStrategy = "packer", "0=0,100=10", StrategyRequestedToCapacityRatio
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "--kube-scheduler-config gives NodeResourcesFit's args: leave out the --node-resources-fit-* flags") {
		t.Errorf("flags next to the file: %v", err)
	}
	cfg = DefaultConfig()
	cfg.KubeSchedulerConfig = filepath.Join(dir, "missing.yaml")
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "--kube-scheduler-config: open ") {
		t.Errorf("a missing file: %v", err)
	}
}

// The RequestedToCapacityRatio example of Kubernetes' "Resource Bin
// Packing" page, given as a KubeSchedulerConfiguration file, on the node
// score's 0-100 scale (the page's shape scores 0-10 are x10, so each
// resource scores its utilization): a pod of intel.com/foo 2, 256Mi and 2
// CPUs, weights foo 5, memory 1, cpu 3, shape {0,0},{100,10}.
//
// Node 1 (foo 4, 1Gi, 8 CPUs; used foo 1, 256Mi, 1 CPU): foo 3/4 = 75,
// memory 512Mi/1Gi = 50, cpu 3/8 = 37 (37.5 truncated); (75*5 + 50*1 +
// 37*3) / 9 = 536/9 = 59.6, rounded 60 (the page: 5 on its 0-10 scale).
// Node 2 (foo 8, 1Gi, 8 CPUs; used foo 2, 512Mi, 6 CPUs): foo 4/8 = 50,
// memory 768Mi/1Gi = 75, cpu 8/8 = 100; (250 + 75 + 300) / 9 = 69.4,
// rounded 69 (the page: 7).
func TestKubeSchedulerConfigBinPackingExample(t *testing.T) {
	a, err := parseKubeSchedulerConfig([]byte(fitProfileYAML("default-scheduler", `      scoringStrategy:
        type: RequestedToCapacityRatio
        resources:
        - {name: intel.com/foo, weight: 5}
        - {name: memory, weight: 1}
        - {name: cpu, weight: 3}
        requestedToCapacityRatio:
          shape:
          - {utilization: 0, score: 0}
          - {utilization: 100, score: 10}
`)), "default-scheduler")
	if err != nil {
		t.Fatal(err)
	}
	withFoo := func(p *v1.Pod, cpu, foo int64, mem string) *v1.Pod {
		r := p.Spec.Containers[0].Resources
		r.Requests[v1.ResourceCPU] = *resource.NewMilliQuantity(cpu, resource.DecimalSI)
		r.Requests[v1.ResourceMemory] = resource.MustParse(mem)
		r.Requests["intel.com/foo"] = *resource.NewQuantity(foo, resource.DecimalSI)
		r.Limits = v1.ResourceList{"intel.com/foo": *resource.NewQuantity(foo, resource.DecimalSI)}
		p.Spec.Containers[0].Resources = r
		return p
	}
	sc := newScorer(newPodInfo(withFoo(pod("p", 0, 0), 2000, 2, "256Mi")))
	sc.fit = a
	for _, tc := range []struct {
		foo, usedCPU, usedFoo int64
		usedMem               string
		want                  int64
	}{
		{4, 1000, 1, "256Mi", 60},
		{8, 6000, 2, "512Mi", 69},
	} {
		c := newCache()
		n := node("n", 8000, 110)
		n.Status.Allocatable[v1.ResourceMemory] = resource.MustParse("1Gi")
		n.Status.Allocatable["intel.com/foo"] = *resource.NewQuantity(tc.foo, resource.DecimalSI)
		c.setNode(n)
		c.setPod(withFoo(pod("used", 0, 0, onNode("n")), tc.usedCPU, tc.usedFoo, tc.usedMem))
		if got := sc.raw(c.nodes["n"]).fit; got != tc.want {
			t.Errorf("node with foo %d: score %d, want %d", tc.foo, got, tc.want)
		}
	}
}

// FuzzKubeSchedulerConfig: any file is read without a panic, an error
// carries its line, and what is accepted is what the --node-resources-fit-*
// flags accept for the same settings, giving the same args.
func FuzzKubeSchedulerConfig(f *testing.F) {
	f.Add([]byte(ksHead))
	f.Add([]byte(fitProfileYAML("default-scheduler", "      scoringStrategy: {type: MostAllocated, resources: [{name: cpu, weight: 2}]}\n")))
	f.Add([]byte(fitProfileYAML("default-scheduler", "      scoringStrategy:\n        type: RequestedToCapacityRatio\n        requestedToCapacityRatio: {shape: [{utilization: 10, score: 3}]}\n      ignoredResources: [a.b/c]\n      ignoredResourceGroups: [a.b]\n")))
	f.Add([]byte(ksHead + "profiles: [{pluginConfig: [{name: NodeResourcesFit, args: null}]}]\n"))
	f.Add([]byte("{"))
	f.Fuzz(func(t *testing.T, data []byte) {
		a, err := parseKubeSchedulerConfig(data, "default-scheduler")
		if err != nil {
			if !strings.HasPrefix(err.Error(), "line ") {
				t.Fatalf("an error without its line: %v", err)
			}
			return
		}
		var res, shape []string
		for _, r := range a.resources {
			res = append(res, fmt.Sprintf("%s=%d", r.name, r.weight))
		}
		for _, p := range a.shape {
			if p.score%(maxNodeScore/maxShapeScore) != 0 {
				t.Fatalf("a shape score off the 0-10 scale: %+v", a.shape)
			}
			shape = append(shape, fmt.Sprintf("%d=%d", p.utilization, p.score*maxShapeScore/maxNodeScore))
		}
		flags, err := parseFitArgs(a.strategy, strings.Join(res, ","), strings.Join(shape, ","),
			strings.Join(sets.List(a.ignored), ","), strings.Join(sets.List(a.ignoredGroups), ","))
		if err != nil {
			t.Fatalf("accepted from the file %+v, refused as flags: %v", a, err)
		}
		if !sameFitArgs(a, flags) {
			t.Fatalf("from the file %+v, as flags %+v", a, flags)
		}
	})
}
