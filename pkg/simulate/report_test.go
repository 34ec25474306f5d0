package simulate

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

func testReport() *Report {
	v := func(f float64) *float64 { return &f }
	rep := &Report{Scenario: "blip", File: "blip.yaml", TimeScale: 10, Duration: Duration{4 * time.Minute},
		Timeline: []string{"+30s network-blip on fake-node-0000 for 45s"}}
	for i, mode := range []string{ModeNodeShepherd, ModeUpstream} {
		r := &RunResult{Mode: mode, Components: mode, Zones: []string{"zone-a"},
			Measures: map[string]*float64{"timeToDetect": v(39), "podsEvicted": v(0), "podNotReadyAfterRecovery": v(14 + 150*float64(i))},
			Marks:    []Mark{{T: 30, Text: "network-blip on fake-node-0000 for 45s"}}}
		for t := 0.0; t <= 240; t += 10 {
			notReady := 0
			if t >= 70 && (t < 90 || mode == ModeUpstream) {
				notReady = 4
			}
			r.Samples = append(r.Samples, Sample{T: t, ZoneReady: map[string]int{"zone-a": 2}, ZoneNotReady: map[string]int{},
				PodsReady: 24 - notReady, PodsNotReady: notReady})
		}
		e := Expectation{Metric: "podNotReadyAfterRecovery", AtMost: &Bound{raw: "30s"}, Run: RunBoth}
		e.check()
		val := r.Measures[e.Metric]
		r.Expectations = append(r.Expectations, Checked{Expectation: e.String(), Metric: e.Metric, Value: val, Passed: e.holds(val)})
		rep.Runs = append(rep.Runs, r)
	}
	return rep
}

func TestSummarySideBySide(t *testing.T) {
	rep := testReport()
	var b bytes.Buffer
	rep.WriteSummary(&b)
	out := b.String()
	for _, want := range []string{
		"run at time scale 10", "NODESHEPHERD  UPSTREAM", "time to detect", "39s",
		"2m44s", "time to first eviction", "never", "PASS  podNotReadyAfterRecovery ≤ 30s", "FAIL  podNotReadyAfterRecovery ≤ 30s",
		"1 of 2 expectations FAILED",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("summary lacks %q:\n%s", want, out)
		}
	}
	if !regexp.MustCompile(`longest NotReady after recovery +14s +2m44s`).MatchString(out) {
		t.Errorf("summary lacks both runs' longest NotReady after recovery:\n%s", out)
	}
	if rep.Failed() != 1 {
		t.Errorf("Failed() = %d", rep.Failed())
	}
}

func TestHTMLIsSelfContainedWithBothRunsOnOneChart(t *testing.T) {
	rep := testReport()
	p := filepath.Join(t.TempDir(), "report.html")
	if err := rep.WriteHTML(p); err != nil {
		t.Fatal(err)
	}
	data, _ := os.ReadFile(p)
	page := string(data)
	if strings.Contains(page, "http://") || strings.Contains(page, "https://") || strings.Contains(page, "src=") {
		t.Error("the page refers to outside resources")
	}
	// Pods, taints, evictions, drains and one zone: five charts, each with both runs.
	if n := strings.Count(page, `<svg class="chart"`); n != 5 {
		t.Errorf("%d charts, want 5", n)
	}
	if n := strings.Count(page, `stroke-dasharray="6 4"`); n == 0 {
		t.Error("the upstream run is not dashed")
	}
	for _, want := range []string{"NotReady (upstream)", "NotReady (nodeshepherd)", "time scale 10", "network-blip on fake-node-0000", "FAIL", "PASS"} {
		if !strings.Contains(page, want) {
			t.Errorf("page lacks %q", want)
		}
	}
}

func TestTickLabels(t *testing.T) {
	for s, want := range map[float64]string{0: "0", 30: "30s", 60: "1m", 90: "1m30s", 600: "10m", 3600: "1h", 5400: "1h30m"} {
		if got := fmtTick(s); got != want {
			t.Errorf("fmtTick(%v) = %q, want %q", s, got, want)
		}
	}
}
