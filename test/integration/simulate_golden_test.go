package integration

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/nodeshepherd/nodeshepherd/pkg/simulate"
)

// recordedUpstream are the example scenarios whose upstream run (--compare
// upstream: kube-controller-manager's controllers and kube-scheduler) is
// recorded by `make golden-scenarios` instead of repeated in every test run:
// upstream's behaviour only changes with the scenario or the control-plane
// version, both named in the file. nodeshepherd's run is never recorded, and
// network-blip and control-plane-partition still run --compare upstream
// live, which keeps simulate's comparison itself under test.
var recordedUpstream = map[string]bool{"node-failure.yaml": true, "kernel-deadlock.yaml": true, "preemption-burst.yaml": true,
	"dead-node-statefulset.yaml": true}

var updateScenarioGolden = flag.Bool("update-scenario-golden", false,
	"run the scenarios of recordedUpstream with --compare upstream and rewrite "+scenarioGoldenPath+" (make golden-scenarios)")

const scenarioGoldenPath = "testdata/simulate-upstream.json"

const scenarioRefreshHint = "run `make golden-scenarios` (runs those scenarios with --compare upstream, a few minutes) and commit " + scenarioGoldenPath

type scenarioGolden struct {
	Comment    string                     `json:"comment"`
	Kubernetes string                     `json:"kubernetes"` // k8s.io/kubernetes version of hack/controlplane
	Scenarios  map[string]*upstreamRecord `json:"scenarios"`
}

// upstreamRecord is the upstream run of one scenario as report.json had it.
type upstreamRecord struct {
	InputsSHA256 string              `json:"inputsSHA256"` // of the scenario file, its workloads and simulate's arguments
	Args         []string            `json:"args"`
	Components   string              `json:"components"`
	Measures     map[string]*float64 `json:"measures"`
	Expectations []simulate.Checked  `json:"expectations"`
}

// scenarioInputsHash hashes the scenario file but for its comment lines,
// every file of the examples' workloads directory, and simulate's arguments.
func scenarioInputsHash(t *testing.T, file string, args []string) string {
	t.Helper()
	h := sha256.New()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		// Comments may change freely, and so may the time scales a scenario
		// claims: they gate --time-scale, they do not change a run.
		if l := strings.TrimSpace(line); !strings.HasPrefix(l, "#") && !strings.HasPrefix(l, "maxTimeScale") {
			h.Write([]byte(line + "\n"))
		}
	}
	err = filepath.WalkDir(filepath.Join(filepath.Dir(file), "workloads"), func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(path)
		h.Write([]byte(filepath.Base(path)))
		h.Write(b)
		return err
	})
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		t.Fatal(err)
	}
	for _, a := range args {
		h.Write([]byte(a + "\x00"))
	}
	return hex.EncodeToString(h.Sum(nil))
}

var scenarioGoldenMu sync.Mutex

func readScenarioGolden() (*scenarioGolden, error) {
	data, err := os.ReadFile(scenarioGoldenPath)
	if err != nil {
		return nil, err
	}
	var g scenarioGolden
	if err := json.Unmarshal(data, &g); err != nil {
		return nil, err
	}
	return &g, nil
}

// checkRecordedUpstream checks the recorded upstream run of a scenario: it
// matches the scenario and the control plane, and every upstream
// expectation held.
func checkRecordedUpstream(t *testing.T, file string, args []string) {
	t.Helper()
	name := filepath.Base(file)
	g, err := readScenarioGolden()
	if err != nil {
		t.Fatalf("recorded upstream runs: %v; %s", err, scenarioRefreshHint)
	}
	if v := kubeSchedulerVersion(t); g.Kubernetes != v {
		t.Fatalf("%s was recorded with Kubernetes %s, the control plane is %s; %s", scenarioGoldenPath, g.Kubernetes, v, scenarioRefreshHint)
	}
	r := g.Scenarios[name]
	if r == nil {
		t.Fatalf("%s has no upstream run of %s; %s", scenarioGoldenPath, name, scenarioRefreshHint)
	}
	if h := scenarioInputsHash(t, file, args); r.InputsSHA256 != h {
		t.Fatalf("%s is stale for %s: the scenario, its workloads or its arguments changed since upstream's run was recorded (sha256 %s, recorded %s); %s",
			scenarioGoldenPath, name, h, r.InputsSHA256, scenarioRefreshHint)
	}
	if len(r.Expectations) == 0 {
		t.Errorf("the recorded upstream run of %s checked no expectation", name)
	}
	for _, c := range r.Expectations {
		if !c.Passed {
			t.Errorf("upstream (recorded): expectation %s failed", c.Expectation)
		}
	}
	t.Logf("upstream run of %s from %s (%s, %d expectations held)", name, scenarioGoldenPath, r.Components, len(r.Expectations))
}

// recordUpstream stores the upstream run of a live --compare upstream run.
func recordUpstream(t *testing.T, file string, args []string, rep *simulate.Report) {
	t.Helper()
	var up *simulate.RunResult
	for _, r := range rep.Runs {
		if r.Mode == simulate.RunUpstream {
			up = r
		}
	}
	if up == nil {
		t.Fatalf("no upstream run in the report of %s", file)
	}
	scenarioGoldenMu.Lock()
	defer scenarioGoldenMu.Unlock()
	g, err := readScenarioGolden()
	if err != nil {
		g = &scenarioGolden{}
	}
	g.Comment = "upstream runs of the example scenarios in recordedUpstream (simulate_golden_test.go); written by `make golden-scenarios`, do not edit"
	g.Kubernetes = kubeSchedulerVersion(t)
	if g.Scenarios == nil {
		g.Scenarios = map[string]*upstreamRecord{}
	}
	g.Scenarios[filepath.Base(file)] = &upstreamRecord{InputsSHA256: scenarioInputsHash(t, file, args), Args: args,
		Components: up.Components, Measures: up.Measures, Expectations: up.Expectations}
	data, err := json.MarshalIndent(g, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(scenarioGoldenPath, append(data, '\n'), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("recorded the upstream run of %s in %s", filepath.Base(file), scenarioGoldenPath)
}
