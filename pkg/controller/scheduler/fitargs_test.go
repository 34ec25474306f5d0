package scheduler

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/pflag"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/nodeshepherd/nodeshepherd/pkg/config"
	"github.com/nodeshepherd/nodeshepherd/pkg/configfile"
)

func TestParseFitArgsRefusesWhatKubeSchedulerRefuses(t *testing.T) {
	for _, tc := range []struct {
		strategy, resources, shape, ignored, groups string
		wantErr                                     string
	}{
		{"", "", "", "", "", ""},
		{"MostAllocated", "cpu=3,memory=1,example.com/gpu=5", "", "", "", ""},
		{"RequestedToCapacityRatio", "", "0=0, 50=4,100=10", "", "", ""},
		{"", "", "", "example.com/dongle", "example.com,vendor.io", ""},
		{"MostAlocated", "", "", "", "", `--node-resources-fit-strategy: "MostAlocated" is not one of LeastAllocated, MostAllocated, RequestedToCapacityRatio`},
		{"", "cpu=0", "", "", "", `--node-resources-fit-resources: "cpu=0": want <resource>=<weight>, a weight from 1 to 100`},
		{"", "cpu", "", "", "", `"cpu": want <resource>=<weight>`},
		{"", "cpu=1,cpu=2", "", "", "", "cpu is listed twice"},
		{"", "bad name!=1", "", "", "", `"bad name!" is not a resource name`},
		{"RequestedToCapacityRatio", "", "", "", "", "RequestedToCapacityRatio needs a shape"},
		{"MostAllocated", "", "0=0,100=10", "", "", "--node-resources-fit-shape (nodeResourcesFitShape in the configuration file) is used only by --node-resources-fit-strategy=RequestedToCapacityRatio, not MostAllocated"},
		{"RequestedToCapacityRatio", "", "0=0,100=11", "", "", `"100=11": want <utilization>=<score>, utilization 0-100 %, score 0-10`},
		{"RequestedToCapacityRatio", "", "50=1,50=2", "", "", "utilizations must increase: 50 after 50"},
		{"", "", "", "cpu", "", `"cpu" is not an extended resource`},
		{"", "", "", "kubernetes.io/foo", "", "is not an extended resource"},
		{"", "", "", "", "example.com/gpu", `"example.com/gpu" is not a resource group`},
		// The API's own test for a native resource: kubernetes.io/ anywhere.
		{"", "", "", "xkubernetes.io/gpu", "", "is not an extended resource"},
		{"", "", "", "requests.example.com/gpu", "", "is not an extended resource"},
		{"", ",", "", "", "", ""}, // an empty list: the default resources
	} {
		_, err := parseFitArgs(tc.strategy, tc.resources, tc.shape, tc.ignored, tc.groups)
		if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
			t.Errorf("parseFitArgs(%q, %q, %q, %q, %q): %v, want error %q", tc.strategy, tc.resources, tc.shape, tc.ignored, tc.groups, err, tc.wantErr)
		}
	}
	def, err := parseFitArgs(DefaultConfig().FitStrategy, DefaultConfig().FitResources, "", "", "")
	if err != nil || def.strategy != StrategyLeastAllocated || len(def.resources) != 2 {
		t.Errorf("the defaults: %+v, %v", def, err)
	}
}

// fitScoreNode is a node of 4 CPUs and 8Gi holding cpu (millicores) and
// mem (Gi) of requests, and 2 example.com/gpu, 1 of them taken.
func fitScoreNode(t *testing.T, cpu, mem int64) *nodeInfo {
	t.Helper()
	c := newCache()
	n := node("n", 4000, 110)
	n.Status.Allocatable[v1.ResourceMemory] = resource.MustParse("8Gi")
	n.Status.Allocatable["example.com/gpu"] = resource.MustParse("2")
	c.setNode(n)
	used := pod("used", 0, cpu, onNode("n"))
	used.Spec.Containers[0].Resources.Requests[v1.ResourceMemory] = *resource.NewQuantity(mem<<30, resource.BinarySI)
	used.Spec.Containers[0].Resources.Requests["example.com/gpu"] = resource.MustParse("1")
	used.Spec.Containers[0].Resources.Limits = v1.ResourceList{"example.com/gpu": resource.MustParse("1")}
	c.setPod(used)
	return c.nodes["n"]
}

