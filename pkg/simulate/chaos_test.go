package simulate

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nodeshepherd/nodeshepherd/pkg/chaos"
)

func TestParseChaosKinds(t *testing.T) {
	got, err := ParseChaosKinds(" reboot,ready-flap ")
	if err != nil || len(got) != 2 || got[0] != chaos.Reboot || got[1] != chaos.ReadyFlap {
		t.Fatalf("ParseChaosKinds: %v %v", got, err)
	}
	for list, want := range map[string]string{
		"reboot,api-errors,leader-kill": "simulate cannot apply api-errors, leader-kill",
		"flood":                         "unknown fault kind(s) flood",
		"":                              "no fault kind given",
	} {
		if _, err := ParseChaosKinds(list); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseChaosKinds(%q): %v, want %q", list, err, want)
		}
	}
}

// Every step of a schedule drawn from the kinds simulate applies becomes a
// timeline step, and the ground truth gets the same operation back.
func TestChaosStepsRoundTrip(t *testing.T) {
	zones := []chaos.Zone{{Name: "zone-a", Nodes: []string{"fake-node-0000", "fake-node-0001", "fake-node-0002"}},
		{Name: "zone-b", Nodes: []string{"fake-node-0003", "fake-node-0004", "fake-node-0005"}}}
	for seed := int64(1); seed <= 20; seed++ {
		sched, err := chaos.Generate(chaos.Options{Seed: seed, Duration: 40 * time.Second, Zones: zones, Replicas: 1, Kinds: SimulateKinds})
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range sched.Steps {
			st, err := chaosStep(s)
			if err != nil {
				t.Fatalf("seed %d: %v", seed, err)
			}
			ops := truthOps(&st, s.Nodes)
			if len(ops) != 1 || ops[0].Op != s.Op || ops[0].Condition != s.Condition {
				t.Fatalf("seed %d: step %s came back as %v", seed, s, ops)
			}
			if st.At.Duration != s.At {
				t.Fatalf("seed %d: step %s at %v", seed, s, st.At.Duration)
			}
		}
	}
	if _, err := chaosStep(chaos.Step{Op: chaos.OpKillLeader}); err == nil {
		t.Error("a leader kill became a timeline step")
	}
}

// A timed step becomes its start and its end, so that the ground truth
// records each as it is applied.
func TestSplitTimed(t *testing.T) {
	d := func(s string) Duration { v, _ := time.ParseDuration(s); return Duration{v} }
	nodes := Target{Nodes: []string{"fake-node-0000"}}
	for _, tc := range []struct {
		st         Step
		start, end string
	}{
		{Step{At: d("5s"), For: d("10s"), Action: ActionNetworkBlip, Target: nodes}, ActionPartition, ActionHeal},
		{Step{At: d("5s"), For: d("10s"), Action: ActionKubeletRestart, Target: nodes}, ActionKubeletStop, ActionKubeletStart},
		{Step{At: d("5s"), For: d("10s"), Action: ActionMachineShutdown, Target: nodes}, ActionMachineShutdown, ActionMachineStart},
		{Step{At: d("5s"), For: d("10s"), Action: ActionSetCondition, Condition: "KernelDeadlock=True", Target: nodes}, ActionSetCondition, ActionClearCondition},
	} {
		got := splitTimed(tc.st)
		if len(got) != 2 || got[0].Action != tc.start || got[1].Action != tc.end || got[0].For.Duration != 0 ||
			got[0].At.Duration != 5*time.Second || got[1].At.Duration != 15*time.Second || got[1].Target.Nodes[0] != "fake-node-0000" {
			t.Errorf("%s: %+v", tc.st.String(), got)
		}
	}
	if got := splitTimed(Step{At: d("5s"), For: d("10s"), Action: ActionSetCondition, Condition: "KernelDeadlock=True"}); got[1].Condition != "KernelDeadlock" || got[1].cond == nil {
		t.Errorf("the condition's end: %+v", got[1])
	}
	if got := splitTimed(Step{At: d("5s"), Action: ActionPartition}); len(got) != 1 {
		t.Errorf("an untimed step split: %+v", got)
	}
}

func TestCheckChaosRefusesMachineDelete(t *testing.T) {
	sc := &Scenario{path: "s.yaml", Timeline: []Step{{At: Duration{10 * time.Second}, Action: ActionMachineDelete}}}
	if err := sc.CheckChaos(); err == nil || !strings.Contains(err.Error(), "machine-delete at 10s") {
		t.Errorf("CheckChaos: %v", err)
	}
}

// The checker's section: in the summary and the HTML, every run's faults
// and violations; only nodeshepherd's violations count.
func TestCheckerSection(t *testing.T) {
	rep := testReport()
	rep.Runs[0].Checker = &CheckerResult{Seed: 7, Kinds: []string{"reboot"}, Faults: []string{"+1.5s reboot for 2s on fake-node-0001"},
		Violations: []string{"14:00:01.000 toleration pod/default/a: early"}, NotChecked: []string{"progress"}, SlackSecs: 15}
	rep.Runs[1].Checker = &CheckerResult{Seed: 7, Kinds: []string{"reboot"}, Faults: rep.Runs[0].Checker.Faults,
		Violations: []string{"14:00:02.000 zone-rules node/n: upstream's"}, NotChecked: []string{"progress"}, SlackSecs: 15}
	if n := rep.Violations(); n != 1 {
		t.Errorf("Violations() = %d, want 1 (nodeshepherd's only)", n)
	}
	var b bytes.Buffer
	rep.WriteSummary(&b)
	for _, want := range []string{"Checker (nodeshepherd; chaos seed 7, 1 faults of reboot; slack 15s real):",
		"fault +1.5s reboot for 2s on fake-node-0001", "VIOLATION 14:00:01.000 toleration pod/default/a: early",
		"(upstream's violations are reported, they do not fail the run)", "The checker found 1 invariant violation(s)."} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("summary lacks %q:\n%s", want, b.String())
		}
	}
	path := filepath.Join(t.TempDir(), "report.html")
	if err := rep.WriteHTML(path); err != nil {
		t.Fatal(err)
	}
	page, _ := os.ReadFile(path)
	for _, want := range []string{"<h2>Checker</h2>", "chaos seed 7, 1 faults", "toleration pod/default/a: early", "(upstream's: reported"} {
		if !strings.Contains(string(page), want) {
			t.Errorf("report.html lacks %q", want)
		}
	}
}

func TestChaosWindow(t *testing.T) {
	if w := chaosWindow(40 * time.Second); w != 38*time.Second {
		t.Errorf("window of 40s: %v", w)
	}
	if w := chaosWindow(10 * time.Second); w != 9*time.Second {
		t.Errorf("window of 10s: %v", w)
	}
}
