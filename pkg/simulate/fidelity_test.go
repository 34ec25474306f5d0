package simulate

import (
	"bytes"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestKindComparisonTable: simulate --nodes fake,hollow prints each measure
// on both kinds of nodes and the difference of the medians.
func TestKindComparisonTable(t *testing.T) {
	v := func(f float64) *float64 { return &f }
	report := func(detect, evicted float64, eviction *float64) *Report {
		rep := &Report{Scenario: "p", File: "p.yaml", TimeScale: 1, Duration: Duration{2 * time.Minute}, Trials: 1}
		rep.Runs = append(rep.Runs, &RunResult{Mode: ModeNodeShepherd, Measures: map[string]*float64{
			"timeToDetect": v(detect), "podsEvicted": v(evicted), "timeToFirstEviction": eviction, "podNotReadyAfterRecovery": v(detect / 1000)}})
		return rep
	}
	var b bytes.Buffer
	WriteKindComparison(&b, []string{NodeKindFake, NodeKindHollow}, []*Report{report(21, 1, v(45)), report(24.5, 1, nil)})
	out := b.String()
	for _, want := range []string{
		`Node kinds side by side \(nodeshepherd run\):`,
		`MEASURE +FAKE +HOLLOW +DIFFERENCE \(hollow − fake\)`,
		`time to detect +21s +25s +\+3.5s`,
		`time to first eviction +45s +never +-`,
		`pods evicted \(taints\) +1 +1 +0\n`,
		`longest NotReady after recovery +0s +0s +0\n`,
	} {
		if !regexp.MustCompile(want).MatchString(out) {
			t.Errorf("no line matching %q in:\n%s", want, out)
		}
	}
	b.Reset()
	WriteKindComparison(&b, []string{NodeKindFake}, []*Report{report(1, 1, nil)})
	if strings.TrimSpace(b.String()) != "" {
		t.Errorf("one kind printed a comparison:\n%s", b.String())
	}
}