// The strategies' scores, worked by hand from kube-scheduler's formulas: a
// pod of 1 CPU and 2Gi on a node of 4 CPUs and 8Gi that holds 1 CPU and
// 2Gi, so 50 % of both once the pod is there.
func TestFitStrategiesScore(t *testing.T) {
	n := fitScoreNode(t, 1000, 2)
	p := pod("p", 0, 1000)
	p.Spec.Containers[0].Resources.Requests[v1.ResourceMemory] = resource.MustParse("2Gi")
	sc := newScorer(newPodInfo(p))
	for _, tc := range []struct {
		strategy, resources, shape string
		want                       int64
	}{
		{StrategyLeastAllocated, "", "", 50},
		{StrategyMostAllocated, "", "", 50},
		{StrategyRequestedToCapacityRatio, "", "0=0,100=10", 50},
		{StrategyRequestedToCapacityRatio, "", "0=10,100=0", 50},
		{StrategyRequestedToCapacityRatio, "", "0=0,40=2,60=9,100=10", 55}, // 20 + (90-20)*(50-40)/(60-40)
		{StrategyRequestedToCapacityRatio, "", "60=3,100=10", 30},          // flat before the first point
		// The pod asks for no GPU: the GPU is left out of the mean.
		{StrategyMostAllocated, "cpu=1,memory=1,example.com/gpu=8", "", 50},
	} {
		a, err := parseFitArgs(tc.strategy, tc.resources, tc.shape, "", "")
		if err != nil {
			t.Fatal(err)
		}
		sc.fit = a
		if got := sc.raw(n).fit; got != tc.want {
			t.Errorf("%s %s %s: score %d, want %d", tc.strategy, tc.resources, tc.shape, got, tc.want)
		}
	}
	// A pod that asks for the GPU: 2 of 2 taken with it, weighted 8 against
	// cpu's and memory's 1: MostAllocated (50 + 50 + 8*100) / 10 = 90.
	gp := p.DeepCopy()
	gp.Spec.Containers[0].Resources.Requests["example.com/gpu"] = resource.MustParse("1")
	gp.Spec.Containers[0].Resources.Limits = v1.ResourceList{"example.com/gpu": resource.MustParse("1")}
	gsc := newScorer(newPodInfo(gp))
	gsc.fit, _ = parseFitArgs(StrategyMostAllocated, "cpu=1,memory=1,example.com/gpu=8", "", "", "")
	if got := gsc.raw(n).fit; got != 90 {
		t.Errorf("MostAllocated with the GPU: %d, want 90", got)
	}
	// MostAllocated caps at the node's allocatable; LeastAllocated gives 0.
	full := fitScoreNode(t, 3500, 7)
	for strategy, want := range map[string]int64{StrategyMostAllocated: 100, StrategyLeastAllocated: 0} {
		sc.fit, _ = parseFitArgs(strategy, "", "", "", "")
		if got := sc.raw(full).fit; got != want {
			t.Errorf("%s over capacity: %d, want %d", strategy, got, want)
		}
	}
}

