package fakenodes

import (
	"errors"
	"io"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/nodeshepherd/nodeshepherd/pkg/cli"
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

// A bad --images or --node-status-max-images is a usage error (exit code
// 2) naming the flag, found before any cluster is contacted.
func TestImagesFlagErrors(t *testing.T) {
	for flag, want := range map[string]string{
		"--images=nginx":              `--images: images "nginx": "nginx" is not NAME=SIZE`,
		"--images=nginx:1.27=70XB":    `--images: images "nginx:1.27=70XB": image nginx:1.27: size "70XB": unknown unit "XB"`,
		"--images=a=1MB,a=2MB":        `image "a" is listed twice`,
		"--node-status-max-images=0":  "--node-status-max-images must be -1 (every image) or at least 1, got 0",
		"--node-status-max-images=-5": "--node-status-max-images must be -1 (every image) or at least 1, got -5",
	} {
		c := NewCommand()
		c.SetArgs([]string{"--kubeconfig=/nonexistent/kubeconfig", flag})
		c.SetOut(io.Discard)
		c.SetErr(io.Discard)
		err := c.Execute()
		var usage *cli.UsageError
		if !errors.As(err, &usage) || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: error %v, want a usage error with %q", flag, err, want)
		}
	}
}

// A bad --devices is a usage error (exit code 2) naming the flag and the
// value, found before any cluster is contacted; so is a driver given twice.
func TestDevicesFlagErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--devices=gpu.example.com"}, `--devices: devices "gpu.example.com": expected DRIVER=COUNT`},
		{[]string{"--devices=gpu.example.com=0"}, `--devices: devices "gpu.example.com=0": count 0 must be from 1 to 128`},
		{[]string{"--devices=gpu.example.com=1,memory=lots"}, `memory "lots" is not a quantity`},
		{[]string{"--devices=gpu.example.com=1", "--devices=gpu.example.com=2"}, "driver gpu.example.com is given twice"},
	} {
		c := NewCommand()
		c.SetArgs(append([]string{"--kubeconfig=/nonexistent/kubeconfig"}, tc.args...))
		c.SetOut(io.Discard)
		c.SetErr(io.Discard)
		err := c.Execute()
		var usage *cli.UsageError
		if !errors.As(err, &usage) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: error %v, want a usage error with %q", tc.args, err, tc.want)
		}
	}
}
