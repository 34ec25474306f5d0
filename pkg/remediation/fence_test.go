package remediation

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// DecideFence (issue 46): only an answer that the machine is off (the
// provider's or the fencing endpoint's), for the boot the request was for,
// confirms a Fence; "running" after
// the settle time, a refusal or another boot is a veto; no answer decides
// nothing.
func TestDecideFence(t *testing.T) {
	now := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	base := FenceInput{Node: "n", RequestBoot: "b1", NodeBoot: "b1", Accepted: now.Add(-5 * time.Second), Settle: 10 * time.Second, Now: now}
	for _, tc := range []struct {
		name   string
		change func(*FenceInput)
		want   FenceOutcome
		says   string
	}{
		{"off", func(in *FenceInput) { in.Power = PowerOff }, FenceConfirmed, `for boot ID "b1"`},
		{"running within the settle time", func(in *FenceInput) { in.Power = PowerOn }, FenceWaiting, "waiting"},
		{"running after the settle time", func(in *FenceInput) { in.Power = PowerOn; in.Now = now.Add(5 * time.Second) }, FenceVetoed, "runs, 10s after"},
		{"no answer, long after", func(in *FenceInput) { in.Now = now.Add(time.Hour) }, FenceWaiting, "could not say"},
		{"request unanswered, off", func(in *FenceInput) { in.Accepted = time.Time{}; in.Power = PowerOff }, FenceWaiting, "no answer yet"},
		{"refused, running", func(in *FenceInput) { in.Accepted = time.Time{}; in.Refused = "no BMC"; in.Power = PowerOn }, FenceVetoed, "refused"},
		{"refused, off anyway", func(in *FenceInput) { in.Accepted = time.Time{}; in.Refused = "already off"; in.Power = PowerOff }, FenceConfirmed, "powered off"},
		{"another boot, off", func(in *FenceInput) { in.NodeBoot = "b2"; in.Power = PowerOff }, FenceVetoed, `reports boot ID "b2", not "b1"`},
		// The words name who answered: the fencing endpoint confirms too.
		{"off, by the fencing endpoint", func(in *FenceInput) { in.Power = PowerOff; in.By = []string{"the fencing endpoint https://f"} }, FenceConfirmed,
			"the fencing endpoint https://f answers that the machine of node n is off"},
		{"running, by both", func(in *FenceInput) {
			in.Power, in.Now, in.By = PowerOn, now.Add(5*time.Second), []string{"the cloud provider acme", "the fencing endpoint https://f"}
		}, FenceVetoed, "the cloud provider acme and the fencing endpoint https://f answer that the machine of node n runs"},
		{"no answer from either", func(in *FenceInput) { in.By = []string{"the cloud provider acme", "the fencing endpoint https://f"} }, FenceWaiting,
			"the cloud provider acme and the fencing endpoint https://f could not say"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := base
			tc.change(&in)
			d := DecideFence(in)
			if d.Outcome != tc.want || !strings.Contains(d.Message, tc.says) {
				t.Fatalf("%+v, want %s saying %q", d, tc.want, tc.says)
			}
			if d.Outcome != FenceConfirmed && d.Outcome != FenceVetoed || d.Outcome == FenceVetoed && tc.name != "another boot, off" {
				if d.Next.IsZero() || d.Next.After(in.Now.Add(FenceRecheck)) {
					t.Errorf("next look at %v, want within %v", d.Next, FenceRecheck)
				}
			}
			// The same outcome and cause say the same words: one event.
			in.Now = in.Now.Add(time.Second)
			if again := DecideFence(in); again.Outcome == d.Outcome && again.Message != d.Message {
				t.Errorf("words changed with time: %q, then %q", d.Message, again.Message)
			}
		})
	}
	if FenceSettle(20*time.Second) != 10*time.Second || FenceSettle(time.Hour) != FenceSettleMax {
		t.Errorf("settle times %v %v", FenceSettle(20*time.Second), FenceSettle(time.Hour))
	}
}

func TestFenceRefusal(t *testing.T) {
	s := PolicySpec{Steps: []Step{{Action: ActionTaint}, {Action: ActionReboot}, {Action: ActionFence, Timeout: metav1.Duration{Duration: time.Minute}}}}
	if i, no := s.FenceRefusal(Capabilities{Reboot: true, Replace: true}); !no || i != 2 {
		t.Errorf("a Fence without a fencer: %d %v", i, no)
	}
	if _, no := s.FenceRefusal(Capabilities{Fence: true}); no {
		t.Error("refused with a fencer")
	}
	s.Steps = s.Steps[:2]
	if _, no := s.FenceRefusal(Capabilities{}); no {
		t.Error("refused without a Fence step")
	}
}