// The filter leaves ignored extended resources out, by name or by group.
func TestFitIgnoresExtendedResources(t *testing.T) {
	n := fitScoreNode(t, 0, 0)
	p := pod("p", 0, 100)
	p.Spec.Containers[0].Resources.Requests["example.com/dongle"] = resource.MustParse("1")
	p.Spec.Containers[0].Resources.Limits = v1.ResourceList{"example.com/dongle": resource.MustParse("1")}
	pi := newPodInfo(p)
	if st := fits(pi, n, defaultFitArgs); st.ok() || !strings.Contains(strings.Join(st.reasons, ","), "Insufficient example.com/dongle") {
		t.Errorf("not ignored: %+v, want Insufficient example.com/dongle", st)
	}
	for _, a := range [][2]string{{"example.com/dongle", ""}, {"", "example.com"}} {
		args, err := parseFitArgs("", "", "", a[0], a[1])
		if err != nil {
			t.Fatal(err)
		}
		if st := fits(pi, n, args); !st.ok() {
			t.Errorf("ignored %v: %+v, want it to fit", a, st)
		}
	}
}

func FuzzParseFitArgs(f *testing.F) {
	f.Add("MostAllocated", "cpu=1,memory=2", "", "example.com/x", "example.com")
	f.Add("RequestedToCapacityRatio", "", "0=0,100=10", "", "")
	f.Add("", "cpu=", "=", ",", "/")
	f.Add("MostAllocated", "cpu=1", "0=0,100=10", "", "")
	f.Fuzz(func(t *testing.T, strategy, resources, shape, ignored, groups string) {
		a, err := parseFitArgs(strategy, resources, shape, ignored, groups)
		// The values one by one (as the flags and the configuration file
		// check them) and together (Validate) agree: what passes each
		// flag fails together only on a shape and strategy mismatch.
		eachOK := checked(parseFitStrategy)(strategy) == nil && checked(parseFitResources)(resources) == nil &&
			checked(parseFitShape)(shape) == nil && checked(parseFitIgnored)(ignored) == nil && checked(parseFitIgnoredGroups)(groups) == nil
		if err == nil && !eachOK || err != nil && eachOK && !strings.HasPrefix(err.Error(), "--node-resources-fit-shape (nodeResourcesFitShape") {
			t.Fatalf("each value checked: %v, together: %v", eachOK, err)
		}
		if err != nil {
			return
		}
		if len(a.resources) == 0 {
			t.Fatalf("accepted without resources: %+v", a)
		}
		if a.strategy == StrategyRequestedToCapacityRatio {
			for u := int64(0); u <= maxUtilization; u += 5 {
				if s := a.shapeAt(u); s < 0 || s > maxNodeScore {
					t.Fatalf("shape %v at %d: %d", a.shape, u, s)
				}
			}
		}
	})
}

// Scores where kube-scheduler's integer arithmetic shows, each worked by
// hand from its documented formulas (NodeResourcesFit's LeastAllocated,
// MostAllocated and RequestedToCapacityRatio): a pod of 500m and 3Gi on a
// node of 4 CPUs and 8Gi that holds 1 CPU and 2Gi, so 1500m of 4000m
// (37.5 %) and 5Gi of 8Gi (62.5 %) once the pod is there.
func TestFitStrategiesScoreByHand(t *testing.T) {
	n := fitScoreNode(t, 1000, 2)
	p := pod("p", 0, 500)
	p.Spec.Containers[0].Resources.Requests[v1.ResourceMemory] = resource.MustParse("3Gi")
	sc := newScorer(newPodInfo(p))
	for _, tc := range []struct {
		strategy, resources, shape string
		want                       int64
	}{
		// LeastAllocated: (allocatable - requested) * 100 / allocatable
		// per resource, truncated: cpu 2500*100/4000 = 62, memory
		// 3*100/8 = 37; weighted mean truncated: (62*3 + 37*1) / 4 =
		// 223/4 = 55.
		{StrategyLeastAllocated, "cpu=3,memory=1", "", 55},
		// MostAllocated: requested * 100 / allocatable: cpu 37, memory 62;
		// (37*3 + 62) / 4 = 173/4 = 43; with equal weights 99/2 = 49.
		{StrategyMostAllocated, "cpu=3,memory=1", "", 43},
		{StrategyMostAllocated, "cpu=1,memory=1", "", 49},
		// RequestedToCapacityRatio, shape 0=0,100=10 (scores x10 on the
		// node scale): utilization requested*100/allocatable truncated,
		// cpu 37, memory 62, so scores 37 and 62; the weighted mean is
		// rounded, not truncated: 99/2 = 49.5 -> 50.
		{StrategyRequestedToCapacityRatio, "cpu=1,memory=1", "0=0,100=10", 50},
		// Shape 0=0,50=0,100=10: cpu at 37 scores 0 and is left out of
		// the mean; memory at 62 scores 0 + (100-0)*(62-50)/(100-50) = 24,
		// alone: 24 (not (0*3 + 24) / 4 = 6).
		{StrategyRequestedToCapacityRatio, "cpu=3,memory=1", "0=0,50=0,100=10", 24},
		// Shape 0=10,100=0 (spread): cpu 100 - 37 = 63, memory 100 - 62
		// = 38; (63*3 + 38) / 4 = 227/4 = 56.75 -> 57.
		{StrategyRequestedToCapacityRatio, "cpu=3,memory=1", "0=10,100=0", 57},
	} {
		a, err := parseFitArgs(tc.strategy, tc.resources, tc.shape, "", "")
		if err != nil {
			t.Fatal(err)
		}
		sc.fit = a
		if got := sc.raw(n).fit; got != tc.want {
			t.Errorf("%s %s %s: score %d, want %d", tc.strategy, tc.resources, tc.shape, got, tc.want)
		}
	}
}

