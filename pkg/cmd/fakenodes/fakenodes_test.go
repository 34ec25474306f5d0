package fakenodes

import (
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
