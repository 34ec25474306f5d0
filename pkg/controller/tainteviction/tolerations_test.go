package tainteviction

import (
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
)

func tol(seconds *int64) v1.Toleration {
	return v1.Toleration{Key: "k", Operator: v1.TolerationOpExists, Effect: v1.TaintEffectNoExecute, TolerationSeconds: seconds}
}

// The cases of upstream's TestGetMinTolerationTime and the reference's table.
func TestMinTolerationTime(t *testing.T) {
	cases := []struct {
		used []v1.Toleration
		want time.Duration
	}{
		{nil, 0},
		{[]v1.Toleration{tol(nil)}, forever},
		{[]v1.Toleration{tol(ptr.To[int64](1)), tol(ptr.To[int64](2))}, time.Second},
		{[]v1.Toleration{tol(ptr.To[int64](1)), tol(nil)}, time.Second},
		{[]v1.Toleration{tol(nil), tol(ptr.To[int64](1))}, time.Second},
		{[]v1.Toleration{tol(ptr.To[int64](30)), tol(ptr.To[int64](0))}, 0},
		{[]v1.Toleration{tol(ptr.To[int64](-5))}, 0},
	}
	for i, tc := range cases {
		if got := minTolerationTime(tc.used); got != tc.want {
			t.Errorf("case %d: %v, want %v", i, got, tc.want)
		}
	}
}

func TestUsedTolerationsFirstMatchWins(t *testing.T) {
	taints := []v1.Taint{{Key: "node.kubernetes.io/unreachable", Effect: v1.TaintEffectNoExecute}}
	tols := []v1.Toleration{
		{Key: "node.kubernetes.io/unreachable", Operator: v1.TolerationOpExists, Effect: v1.TaintEffectNoExecute, TolerationSeconds: ptr.To[int64](300)},
		{Operator: v1.TolerationOpExists}, // tolerates everything forever, but comes second
	}
	ok, used := usedTolerations(klog.Background(), taints, tols)
	if !ok || len(used) != 1 || minTolerationTime(used) != 300*time.Second {
		t.Errorf("ok=%v used=%v", ok, used)
	}
	// A toleration for another key does not tolerate the taint.
	ok, _ = usedTolerations(klog.Background(), taints, []v1.Toleration{{Key: "other", Operator: v1.TolerationOpExists}})
	if ok {
		t.Error("non-matching toleration accepted")
	}
	// No taints: everything tolerated, nothing used.
	if ok, used := usedTolerations(klog.Background(), nil, nil); !ok || used != nil {
		t.Error("no taints must be tolerated")
	}
	if ok, _ := usedTolerations(klog.Background(), taints, nil); ok {
		t.Error("taints without tolerations must not be tolerated")
	}
}

func TestNoExecuteTaints(t *testing.T) {
	in := []v1.Taint{{Key: "a", Effect: v1.TaintEffectNoSchedule}, {Key: "b", Effect: v1.TaintEffectNoExecute}, {Key: "c", Effect: v1.TaintEffectPreferNoSchedule}}
	if got := noExecuteTaints(in); len(got) != 1 || got[0].Key != "b" {
		t.Errorf("got %v", got)
	}
}