// ephemeral-storage is scored as kube-scheduler scores it: the node's
// requests count even for a pod that requests none (it is not one of its
// scalar resources), while an extended resource or hugepages the pod does
// not request are left out.
func TestFitScoresEphemeralStorageWithoutRequest(t *testing.T) {
	c := newCache()
	nd := node("n", 4000, 110)
	nd.Status.Allocatable[v1.ResourceEphemeralStorage] = resource.MustParse("100Gi")
	nd.Status.Allocatable["hugepages-2Mi"] = resource.MustParse("1Gi")
	nd.Status.Allocatable["example.com/gpu"] = resource.MustParse("2")
	c.setNode(nd)
	used := pod("used", 0, 100, onNode("n"))
	used.Spec.Containers[0].Resources.Requests[v1.ResourceEphemeralStorage] = resource.MustParse("40Gi")
	c.setPod(used)
	sc := newScorer(newPodInfo(pod("p", 0, 100)))
	for resources, want := range map[string]int64{
		// MostAllocated: 40Gi * 100 / 100Gi = 40.
		"ephemeral-storage=1": 40,
		// Not requested by the pod: no resource left to score, 0.
		"example.com/gpu=1": 0,
		"hugepages-2Mi=1":   0,
	} {
		a, err := parseFitArgs(StrategyMostAllocated, resources, "", "", "")
		if err != nil {
			t.Fatal(err)
		}
		sc.fit = a
		if got := sc.raw(c.nodes["n"]).fit; got != want {
			t.Errorf("MostAllocated on %s: %d, want %d", resources, got, want)
		}
	}
}

