package scheduler

import (
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
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
		{"MostAllocated", "", "0=0,100=10", "", "", "--node-resources-fit-shape is used only by --node-resources-fit-strategy=RequestedToCapacityRatio, not MostAllocated"},
		{"RequestedToCapacityRatio", "", "0=0,100=11", "", "", `"100=11": want <utilization>=<score>, utilization 0-100 %, score 0-10`},
		{"RequestedToCapacityRatio", "", "50=1,50=2", "", "", "utilizations must increase: 50 after 50"},
		{"", "", "", "cpu", "", `"cpu" is not an extended resource`},
		{"", "", "", "kubernetes.io/foo", "", "is not an extended resource"},
		{"", "", "", "", "example.com/gpu", `"example.com/gpu" is not a resource group`},
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
	f.Fuzz(func(t *testing.T, strategy, resources, shape, ignored, groups string) {
		a, err := parseFitArgs(strategy, resources, shape, ignored, groups)
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
