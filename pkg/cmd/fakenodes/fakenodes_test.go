package fakenodes

import (
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
)

func TestParseTaint(t *testing.T) {
	good := map[string]v1.Taint{
		"dedicated=infra:NoSchedule": {Key: "dedicated", Value: "infra", Effect: v1.TaintEffectNoSchedule},
		"example.com/gpu:NoExecute":  {Key: "example.com/gpu", Effect: v1.TaintEffectNoExecute},
	}
	for in, want := range good {
		if got, err := ParseTaint(in); err != nil || got != want {
			t.Errorf("ParseTaint(%q) = %+v, %v", in, got, err)
		}
	}
	for _, bad := range []string{"dedicated=infra", "a=b:Sometimes", "bad key:NoSchedule", "a=bad value:NoSchedule"} {
		if _, err := ParseTaint(bad); err == nil {
			t.Errorf("ParseTaint(%q) accepted", bad)
		}
	}
}

// --survives-reboot goes with the condition being set, and only with it.
func TestFaultSurvivesReboot(t *testing.T) {
	o := &faultOptions{survivesReboot: true}
	o.target.All = true
	f, err := o.fault([]string{"condition", "KernelDeadlock=True"})
	if err != nil || f.Condition == nil || !f.Condition.SurvivesReboot {
		t.Fatalf("condition --survives-reboot: %+v, %v", f, err)
	}
	for _, args := range [][]string{{"clear-condition", "KernelDeadlock"}, {"partition"}, {"machine-shutdown"}} {
		if _, err := o.fault(args); err == nil || !strings.Contains(err.Error(), "--survives-reboot is for condition") {
			t.Errorf("%v --survives-reboot: %v, want a refusal", args, err)
		}
	}
	o.survivesReboot = false
	if f, err := o.fault([]string{"condition", "KernelDeadlock=True"}); err != nil || f.Condition.SurvivesReboot {
		t.Errorf("condition without the flag: %+v, %v", f.Condition, err)
	}
}