// A bad NodeResourcesFit value in the configuration file is refused with
// the file, the line and the key (nodeshepherd run exits 2 on it); on the
// command line with the flag. What only the values together decide (a
// shape without RequestedToCapacityRatio) is refused by Validate, naming
// the flag and the key.
func TestFitSettingsRefusedInConfigFile(t *testing.T) {
	dir := t.TempDir()
	apply := func(body string) (*Config, error) {
		cfg := DefaultConfig()
		fs := pflag.NewFlagSet("run", pflag.ContinueOnError)
		cfg.AddFlags(fs)
		path := filepath.Join(dir, "nodeshepherd.yaml")
		doc := "apiVersion: " + configfile.APIVersion + "\nkind: " + config.Kind + "\nscheduler:\n" + body
		if err := os.WriteFile(path, []byte(doc), 0o600); err != nil {
			t.Fatal(err)
		}
		return &cfg, config.Apply(path, fs, func() []config.Section {
			scratch := DefaultConfig()
			return []config.Section{{Name: "scheduler", Register: func(fs *pflag.FlagSet) { scratch.AddFlags(fs) }}}
		})
	}
	for _, tc := range []struct{ body, wantErr string }{
		{"  nodeResourcesFitStrategy: MostAlocated\n",
			`nodeshepherd.yaml:4: scheduler.nodeResourcesFitStrategy: invalid argument "MostAlocated" for "--node-resources-fit-strategy" flag: "MostAlocated" is not one of LeastAllocated, MostAllocated, RequestedToCapacityRatio`},
		{"  schedulerName: x\n  nodeResourcesFitResources: cpu=1,memory=0\n",
			`nodeshepherd.yaml:5: scheduler.nodeResourcesFitResources: invalid argument "cpu=1,memory=0" for "--node-resources-fit-resources" flag: "memory=0": want <resource>=<weight>, a weight from 1 to 100`},
		{"  nodeResourcesFitShape: 0=0,100=11\n", `nodeshepherd.yaml:4: scheduler.nodeResourcesFitShape: invalid argument "0=0,100=11" for "--node-resources-fit-shape" flag: "100=11": want <utilization>=<score>`},
		{"  nodeResourcesFitIgnoredResources: cpu\n", `nodeshepherd.yaml:4: scheduler.nodeResourcesFitIgnoredResources: invalid argument "cpu" for "--node-resources-fit-ignored-resources" flag: "cpu" is not an extended resource`},
		{"  nodeResourcesFitIgnoredResourceGroups: example.com/gpu\n", `nodeshepherd.yaml:4: scheduler.nodeResourcesFitIgnoredResourceGroups: invalid argument "example.com/gpu" for "--node-resources-fit-ignored-resource-groups" flag: "example.com/gpu" is not a resource group`},
	} {
		if _, err := apply(tc.body); err == nil || !strings.Contains(err.Error(), tc.wantErr) {
			t.Errorf("%q: %v, want error %q", tc.body, err, tc.wantErr)
		}
	}

	cfg, err := apply("  nodeResourcesFitStrategy: RequestedToCapacityRatio\n  nodeResourcesFitShape: 0=0,100=10\n" +
		"  nodeResourcesFitResources: cpu=2,memory=1,example.com/gpu=3\n  nodeResourcesFitIgnoredResourceGroups: vendor.io\n")
	if err != nil {
		t.Fatal(err)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	a, _ := cfg.fitArgs()
	if a.strategy != StrategyRequestedToCapacityRatio || len(a.resources) != 3 || a.resources[2].weight != 3 ||
		len(a.shape) != 2 || a.shape[1] != (shapePoint{100, 100}) || !a.ignores("vendor.io/dongle") {
		t.Errorf("read from the file: %+v", a)
	}

	cfg, err = apply("  nodeResourcesFitStrategy: MostAllocated\n  nodeResourcesFitShape: 0=0,100=10\n")
	if err != nil {
		t.Fatal(err)
	}
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "--node-resources-fit-shape (nodeResourcesFitShape in the configuration file) is used only by") {
		t.Errorf("a shape with MostAllocated: %v", err)
	}

	c := DefaultConfig()
	fs := pflag.NewFlagSet("run", pflag.ContinueOnError)
	fs.SetOutput(io.Discard)
	c.AddFlags(fs)
	if err := fs.Parse([]string{"--node-resources-fit-strategy=Most"}); err == nil ||
		!strings.Contains(err.Error(), `"--node-resources-fit-strategy" flag: "Most" is not one of`) {
		t.Errorf("on the command line: %v", err)
	}
	if err := fs.Parse([]string{"--node-resources-fit-strategy=MostAllocated"}); err != nil || c.FitStrategy != StrategyMostAllocated {
		t.Errorf("a good value: %v, %q", err, c.FitStrategy)
	}
}
